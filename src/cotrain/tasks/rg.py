"""Procedural tasks of reasoning-gym (`rg:<generator name>`), graded by the generator's own scorer.

Splits: `train` and `test`, each a reasoning-gym dataset of the generator with a seed derived by
sha256 from (generator, split, task seed, problems seed). Generators draw item i from
Random(dataset seed + i), so the two splits use far-apart seed ranges (they overlap with chance
below n / 2^30) and a shorter list is a prefix of a longer one; a generator with few distinct
questions can still repeat a question across splits. No `ood` split.

reasoning_gym is imported on first use: importing it registers ~100 generators and takes a second.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import re

from cotrain.errors import UserError
from cotrain.tasks.base import Problem, labelled

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def generator_names() -> list[str]:
    """The names of reasoning-gym's registered generators (imports reasoning_gym)."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def extract_answer(completion: str) -> str | None:
    """The final answer of a completion, or None. Never raises.

    In order: the content of the last `<answer>...</answer>`; else the text after the leading `#`s
    of the last line that starts with `#`; else the last non-empty line. Stripped; empty gives None.

    Args:
        completion: e.g. "3 legs each\\n#12" or "<answer>12</answer>".

    Returns:
        e.g. "12".
    """
    if not isinstance(completion, str):
        return None
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return tags[-1].strip() or None
    lines = [line.strip() for line in completion.split("\n") if line.strip()]
    for line in reversed(lines):
        if line.startswith("#"):
            return line.lstrip("#").strip() or None
    return lines[-1] if lines else None


def derive_seed(*parts) -> int:
    """A 31-bit seed that is a stable function of `parts` (sha256 of their repr)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big") >> 1


class ReasoningGymTask:
    """One reasoning-gym generator as a task.

    Args:
        name: the generator, e.g. "leg_counting" (see `generator_names()`).
        size: the number of problems of a split when problems() is given no n.
        seed: the task's seed, mixed into every split's dataset seed.
        **config: fields of the generator's config dataclass (e.g. min_animals=2 for leg_counting).
    """

    splits = ("train", "test")

    def __init__(self, name: str, size: int = 1000, seed: int = 0, **config):
        names = generator_names()
        if name not in names:
            closest = difflib.get_close_matches(name, names, n=1, cutoff=0.0)
            raise UserError(f"rg: unknown reasoning-gym generator {name!r}; did you mean 'rg:{closest[0]}'?")
        if not isinstance(size, int) or size < 1:
            raise UserError(f"rg:{name}: size must be a positive integer, got {size!r}")
        self.generator, self.name, self.size, self.seed, self.config = name, f"rg:{name}", size, seed, dict(config)
        # Scoring needs the generator's score_answer, which may read its config.
        self._scorer = self._dataset(size=1, seed=0)

    def _dataset(self, size: int, seed: int):
        from reasoning_gym import create_dataset
        from reasoning_gym.factory import DATASETS

        try:
            return create_dataset(self.generator, size=size, seed=seed, **self.config)
        except TypeError as error:
            fields = [f.name for f in dataclasses.fields(DATASETS[self.generator][1]) if f.name not in ("size", "seed")]
            raise UserError(f"{self.name}: bad generator option ({error}); valid: {', '.join(fields)}") from None
        except (AssertionError, ValueError) as error:
            raise UserError(f"{self.name}: invalid generator options {self.config}: {error}") from None

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """The first n items (default: `size`) of the split's dataset; see the module docstring.

        Returns:
            Problems whose meta holds {"entry": the reasoning-gym entry (needed by `grade`), "index": i}.
        """
        if split not in self.splits:
            raise UserError(f"{self.name}: unknown split {split!r} (valid: {', '.join(self.splits)})")
        n = self.size if n is None else n
        if n <= 0:
            return []
        dataset = self._dataset(size=n, seed=derive_seed(self.generator, split, self.seed, seed))
        problems = []
        for index in range(n):
            entry = dataset[index]
            answer = "" if entry["answer"] is None else str(entry["answer"])
            problems.append(Problem(question=entry["question"], answer=answer, meta={"entry": entry, "index": index}))
        return problems

    def extract_answer(self, completion: str) -> str | None:
        """See `extract_answer` (module level): `<answer>` tag, else last `#` line, else last line."""
        return extract_answer(completion)

    def score(self, completion: str, problem: Problem) -> float:
        """The generator's score of the extracted answer, in [0, 1] (partial credit). Never raises,
        except LabelLeak on a blinded problem."""
        labelled(problem)
        predicted = extract_answer(completion)
        if predicted is None:
            return 0.0
        entry = problem.meta.get("entry") or {"question": problem.question, "answer": problem.answer, "metadata": {}}
        try:
            value = float(self._scorer.score_answer(answer=predicted, entry=entry))
        except Exception:
            return 0.0  # a scorer that chokes on a malformed answer means the answer is wrong
        return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0

    def answers_equal(self, a: str, b: str) -> bool:
        """Answers compared as stripped strings (reasoning-gym scores against an entry, not another answer)."""
        return a.strip() == b.strip()

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the generator scores the answer fully correct (>= 1 - 1e-9), else 0.0. Never raises."""
        return float(self.score(completion, problem) >= 1.0 - 1e-9)
