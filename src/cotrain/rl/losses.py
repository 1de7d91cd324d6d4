"""GRPO-family advantages and losses as pure tensor functions.

Shape letters: B prompts, G samples per prompt (group_size), N = B*G sequences, T completion tokens.
"""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str = "group",
                     eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i - mean of its group) / (std + eps).

    Args:
        rewards: [N] with N = B*G, the G samples of a prompt contiguous.
        group_size: G.
        scale_rewards: "group" divides by the group's std, "batch" by the whole batch's std,
            "none" does not divide (Dr. GRPO).
    Returns:
        advantages [N].
    """
    assert rewards.ndim == 1 and rewards.numel() % group_size == 0, "rewards must be [B*G]"
    grouped = rewards.view(-1, group_size)                        # [B, G]
    centered = grouped - grouped.mean(dim=1, keepdim=True)        # [B, G]
    if scale_rewards == "group":
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + eps)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    return centered.reshape(-1)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (>= 0). Shapes [N, T]."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, *, num_sequences: int | None = None,
              num_tokens: int | None = None, max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token loss [N, T] to a scalar.

    grpo: mean over sequences of each sequence's token mean; dr_grpo: token sum / (N * max_len),
    max_len being the completion length limit (a constant, as in Dr. GRPO and TRL; default T);
    dapo: token sum / number of tokens.

    The normalisers N, T and the token count default to those of the tensors given. Passing those
    of a larger batch makes the loss of a subset equal to that subset's share of the batch loss, so
    sequences known to contribute zero (zero advantage, no KL) can be left out of the computation.
    """
    mask = mask.to(per_token.dtype)
    n = per_token.shape[0] if num_sequences is None else num_sequences
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / max(n, 1)
    if loss_type == "dr_grpo":
        t = per_token.shape[1] if max_len is None else max_len
        return (per_token * mask).sum() / max(n * t, 1)
    if loss_type == "dapo":
        tokens = mask.sum().clamp(min=1) if num_tokens is None else max(num_tokens, 1)
        return (per_token * mask).sum() / tokens
    raise ValueError(f"loss_type must be grpo, dr_grpo or dapo, got {loss_type!r}")


def contributing_groups(advantages: torch.Tensor, group_size: int, beta: float) -> torch.Tensor:
    """Indices of the groups whose tokens can have a non-zero loss gradient.

    With beta == 0 a group whose advantages are all zero (all rewards equal) contributes exactly zero;
    with beta > 0 every group contributes through the KL term.

    Args:
        advantages: [B*G] or [B*G, T].
    Returns:
        [b] indices of groups in 0..B-1.
    """
    per_group = advantages.reshape(-1, group_size, *advantages.shape[1:]).abs().flatten(1).amax(1)  # [B]
    if beta > 0:
        return torch.arange(per_group.shape[0])
    return (per_group > 0).nonzero().squeeze(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    loss_type: str = "grpo",
    num_sequences: int | None = None,
    num_tokens: int | None = None,
    max_len: int | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO-clip loss with an optional k3 KL penalty.

    l_t = -w_t * min(rho_t * A, clip(rho_t, 1 - eps, 1 + eps_high) * A) + beta * KL_t,
    rho_t = exp(logp - old_logp), w_t = 1 or the truncated importance weights of a sampler that is
    not the trainer (`truncated_importance_weights`).

    Args:
        logp, old_logp: [N, T] log-probs of the taken tokens under the current and the sampling policy.
        advantages: [N] (one per sequence) or [N, T] (per token, e.g. with process rewards).
        mask: [N, T] 1 on completion tokens that count.
        ref_logp: [N, T] under the frozen reference; required when beta > 0.
        num_sequences, num_tokens, max_len: normalisers of the whole batch when these rows are a
            subset of it (see `aggregate`).
        is_weights: [N, T] constant weights of the policy-gradient term (None: 1).
    Returns:
        (loss, stats) with stats kl, clip_ratio (low, high, region) as floats.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages[:, None] if advantages.ndim == 1 else advantages      # [N, 1] or [N, T]
    ratio = torch.exp(logp - old_logp)                                      # [N, T]
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)                      # [N, T]
    if is_weights is not None:
        per_token = per_token * is_weights
    kl = None
    if beta > 0:
        assert ref_logp is not None, "beta > 0 needs ref_logp"
        kl = kl_k3(logp, ref_logp)
        per_token = per_token + beta * kl
    loss = aggregate(per_token, mask, loss_type, num_sequences=num_sequences, num_tokens=num_tokens, max_len=max_len)
    with torch.no_grad():
        low = (ratio < 1 - epsilon) & (adv < 0)     # clipped from below: the min took the clipped term
        high = (ratio > 1 + eps_high) & (adv > 0)
        stats = {
            "clip_ratio/low": masked_mean(low.float(), mask).item(),
            "clip_ratio/high": masked_mean(high.float(), mask).item(),
            "clip_ratio": masked_mean((low | high).float(), mask).item(),
            "kl": masked_mean(kl, mask).item() if kl is not None else 0.0,
        }
    return loss, stats


def truncated_importance_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                                 cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS) weights that correct for the sampler/trainer mismatch.

    w_t = min(exp(trainer_logp_t - sampler_logp_t), cap), and 0 where mask == 0.

    A fast rollout engine (vLLM) samples from a distribution that differs slightly from the
    trainer's, even with identical weights (other kernels, bf16, ...), so a nominally on-policy
    batch is off-policy. Multiplying each token's policy-gradient loss by w_t reweights it to the
    trainer's distribution; the cap bounds the variance (Yao et al. 2025, "Your efficient RL
    framework secretly brings you off-policy RL training"). Capping is per token, as in that paper
    and TRL's `vllm_importance_sampling_mode="token_truncate"` (TRL can also weight whole
    sequences by exp of the summed log-ratio; that is not done here).

    Args:
        trainer_logp: [N, T] log-probs of the sampled tokens under the trainer's policy at sampling
            time (the old policy, computed by the trainer).
        sampler_logp: [N, T] log-probs of the same tokens reported by the sampler (`Rollout.logp`).
        mask: [N, T] 1 on completion tokens that count.
        cap: upper bound C of the weights (TRL's default is 3).
    Returns:
        weights [N, T], detached (a constant factor of the loss, not differentiated).
    """
    keep = mask.bool()
    log_ratio = torch.where(keep, trainer_logp.detach() - sampler_logp.detach(), 0.0)  # 0 on padding: no overflow
    return torch.where(keep, log_ratio.exp().clamp(max=cap), 0.0)                     # [N, T]


def importance_stats(weights: torch.Tensor, mask: torch.Tensor, cap: float) -> dict[str, float]:
    """Metrics of TIS weights [N, T] over the tokens of `mask`: `is_weight_mean`, the mean weight, and
    `is_capped_frac`, the share of tokens whose weight is at the cap."""
    return {
        "is_weight_mean": masked_mean(weights, mask).item(),
        "is_capped_frac": masked_mean((weights >= cap).float(), mask).item(),
    }
