"""Problem sources: `make_task(name, **options)` builds one by name.

    arith             the tiny world's procedural integer chains (tasks/arith.py)
    countdown         the gap world: reach a target from given numbers (tasks/countdown.py)
    humaneval         HumanEval's functions, graded by their tests in the sandbox (tasks/code.py)
    code_jsonl        code problems from a user's JSONL file (MBPP-style), graded the same way (tasks/code.py)
    codeworld         the tiny code world: one-line list functions from a description (tasks/codeworld.py)
    wordproblems      generated GSM8K-style word problems of 1-3 steps, for real models (tasks/wordproblems.py)
    gsm8k, math500    GSM8K and MATH-500, shipped in the package or a `datasets` id (tasks/mathdata.py)
    jsonl             any JSONL file of question/answer rows (tasks/mathdata.py)
    rg:<generator>    a reasoning-gym generator, e.g. rg:leg_counting (tasks/rg.py)
"""
from __future__ import annotations

import difflib
import inspect

from cotrain.errors import UserError
from cotrain.tasks.arith import ArithTask
from cotrain.tasks.base import Problem, Task
from cotrain.tasks.code import CodeJsonlTask, HumanEvalTask
from cotrain.tasks.codeworld import CodeWorldTask
from cotrain.tasks.countdown import CountdownTask
from cotrain.tasks.mathdata import Gsm8kTask, JsonlTask, Math500Task
from cotrain.tasks.wordproblems import WordProblemsTask

__all__ = ["TASKS", "Problem", "Task", "make_task"]

TASKS = {"arith": ArithTask, "countdown": CountdownTask, "gsm8k": Gsm8kTask, "math500": Math500Task, "jsonl": JsonlTask,
         "humaneval": HumanEvalTask, "code_jsonl": CodeJsonlTask, "codeworld": CodeWorldTask,
         "wordproblems": WordProblemsTask}
"""The tasks by name, besides the `rg:<generator>` family."""


def make_task(name: str, **options) -> Task:
    """The task called `name`, built with `options` as its constructor's keyword arguments.

    Args:
        name: "arith", "countdown", "humaneval", "code_jsonl", "codeworld", "wordproblems", "gsm8k", "math500", "jsonl" or
            "rg:<reasoning-gym generator>".
        **options: the task's knobs (e.g. n_ops=(2, 3) for arith, data_dir=... for gsm8k).

    Returns:
        The task.

    Raises:
        UserError: unknown name or option (the message names the closest valid one), or bad values.
    """
    if name.startswith("rg:"):
        from cotrain.tasks.rg import ReasoningGymTask  # imports reasoning_gym lazily, inside

        return ReasoningGymTask(name[len("rg:"):], **options)
    if name not in TASKS:
        valid = [*TASKS, "rg:<generator>"]
        closest = difflib.get_close_matches(name, valid, n=1, cutoff=0.0)[0]
        raise UserError(f"unknown task {name!r}; did you mean {closest!r}? (valid: {', '.join(valid)})")
    cls = TASKS[name]
    accepted = [p for p in inspect.signature(cls).parameters if p != "self"]
    for option in options:
        if option not in accepted:
            closest = difflib.get_close_matches(option, accepted, n=1, cutoff=0.0)
            hint = f"; did you mean {closest[0]!r}?" if closest else " (it takes none)"
            raise UserError(f"{name}: unknown option {option!r}{hint} (valid: {', '.join(accepted) or 'none'})")
    return cls(**options)
