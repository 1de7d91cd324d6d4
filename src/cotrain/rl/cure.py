"""CURE's rewards (Wang et al. 2025, "Co-Evolving LLM Coder and Unit Tester via Reinforcement Learning";
Gen-Verse/CURE `optimization/reward.py`): a coder and a unit tester rewarded from one execution matrix.

For one problem, n codes are run on the ground-truth tests and on m generated tests (a `Matrix`):
  gt   [n][t] bool   code i passes ground-truth test k
  gen  [n][m] bool   code i passes generated test j

  coder   r_i = mean_k gt[i][k], normalised over the problem's n codes.
  tester  only where some code passes every ground-truth test (the "correct" codes C; W the others):
            sign_j  = +1 when every correct code passes test j, else -1;
            scale_j = share of wrong codes that fail j (a right test: how much it rejects), or
                      share of wrong codes that pass j (a wrong test: how much it lets through);
                      1 when there is no wrong code;
            r_j = sign_j * scale_j, normalised over the problem's m tests.
          `post_stage` (CURE's later stage) makes the scale all-or-nothing: a right test scores 1 only
          when it rejects every wrong code, a wrong test's penalty is 1 when it lets any through.
  Normalisation is z-scoring with the population std; a problem whose rewards are all equal trains
  no one (None).

Deviation: a generated test that does not parse as a test is rewarded -1 before normalisation (CURE's
prompts make one unparsable only rarely; a from-scratch model writes many).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Matrix:
    """One problem's execution results: codes x tests."""

    gt: list[list[bool]]        # [n][t] code i passes ground-truth test k (empty rows without labels)
    gen: list[list[bool]]       # [n][m] code i passes generated test j (False where j does not parse)
    parsable: list[bool]        # [m]
    reference_gen: list[bool]   # [m] the reference solution passes generated test j (metrics only; [] without)


def normalise(rewards: list[float]) -> list[float] | None:
    """(r - mean) / std with the population std; None when std is 0 (no signal: CURE drops the problem)."""
    if not rewards:
        return None
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std == 0:
        return None
    return [(r - mean) / std for r in rewards]


def code_rewards(gt: list[list[bool]]) -> list[float]:
    """Each code's share of ground-truth tests passed (before normalisation)."""
    return [sum(row) / len(row) if row else 0.0 for row in gt]


def case_rewards(gt: list[list[bool]], gen: list[list[bool]], parsable: list[bool],
                 post_stage: bool = False) -> list[float] | None:
    """Each generated test's reward before normalisation (see the module docstring); None when no code
    passes every ground-truth test (nothing to judge a test by)."""
    n, m = len(gen), len(parsable)
    correct = [i for i in range(n) if gt[i] and all(gt[i])]
    if not correct:
        return None
    wrong = [i for i in range(n) if i not in correct]
    out = []
    for j in range(m):
        if not parsable[j]:
            out.append(-1.0)
            continue
        right = all(gen[i][j] for i in correct)
        if not wrong:
            out.append(1.0 if right else -1.0)
            continue
        if right:
            rejected = [not gen[i][j] for i in wrong]
            scale = float(all(rejected)) if post_stage else sum(rejected) / len(wrong)
            out.append(scale)
        else:
            accepted = [gen[i][j] for i in wrong]
            scale = float(any(accepted)) if post_stage else sum(accepted) / len(wrong)
            out.append(-scale)
    return out


def best_of_n(gen: list[list[bool]]) -> int:
    """The code a tester's tests select: the one passing the most generated tests (the first of equals)."""
    scores = [sum(row) for row in gen]
    return max(range(len(scores)), key=lambda i: (scores[i], -i)) if scores else 0
