"""The tiny world's task: left-to-right chains of integer operations, generated from a seed.

Formats (no spaces anywhere: a char-level model learns them):

    question   "12+34-5"
    steps      ("12+34=46", "46-5=41")        one per operation: `left OP right=result`, where the
                                              left of step k>1 is the previous result ("5-12=-7", "-7+3=-4")
    solution   "12+34=46\\n46-5=41\\n#41"      the steps, then the final line `#` + answer
    answer     "41"

Operations are evaluated left to right (no precedence: "2+3*4" is (2+3)*4 = 20). The first operand
is uniform in 1..max_operand (a leading 0 adds nothing to learn); the right operand of `+`/`-` is
uniform in 0..max_operand, that of `*` in 0..max_mul_operand (to keep results small); each operation
is uniform over `ops`.

Splits: `train` and `test` share one distribution and are disjoint: a question string belongs to
`test` when int(sha256(question), 16) % 10 == 0, else to `train`, and each split rejects the other's
strings. `ood` draws from the ood knobs (more operations by default) and accepts any string.
"""
from __future__ import annotations

import hashlib
import operator
import random
import re

from cotrain.errors import UserError
from cotrain.tasks.base import Problem, labelled

MAX_DIGITS = 12
"""Answers and step numbers have at most this many digits; the knobs are checked to stay below it."""

APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}
"""The operations of the step format `a op b = c` (arith, countdown, wordproblems)."""
_INT = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")
_STEP = re.compile(rf"(-?[0-9]{{1,{MAX_DIGITS}}})([-+*])([0-9]{{1,{MAX_DIGITS}}})=(-?[0-9]{{1,{MAX_DIGITS}}})")
_QUESTION = re.compile(r"[0-9]{1,12}(?:[-+*][0-9]{1,12})+")
_OPERATION = re.compile(r"([-+*])([0-9]+)")


# ----------------------------------------------------------------------------- pure string functions


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]] | None:
    """The first number and the (op, right operand) list of an arith question, or None.

    Args:
        question: e.g. "12+34-5".

    Returns:
        e.g. (12, [("+", 34), ("-", 5)]); None when `question` is not in the arith format.
    """
    if not isinstance(question, str) or not _QUESTION.fullmatch(question):
        return None
    first = int(question[: len(question) - len(question.lstrip("0123456789"))])
    return first, [(op, int(right)) for op, right in _OPERATION.findall(question)]


def format_step(left: int, op: str, right: int, result: int) -> str:
    """One step line, e.g. format_step(-7, "+", 3, -4) == "-7+3=-4"."""
    return f"{left}{op}{right}={result}"


def format_solution(steps: tuple[str, ...] | list[str], answer: int | str) -> str:
    """The steps, one per line, then the final answer line `#<answer>`."""
    return "\n".join([*steps, f"#{answer}"])


def solve(question: str) -> tuple[tuple[str, ...], str]:
    """The reference steps and answer of an arith question.

    Args:
        question: e.g. "12+34-5".

    Returns:
        (("12+34=46", "46-5=41"), "41").

    Raises:
        ValueError: `question` is not in the arith format.
    """
    parsed = parse_question(question)
    if parsed is None:
        raise ValueError(f"not an arith question: {question!r}")
    left, operations = parsed
    steps = []
    for op, right in operations:
        result = APPLY[op](left, right)
        steps.append(format_step(left, op, right, result))
        left = result
    return tuple(steps), str(left)


def parse_step(line: str) -> tuple[int, str, int, int] | None:
    """(left, op, right, result) of one step line such as "-7+3=-4", or None. Never raises."""
    if not isinstance(line, str):
        return None
    match = _STEP.fullmatch(line.strip())
    if match is None:
        return None
    left, op, right, result = match.groups()
    return int(left), op, int(right), int(result)


def parse_steps(text: str) -> list[tuple[str, int | None]]:
    """The step lines of a completion, each with the result it states. Never raises.

    Steps are the non-empty lines (stripped) before the first line that starts with `#`.

    Args:
        text: a completion, e.g. "12+34=46\\n46-5=41\\n#41".

    Returns:
        e.g. [("12+34=46", 46), ("46-5=41", 41)]; the result is None for a line that is not a
        well-formed step.
    """
    if not isinstance(text, str):
        return []
    steps = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("#"):
            break
        if line:
            parsed = parse_step(line)
            steps.append((line, None if parsed is None else parsed[3]))
    return steps


