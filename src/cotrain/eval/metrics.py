"""Sampling metrics as pure functions: unbiased pass@k and majority vote."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from math import comb, sqrt


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k) for n samples of which c are correct."""
    assert 0 <= c <= n and 1 <= k <= n, f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}"
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def wilson_interval(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a proportion hits / n; (0, 1) when n is 0.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n hits:
    wilson_interval(0, 10) = (0, 0.278), wilson_interval(5, 10) = (0.237, 0.763).
    """
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def majority_answer(answers: list[str | None], equal: Callable[[str, str], bool] | None = None) -> str | None:
    """Most common non-None answer; ties go to the answer seen first. None when no answer parsed.

    Args:
        equal: answer equivalence (e.g. "1/2" and "0.5"); answers are grouped with the first answer of
            their class. Default: string equality.
    """
    if equal is None:
        counts = Counter(a for a in answers if a is not None)
    else:
        counts = Counter()
        for a in answers:
            if a is not None:
                rep = next((r for r in counts if equal(r, a)), a)
                counts[rep] += 1
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts.get(a) == best)


def majority_correct(answers: list[str | None], correct: list[bool | float],
                     equal: Callable[[str, str], bool] | None = None) -> float:
    """The correctness (0/1) of a group's majority answer: that of the first sample stating it; 0 when
    no sample states an answer."""
    voted = majority_answer(answers, equal)
    return float(correct[answers.index(voted)]) if voted is not None else 0.0


def majority_gap(answers: list[str | None], correct: list[bool | float], group_size: int,
                 equal: Callable[[str, str], bool] | None = None) -> float:
    """`gap/majority`: maj@G minus the samples' mean accuracy (sampled pass@1), over consecutive groups
    of `group_size` samples of one question each. Positive when a majority over G samples knows more
    than one sample: the gap that majority-vote pseudo-labels can exploit.

    Raises:
        ValueError: the lists differ in length, or it is not a whole number of groups.
    """
    if len(answers) != len(correct) or group_size < 1 or len(answers) % group_size:
        raise ValueError(f"majority_gap: {len(answers)} answers, {len(correct)} labels, group size {group_size}")
    if not answers:
        return 0.0
    groups = range(0, len(answers), group_size)
    maj = [majority_correct(answers[i:i + group_size], correct[i:i + group_size], equal) for i in groups]
    return sum(maj) / len(maj) - sum(float(c) for c in correct) / len(correct)
