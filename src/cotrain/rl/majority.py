"""Majority-vote pseudo-labels as pure functions, for the recipes that learn without ground truth.

- `majority_vote`: each group's most common answer and its share of the group (`reliability` picks
  its strong candidates by it).
- `pseudo_labels`: whether each answer agrees with its group's majority; None where the majority is
  not trusted.
- `consistency_rewards`: the generator's reward in `consistency`, w·1[approved] + (1 − w)·1[agrees].

Shape letters: B groups of G answers, N = B*G.
"""
from __future__ import annotations

from collections import Counter

import torch


def majority_vote(answers: list[str | None], group_size: int) -> tuple[list[str | None], list[float]]:
    """The most common non-None answer of each contiguous group, and its share of the group.

    Ties go to the answer that appears first in the group; a group of only None answers has
    majority None and share 0.0.

    Args:
        answers: B*G parsed answers (None = unparsable), a group's G answers contiguous.
        group_size: G.

    Returns:
        (majorities, shares): one entry per group each, share = count / G.
    """
    if group_size <= 0 or len(answers) % group_size != 0:
        raise ValueError(f"len(answers) = {len(answers)} must be a multiple of group_size = {group_size}")
    majorities: list[str | None] = []
    shares: list[float] = []
    for start in range(0, len(answers), group_size):
        counts = Counter(a for a in answers[start:start + group_size] if a is not None)
        best, best_count = None, 0
        for answer, count in counts.items():                        # insertion order = first appearance
            if count > best_count:                                  # strict: an earlier answer wins a tie
                best, best_count = answer, count
        majorities.append(best)
        shares.append(best_count / group_size)
    return majorities, shares


def pseudo_labels(answers: list[str | None], group_size: int, min_share: float = 0.0) -> list[bool | None]:
    """Whether each answer agrees with its group's majority; None where the majority is not trusted.

    Args:
        answers: B*G parsed answers (None = unparsable), a group's G answers contiguous.
        group_size: G.
        min_share: a group whose majority share is below this gets no labels.

    Returns:
        B*G labels: None when the group's majority is None or its share < min_share, else
        answer == majority (an unparsable answer is False).
    """
    majorities, shares = majority_vote(answers, group_size)
    labels: list[bool | None] = []
    for i, answer in enumerate(answers):
        majority, share = majorities[i // group_size], shares[i // group_size]
        if majority is None or share < min_share:
            labels.append(None)
        else:
            labels.append(answer is not None and answer == majority)
    return labels


def consistency_rewards(labels: list[bool | None], approved: list[bool | None], w_verdict: float) -> torch.Tensor:
    """The generator's reward in `consistency`: w * 1[the verifier approved] + (1 - w) * 1[the answer
    agrees with its group's majority] (a sample without a pseudo-label earns no agreement term).

    Args:
        labels: [N] pseudo-labels (`pseudo_labels`).
        approved: [N] the verifier's final verdicts (None = unparsable, not approved).
        w_verdict: w in [0, 1].

    Returns:
        [N] float rewards.
    """
    return torch.tensor([w_verdict * (a is True) + (1 - w_verdict) * (lab is True)
                         for lab, a in zip(labels, approved, strict=True)], dtype=torch.float32)