def extract_answer(completion: str) -> str | None:
    """The integer on the completion's last line that starts with `#`, or None. Never raises.

    Lines are stripped of surrounding whitespace; the text after that line's `#` (stripped) must be
    an optionally negative integer of at most 12 digits. Only the last `#` line counts: a malformed
    one gives None even when an earlier one was well formed.

    Args:
        completion: e.g. "12+34=46\\n46-5=41\\n#41".

    Returns:
        The integer in canonical form ("41"; "#007" gives "7", "#-0" gives "0"), or None.
    """
    if not isinstance(completion, str):
        return None
    for line in reversed(completion.split("\n")):
        line = line.strip()
        if line.startswith("#"):
            match = _INT.fullmatch(line[1:].strip())
            return str(int(match.group())) if match else None
    return None


def step_labels(question: str, steps: tuple[str, ...] | list[str]) -> list[bool]:
    """Whether each step of a solution is correct, judged locally. Never raises.

    Step k is correct when it parses as `left OP right=result`, its op and right operand are the
    question's k-th operation, its left operand is the previous step's stated result (for the first
    step: the question's first number), and left OP right == result. A step after an unparsable
    one cannot be checked and is False; steps beyond the question's operations are False.

    An error carried forward consistently is thus labelled [True, ..., False (at the error),
    True, ...]: the earliest error of a solution is its first False.

    Args:
        question: the arith question, e.g. "12+34-5".
        steps: the solution's step lines, e.g. ("12+34=46", "46-5=41").

    Returns:
        One bool per step (all False when `question` is not an arith question).
    """
    parsed_question = parse_question(question)
    if parsed_question is None:
        return [False] * len(steps)
    expected_left, operations = parsed_question
    labels = []
    for k, line in enumerate(steps):
        step = parse_step(line)
        correct = (
            step is not None
            and k < len(operations)
            and step[0] == expected_left
            and (step[1], step[2]) == operations[k]
            and APPLY[step[1]](step[0], step[2]) == step[3]
        )
        labels.append(correct)
        expected_left = None if step is None else step[3]
    return labels


def step_rationales(question: str, steps: tuple[str, ...] | list[str]) -> list[str]:
    """A verifier's rationale for each step of a solution: the step recomputed, then the recomputed
    result minus the claimed one, so that the verdict reads off one number: 0 is a correct step.

    Step k is recomputed from its expected left operand (the previous step's stated result, or the
    question's first number; after an unparsable step, the previous recomputed result) and the
    question's k-th operation. The difference is written in the task's own step format
    (`mine-claimed=d`, or `mine+|claimed|=d` for a negative claim), an operation the generator already
    knows; a line that does not parse gets "?" instead, and so does a step beyond the question's
    operations. Never raises.

    Args:
        question: e.g. "12+34-5".
        steps: e.g. ("12+34=46", "46-5=42").

    Returns:
        e.g. ["12+34=46 46-46=0", "46-5=41 41-42=-1"]; all "?" when `question` is not an arith question.
    """
    parsed_question = parse_question(question)
    if parsed_question is None:
        return ["?"] * len(steps)
    left, operations = parsed_question
    rationales = []
    for k, line in enumerate(steps):
        step = parse_step(line)
        if k >= len(operations):
            rationales.append("?")
            continue
        op, right = operations[k]
        result = APPLY[op](left, right)
        if step is None:
            rationales.append(f"{format_step(left, op, right, result)} ?")
        else:
            claimed = step[3]
            diff = format_step(result, "-" if claimed >= 0 else "+", abs(claimed), result - claimed)
            rationales.append(f"{format_step(left, op, right, result)} {diff}")
        left = result if step is None else step[3]
    return rationales


def corrupt_solution(question: str, k: int | list[int], rng: random.Random) -> tuple[tuple[str, ...], str]:
    """A solution whose step k states a wrong result, and every later step computes correctly from it.

    `k` may also be a list of step indices: each of them states a wrong result (each computed from
    the previous, possibly wrong, result).

    The wrong result is, with equal chance, the true one plus a nonzero delta in [-10, 10], or the
    true one with one digit changed; it never equals the true result. The final `#` line is the last
    (wrong) result, so the final answer is wrong too, except when a later step multiplies by 0
    (possible only when `*` is among the ops).

    Args:
        question: the arith question.
        k: 0-based index of the step to corrupt, or a list of them.
        rng: the source of randomness (the caller seeds it).

    Returns:
        (steps, solution) in the task's format.

    Raises:
        ValueError: `question` is not an arith question or k is not a step index.
    """
    parsed = parse_question(question)
    if parsed is None:
        raise ValueError(f"not an arith question: {question!r}")
    left, operations = parsed
    wrong = {k} if isinstance(k, int) else set(k)
    if not wrong or not all(0 <= i < len(operations) for i in wrong):
        raise ValueError(f"step index {k} out of range for {len(operations)} steps of {question!r}")
    steps = []
    for i, (op, right) in enumerate(operations):
        result = APPLY[op](left, right)
        if i in wrong:
            result = _wrong_result(result, rng)
        steps.append(format_step(left, op, right, result))
        left = result
    return tuple(steps), format_solution(steps, left)


