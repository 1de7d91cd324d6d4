"""Sampling metrics as pure functions: unbiased pass@k and majority vote."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k) for n samples of which c are correct."""
    assert 0 <= c <= n and 1 <= k <= n, f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}"
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


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
