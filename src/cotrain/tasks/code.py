"""Code tasks: a completion is a program, graded by running its tests in the sandbox (cotrain.sandbox).

    humaneval   HumanEval's 164 problems (the single split `test`), shipped in the package
                (cotrain/data/humaneval.jsonl.gz): the prompt is a function's signature and docstring,
                the tests a `check(candidate)` of assertions.
    code_jsonl  a JSONL file a user brings (MBPP, CodeContests-style function tasks), its fields mapped
                by options: prompt, tests (a `check(candidate)` or a list of assertions), entry point
                (or the function the tests call), reference solution.

What a completion may be (`extract_program`): the body that continues the prompt, as a base model writes
it, or a fenced code block, as a chat model writes it; a block that defines the function replaces the
prompt's stub (the prompt's imports and helpers stay in front of it).

The answer of a problem is its tests, which never enter the sandbox's program and are stripped when a
problem is blinded (`tasks.base.blind` keeps no test).

Both tasks serve the CURE recipe: a suite's literal assertions (`assert candidate(2, 3) == 5`) are the
problem's unit tests, run in the execution matrix, and a tester writes one such assertion per test.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from cotrain import sandbox
from cotrain.errors import UserError
from cotrain.tasks.base import Problem, labelled
from cotrain.tasks.mathdata import _field, _FileTask, data_file, default_data_dir, split_file

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


# ---------------------------------------------------------------------- unit tests as assertion lines (CURE)


def _literal(node: ast.AST):
    """The value of a literal expression that survives a JSON round trip unchanged in meaning (numbers,
    strings, booleans, None, lists and tuples of them, dicts with string keys); raises ValueError else."""
    value = ast.literal_eval(node)
    text = json.dumps(value, allow_nan=False)
    if len(text) > 2000:
        raise ValueError("too long")
    return value


def parse_assertion(line: str, names: tuple[str, ...] | None = None) -> tuple[list, object] | None:
    """A test written as one assertion, `assert f(1, [2, 3]) == 6` (either side of the `==`), as
    (positional arguments, expected value): literals only, any function name unless `names` lists the
    allowed ones. None for anything else (keyword arguments, `abs(...) < eps`, several statements).
    Never raises."""
    if not isinstance(line, str) or len(line) > 4000:
        return None
    try:
        tree = ast.parse(line.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    return _assertion_test(tree.body[0], names)


def _assertion_test(node: ast.Assert, names: tuple[str, ...] | None) -> tuple[list, object] | None:
    """(arguments, expected) of `assert f(literals) == literal` (either side), or None (`parse_assertion`)."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    for call, other in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords):
            continue
        if names is not None and call.func.id not in names:
            continue
        if any(isinstance(a, ast.Starred) for a in call.args):
            return None
        try:
            return [_literal(a) for a in call.args], _literal(other)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
    return None


def literal_tests(check: str, entry: str) -> list[tuple[list, object]]:
    """The tests of a suite that are one literal assertion each (`assert candidate(2, 3) == 5`, or the
    function by name): what a tester can write and a matrix can run. Other assertions (`abs(...) < eps`,
    loops, helpers) are left out."""
    try:
        tree = ast.parse(check)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found = (_assertion_test(node, ("candidate", entry)) for node in ast.walk(tree) if isinstance(node, ast.Assert))
    return [test for test in found if test is not None]


class _UnitTests:
    """What the CURE recipe needs of a function-writing task whose tests are assertions: the literal
    tests of a problem, one test as a line in the tester's notation (`assert name(args) == expected`),
    and the program a completion stands for."""

    test_notation = ("a single Python assertion line that calls the function with literal arguments and "
                     "compares the result with the expected literal value, for example "
                     "assert add(2, 3) == 5")

    def tests_of(self, problem: Problem) -> list[tuple[list, object]]:
        """The problem's literal ground-truth tests, (arguments, expected). LabelLeak when blinded."""
        labelled(problem)
        return literal_tests(problem.answer, problem.meta["entry_point"])

    def test_line(self, args: list, expected, problem: Problem | None = None) -> str:
        name = problem.meta["entry_point"] if problem is not None else "f"
        return f"assert {name}({', '.join(map(repr, args))}) == {expected!r}"

    def parse_test(self, line: str | None) -> tuple[list, object] | None:
        return parse_assertion(line) if isinstance(line, str) else None

    def arguments(self, args: list) -> list:
        return list(args)

    def entry_of(self, problem: Problem) -> str:
        return problem.meta["entry_point"]


