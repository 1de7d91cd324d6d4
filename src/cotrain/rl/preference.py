"""Preference training as pure functions: the losses on pairs of sequences and the pairs they train on.

- Losses: DPO (`dpo_loss`), SPIN's (`spin_loss`: DPO with the previous iterate as the reference and
  the reference solution always preferred), an RRHF-style ranking loss over candidates (`ranking_loss`).
- Pairs: one question's best against its worst candidate by a judge's scores (`preference_pairs`),
  V-STaR's correct against incorrect samples (`correct_incorrect_pairs`).

Shape letters: n pairs, C candidates of one question, B*G samples (a problem's G contiguous).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO: mean over pairs of -log sigmoid(beta * ((pc - rc) - (pr - rr))).

    Args:
        policy_chosen, policy_rejected: [n] sequence log-probs under the policy.
        ref_chosen, ref_rejected: [n] sequence log-probs under the reference.
        beta: the inverse temperature.

    Returns:
        The 0-dim loss, differentiable in the policy log-probs.
    """
    logits = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)      # [n]
    return -F.logsigmoid(beta * logits).mean()


def spin_loss(policy_real: torch.Tensor, policy_synthetic: torch.Tensor, opponent_real: torch.Tensor,
              opponent_synthetic: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SPIN's logistic loss (Chen et al. 2024): the reference solution y (real) against the opponent's
    own sample y' (synthetic) of the same prompt, the opponent being the previous iterate, frozen:
    mean of −log σ(β [(log πθ(y) − log π_old(y)) − (log πθ(y') − log π_old(y'))]), DPO with the opponent
    as its reference.

    Args:
        policy_real, policy_synthetic: [n] sequence log-probs under the model being trained.
        opponent_real, opponent_synthetic: [n] the same under the opponent.
        beta: β (SPIN: 0.1).

    Returns:
        (the 0-dim loss, the [n] margins β[...] before the sigmoid, detached).
    """
    margins = beta * ((policy_real - opponent_real) - (policy_synthetic - opponent_synthetic))      # [n]
    return -F.logsigmoid(margins).mean(), margins.detach()


def ranking_loss(logps: torch.Tensor, scores: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
    """RRHF-style ranking loss: mean of relu(margin + logp_j - logp_i) over ordered pairs with s_i > s_j.

    Args:
        logps: [C] sequence log-probs (or length-normalised log-probs) of the candidates.
        scores: [C] their scores.
        margin: how far above a worse candidate a better one must be.

    Returns:
        The 0-dim loss; 0 (still attached to logps' graph) when no pair has different scores.
    """
    assert logps.shape == scores.shape and logps.ndim == 1, "logps and scores must both be [C]"
    better = scores[:, None] > scores[None, :]                                     # [C, C]: s_i > s_j
    violation = F.relu(margin + logps[None, :] - logps[:, None])                   # [C, C]: logp_j - logp_i
    if not better.any():
        return (logps * 0).sum()
    return violation[better].mean()


def preference_pairs(scores: list[float], min_gap: float) -> list[tuple[int, int]]:
    """The (best, worst) pair of one question's candidates, if their scores differ enough.

    Args:
        scores: one score per candidate.
        min_gap: the least score gap kept (a gap of 0 is never kept).

    Returns:
        [(i_best, i_worst)] with i_best the first highest and i_worst the last lowest score, when
        scores[i_best] - scores[i_worst] >= max(min_gap, 1e-12); else [].
    """
    if not scores:
        return []
    i_best = max(range(len(scores)), key=lambda i: (scores[i], -i))               # first of the highest
    i_worst = min(range(len(scores)), key=lambda i: (scores[i], -i))              # last of the lowest
    if scores[i_best] - scores[i_worst] >= max(min_gap, 1e-12):
        return [(i_best, i_worst)]
    return []


def correct_incorrect_pairs(correct: list[bool], group_size: int, per_problem: int) -> list[tuple[int, int]]:
    """V-STaR's verifier pairs: within each problem's samples, (correct, incorrect) index pairs, up to
    `per_problem` of them, pairing the m-th correct with the m-th incorrect sample cyclically (m = 0, 1,
    ...), so that every sample takes part before any repeats; a problem whose samples are all right or
    all wrong gives none.

    Args:
        correct: [B*G] each sample's correctness, a problem's G samples contiguous.
        group_size: G.
        per_problem: the most pairs a problem gives (at most #correct x #incorrect).

    Returns:
        [(i_correct, i_incorrect)] global indices, problem by problem.
    """
    assert len(correct) % group_size == 0, "correct must hold whole groups"
    pairs = []
    for start in range(0, len(correct), group_size):
        right = [i for i in range(start, start + group_size) if correct[i]]
        wrong = [i for i in range(start, start + group_size) if not correct[i]]
        if not right or not wrong:
            continue
        # m-th pair: (right[m mod r], wrong[(m + t) mod w]) in block t = m // lcm(r, w): the pairs of a block
        # are distinct (they differ mod r or mod w), and block t holds those with j − i ≡ t (mod gcd(r, w))
        lcm = math.lcm(len(right), len(wrong))
        pairs += [(right[m % len(right)], wrong[(m + m // lcm) % len(wrong)])
                  for m in range(min(per_problem, len(right) * len(wrong)))]
    return pairs
