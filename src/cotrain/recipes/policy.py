"""The GRPO policy update shared by the RL recipes: one call trains one role on one batch of rollouts.

Every RL recipe ends a role's step the same way (old log-probs, `num_iterations` passes over
`num_minibatches`, PPO-clip loss, clipping, AdamW), whatever produced its advantages; the recipes
differ in how they roll out and reward, which stays in their own files.
"""
from __future__ import annotations

import torch

from cotrain.config import GrpoConfig
from cotrain.models.generate import Rollout, completion_logprobs, group_logprobs, left_pad
from cotrain.rl.losses import contributing_groups, grpo_loss, masked_mean


def zero_grads(model: torch.nn.Module) -> None:
    """Zero gradients that exist as tensors even when no backward pass follows: a step that trains no
    group must still step AdamW's moments, exactly as the zero gradient of the full batch would."""
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()


def _logprobs(model, ro: Rollout, groups: torch.Tensor, g: GrpoConfig, bf16: bool):
    """Log-probs [b*G, T] of the completions of `groups` (indices of prompts), each prompt run once."""
    gs = g.group_size
    rows = (groups[:, None] * gs + torch.arange(gs)).reshape(-1)                  # [b*G]
    (logp, _) = group_logprobs(model, ro.prompt_ids[groups * gs], ro.prompt_mask[groups * gs],
                               ro.completion_ids[rows], ro.completion_mask[rows], gs,
                               temperature=g.temperature, bf16=bf16)
    return logp, rows


def policy_update(model, opt, ro: Rollout, advantages: torch.Tensor, mask: torch.Tensor, g: GrpoConfig, *,
                  max_grad_norm: float, bf16: bool = False, ref_model=None) -> dict[str, float]:
    """Train `model` on one batch of rollouts with the GRPO loss.

    With beta == 0, groups whose advantages are all zero add exactly zero to the gradient: they are
    left out of the forward and backward passes, and the loss keeps the normalisers of the whole
    minibatch, so the update is unchanged (AdamW still steps, on zero gradients).

    Args:
        ro: the rollouts, G = g.group_size completions per prompt, groups contiguous.
        advantages: [N] per sequence or [N, T] per token.
        mask: [N, T] completion tokens that count in the loss.
        g: the role's GRPO settings (group_size, clip, beta, loss_type, num_iterations, ...).
        ref_model: the frozen reference, needed when g.beta > 0.

    Returns:
        Mean over optimizer steps of loss, grad_norm, clip_ratio(/low, /high), kl; plus
        `frac_groups_trained` and `tokens_trained`.
    """
    gs = g.group_size
    n_prompts = advantages.shape[0] // gs
    active = set(contributing_groups(advantages, gs, g.beta).tolist())
    minibatches = [mb.tolist() for mb in torch.arange(n_prompts).chunk(g.num_minibatches)]
    trained = [torch.tensor([i for i in mb if i in active], dtype=torch.long) for mb in minibatches]
    reuse = g.num_iterations > 1 or g.num_minibatches > 1

    def no_grad_logp(m, groups):
        if m is None or not len(groups):
            return None
        with torch.no_grad():
            return _logprobs(m, ro, groups, g, bf16)[0]

    old_logp = [no_grad_logp(model, t) if reuse else None for t in trained]
    ref_logp = [no_grad_logp(ref_model, t) for t in trained]
    stats: dict[str, list[float]] = {}
    for _ in range(g.num_iterations):
        for k, (mb, groups) in enumerate(zip(minibatches, trained)):
            mb_rows = [i * gs + j for i in mb for j in range(gs)]
            zero_grads(model)
            st = _backward(model, ro, advantages, mask, g, groups, mb_rows, old_logp[k] if reuse else None,
                           ref_logp[k], bf16)
            st["grad_norm"] = optimizer_step(model, opt, max_grad_norm)
            for key, v in st.items():
                stats.setdefault(key, []).append(v)
    for key in ("clip_ratio", "clip_ratio/low", "clip_ratio/high", "kl"):
        stats.setdefault(key, [0.0])  # no group trained: nothing clipped, no KL measured
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out["frac_groups_trained"] = len(active) / max(n_prompts, 1)
    out["tokens_trained"] = sum(int(mask[i * gs:(i + 1) * gs].sum()) for i in active) * g.num_iterations
    out["prompt_tokens_trained"] = sum(int(ro.prompt_mask[i * gs].sum()) for i in active) * g.num_iterations
    return out


