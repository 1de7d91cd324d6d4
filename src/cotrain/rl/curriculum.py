"""The curriculum as a pure function: `next_level` raises the difficulty of a fixed task source as
the solver's accuracy rises (`grpo`'s `curriculum`)."""
from __future__ import annotations


def next_level(level: int, accuracy: float, raise_at: float, max_level: int) -> int:
    """Curriculum step: level + 1 when accuracy >= raise_at and level < max_level, else level.

    Args:
        level: the current difficulty level.
        accuracy: the solver's accuracy at it.
        raise_at: the accuracy that moves to the next level.
        max_level: the highest level.

    Returns:
        The next level.
    """
    return level + 1 if accuracy >= raise_at and level < max_level else level
