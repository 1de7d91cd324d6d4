"""Multi-agent GRPO (MARS, Chen et al. 2025, arXiv 2510.04935) as pure functions.

Two roles act in turn in one trajectory and share its reward. Each role's samples are normalised
within their own group, as AT-GRPO groups by agent and by turn: the planner's G plans of a prompt
form a group, and the worker's samples of turn k of a prompt's trajectories form another. The worker
acts several times per trajectory, so its samples outnumber the planner's; MARS balances the two by
sampling the more numerous role's samples down (or up) to the other's count after the advantages are
computed, so that the balancing leaves each sample's advantage as it was. Here the draw is weighted by
|advantage| (`balanced_indices`): a sample whose advantage is zero adds nothing to the gradient and is
the first left out.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def grouped_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i − mean of its group) / (std of its group + eps), the groups named by `groups`.

    The std is the unbiased one, as `rl.losses.group_advantages` (GRPO) uses; a group of one sample
    has advantage 0 (nothing to compare it with).

    Args:
        rewards: [N] the reward of each sample.
        groups: N keys; samples with equal keys form a group (e.g. (prompt, turn)).

    Returns:
        advantages [N].
    """
    assert rewards.ndim == 1 and len(groups) == rewards.numel(), "one group key per reward"
    out = torch.zeros_like(rewards, dtype=torch.float32)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    for idx in members.values():
        if len(idx) < 2:
            continue
        r = rewards[idx].float()                                   # [n_g]
        out[idx] = (r - r.mean()) / (r.std() + eps)
    return out


def balanced_indices(advantages: torch.Tensor, target: int, generator: torch.Generator) -> torch.Tensor:
    """Indices of `target` samples of one role drawn with probability ∝ |advantage|: without replacement
    when the role has more samples than `target` (those with advantage 0 drawn only once every other
    one is in), with replacement beyond its own count when it has fewer (every sample kept once, the
    rest drawn ∝ |A|). With no nonzero advantage at all, the first `target` (or every sample).

    Args:
        advantages: [M] the role's advantages, computed before balancing.
        target: the count to balance to (the other role's number of samples).
        generator: the draw's random state (seeded per step).

    Returns:
        [target] indices into `advantages`, sorted (with repeats when sampled up).
    """
    m = advantages.numel()
    assert target >= 0
    weights = advantages.abs().double()                            # [M]
    nonzero = int((weights > 0).sum())
    if target == 0 or m == 0:
        return torch.zeros(0, dtype=torch.long)
    if nonzero == 0:
        return torch.arange(min(target, m))
    if target <= m:
        take = min(target, nonzero)
        picked = torch.multinomial(weights, take, replacement=False, generator=generator)
        if take < target:  # fewer informative samples than the count: the zero-advantage ones fill it, in order
            rest = (weights == 0).nonzero().flatten()[:target - take]
            picked = torch.cat([picked, rest])
        return picked.sort().values
    extra = torch.multinomial(weights, target - m, replacement=True, generator=generator)
    return torch.cat([torch.arange(m), extra]).sort().values
