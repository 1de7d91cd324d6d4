"""PRIME's implicit process rewards as pure functions (Cui et al. 2025, "Process Reinforcement through
Implicit Rewards"; the PRIME-RL/PRIME code and verl's `recipe/prime`).

An implicit process reward model (PRM) is a causal LM πφ beside a frozen reference πref, both started
from the generator's start. Its per-token log-ratio q_t = log πφ(y_t) − log πref(y_t) is a process
reward once scaled by β, and it learns online from outcome labels alone: σ(β Σ_t q_t) is trained by
cross-entropy to predict whether the rollout is right. The generator's advantages combine leave-one-out
(RLOO) baselines of the outcome reward and of the process rewards into a reverse-cumulative return,
whitened over the batch.

Shape letters: N = B*n samples (a prompt's n samples contiguous), T completion tokens; `mask` [N, T]
marks each sample's valid completion tokens (a left-aligned run of ones).

Where verl's recipe differs, and what this module does instead (the recipe's docstring repeats it):
  - verl gives the last valid token no process reward (`prime_granularity: token`); here every valid
    token has r_t = β q_t, as the paper writes it.
  - verl computes the outcome and process RLOO baselines exactly as `masked_rloo` below (the process
    baseline includes the sample's own mean reward); kept as is.
"""
from __future__ import annotations

import torch


