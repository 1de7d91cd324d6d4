"""The common interface of every problem source: problems with a ground truth, an exact grader,
and the step structure of a reference solution."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    """One problem of a task.

    Attributes:
        question: the problem text, as the task writes it (no role prompt around it).
        answer: the ground-truth final answer, as a string.
        steps: the steps of a reference solution (may be empty when the source has none).
        solution: the full reference completion a model should learn to write (steps and final
            answer line, in the task's output format), or None when the source has none.
        meta: anything else the source carries (difficulty, subject, ...).
    """

    question: str
    answer: str
    steps: tuple[str, ...] = ()
    solution: str | None = None
    meta: dict = field(default_factory=dict, hash=False, compare=False)


class Task(Protocol):
    name: str
    splits: tuple[str, ...]

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """Deterministic list of problems of `split` (at most n; all when n is None)."""

    def extract_answer(self, completion: str) -> str | None:
        """The final answer a completion states, or None. Never raises."""

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the completion's final answer equals the ground truth, else 0.0. Never raises."""

    def answers_equal(self, a: str, b: str) -> bool:
        """Whether two extracted answers are the same answer (for majority voting). Never raises."""


# ----------------------------------------------------------------------------- the label-free wall


class LabelLeak(RuntimeError):
    """A label-free training path touched a ground-truth answer (a bug, never a user error)."""


class HiddenAnswer:
    """Stands where the answer of a problem handed to a label-free training path was: using it in any
    way that could reveal the answer (str, int, float, comparison, length, iteration) raises LabelLeak."""

    __slots__ = ()

    def _leak(self, *args, **kwargs):
        raise LabelLeak("a label-free training path read a ground-truth answer")

    __str__ = __int__ = __float__ = __index__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _leak
    __len__ = __iter__ = __getitem__ = __contains__ = __bool__ = __format__ = __add__ = __radd__ = _leak

    def __hash__(self) -> int:  # a problem stays hashable; every hidden answer hashes alike
        return 0

    def __repr__(self) -> str:
        return "<hidden answer>"


HIDDEN = HiddenAnswer()


PUBLIC_META = ("n_ops", "subject", "level", "line", "index", "entry_point")
"""The only metadata a blinded problem keeps: fields no task derives from its answer (a reasoning-gym
entry holds the answer; a `jsonl` row's other fields may: an equation, a rationale). A code problem
keeps the name of its function, which its prompt states."""


def blind(problems: list[Problem]) -> list[Problem]:
    """The problems as a label-free training path may see them: the question and the metadata of
    `PUBLIC_META`, with the answer replaced by HIDDEN and no reference steps or solution. Grading a
    blinded problem raises LabelLeak in every task (`labelled`)."""
    return [Problem(question=p.question, answer=HIDDEN, steps=(), solution=None,
                    meta={k: v for k, v in p.meta.items() if k in PUBLIC_META}) for p in problems]


def labelled(problem: Problem) -> Problem:
    """`problem` itself, for a grader to read its answer; LabelLeak when it was blinded. Every task's
    `grade` starts with it, so a label-free path that grades fails loudly instead of reading 0."""
    if isinstance(problem.answer, HiddenAnswer):
        raise LabelLeak("a label-free training path graded a blinded problem")
    return problem
