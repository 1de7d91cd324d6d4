"""Policy updates shared by the recipes: one call trains one role on one batch.

Every RL recipe ends a role's step the same way (old log-probs, `num_iterations` passes over
`num_minibatches`, PPO-clip loss, clipping, AdamW: `policy_update`), whatever produced its
advantages; roles that share one model add their losses first (`policy_backward`, then one
`optimizer_step`). `supervised_step` is one SFT step; `sequence_logprobs` gives the differentiable
sequence log-probs a DPO or ranking loss (rl/preference.py) is built on. The recipes differ in how
they roll out and reward, which stays in their own files.
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import GrpoConfig, TrainConfig
from cotrain.models.generate import Rollout, completion_logprobs, group_logprobs, left_pad, right_pad
from cotrain.models.prompts import encode_completion, encode_generator_prompts
from cotrain.rl.losses import contributing_groups, grpo_loss, importance_stats, truncated_importance_weights
from cotrain.rl.preference import dpo_loss


def zero_grads(model: torch.nn.Module) -> None:
    """Zero gradients that exist as tensors even when no backward pass follows: a step that trains no
    group (or a process that holds none of the step's groups) must still step AdamW's moments and
    join the gradient all-reduce, exactly as the zero gradient of the full batch would."""
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()


def my_share(items: torch.Tensor) -> torch.Tensor:
    """This process's block of `items` (group indices) under torchrun; all of them in one process."""
    r = dist.shard(len(items))
    return items[r.start:r.stop]


def micro_batches(groups: torch.Tensor, group_size: int, micro_batch_size: int | None,
                  lengths: torch.Tensor | None = None) -> list[torch.Tensor]:
    """`groups` in chunks of whole groups holding at most `micro_batch_size` sequences (at least one
    group each); one chunk when micro_batch_size is None. With `lengths` (each group's padded length,
    indexed by group) the groups are chunked in order of length, so that a chunk holds groups of like
    lengths and pads little (`_logprobs` runs a chunk at its own length)."""
    if not len(groups):
        return []
    per = len(groups) if micro_batch_size is None else max(1, micro_batch_size // group_size)
    if lengths is not None and per < len(groups):  # the lengths may live on the GPU, the indices on the host
        groups = groups[torch.argsort(lengths.to(groups.device)[groups], stable=True)]
    return list(groups.split(per))


def group_lengths(ro: Rollout, group_size: int) -> torch.Tensor:
    """[B] each group's length as a micro-batch pads it: its prompt plus its longest completion."""
    prompt = ro.prompt_mask[::group_size].sum(-1)
    completion = ro.completion_mask.sum(-1).view(-1, group_size).amax(-1)
    return prompt + completion


def _logprobs(model, ro: Rollout, groups: torch.Tensor, g: GrpoConfig, bf16: bool):
    """Log-probs [b*G, T] of the completions of `groups` (indices of prompts), each prompt run once, at
    the chunk's own lengths: prompt columns no prompt of the chunk uses (left padding) and completion
    columns past its longest completion are left out of the passes (their log-probs are 0, outside
    every mask); the same log-probs up to float rounding."""
    gs = g.group_size
    rows = (groups[:, None] * gs + torch.arange(gs)).reshape(-1)                  # [b*G]
    p_ids, p_mask = ro.prompt_ids[groups * gs], ro.prompt_mask[groups * gs]
    c_ids, c_mask = ro.completion_ids[rows], ro.completion_mask[rows]
    used = p_mask.any(0).nonzero()
    start = int(used[0]) if len(used) else 0
    filled = c_mask.any(0).nonzero()
    end = int(filled[-1]) + 1 if len(filled) else 1
    (logp, _) = group_logprobs(model, p_ids[:, start:], p_mask[:, start:], c_ids[:, :end], c_mask[:, :end], gs,
                               temperature=g.temperature, bf16=bf16)
    if end < c_ids.shape[1]:
        logp = torch.nn.functional.pad(logp, (0, c_ids.shape[1] - end))
    return logp, rows


def rollout_logprobs(model, ro: Rollout, g: GrpoConfig, bf16: bool) -> torch.Tensor:
    """Log-probs [N, T] of every completion of `ro` under `model` at temperature 1 (each prompt run once
    per group of g.group_size), with the graph when gradients are on."""
    groups = torch.arange(ro.completion_ids.shape[0] // g.group_size)  # all of them, in order: rows 0..N-1
    return _logprobs(model, ro, groups, g.model_copy(update={"temperature": 1.0}), bf16)[0]


def _no_grad_logprobs(model, ro: Rollout, chunks: list[torch.Tensor], g: GrpoConfig, bf16: bool) -> list | None:
    if model is None:
        return None
    with torch.no_grad():
        out = [_logprobs(model, ro, c, g, bf16)[0] for c in chunks]
        for _ in range(_passes(model, chunks) - len(chunks)):  # a sharded model's passes are collectives
            _logprobs(model, ro, torch.tensor([0]), g, bf16)
    return out


def _passes(model, chunks: list) -> int:
    """Micro-batch passes this process runs: its own, or as many as the busiest process when the model
    is sharded (FSDP2), the extra ones empty."""
    return dist.lockstep(len(chunks)) if dist.is_sharded(model) else len(chunks)


def policy_update(model, opt, ro: Rollout, advantages: torch.Tensor, mask: torch.Tensor, g: GrpoConfig, *,
                  max_grad_norm: float, bf16: bool = False, ref_model=None,
                  micro_batch_size: int | None = None, tis_cap: float | None = None,
                  lr_scale: float = 1.0) -> dict[str, float]:
    """Train `model` on one batch of rollouts with the GRPO loss.

    With beta == 0, groups whose advantages are all zero add exactly zero to the gradient: they are
    left out of the forward and backward passes, and the loss keeps the normalisers of the whole
    minibatch, so the update is unchanged (AdamW still steps, on zero gradients). The trained groups
    of a minibatch are split over torchrun processes and run in micro-batches of at most
    `micro_batch_size` sequences (whole groups); gradients accumulate over the micro-batches and are
    averaged over processes, so the optimizer step is the one of the whole minibatch.

    Args:
        ro: the rollouts, G = g.group_size completions per prompt, groups contiguous.
        advantages: [N] per sequence or [N, T] per token.
        mask: [N, T] completion tokens that count in the loss.
        g: the role's GRPO settings (group_size, clip, beta, loss_type, num_iterations, ...).
        ref_model: the frozen reference, needed when g.beta > 0.
        micro_batch_size: sequences per forward and backward pass (None: the process's whole share).
        tis_cap: the rollouts come from another engine (vLLM) whose log-probs are `ro.logp`: weight each
            token's loss by min(pi_trainer / pi_sampler, tis_cap), pi_trainer at sampling time (the
            old log-probs). Adds `is_weight_mean` and `is_capped_frac` to the stats.
        lr_scale: the learning rate of this batch's optimizer steps times this (a label-free
            recipe's safeguard; 0: the weights stay).

    Returns:
        Mean over optimizer steps of loss, grad_norm, clip_ratio(/low, /high), kl; plus
        `frac_groups_trained` and `tokens_trained`.
    """
    gs = g.group_size
    n_prompts = advantages.shape[0] // gs
    active = set(contributing_groups(advantages, gs, g.beta).tolist())
    minibatches = [mb.tolist() for mb in torch.arange(n_prompts).chunk(g.num_minibatches)]
    trained = [torch.tensor([i for i in mb if i in active], dtype=torch.long) for mb in minibatches]
    lengths = group_lengths(ro, gs)
    chunks = [micro_batches(my_share(t), gs, micro_batch_size, lengths) for t in trained]  # this process's micro-batches
    reuse = g.num_iterations > 1 or g.num_minibatches > 1
    old_logp = [_no_grad_logprobs(model, ro, c, g, bf16) if reuse else None for c in chunks]
    ref_logp = [_no_grad_logprobs(ref_model, ro, c, g, bf16) for c in chunks]
    stats: dict[str, list[float]] = {}
    for _ in range(g.num_iterations):
        for k, mb in enumerate(minibatches):
            mb_rows = [i * gs + j for i in mb for j in range(gs)]
            zero_grads(model)
            st = _backward(model, ro, advantages, mask, g, chunks[k], (len(mb_rows), int(mask[mb_rows].sum())),
                           old_logp[k], ref_logp[k], bf16, tis_cap)
            st["grad_norm"] = optimizer_step(model, opt, max_grad_norm, lr_scale)
            for key, v in st.items():
                stats.setdefault(key, []).append(v)
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out["frac_groups_trained"] = len(active) / max(n_prompts, 1)
    out["tokens_trained"] = sum(int(mask[i * gs:(i + 1) * gs].sum()) for i in active) * g.num_iterations
    out["prompt_tokens_trained"] = sum(int(ro.prompt_mask[i * gs].sum()) for i in active) * g.num_iterations
    return out


_TOKEN_STATS = ("clip_ratio", "clip_ratio/low", "clip_ratio/high", "kl")


def _backward(model, ro: Rollout, advantages, mask, g: GrpoConfig, chunks: list[torch.Tensor],
              normalisers: tuple[int, int], old_logp: list | None, ref_logp: list | None,
              bf16: bool, tis_cap: float | None = None) -> dict[str, float]:
    """Add the GRPO loss of this process's micro-batches `chunks` (group indices) of a minibatch to the
    gradients. `normalisers` (sequences, tokens) are the whole minibatch's, so the parts' losses add up
    to its loss. Returns the minibatch's loss and token-weighted stats, summed over processes."""
    keys = _TOKEN_STATS + (("is_weight_mean", "is_capped_frac") if tis_cap else ())
    sums = [0.0] * (len(keys) + 2)  # loss, then each stat times its tokens, then tokens
    for c in range(_passes(model, chunks)):
        real = c < len(chunks)  # else an empty pass of a sharded model: the collectives, no gradient
        logp, rows = _logprobs(model, ro, chunks[c] if real else torch.tensor([0]), g, bf16)  # [b*G, T]
        m = mask[rows].to(logp.device)
        old = old_logp[c] if real and old_logp is not None else logp.detach()
        weights = None
        if tis_cap:
            weights = truncated_importance_weights(old, ro.logp[rows].to(logp.device), m, tis_cap)
        loss, st = grpo_loss(
            logp, old, advantages[rows].to(logp.device), m,
            epsilon=g.epsilon, epsilon_high=g.epsilon_high, beta=g.beta,
            ref_logp=None if ref_logp is None else ref_logp[c] if real else logp.detach(), loss_type=g.loss_type,
            num_sequences=normalisers[0], num_tokens=normalisers[1], max_len=g.max_new_tokens, is_weights=weights)
        # gradients are averaged over processes (optimizer_step, or FSDP2's reduce-scatter)
        (loss * (dist.world() if real else 0.0)).backward()
        if not real:
            continue
        if weights is not None:
            st.update(importance_stats(weights, m, tis_cap))
        tokens = float(m.sum())
        sums[0] += loss.item()
        for i, key in enumerate(keys):
            sums[1 + i] += st[key] * tokens
        sums[-1] += tokens
    sums = dist.all_reduce_sum(sums)
    tokens = max(sums[-1], 1.0)
    return {"loss": sums[0], **{key: sums[1 + i] / tokens for i, key in enumerate(keys)}}


def generator_update(g: GrpoConfig, t: TrainConfig, model, opt, sched, ro: Rollout, advantages: torch.Tensor, *,
                     sampler, ref_model=None, lr_scale: float = 1.0) -> dict[str, float]:
    """The generator's step on its rollouts (`policy_update` with the run's `grpo` and `train` settings):
    truncated samples left out of the loss when `grpo.mask_truncated`, the rollout engine told the weights
    changed (`train.rollout.Sampler`), the schedule stepped; the learning rate times `lr_scale` for this
    step alone."""
    mask = ro.completion_mask.clone()                                                  # [B*G, T]
    if g.mask_truncated:
        mask[ro.truncated] = 0
    st = policy_update(model, opt, ro, advantages, mask, g, max_grad_norm=t.max_grad_norm, bf16=t.bf16,
                       ref_model=ref_model, micro_batch_size=t.micro_batch_size, tis_cap=sampler.tis_cap,
                       lr_scale=lr_scale)
    sched.step()
    sampler.after_update(model)
    return st


def optimizer_step(model, opt, max_grad_norm: float, lr_scale: float = 1.0) -> float:
    """Average the accumulated gradients over processes (FSDP2 has averaged a sharded model's in its
    backward pass), clip them and step with the learning rate times `lr_scale` (restored after: the
    schedule is untouched); the norm before clipping. The gradients are freed after the step (the next
    update's `zero_grads` makes them again), so rollouts and the other role's update run without them."""
    if dist.is_sharded(model):
        model._cotrain_version += 1  # its plain copy for rollouts is stale
    else:
        dist.all_reduce_grads(model)
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    if lr_scale == 1.0:
        opt.step()
    else:
        rates = [group["lr"] for group in opt.param_groups]
        for group in opt.param_groups:
            group["lr"] = group["lr"] * lr_scale
        opt.step()
        for group, lr in zip(opt.param_groups, rates):
            group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    return float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)


def policy_backward(model, ro: Rollout, advantages: torch.Tensor, mask: torch.Tensor, g: GrpoConfig, *,
                    bf16: bool = False, ref_model=None, micro_batch_size: int | None = None) -> dict[str, float]:
    """Add one role's GRPO loss (one pass, rho = 1) to `model`'s gradients without stepping: several
    roles of one model then share one optimizer step (`optimizer_step`). With g.beta > 0 the k3 KL to
    `ref_model` is part of the loss. Split over processes and micro-batches (groups of like lengths)
    as in `policy_update`.

    Returns:
        loss, clip_ratio, kl and `frac_groups_trained`, `tokens_trained`, `prompt_tokens_trained`.
    """
    gs = g.group_size
    n_prompts = advantages.shape[0] // gs
    groups = contributing_groups(advantages, gs, g.beta)
    chunks = micro_batches(my_share(groups), gs, micro_batch_size, group_lengths(ro, gs))
    ref_logp = _no_grad_logprobs(ref_model, ro, chunks, g, bf16) if g.beta > 0 else None
    st = _backward(model, ro, advantages, mask, g, chunks, (n_prompts * gs, int(mask.sum())), None, ref_logp, bf16)
    active = groups.tolist()
    st["frac_groups_trained"] = len(active) / max(n_prompts, 1)
    st["tokens_trained"] = sum(int(mask[i * gs:(i + 1) * gs].sum()) for i in active)
    st["prompt_tokens_trained"] = sum(int(ro.prompt_mask[i * gs].sum()) for i in active)
    return st


def sequence_logprobs(model, tokenizer, questions: list[str], texts: list[str], *,
                      bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed log-prob [N] of each completion text after its question's generator prompt
    (differentiable), and its number of tokens [N] (eos included). Texts are re-encoded."""
    prompt_ids, prompt_mask = left_pad(encode_generator_prompts(tokenizer, questions), tokenizer.pad_token_id)
    target_ids, target_mask = right_pad([encode_completion(tokenizer, t) for t in texts], tokenizer.pad_token_id)
    logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask, bf16=bf16)  # [N, T]
    mask = target_mask.to(logp.device)
    return (logp * mask).sum(dim=1), mask.sum(dim=1)


def dpo_backward(model, reference, tokenizer, questions: list[str], chosen: list[str], rejected: list[str],
                 beta: float, *, bf16: bool = False) -> dict[str, float]:
    """Add DPO's loss on (chosen, rejected) pairs of each question to `model`'s gradients (the caller
    zeroes them first and steps after), `reference` frozen; one pass of the 2n sequences each.

    Returns:
        dpo_loss, dpo_acc (the share of pairs whose β-scaled margin is positive), margin (its mean) and
        tokens (of one pass; the reference runs as many).
    """
    n = len(chosen)
    logp, n_tok = sequence_logprobs(model, tokenizer, questions * 2, chosen + rejected, bf16=bf16)      # [2n]
    with torch.no_grad():
        ref, _ = sequence_logprobs(reference, tokenizer, questions * 2, chosen + rejected, bf16=bf16)
    loss = dpo_loss(logp[:n], logp[n:], ref[:n], ref[n:], beta)
    loss.backward()
    margins = beta * ((logp[:n] - ref[:n]) - (logp[n:] - ref[n:])).detach()                             # [n]
    return {"dpo_loss": loss.item(), "dpo_acc": (margins > 0).float().mean().item(),
            "margin": margins.mean().item(), "tokens": int(n_tok.sum())}


def supervised_step(model, opt, prompts: list[list[int]], targets: list[list[int]], pad_id: int, *,
                    max_grad_norm: float, bf16: bool = False, micro_batch_size: int | None = None) -> dict[str, float]:
    """One SFT step: minimise the mean negative log-likelihood of the target tokens given the prompts.

    The examples are split over torchrun processes and run in micro-batches of at most
    `micro_batch_size`; each part's loss is divided by the whole batch's token count, so the
    accumulated, process-averaged gradient is the whole batch's."""
    total_tokens = sum(len(t) for t in targets)
    mine = list(dist.shard(len(prompts)))
    per = len(mine) if micro_batch_size is None else micro_batch_size
    zero_grads(model)
    loss_sum, prompt_tokens = 0.0, 0
    chunks = [mine[i:i + per] for i in range(0, len(mine), max(per, 1))]
    for c in range(_passes(model, chunks)):
        real = c < len(chunks)  # else an empty pass of a sharded model: the collectives, no gradient
        idx = chunks[c] if real else [0]
        prompt_ids, prompt_mask = left_pad([prompts[j] for j in idx], pad_id)
        target_ids, target_mask = right_pad([targets[j] for j in idx], pad_id)
        logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask, bf16=bf16)  # [n, T]
        loss = -(logp * target_mask.to(logp.device)).sum() / max(total_tokens, 1)
        (loss * (dist.world() if real else 0.0)).backward()
        if real:
            loss_sum += loss.item()
            prompt_tokens += int(prompt_mask.sum())
    loss_sum, prompt_tokens = dist.all_reduce_sum([loss_sum, prompt_tokens])
    grad_norm = optimizer_step(model, opt, max_grad_norm)
    return {"loss": loss_sum, "grad_norm": grad_norm, "tokens_trained": total_tokens,
            "prompt_tokens_trained": int(prompt_tokens)}