def implicit_process_rewards(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                             beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q_t = (log πφ(y_t) − log πref(y_t)) on valid tokens, 0 elsewhere, and r_t = β q_t.

    Args:
        logp, ref_logp: [N, T] log-probabilities of the sampled tokens under the PRM and its reference.
        mask: [N, T] valid completion tokens.
        beta: β, the PRM's temperature (PRIME: 0.05).

    Returns:
        (q [N, T], r [N, T]); q keeps the graph of `logp` (the PRM's loss differentiates it).
    """
    q = (logp - ref_logp) * mask.to(logp.dtype)
    return q, beta * q


def normalise_process_rewards(r: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """verl's `prime_norm: batch_norm`: r / (max over the batch of |Σ_{s≥t} r_s| + eps), so that no
    sample's process return exceeds 1 in size."""
    returns = reverse_cumsum(r * mask.to(r.dtype))
    return r / (returns.abs().max() + eps)


def prm_loss(q: torch.Tensor, mask: torch.Tensor, outcome: torch.Tensor, beta: float) -> torch.Tensor:
    """The PRM's online loss: binary cross-entropy of σ(β Σ_t q_t) against each rollout's outcome.

    Args:
        q: [N, T] log-ratios (`implicit_process_rewards`), with the graph of the PRM's log-probs.
        mask: [N, T] valid tokens.
        outcome: [N] outcome labels in [0, 1] (1: right).
        beta: β.

    Returns:
        A 0-dim tensor, the mean over the N rollouts.
    """
    score = torch.sigmoid(beta * (q * mask.to(q.dtype)).sum(dim=1))
    return torch.nn.functional.binary_cross_entropy(score, outcome.to(score.dtype))


def masked_rloo(rewards: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
    """Leave-one-out baselines within each group of n samples, as PRIME computes them.

    Per sample, m_i = its mean reward over its masked positions; per group, S = Σ_i m_i; every masked
    reward becomes r_{i,t} · n/(n−1) − S/(n−1), unmasked positions 0. Where each sample has one masked
    position (an outcome at its last token) this is r_i − mean_{j≠i} r_j, RLOO; over many positions
    (process rewards) it is r_{i,t} − mean_{j≠i} m_j + (r_{i,t} − m_i)/(n−1): the baseline also holds
    the sample's own mean.

    Args:
        rewards: [N, T], N a multiple of n.
        mask: [N, T] bool, at least one position per sample.
        n: the group size, ≥ 2.
    """
    assert n >= 2 and rewards.shape[0] % n == 0, "N must be a multiple of the group size n >= 2"
    mask = mask.bool()
    r = torch.where(mask, rewards, torch.zeros_like(rewards))
    means = r.sum(dim=1) / mask.sum(dim=1).clamp(min=1)                      # [N]
    baseline = means.view(-1, n).sum(dim=1, keepdim=True) / (n - 1)           # [N/n, 1]
    out = r.view(-1, n, r.shape[1]) * (n / (n - 1)) - baseline.unsqueeze(-1)  # [N/n, n, T]
    return torch.where(mask, out.view_as(r), torch.zeros_like(r))


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """Σ_{s≥t} x_s along the last dimension (the undiscounted return from each token on)."""
    return x.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − μ) / sqrt(σ² + eps) over the masked entries (σ² the unbiased variance), as verl whitens."""
    m = mask.to(x.dtype)
    count = m.sum()
    mean = (x * m).sum() / count
    var = (((x - mean) ** 2) * m).sum() / (count - 1)
    return (x - mean) * torch.rsqrt(var + eps) * m


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] bool, true at each sample's last valid token."""
    lengths = mask.long().sum(dim=1)
    out = torch.zeros_like(mask, dtype=torch.bool)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    out[rows, lengths[rows] - 1] = True
    return out


def prime_advantages(process: torch.Tensor, outcome: torch.Tensor, mask: torch.Tensor, n: int,
                     prm_coef: float, gt_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PRIME's advantages: the RLOO of the process rewards (weight `prm_coef`) plus the RLOO of the
    outcome placed on each sample's last valid token (weight `gt_coef`), summed into the return from
    each token on, then whitened over the batch's valid tokens.

    Args:
        process: [N, T] per-token process rewards r_t (0 off the mask).
        outcome: [N] outcome rewards.
        mask: [N, T] valid tokens (every sample at least one).
        n: group size.
        prm_coef, gt_coef: the two sources' weights (PRIME: 5 and 5); a weight of 0 drops its source.

    Returns:
        (advantages [N, T], returns [N, T]).
    """
    mask = mask.bool()
    total = torch.zeros_like(process)
    if prm_coef:
        total = total + prm_coef * masked_rloo(process, mask, n)
    if gt_coef:
        last = last_token_mask(mask)
        placed = torch.zeros_like(process)
        placed[last] = outcome.to(process.dtype)[last.any(dim=1)]
        total = total + gt_coef * masked_rloo(placed, last, n)
    returns = reverse_cumsum(total * mask.to(total.dtype))
    return masked_whiten(returns, mask), returns


def accuracy_filter(accuracy: list[float], lower: float, upper: float, keep: int) -> tuple[list[int], int]:
    """PRIME's filter of prompts by their samples' accuracy: those with lower ≤ accuracy ≤ upper pass
    (both bounds inclusive); the batch keeps `keep` prompts, the passing ones first in their order, and
    where fewer pass, failing ones in their order fill the rest (verl's recipe: the batch size holds).

    Args:
        accuracy: each oversampled prompt's mean outcome over its n samples.
        lower, upper: the bounds (PRIME: 0.2 and 0.8).
        keep: prompts the batch keeps (the oversampled count / the oversampling factor).

    Returns:
        (indices of the prompts kept, how many of the oversampled prompts passed).
    """
    passed = [i for i, a in enumerate(accuracy) if lower <= a <= upper]
    failed = [i for i, a in enumerate(accuracy) if not lower <= a <= upper]
    return (passed + failed)[:keep], len(passed)


def ranking_accuracy(scores: torch.Tensor, outcome: torch.Tensor, n: int) -> float:
    """How often the PRM orders a group's samples as their outcomes do (verl's `dpo_acc`): over the pairs
    i < j of each group of n, Σ [(s_i − s_j > 0) = (o_i − o_j > 0)] · |o_i − o_j| / Σ |o_i − o_j|, 0.5
    for a group whose outcomes are all equal; the mean over groups.

    Args:
        scores: [N] each sample's summed process reward.
        outcome: [N] outcomes.
        n: group size.
    """
    i, j = torch.triu_indices(n, n, offset=1)
    accs = []
    for s, o in zip(scores.float().view(-1, n), outcome.float().view(-1, n)):
        weight = (o[i] - o[j]).abs()
        if weight.sum() == 0:
            accs.append(0.5)
            continue
        right = ((s[i] - s[j] > 0) == (o[i] - o[j] > 0)).float()
        accs.append(((right * weight).sum() / weight.sum()).item())
    return sum(accs) / len(accs)
