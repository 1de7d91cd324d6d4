"""Code tasks: a completion is a program, graded by running its tests in the sandbox (cotrain.sandbox).

    humaneval   ../shared/data/humaneval.jsonl.gz (164 problems, the single split `test`): the prompt is
                a function's signature and docstring, the tests a `check(candidate)` of assertions.

What a completion may be (`extract_program`): the body that continues the prompt, as a base model writes
it, or a fenced code block, as a chat model writes it; a block that defines the function replaces the
prompt's stub (the prompt's imports and helpers stay in front of it).

The answer of a problem is its tests, which never enter the sandbox's program and are stripped when a
problem is blinded (`tasks.base.blind` keeps no test).
"""
from __future__ import annotations

import re
from pathlib import Path

from cotrain import sandbox
from cotrain.tasks.base import Problem, labelled
from cotrain.tasks.mathdata import _FileTask, default_data_dir

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_program(prompt: str, completion: str, entry: str) -> str:
    """The program a completion stands for: the prompt followed by the completion, or by the first fenced
    code block when there is one. Never raises.

    Args:
        prompt: the problem's prompt (signature and docstring of `entry`, maybe imports and helpers).
        completion: the model's output.
        entry: the function's name.

    Returns:
        Source text (it may not compile: that is the sandbox's verdict to give).
    """
    if not isinstance(completion, str):
        return prompt
    match = _FENCE.search(completion)
    if match is None:
        return prompt + completion
    block = match.group(1)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", block, re.MULTILINE):
        return prompt + "\n    pass\n\n" + block  # the stub gets a body; the block's definition replaces it
    return prompt + block


class HumanEvalTask(_FileTask):
    """HumanEval: 164 functions to write from their docstrings, graded by their tests in the sandbox.

    answer: the test code; solution: the prompt plus the reference body; meta: {"entry_point",
    "task_id", "line"}. `extract_answer` returns the program a completion stands for.

    Args:
        data_dir: directory of humaneval.jsonl.gz (default: `default_data_dir()`).
        wall_s: the sandbox's wall-clock limit per program (seconds).
    """

    name = "humaneval"

    def __init__(self, data_dir: str | Path | None = None, wall_s: float = 10.0):
        super().__init__()
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        self._files = {"test": root / "humaneval.jsonl.gz"}
        self.limits = sandbox.Limits(wall_s=float(wall_s))

    def _to_problem(self, row: dict, path: Path) -> Problem:
        return Problem(question=str(row["prompt"]), answer=str(row["test"]),
                       solution=str(row["canonical_solution"]),
                       meta={"entry_point": str(row["entry_point"]), "task_id": str(row["task_id"]),
                             "line": row.get("_line")})

    def extract_answer(self, completion: str) -> str | None:
        """The completion's code (the fenced block, or the text itself), stripped; None when empty."""
        if not isinstance(completion, str):
            return None
        match = _FENCE.search(completion)
        code = (match.group(1) if match else completion).strip()
        return code or None

    def answers_equal(self, a: str, b: str) -> bool:
        """Programs are the same answer when their text is (no vote finds meaning in more)."""
        return a == b

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the program passes every test (sandbox.run_tests), else 0.0. Never raises, except
        LabelLeak on a blinded problem."""
        labelled(problem)
        entry = problem.meta["entry_point"]
        program = extract_program(problem.question, completion, entry)
        run = sandbox.run_tests(program, entry, problem.answer, context=problem.question, limits=self.limits)
        return float(run.status == "ok")