def _wrong_result(value: int, rng: random.Random) -> int:
    if rng.random() < 0.5:
        return value + rng.choice([d for d in range(-10, 11) if d != 0])
    digits = list(str(abs(value)))
    position = rng.randrange(len(digits))
    digits[position] = rng.choice([d for d in "0123456789" if d != digits[position]])
    wrong = int("".join(digits))
    return -wrong if value < 0 else wrong


def is_test_question(question: str) -> bool:
    """Whether a question string belongs to the test split (about 1 in 10), by a stable hash."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % 10 == 0


# ----------------------------------------------------------------------------- the task


class ArithTask:
    """Seeded chains of integer operations; see the module docstring for the formats and splits.

    Args:
        n_ops: inclusive range of the number of operations (train and test).
        max_operand: largest operand (train and test); the first operand is at least 1.
        ops: the operations to draw from, a non-empty subset of "+-*".
        max_mul_operand: largest right operand of `*` (all splits).
        ood_n_ops: inclusive range of the number of operations of the ood split (default: n_ops).
        ood_max_operand: largest operand of the ood split (default: 1.5 x max_operand, rounded up).

    The default ood split keeps the number of operations and draws operands up to 1.5x larger
    (149 for the default 99): a tiny model fine-tuned to ~65% greedy pass@1 on `test` scores ~14%
    there, while chains with more operations than it was trained on stay near 0% and tell nothing.
    """

    name = "arith"
    splits = ("train", "test", "ood")

    def __init__(self, n_ops: tuple[int, int] = (2, 3), max_operand: int = 99, ops: str = "+-",
                 max_mul_operand: int = 9, ood_n_ops: tuple[int, int] | None = None,
                 ood_max_operand: int | None = None):
        self.n_ops = _check_range("n_ops", n_ops)
        self.ood_n_ops = _check_range("ood_n_ops", self.n_ops if ood_n_ops is None else ood_n_ops)
        self.max_operand = _check_int("max_operand", max_operand, low=1)
        if ood_max_operand is None:
            ood_max_operand = -(-3 * self.max_operand // 2)  # ceil(1.5 x)
        self.ood_max_operand = _check_int("ood_max_operand", ood_max_operand, low=1)
        self.max_mul_operand = _check_int("max_mul_operand", max_mul_operand, low=0)
        if not isinstance(ops, str) or not ops or set(ops) - set("+-*") or len(set(ops)) != len(ops):
            raise UserError(f"arith: ops must be distinct characters of '+-*' (e.g. '+-'), got {ops!r}")
        self.ops = ops
        for n_hi, max_operand_ in ((self.n_ops[1], self.max_operand), (self.ood_n_ops[1], self.ood_max_operand)):
            bound = _largest_result(n_hi, max_operand_, ops, self.max_mul_operand)
            if bound >= 10 ** (MAX_DIGITS - 1):
                raise UserError(f"arith: results could reach {bound}, more than {MAX_DIGITS - 1} digits; "
                                "lower n_ops/ood_n_ops, max_operand or max_mul_operand")

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """`n` distinct problems of `split`, a deterministic function of (split, n, seed, knobs).

        Problems are drawn one after another from one random stream seeded by (split, seed), skipping
        questions of the other split (train/test) and repeats, so a shorter list is a prefix of a
        longer one: problems(s, n, seed)[:m] == problems(s, m, seed).

        Args:
            split: "train", "test" or "ood".
            n: how many problems; required, since the task is procedural and has no fixed size.
            seed: the seed of the draw.

        Returns:
            The problems; `meta` holds {"n_ops": number of operations}.
        """
        if split not in self.splits:
            raise UserError(f"arith: unknown split {split!r} (valid: {', '.join(self.splits)})")
        if n is None:
            raise UserError("arith: the task is procedural; give the number of problems (e.g. train.n_problems)")
        n_lo, n_hi = self.ood_n_ops if split == "ood" else self.n_ops
        max_operand = self.ood_max_operand if split == "ood" else self.max_operand
        rng = random.Random(f"arith:{split}:{seed}")  # str seeds are hashed with sha512: stable across runs
        draw, ops, max_mul = rng.random, self.ops, self.max_mul_operand
        seen: set[str] = set()
        problems = []
        attempts, max_attempts = 0, 200 * n + 1000
        while len(problems) < n:
            attempts += 1
            if attempts > max_attempts:
                raise UserError(f"arith: found only {len(problems)} distinct {split} questions in {max_attempts} "
                                f"draws, fewer than n={n}; widen n_ops or max_operand")
            # int(random() * m) is uniform on 0..m-1 up to 2^-53, and several times faster than randrange.
            n_op = n_lo + int(draw() * (n_hi - n_lo + 1))
            parts = [str(1 + int(draw() * max_operand))]
            for _ in range(n_op):
                op = ops[int(draw() * len(ops))]
                parts += (op, str(int(draw() * ((max_mul if op == "*" else max_operand) + 1))))
            question = "".join(parts)
            if question in seen or (split != "ood" and is_test_question(question) != (split == "test")):
                continue
            seen.add(question)
            steps, answer = solve(question)
            problems.append(Problem(question=question, answer=answer, steps=steps,
                                    solution=format_solution(steps, answer), meta={"n_ops": n_op}))
        return problems

    def extract_answer(self, completion: str) -> str | None:
        """See `extract_answer` (module level): the integer of the last `#` line, or None."""
        return extract_answer(completion)

    def answers_equal(self, a: str, b: str) -> bool:
        """Extracted answers are canonical integers: equal strings are equal answers."""
        return a == b

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the completion's final integer equals the problem's answer, else 0.0. Never raises,
        except LabelLeak on a blinded problem."""
        labelled(problem)
        predicted = extract_answer(completion)
        try:
            return float(predicted is not None and int(predicted) == int(problem.answer))
        except (TypeError, ValueError, AttributeError):
            return 0.0

    def check_question(self, question: str, max_ops: int | None = None,
                       max_operand: int | None = None, solvable: bool = True) -> tuple[bool, bool]:
        """(parsable, valid) of a proposed question. Never raises.

        Parsable: in the arith notation. Valid: also within the size limits, 1..max_ops operations
        (default: the task's most) of the task's ops, operands at most max_operand (default: the
        task's; `*` at most max_mul_operand), and results within MAX_DIGITS - 1 digits. Every such
        question has an answer, so `solvable` changes nothing here.
        """
        parsed = parse_question(question)
        if parsed is None:
            return False, False
        first, operations = parsed
        max_ops = self.n_ops[1] if max_ops is None else max_ops
        max_operand = self.max_operand if max_operand is None else max_operand
        valid = (1 <= len(operations) <= max_ops and first <= max_operand
                 and all(op in self.ops and right <= (self.max_mul_operand if op == "*" else max_operand)
                         for op, right in operations))
        return True, valid and abs(int(solve(question)[1])) < 10 ** (MAX_DIGITS - 1)

    def size(self, question: str) -> dict[str, float]:
        """How big a question is: its number of operations and its largest operand ({} when unparsable)."""
        parsed = parse_question(question)
        if parsed is None:
            return {}
        first, operations = parsed
        return {"n_ops": float(len(operations)), "max_operand": float(max([first] + [r for _, r in operations]))}

    def problem_of(self, question: str) -> Problem | None:
        """The problem with its ground truth for any question in the arith notation (evaluation of
        proposed questions), or None."""
        if parse_question(question) is None:
            return None
        steps, answer = solve(question)
        return Problem(question=question, answer=answer, steps=steps, solution=format_solution(steps, answer),
                       meta={"n_ops": len(steps)})

    def corrupt(self, problem: Problem, k: int | list[int], rng: random.Random) -> tuple[tuple[str, ...], str]:
        """See `corrupt_solution`: (steps, solution) with a wrong result at step k, carried forward."""
        return corrupt_solution(problem.question, k, rng)

    def step_labels(self, problem: Problem, steps: tuple[str, ...] | list[str]) -> list[bool]:
        """See `step_labels` (module level): per-step correctness; the earliest error is the first False."""
        return step_labels(problem.question, steps)

    def step_rationales(self, problem: Problem, steps: tuple[str, ...] | list[str]) -> list[str]:
        """See `step_rationales` (module level): each step recomputed, then the result it claims."""
        return step_rationales(problem.question, steps)


def _check_range(name: str, value) -> tuple[int, int]:
    # Config files give lists; accept any pair of ints.
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not 1 <= value[0] <= value[1]):
        raise UserError(f"arith: {name} must be [low, high] with 1 <= low <= high, got {value!r}")
    return int(value[0]), int(value[1])


def _check_int(name: str, value, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"arith: {name} must be an integer >= {low}, got {value!r}")
    return value


def _largest_result(n_ops: int, max_operand: int, ops: str, max_mul_operand: int) -> int:
    # The largest |value| a chain can reach: each step either adds/subtracts max_operand or multiplies.
    value = max_operand
    for _ in range(n_ops):
        value = max(value + (max_operand if set(ops) & set("+-") else 0),
                    value * (max_mul_operand if "*" in ops else 1))
    return value
