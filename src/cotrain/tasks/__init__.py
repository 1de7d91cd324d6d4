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

A task of one's own is a `Task` subclass in one's own file: name it with `task.module: path/to/file.py:Name`
(or `package.module:Name`), or register it from Python with `cotrain.register_task(name, cls)`
(docs/new_task.md).
"""
from __future__ import annotations

import difflib
import inspect
import sys

from cotrain.errors import UserError
from cotrain.tasks.arith import ArithTask
from cotrain.tasks.base import Problem, Task
from cotrain.tasks.code import CodeJsonlTask, HumanEvalTask
from cotrain.tasks.codeworld import CodeWorldTask
from cotrain.tasks.countdown import CountdownTask
from cotrain.tasks.mathdata import Gsm8kTask, JsonlTask, Math500Task
from cotrain.tasks.wordproblems import WordProblemsTask
from cotrain.userfiles import file_of, load_object

__all__ = ["TASKS", "Problem", "Task", "make_task", "register_task"]

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
    options.pop("reward", None)  # the training reward's function: read by the recipe (train/setup.py), not the task
    module = options.pop("module", None)
    if module is not None:
        return _build(load_object(str(module), "task.module"), name, options, own=True)
    if name in USER_TASKS:
        return _build(USER_TASKS[name], name, options, own=True)
    if name.startswith("rg:"):
        from cotrain.tasks.rg import ReasoningGymTask  # imports reasoning_gym lazily, inside

        return ReasoningGymTask(name[len("rg:"):], **options)
    if name not in TASKS:
        valid = [*TASKS, "rg:<generator>"]
        closest = difflib.get_close_matches(name, valid, n=1, cutoff=0.0)[0]
        raise UserError(f"unknown task {name!r}; did you mean {closest!r}? (valid: {', '.join(valid)})")
    return _build(TASKS[name], name, options)


def _build(cls, name: str, options: dict, own: bool = False) -> Task:
    """`cls(**options)`, its options checked first; a user's own class (`own`) fails in one line, whatever it raises."""
    if not isinstance(cls, type):
        raise UserError(f"{name}: {cls!r} is not a task class (see cotrain.tasks.Task)")
    if own:
        try:
            return _build(cls, name, options)
        except UserError:
            raise
        except Exception as err:
            raise UserError(f"{name}: {cls.__name__}({', '.join(options)}) failed: {type(err).__name__}: {err}") from None
    accepted = [p for p in inspect.signature(cls).parameters if p != "self"]
    for option in options:
        if option not in accepted:
            closest = difflib.get_close_matches(option, accepted, n=1, cutoff=0.0)
            hint = f"; did you mean {closest[0]!r}?" if closest else " (it takes none)"
            raise UserError(f"{name}: unknown option {option!r}{hint} (valid: {', '.join(accepted) or 'none'})")
    task = cls(**options)
    missing = [a for a in TASK_API if not hasattr(task, a)]
    if missing:
        raise UserError(f"{name}: {cls.__name__} is not a task: it has no {', '.join(missing)} (see cotrain.tasks.Task)")
    return task


TASK_API = ("name", "splits", "problems", "extract_answer", "grade")


USER_TASKS: dict[str, type] = {}
"""Tasks registered from Python (`register_task`), by name."""


def register_task(name: str, cls: type) -> str:
    """Make `cls` (a `Task` subclass) the task called `name` in this process, and return the `task.module` value
    a run records for it (`path/to/file.py:Name`), so that a later `cotrain eval`, a sweep or torchrun rebuild it."""
    if not (isinstance(cls, type) and all(hasattr(cls, a) for a in TASK_API if a not in ("name", "splits"))):
        raise UserError(f"register_task({name!r}, ...): expected a task class (cotrain.tasks.Task), got {cls!r}")
    if name in TASKS or name.startswith("rg:"):
        raise UserError(f"register_task: {name!r} is a task of cotrain's own; choose another name")
    USER_TASKS[name] = cls
    return module_of(cls)


def module_of(cls: type) -> str:
    """Where a class lives, as `task.module` names it: its file, absolute (a script's, a module's of its own, one
    `task.module` loaded), found from any directory; `package.module:Name` for a class inside a package."""
    where = file_of(sys.modules[cls.__module__], f"{cls.__qualname__} (register it or name it with task.module)")
    return f"{where}:{cls.__qualname__}"


