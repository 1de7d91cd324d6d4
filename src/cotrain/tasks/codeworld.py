"""The tiny code world: one-line Python functions over a list of small integers, specified by a short
description and examples, graded by hidden tests in the sandbox. A ~1M-parameter char model can learn it.

Formats (a char model learns them):

    question   "add 3,keep even,sum|[1,2,3]>10|[4,5]>8"   the description (operations, in order), then
                                                         two examples `input>output`
    ood        "|[1,2,3]>10|[4,5]>8|[0,9]>12"              examples only: nothing to copy an expression from
    solution   "return sum([v for v in [v+3 for v in x] if v%2==0])"
    answer     the hidden tests, JSON: [[input, output], ...] (8 of them; none shown in the question)

A function applies 1..n operations to its argument x, a list of 2..6 integers in 0..9: a map (`add k`,
`mul k`), a filter (`keep even`, `keep odd`, `keep >k`), a reordering (`sort`, `reverse`), and, as
the last operation only, a reduction (`sum`, `max`, `len`). A completion is the function's body on one
line, `return <expression>`; the program is `def f(x):` and that line, run on every hidden input in the
sandbox (`cotrain.sandbox.run_program`), its outputs compared outside it.

Splits: `train` and `test` are disjoint by a stable hash of the description; `ood` draws from the same
generator and shows examples alone.
"""
from __future__ import annotations

import hashlib
import json
import random

from cotrain import sandbox
from cotrain.errors import UserError
from cotrain.tasks.base import Problem, labelled

MAPS = ("add", "mul")
FILTERS = ("keep even", "keep odd", "keep >")
ORDERS = ("sort", "reverse")
REDUCTIONS = ("sum", "max", "len")
N_TESTS = 8


def apply(op: str, x):
    """One operation on a list (the reference semantics). `op` is e.g. "add 3", "keep >4", "sum"."""
    if op.startswith("add "):
        return [v + int(op[4:]) for v in x]
    if op.startswith("mul "):
        return [v * int(op[4:]) for v in x]
    if op == "keep even":
        return [v for v in x if v % 2 == 0]
    if op == "keep odd":
        return [v for v in x if v % 2 == 1]
    if op.startswith("keep >"):
        return [v for v in x if v > int(op[6:])]
    if op == "sort":
        return sorted(x)
    if op == "reverse":
        return x[::-1]
    if op == "sum":
        return sum(x)
    if op == "max":
        return max(x, default=0)
    if op == "len":
        return len(x)
    raise ValueError(f"unknown operation {op!r}")


def expression(ops: list[str]) -> str:
    """The reference expression of a pipeline, e.g. ["add 3", "sum"] -> "sum([v+3 for v in x])"."""
    e = "x"
    for op in ops:
        if op.startswith("add "):
            e = f"[v+{op[4:]} for v in {e}]"
        elif op.startswith("mul "):
            e = f"[v*{op[4:]} for v in {e}]"
        elif op == "keep even":
            e = f"[v for v in {e} if v%2==0]"
        elif op == "keep odd":
            e = f"[v for v in {e} if v%2==1]"
        elif op.startswith("keep >"):
            e = f"[v for v in {e} if v>{op[6:]}]"
        elif op == "sort":
            e = f"sorted({e})"
        elif op == "reverse":
            e = f"{e}[::-1]"
        elif op == "max":
            e = f"max({e},default=0)"
        else:  # sum, len
            e = f"{op}({e})"
    return e


def run_reference(ops: list[str], x: list[int]):
    for op in ops:
        x = apply(op, x)
    return x