def _backward(model, ro: Rollout, advantages, mask, g: GrpoConfig, groups: torch.Tensor, mb_rows: list[int],
              old_logp, ref_logp, bf16: bool) -> dict[str, float]:
    """Add the GRPO loss of `groups` (a minibatch of rows `mb_rows`) to the gradients; its stats."""
    if not len(groups):
        return {"loss": 0.0}
    logp, rows = _logprobs(model, ro, groups, g, bf16)                                      # [b*G, T]
    loss, st = grpo_loss(
        logp, logp.detach() if old_logp is None else old_logp, advantages[rows].to(logp.device),
        mask[rows].to(logp.device), epsilon=g.epsilon, epsilon_high=g.epsilon_high, beta=g.beta,
        ref_logp=ref_logp, loss_type=g.loss_type, num_sequences=len(mb_rows),
        num_tokens=int(mask[mb_rows].sum()), max_len=g.max_new_tokens)
    loss.backward()
    st["loss"] = loss.item()
    return st


def optimizer_step(model, opt, max_grad_norm: float) -> float:
    """Clip the accumulated gradients and step; the gradient norm before clipping."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    opt.step()
    return grad_norm.item()


def policy_backward(model, ro: Rollout, advantages: torch.Tensor, mask: torch.Tensor, g: GrpoConfig, *,
                    bf16: bool = False, ref_model=None) -> dict[str, float]:
    """Add one role's GRPO loss (one pass, rho = 1) to `model`'s gradients without stepping: several
    roles of one model then share one optimizer step (`optimizer_step`). With g.beta > 0 the k3 KL to
    `ref_model` is part of the loss.

    Returns:
        loss, clip_ratio, kl and `frac_groups_trained`, `tokens_trained`, `prompt_tokens_trained`.
    """
    gs = g.group_size
    n_prompts = advantages.shape[0] // gs
    groups = contributing_groups(advantages, gs, g.beta)
    ref_logp = None
    if g.beta > 0 and len(groups):
        with torch.no_grad():
            ref_logp = _logprobs(ref_model, ro, groups, g, bf16)[0]
    st = _backward(model, ro, advantages, mask, g, groups, list(range(n_prompts * gs)), None, ref_logp, bf16)
    for key in ("clip_ratio", "clip_ratio/low", "clip_ratio/high", "kl"):
        st.setdefault(key, 0.0)
    active = groups.tolist()
    st["frac_groups_trained"] = len(active) / max(n_prompts, 1)
    st["tokens_trained"] = sum(int(mask[i * gs:(i + 1) * gs].sum()) for i in active)
    st["prompt_tokens_trained"] = sum(int(ro.prompt_mask[i * gs].sum()) for i in active)
    return st


def sequence_logprobs(model, tokenizer, questions: list[str], texts: list[str], *,
                      bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed log-prob [N] of each completion text after its question's generator prompt
    (differentiable), and its number of tokens [N] (eos included). Texts are re-encoded."""
    from cotrain.models.prompts import encode_completion, encode_generator_prompts
    from cotrain.recipes.sft import right_pad

    prompt_ids, prompt_mask = left_pad(encode_generator_prompts(tokenizer, questions), tokenizer.pad_token_id)
    target_ids, target_mask = right_pad([encode_completion(tokenizer, t) for t in texts], tokenizer.pad_token_id)
    logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask, bf16=bf16)  # [N, T]
    mask = target_mask.to(logp.device)
    return (logp * mask).sum(dim=1), mask.sum(dim=1)


def supervised_step(model, opt, prompts: list[list[int]], targets: list[list[int]], pad_id: int, *,
                    max_grad_norm: float, bf16: bool = False) -> dict[str, float]:
    """One SFT step: minimise the mean negative log-likelihood of the target tokens given the prompts."""
    from cotrain.recipes.sft import right_pad

    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    target_ids, target_mask = right_pad(targets, pad_id)
    logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask, bf16=bf16)  # [N, T]
    loss = -masked_mean(logp, target_mask.to(logp.device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    opt.step()
    return {"loss": loss.item(), "grad_norm": grad_norm.item(), "tokens_trained": int(target_mask.sum()),
            "prompt_tokens_trained": int(prompt_mask.sum())}