class HumanEvalTask(_UnitTests, _FileTask):
    """HumanEval: 164 functions to write from their docstrings, graded by their tests in the sandbox.

    answer: the test code; solution: the prompt plus the reference body; meta: {"entry_point",
    "task_id", "line"}. `extract_answer` returns the program a completion stands for.

    Args:
        data_dir: directory of humaneval.jsonl.gz, or of a plain humaneval.jsonl (default:
            `default_data_dir()`).
        wall_s: the sandbox's wall-clock limit per program (seconds).
    """

    name = "humaneval"

    def __init__(self, data_dir: str | Path | None = None, wall_s: float = 10.0):
        super().__init__()
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        self._files = {"test": data_file(root, "humaneval.jsonl.gz")}
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

    def program(self, completion: str, problem: Problem) -> str:
        """The program a completion stands for (`extract_program`)."""
        return extract_program(problem.question, completion, problem.meta["entry_point"])

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the program passes every test (sandbox.run_tests), else 0.0. Never raises, except
        LabelLeak on a blinded problem."""
        labelled(problem)
        entry = problem.meta["entry_point"]
        program = self.program(completion, problem)
        run = sandbox.run_tests(program, entry, problem.answer, context=problem.question, limits=self.limits)
        return float(run.status == "ok")


_NOT_ENTRY = frozenset(dir(__import__("builtins"))) | {"check", "candidate"}


def entry_from_tests(tests: str) -> str | None:
    """The function a test suite tests: the first name it calls that is not a builtin (`assert
    remove_occ("hello", "l") == "heo"` -> "remove_occ"); None when the tests call none or do not parse."""
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError):
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    calls.sort(key=lambda node: (node.lineno, node.col_offset))
    return next((c.func.id for c in calls if c.func.id not in _NOT_ENTRY), None)


def as_check(tests: str | list) -> str:
    """A test suite in HumanEval's form: text that defines `check(candidate)` is kept as it is; a list of
    assertions (MBPP's `test_list`) or assertion lines become the body of a `check(candidate)`, where
    calls of the function by name are calls of the candidate (`sandbox.run_tests`)."""
    if isinstance(tests, list):
        tests = "\n".join(str(t) for t in tests)
    if re.search(r"^def\s+check\s*\(", tests, re.MULTILINE):
        return tests
    body = "\n".join("    " + line for line in tests.splitlines()) or "    pass"
    return f"def check(candidate):\n{body}\n"


class CodeJsonlTask(HumanEvalTask):
    """Code problems from a JSONL file a user brings (MBPP, CodeContests-style function tasks, a HumanEval
    copy), graded by their tests in the sandbox like `humaneval`.

    Args:
        path: shorthand for splits={"train": path}.
        splits: split name -> file, e.g. {"train": "mbpp_train.jsonl", "test": "mbpp_test.jsonl"}; a file may
            be gzipped, and `data:humaneval.jsonl.gz` is the copy of HumanEval in the data directory
            (`mathdata.split_file`).
        prompt_field: the row field holding the prompt, or a template over fields ("{text}\\n{test_list}").
        tests_field: the row field holding the tests: text defining `check(candidate)` (HumanEval), or a
            list of assertions or text of assertion lines (MBPP's `test_list`).
        entry_point_field: the row field naming the function; None: the first non-builtin function the
            tests call.
        solution_field: the row field holding a reference solution, if any.
        prompt_is_code: the prompt is the start of the program (a signature and docstring, as in
            HumanEval), which the completion continues; false (MBPP): the prompt is a description and
            the program is the completion's code alone.
        wall_s: the sandbox's wall-clock limit per program (seconds).
        name: the task's name in messages and logs.
    """

    def __init__(self, path: str | Path | None = None, splits: dict | None = None, prompt_field: str = "prompt",
                 tests_field: str = "test", entry_point_field: str | None = "entry_point",
                 solution_field: str | None = None, prompt_is_code: bool = True, wall_s: float = 10.0,
                 name: str = "code_jsonl"):
        _FileTask.__init__(self)
        self.name = name
        if (path is None) == (splits is None):
            raise UserError(f"{name}: give exactly one of task.path (one file, the train split) "
                            "or task.splits ({split: file})")
        files = {"train": path} if path is not None else splits
        if not isinstance(files, dict) or not files or not all(isinstance(f, (str, Path)) for f in files.values()):
            raise UserError(f"{name}: task.splits must map each split to a file path")
        if not isinstance(prompt_is_code, bool):
            raise UserError(f"{name}: task.prompt_is_code must be true or false, got {prompt_is_code!r}")
        if not isinstance(wall_s, (int, float)) or isinstance(wall_s, bool) or not 0 < wall_s <= 600:
            raise UserError(f"{name}: task.wall_s must be a number of seconds in (0, 600], got {wall_s!r}")
        self._files = {str(split): split_file(file) for split, file in files.items()}
        self.fields = {"prompt": prompt_field, "tests": tests_field, "entry": entry_point_field,
                       "solution": solution_field}
        self.prompt_is_code = prompt_is_code
        self.limits = sandbox.Limits(wall_s=float(wall_s))
        self._hint = "check task.path / task.splits"

    def _to_problem(self, row: dict, path: Path) -> Problem:
        f = self.fields
        prompt = _field(row, f["prompt"], path, self.name)
        if f["tests"] not in row:
            _field(row, f["tests"], path, self.name)  # the error that lists the row's fields
        tests = row[f["tests"]]
        if not isinstance(tests, (str, list)):
            raise UserError(f"{self.name}: {path}:{row['_line']}: field {f['tests']!r} must be test code or a list of "
                            f"assertions, got {type(tests).__name__}")
        check = as_check(tests)
        entry = _field(row, f["entry"], path, self.name) if f["entry"] else entry_from_tests(check)
        if not entry:
            raise UserError(f"{self.name}: {path}:{row['_line']}: its tests call no function to test; set "
                            "task.entry_point_field to the field naming it")
        solution = _field(row, f["solution"], path, self.name) if f["solution"] else None
        meta = {k: v for k, v in row.items() if k not in ("_line", f["tests"]) and isinstance(v, (str, int, float))}
        return Problem(question=prompt, answer=check, solution=solution,
                       meta={**meta, "entry_point": entry, "line": row["_line"]})

    def program(self, completion: str, problem: Problem) -> str:
        """The prompt continued by the completion (`prompt_is_code`), else the completion's code alone."""
        if self.prompt_is_code:
            return super().program(completion, problem)
        return self.extract_answer(completion) or ""

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the program passes every test (sandbox.run_tests), else 0.0. Never raises, except
        LabelLeak on a blinded problem."""
        if self.prompt_is_code:
            return super().grade(completion, problem)
        labelled(problem)
        program = self.program(completion, problem)
        run = sandbox.run_tests(program, problem.meta["entry_point"], problem.answer, limits=self.limits)
        return float(run.status == "ok")