def _show(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def program_of(completion: str) -> str:
    """The program a completion stands for: `def f(x):` and the completion's first non-empty line."""
    line = next((ln.strip() for ln in completion.split("\n") if ln.strip()), "") if isinstance(completion, str) else ""
    return f"def f(x):\n    {line}\n"


class CodeWorldTask:
    """See the module docstring.

    Args:
        n_ops: inclusive range of how many operations a function applies.
        wall_s: the sandbox's wall-clock limit per program.
    """

    name = "codeworld"
    splits = ("train", "test", "ood")

    def __init__(self, n_ops: tuple[int, int] = (1, 3), wall_s: float = 5.0):
        if (not isinstance(n_ops, (list, tuple)) or len(n_ops) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in n_ops) or not 1 <= n_ops[0] <= n_ops[1] <= 4):
            raise UserError(f"codeworld: n_ops must be [low, high] with 1 <= low <= high <= 4, got {n_ops!r}")
        self.n_ops = (int(n_ops[0]), int(n_ops[1]))
        self.limits = sandbox.Limits(wall_s=float(wall_s), cpu_s=max(1, int(wall_s)))

    def _draw_ops(self, rng: random.Random) -> list[str]:
        n = self.n_ops[0] + int(rng.random() * (self.n_ops[1] - self.n_ops[0] + 1))
        ops = []
        for i in range(n):
            kinds = ["map", "filter", "order"] + (["reduce"] if i == n - 1 else [])
            kind = rng.choice(kinds)
            if kind == "map":
                op = f"{rng.choice(MAPS)} {rng.randint(2, 5)}"
            elif kind == "filter":
                op = rng.choice(FILTERS)
                op = f"{op}{rng.randint(2, 6)}" if op == "keep >" else op
            elif kind == "order":
                op = rng.choice(ORDERS)
            else:
                op = rng.choice(REDUCTIONS)
            ops.append(op)
        return ops

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """`n` distinct problems of `split`, a deterministic function of (split, n, seed, knobs)."""
        if split not in self.splits:
            raise UserError(f"codeworld: unknown split {split!r} (valid: {', '.join(self.splits)})")
        if n is None:
            raise UserError("codeworld: the task is procedural; give the number of problems (e.g. train.n_problems)")
        rng = random.Random(f"codeworld:{split}:{seed}")
        seen: set[str] = set()
        problems = []
        for _ in range(200 * n + 1000):
            if len(problems) == n:
                break
            ops = self._draw_ops(rng)
            description = ",".join(ops)
            inputs = [[rng.randint(0, 9) for _ in range(rng.randint(2, 6))] for _ in range(3 + N_TESTS)]
            shown = inputs[:3 if split == "ood" else 2]
            examples = "|".join(f"{_show(x)}>{_show(run_reference(ops, x))}" for x in shown)
            question = ("" if split == "ood" else description) + "|" + examples
            test_split = int(hashlib.sha256(description.encode()).hexdigest(), 16) % 10 == 0
            if question in seen or (split != "ood" and test_split != (split == "test")):
                continue
            seen.add(question)
            tests = [[x, run_reference(ops, x)] for x in inputs[3:]]
            problems.append(Problem(question=question, answer=json.dumps(tests), solution=f"return {expression(ops)}",
                                    meta={"n_ops": len(ops)}))
        if len(problems) < n:
            raise UserError(f"codeworld: found only {len(problems)} distinct {split} problems, fewer than n={n}; "
                            "widen n_ops")
        return problems

    # ------------------------------------------------------------------ unit tests (the CURE recipe)

    entry = "f"
    test_notation = "one line, the input and the output the function must return, as input>output (for example [1,2,3]>6)"

    def entry_of(self, problem: Problem) -> str:
        return self.entry

    def arguments(self, x: list) -> list:
        """The call's positional arguments: f takes the one list."""
        return [x]

    def tests_of(self, problem: Problem) -> list[tuple[list, object]]:
        """The problem's hidden ground-truth tests, (input, expected output) pairs. LabelLeak when blinded."""
        labelled(problem)
        return [(x, y) for x, y in json.loads(problem.answer)]

    def test_line(self, x: list, y, problem: Problem | None = None) -> str:
        """A test in the tester's notation: `[1,2,3]>10`."""
        return f"{_show(x)}>{_show(y)}"

    def parse_test(self, line: str | None) -> tuple[list, object] | None:
        """A tester's line `input>output` as (input, expected): the input a list of at most 12 integers,
        the output an integer or a list of at most 50; None for anything else. Never raises."""
        if not isinstance(line, str) or ">" not in line or len(line) > 200:
            return None
        left, right = line.split(">", 1)
        try:
            x, y = json.loads(left), json.loads(right)
        except (ValueError, RecursionError):
            return None
        def ints(v, most):
            return (isinstance(v, list) and len(v) <= most
                    and all(isinstance(e, int) and not isinstance(e, bool) and abs(e) <= 10**6 for e in v))
        if not ints(x, 12) or not (ints(y, 50) or (isinstance(y, int) and not isinstance(y, bool) and abs(y) <= 10**9)):
            return None
        return x, y

    def program(self, completion: str, problem: Problem | None = None) -> str:
        return program_of(completion)

    def extract_answer(self, completion: str) -> str | None:
        """The completion's first non-empty line, stripped (the function's body), or None."""
        if not isinstance(completion, str):
            return None
        return next((ln.strip() for ln in completion.split("\n") if ln.strip()), None)

    def answers_equal(self, a: str, b: str) -> bool:
        return a == b

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when `def f(x):` + the completion's first line returns the expected value on every hidden
        test, run in the sandbox; else 0.0. Never raises, except LabelLeak on a blinded problem."""
        labelled(problem)
        tests = json.loads(problem.answer)
        run = sandbox.run_program(program_of(completion), "f", [[x] for x, _ in tests], self.limits)
        return float(all(sandbox.passed(run, [y for _, y in tests])))
