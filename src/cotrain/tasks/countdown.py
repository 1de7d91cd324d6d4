"""The gap world: Countdown. Reach a target from given numbers with + - *, each number used once.

Checking a solution here is easier than finding one: a checker redoes a few one- and two-digit
operations and ticks the numbers off, while a solver must search the ways of combining the numbers.
The difficulty lies in the search, not in the arithmetic.

Formats (no spaces: a char-level model learns them):

    question   "3,5,7:22"                   the given numbers, then `:` and the target
    steps      ("3*5=15", "15+7=22")        `a OP b=c`: two values still available (given numbers,
                                            or results of earlier steps), combined; c is then available
    solution   "3*5=15\\n15+7=22\\n#22"       the steps, then the final line `#` + the result reached
    answer     "22"                         the target

A solution is correct when every step is well formed, takes both its operands from the values still
available (each given number and each result is used at most once), states the true result, which is
never negative (as in the game), and when the steps use up every number and end at the target, which
the final `#` line states: n numbers take exactly n - 1 steps. Many solutions are correct; the grader
evaluates, it does not compare with the reference.

Process labels judge each step locally, against the values the solution itself has made available so
far (its stated results, right or wrong): an error carried forward consistently is one False step.

Problems are drawn by combining n numbers (uniform in 1..max_number) in a random order with random
operations, keeping every intermediate result within 0..max_value and the target within
min_target..max_value (a target reached only through a larger result is not drawn, though any correct
solution is accepted). Splits `train` and `test` share one distribution and are disjoint by a stable hash of
the question; `ood` draws numbers up to 1.5 x max_number (two-digit numbers the model has not been
given), as `arith`'s ood split does: one number more than trained on scores 0 and tells nothing.

Waypoints (the sparse world, `waypoints: true`): the question also names the result every step must
reach, "3,5,7,2:15,22,44" (three steps: 15, then 22, then 44, the target). Each step is then a search of
its own (which two available values, which operation, give the waypoint?), and a solver that misses
one usually writes the waypoint as the result of an operation that does not give it, then goes on
correctly from there: its first false step is anywhere, not only the last, and one wrong step fails
the whole solution, so outcomes are sparse. A checker still redoes one small operation a step and
compares three numbers. Process labels add one fault: a step whose result is right but misses its
waypoint ("target"). Whether a question has waypoints is read from the question itself.
"""
from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from cotrain.errors import UserError
from cotrain.tasks import arith
from cotrain.tasks.arith import APPLY, is_test_question
from cotrain.tasks.base import Problem, labelled

_NUMBER = r"-?[0-9]{1,7}"
_STEP = re.compile(rf"({_NUMBER})([-+*])({_NUMBER})=({_NUMBER})")
_QUESTION = re.compile(r"([0-9]{1,4}(?:,[0-9]{1,4}){1,7}):([0-9]{1,6}(?:,[0-9]{1,6}){0,6})")

ERROR_KINDS = ("step", "operand", "target", "format")
"""How a wrong solution fails, by its first fault: a step states a wrong (or negative) result; a step
takes an operand that is not available (not given, or already used); every step is right but the
solution does not end at the target with every number used (or its `#` line says otherwise), or, with
waypoints, a right step misses its waypoint (or is a step too many); no readable step at all, or a
line that is not a step."""


# ----------------------------------------------------------------------------- pure string functions


def parse_question(question: str) -> tuple[list[int], int] | None:
    """(numbers, target) of a Countdown question such as "3,5,7:22", or None. With waypoints
    ("3,5,7:15,22") the target is the last of them; a question whose waypoints are not one per step
    (n numbers, n - 1 steps) is None. Never raises."""
    parsed = _parse(question)
    return None if parsed is None else (parsed[0], parsed[1][-1])


def parse_waypoints(question: str) -> list[int] | None:
    """The result each step must reach ("3,5,7:15,22" gives [15, 22]), or None for a question without
    waypoints (one target) or one that does not parse. Never raises."""
    parsed = _parse(question)
    return None if parsed is None or len(parsed[1]) == 1 else parsed[1]


def _parse(question: str) -> tuple[list[int], list[int]] | None:
    if not isinstance(question, str):
        return None
    match = _QUESTION.fullmatch(question)
    if match is None:
        return None
    numbers = [int(x) for x in match.group(1).split(",")]
    targets = [int(x) for x in match.group(2).split(",")]
    if len(targets) > 1 and len(targets) != len(numbers) - 1:
        return None
    return numbers, targets


def format_question(numbers: list[int], target: int | list[int]) -> str:
    """format_question([3, 5, 7], 22) == "3,5,7:22"; with waypoints, format_question([3, 5, 7], [15, 22])
    == "3,5,7:15,22"."""
    targets = target if isinstance(target, (list, tuple)) else [target]
    return ",".join(map(str, numbers)) + ":" + ",".join(map(str, targets))


def parse_step(line: str) -> tuple[int, str, int, int] | None:
    """(a, op, b, c) of one step line such as "3*5=15", or None. Never raises."""
    if not isinstance(line, str):
        return None
    match = _STEP.fullmatch(line.strip())
    if match is None:
        return None
    a, op, b, c = match.groups()
    return int(a), op, int(b), int(c)


def step_lines(completion: str) -> list[str]:
    """The non-empty lines (stripped) of a completion before its first line that starts with `#`."""
    return [line for line, _ in arith.parse_steps(completion)]


extract_answer = arith.extract_answer
"""The integer on the completion's last `#` line, canonical ("#022" gives "22"), or None (as in arith)."""


@dataclass(frozen=True)
class StepCheck:
    """One step judged against the values available before it.

    Attributes:
        pool: the values available before the step, in order (given numbers, then stated results).
        step: the parsed (a, op, b, c), or None for a line that is not a step.
        result: a OP b recomputed (None for an unparsable line).
        kind: None for a correct step, else "format", "operand" (an operand not available), "step"
            (a wrong or negative stated result) or, with waypoints, "target" (a right result that is not
            the step's waypoint, or a step past the last waypoint); the first that applies in that order.
    """

    pool: tuple[int, ...]
    step: tuple[int, str, int, int] | None
    result: int | None
    kind: str | None


def check_steps(numbers: list[int], steps: list[str],
                waypoints: list[int] | None = None) -> tuple[list[StepCheck], tuple[int, ...]]:
    """Each step judged locally, and the values left after the last. Never raises.

    A parsed step removes its operands from the pool where they are in it and adds its stated result
    (right or wrong); an unparsable line leaves the pool as it is. With `waypoints`, step k must also
    state waypoints[k].
    """
    pool = list(numbers)
    checks = []
    for line in steps:
        step = parse_step(line)
        if step is None:
            checks.append(StepCheck(tuple(pool), None, None, "format"))
            continue
        a, op, b, c = step
        before = tuple(pool)
        available = True
        for operand in (a, b):
            if operand in pool:
                pool.remove(operand)
            else:
                available = False
        result = APPLY[op](a, b)
        kind = "operand" if not available else ("step" if result != c or c < 0 else None)
        k = len(checks)
        if kind is None and waypoints is not None and (k >= len(waypoints) or c != waypoints[k]):
            kind = "target"
        checks.append(StepCheck(before, step, result, kind))
        pool.append(c)
    return checks, tuple(pool)


def error_kind(question: str, completion: str) -> str | None:
    """None when `completion` solves the Countdown `question`, else its first fault (`ERROR_KINDS`).
    A question that does not parse gives "format". Never raises."""
    parsed = parse_question(question)
    if parsed is None:
        return "format"
    numbers, target = parsed
    steps = step_lines(completion)
    if not steps:
        return "format"
    checks, left = check_steps(numbers, steps, parse_waypoints(question))
    for check in checks:
        if check.kind is not None:
            return check.kind
    answer = extract_answer(completion)
    if left != (target,) or answer is None or int(answer) != target:
        return "target"
    return None


def step_labels(question: str, steps: list[str]) -> list[bool]:
    """Whether each step is correct, judged locally (`check_steps`); all False for a question that
    does not parse. Never raises."""
    parsed = parse_question(question)
    if parsed is None:
        return [False] * len(steps)
    return [c.kind is None for c in check_steps(parsed[0], list(steps), parse_waypoints(question))[0]]


def _values(values) -> str:
    return ",".join(map(str, values))


def step_rationales(question: str, steps: list[str]) -> list[str]:
    """A verifier's rationale for each step: the values available before it, the step recomputed from
    its own operands, then the result it claims, so that the verdict reads off what is on the line
    (are both operands among the values? are the two results the same?). A line that is not a step
    gets the values and "?". Never raises.

    Example: question "3,5,7:22", steps ("3*5=15", "15+7=23") give
    ["3,5,7 3*5=15 15", "7,15 15+7=22 23"]. With waypoints each line ends with the step's waypoint
    ("?" past the last), so that a right step shows one number three times: question "3,5,7:15,22"
    gives ["3,5,7 3*5=15 15 15", "7,15 15+7=22 23 22"].
    """
    parsed = parse_question(question)
    if parsed is None:
        return ["?"] * len(steps)
    waypoints = parse_waypoints(question)
    out = []
    for k, check in enumerate(check_steps(parsed[0], list(steps), waypoints)[0]):
        if check.step is None:
            line = f"{_values(check.pool)} ?"
        else:
            a, op, b, c = check.step
            line = f"{_values(check.pool)} {a}{op}{b}={check.result} {c}"
        if waypoints is not None:
            line += f" {waypoints[k]}" if k < len(waypoints) else " ?"
        out.append(line)
    return out


def final_rationale(question: str, steps: list[str]) -> str:
    """What a verifier writes before its final verdict: the values left after the last step, then the
    target copied from the question, so that the verdict compares what is side by side (a correct
    solution leaves the target alone: "22 22"); "?" for a question that does not parse. Never raises."""
    parsed = parse_question(question)
    if parsed is None:
        return "?"
    return f"{_values(check_steps(parsed[0], list(steps))[1])} {parsed[1]}"


def format_solution(steps: list[str] | tuple[str, ...], answer: int | str) -> str:
    """The steps, one per line, then the final line `#<answer>`."""
    return "\n".join([*steps, f"#{answer}"])


@functools.lru_cache(maxsize=65536)
def _search(pool: tuple[int, ...], target: int, ops: str) -> tuple[str, ...] | None:
    # Depth-first over pairs of values; `pool` is sorted, so equal pools share one cache entry.
    if len(pool) == 1:
        return () if pool[0] == target else None
    for i in range(len(pool)):
        for j in range(len(pool)):
            if i == j or (j < i and pool[i] == pool[j]):
                continue
            a, b = pool[i], pool[j]
            rest = [v for k, v in enumerate(pool) if k not in (i, j)]
            for op in ops:
                if op in "+*" and j < i:
                    continue  # commutative: one order suffices
                c = APPLY[op](a, b)
                if c < 0:
                    continue
                found = _search(tuple(sorted([*rest, c])), target, ops)
                if found is not None:
                    return (f"{a}{op}{b}={c}", *found)
    return None


@functools.lru_cache(maxsize=65536)
def _search_waypoints(pool: tuple[int, ...], waypoints: tuple[int, ...], ops: str) -> tuple[str, ...] | None:
    # As _search, but the next step must give waypoints[0].
    if not waypoints:
        return () if len(pool) == 1 else None
    for i in range(len(pool)):
        for j in range(len(pool)):
            if i == j or (j < i and pool[i] == pool[j]):
                continue
            a, b = pool[i], pool[j]
            for op in ops:
                if (op in "+*" and j < i) or APPLY[op](a, b) != waypoints[0]:
                    continue
                rest = [v for k, v in enumerate(pool) if k not in (i, j)]
                found = _search_waypoints(tuple(sorted([*rest, waypoints[0]])), waypoints[1:], ops)
                if found is not None:
                    return (f"{a}{op}{b}={waypoints[0]}", *found)
    return None


def solve(question: str, ops: str = "+-*") -> tuple[str, ...] | None:
    """Steps of one correct solution of a Countdown question (reaching its waypoints, if it has them),
    or None when it has none (or does not parse). Exhaustive: at most a few thousand pools for six
    numbers."""
    parsed = parse_question(question)
    if parsed is None or len(parsed[0]) > 6:
        return None
    numbers, target = parsed
    waypoints = parse_waypoints(question)
    if waypoints is not None:
        found = _search_waypoints(tuple(sorted(numbers)), tuple(waypoints), ops)
    else:
        found = _search(tuple(sorted(numbers)), target, ops)
    return None if found is None else tuple(found)


# ----------------------------------------------------------------------------- the task


class CountdownTask:
    """Countdown problems from a seed; see the module docstring for the formats, rules and splits.

    Args:
        n_numbers: inclusive range of how many numbers a question gives (train and test).
        max_number: largest given number (the smallest is 1).
        max_value: largest intermediate result and target of a drawn problem.
        min_target: smallest target of a drawn problem (small targets are reached by many easy ways).
        ops: the operations to draw from and to solve with, a non-empty subset of "+-*".
        ood_n_numbers: the ood split's range of how many numbers (default: n_numbers).
        ood_max_number: the ood split's largest given number (default: 1.5 x max_number, rounded up).
        waypoints: questions name every step's result (module docstring): the sparse world.
    """

    name = "countdown"
    splits = ("train", "test", "ood")

    def __init__(self, n_numbers: tuple[int, int] = (3, 4), max_number: int = 9, max_value: int = 99,
                 min_target: int = 10, ops: str = "+-*", ood_n_numbers: tuple[int, int] | None = None,
                 ood_max_number: int | None = None, waypoints: bool = False):
        self.n_numbers = _check_range("n_numbers", n_numbers, low=2, high=5)
        self.ood_n_numbers = _check_range("ood_n_numbers", self.n_numbers if ood_n_numbers is None else ood_n_numbers,
                                          low=2, high=6)
        self.max_number = _check_int("max_number", max_number, 1, 9999)
        self.ood_max_number = _check_int("ood_max_number", -(-3 * self.max_number // 2) if ood_max_number is None
                                         else ood_max_number, 1, 9999)
        self.max_value = _check_int("max_value", max_value, 1, 999999)
        self.min_target = _check_int("min_target", min_target, 1, self.max_value)
        if not isinstance(ops, str) or not ops or set(ops) - set("+-*") or len(set(ops)) != len(ops):
            raise UserError(f"countdown: ops must be distinct characters of '+-*' (e.g. '+-*'), got {ops!r}")
        self.ops = ops
        if not isinstance(waypoints, bool):
            raise UserError(f"countdown: waypoints must be true or false, got {waypoints!r}")
        self.waypoints = waypoints

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """`n` distinct problems of `split`, a deterministic function of (split, n, seed, knobs); a
        shorter list is a prefix of a longer one. `meta` holds {"n_ops": the steps a solution takes}."""
        if split not in self.splits:
            raise UserError(f"countdown: unknown split {split!r} (valid: {', '.join(self.splits)})")
        if n is None:
            raise UserError("countdown: the task is procedural; give the number of problems (e.g. train.n_problems)")
        n_lo, n_hi = self.ood_n_numbers if split == "ood" else self.n_numbers
        rng = random.Random(f"countdown:{split}:{seed}")
        seen: set[str] = set()
        problems = []
        attempts, max_attempts = 0, 200 * n + 1000
        while len(problems) < n:
            attempts += 1
            if attempts > max_attempts:
                raise UserError(f"countdown: found only {len(problems)} distinct {split} questions in {max_attempts} "
                                f"draws, fewer than n={n}; widen n_numbers, max_number or max_value")
            drawn = self._draw(rng, n_lo + int(rng.random() * (n_hi - n_lo + 1)),
                               self.ood_max_number if split == "ood" else self.max_number)
            if drawn is None:
                continue
            numbers, steps, target = drawn
            if target < self.min_target:
                continue
            question = format_question(numbers, [parse_step(x)[3] for x in steps] if self.waypoints else target)
            if question in seen or (split != "ood" and is_test_question(question) != (split == "test")):
                continue
            seen.add(question)
            problems.append(Problem(question=question, answer=str(target), steps=steps,
                                    solution=format_solution(steps, target), meta={"n_ops": len(steps)}))
        return problems

    def _draw(self, rng: random.Random, n: int, max_number: int) -> tuple[list[int], tuple[str, ...], int] | None:
        # Numbers, then pairs of available values combined in a random order; None when a result
        # leaves 0..max_value (the target: 1..max_value) whatever the operation.
        numbers = [1 + int(rng.random() * max_number) for _ in range(n)]
        pool, steps = list(numbers), []
        while len(pool) > 1:
            a = pool.pop(int(rng.random() * len(pool)))
            b = pool.pop(int(rng.random() * len(pool)))
            ops = list(self.ops)
            rng.shuffle(ops)
            for op in ops:
                x, y = (max(a, b), min(a, b)) if op == "-" else (a, b)
                c = APPLY[op](x, y)
                if 0 <= c <= self.max_value and (len(pool) > 0 or c >= 1):
                    break
            else:
                return None
            steps.append(f"{x}{op}{y}={c}")
            pool.append(c)
        return numbers, tuple(steps), pool[0]

    def extract_answer(self, completion: str) -> str | None:
        """See `extract_answer` (module level): the integer of the last `#` line, or None."""
        return extract_answer(completion)

    def answers_equal(self, a: str, b: str) -> bool:
        """Extracted answers are canonical integers: equal strings are equal answers."""
        return a == b

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the completion solves the problem's question (module docstring), else 0.0. Never
        raises, except LabelLeak on a blinded problem: the grader is the ground truth a label-free
        path must not read, though it needs no stored answer."""
        labelled(problem)
        return float(error_kind(problem.question, completion) is None)

    def error_kind(self, problem: Problem, completion: str) -> str | None:
        """See `error_kind` (module level): None for a correct solution, else its first fault."""
        labelled(problem)
        return error_kind(problem.question, completion)

    def check_question(self, question: str, max_ops: int | None = None,
                       max_operand: int | None = None, solvable: bool = True) -> tuple[bool, bool]:
        """(parsable, valid) of a proposed question. Never raises.

        Valid: 2..max_ops + 1 numbers (default: the task's most), each 1..max_operand (default:
        max_number), a target in 1..max_value, and (with `solvable`) a solution with the task's ops
        found by the exact solver (`solve`): an oracle, which `solvable=False` leaves out, so that
        validity is the question's form and limits alone.
        """
        parsed = parse_question(question)
        if parsed is None:
            return False, False
        numbers, target = parsed
        most = self.n_numbers[1] if max_ops is None else max_ops + 1
        largest = self.max_number if max_operand is None else max_operand
        valid = (2 <= len(numbers) <= min(most, 6) and all(1 <= x <= largest for x in numbers)
                 and 1 <= target <= self.max_value)
        return True, valid and (not solvable or solve(question, self.ops) is not None)

    def size(self, question: str) -> dict[str, float]:
        """How big a question is: the steps it takes and its largest number ({} when unparsable)."""
        parsed = parse_question(question)
        if parsed is None:
            return {}
        return {"n_ops": float(len(parsed[0]) - 1), "max_operand": float(max(parsed[0]))}

    def problem_of(self, question: str) -> Problem | None:
        """The problem, with a solution found by search, of any solvable question in the notation;
        None otherwise."""
        steps = solve(question, self.ops)
        if steps is None:
            return None
        target = parse_question(question)[1]
        return Problem(question=question, answer=str(target), steps=steps,
                       solution=format_solution(steps, target), meta={"n_ops": len(steps)})

    def corrupt(self, problem: Problem, k: int | list[int], rng: random.Random) -> tuple[tuple[str, ...], str]:
        """See `corrupt_solution`: the reference with an error of a random kind at step k (or each k),
        drawn again (up to 20 times) while the change happens to leave a correct solution."""
        for _ in range(20):
            steps, solution = corrupt_solution(problem.question, problem.steps, k, rng, self.ops)
            if error_kind(problem.question, solution) is not None:
                break
        return steps, solution

    def step_labels(self, problem: Problem, steps: list[str]) -> list[bool]:
        """See `step_labels` (module level)."""
        return step_labels(problem.question, steps)

    def step_kinds(self, problem: Problem, steps: list[str]) -> list[str | None]:
        """Each step's fault (`StepCheck.kind`: None for a right step), judged as `step_labels` judges it;
        all "format" for a question that does not parse. Never raises."""
        parsed = parse_question(problem.question)
        if parsed is None:
            return ["format"] * len(steps)
        return [c.kind for c in check_steps(parsed[0], list(steps), parse_waypoints(problem.question))[0]]

    def step_rationales(self, problem: Problem, steps: list[str]) -> list[str]:
        """See `step_rationales` (module level)."""
        return step_rationales(problem.question, steps)

    def final_rationale(self, problem: Problem, steps: list[str], answer: str | None = None) -> str:
        """See `final_rationale` (module level). `answer` is not read: the final line compares the values
        the steps leave with the target, which is what a Countdown answer is judged by."""
        return final_rationale(problem.question, steps)


# ----------------------------------------------------------------------------- injected errors


def corrupt_solution(question: str, steps: tuple[str, ...] | list[str], k: int | list[int], rng: random.Random,
                     ops: str = "+-*") -> tuple[tuple[str, ...], str]:
    """A wrong solution made from a correct one: at step k (or each step of a list), one fault of a
    kind drawn uniformly, the other steps replayed correctly on the values they refer to.

    Kinds: "step", the stated result is off (by a nonzero delta in -10..10, never negative); "operand",
    one operand is replaced by a number that is not available at that step (a given number already
    used, or another one in 1..9); "target", the operation is replaced by another, computed correctly
    (a search failure: every step right, the end off the target), the final line stating either the
    result reached or the target. Later steps take the changed result where the reference took it.
    With waypoints, half the "step" faults are what a solver that misses a waypoint writes: another
    operation, whose true result is not the waypoint, stated as giving it; later steps then go on
    from the waypoint as the reference does.

    Args:
        question: the Countdown question.
        steps: its correct solution's steps (the reference).
        k: 0-based index of the step to change, or a list of them.
        rng: the source of randomness (the caller seeds it).

    Returns:
        (steps, solution).

    Raises:
        ValueError: the question does not parse, the steps are not a correct solution, or k is not a
            step index.
    """
    parsed = parse_question(question)
    if parsed is None:
        raise ValueError(f"not a countdown question: {question!r}")
    numbers, target = parsed
    waypoints = parse_waypoints(question)
    plan = _references(numbers, list(steps))
    wrong = {k} if isinstance(k, int) else set(k)
    if not wrong or not all(0 <= i < len(plan) for i in wrong):
        raise ValueError(f"step index {k} out of range for {len(plan)} steps of {question!r}")
    values = list(numbers)                     # slot -> current value: given numbers, then step results
    used: set[int] = set()
    out = []
    lie = False
    for i, (x, op, y) in enumerate(plan):
        a, b = values[x], values[y]
        available = [values[s] for s in range(len(values)) if s not in used]
        used.update((x, y))
        if i in wrong:
            kind = rng.choice(("step", "operand", "target"))
            if kind == "operand":
                candidates = [v for v in range(1, 10) if v not in available]
                if rng.random() < 0.5:
                    a = rng.choice(candidates)
                else:
                    b = rng.choice(candidates)
            elif kind == "target":
                others = [o for o in ops if o != op] or [op]
                op = rng.choice(others)
                if op == "-" and a < b:
                    a, b = b, a
                lie = rng.random() < 0.5
            c = APPLY[op](a, b)
            # with waypoints, half the time: the waypoint stated as the result of an operation that misses it
            missing = [o for o in ops if APPLY[o](*sorted((a, b), reverse=o == "-")) != c] \
                if kind == "step" and waypoints is not None else []
            if missing and rng.random() < 0.5:
                op = rng.choice(missing)
                if op == "-" and a < b:
                    a, b = b, a
            elif kind == "step":
                c = max(0, c + rng.choice([d for d in range(-10, 11) if d != 0]))
                if c == APPLY[op](a, b):
                    c += 1
        else:
            if op == "-" and a < b:
                a, b = b, a
            c = APPLY[op](a, b)
        out.append(f"{a}{op}{b}={c}")
        values.append(c)
    final = target if lie else values[-1]
    return tuple(out), format_solution(out, final)


def _references(numbers: list[int], steps: list[str]) -> list[tuple[int, str, int]]:
    # Each step of a correct solution as (slot of a, op, slot of b): slots 0..n-1 are the given
    # numbers, n + i the result of step i; an operand takes the first unused slot holding its value.
    values, used, plan = list(numbers), set(), []
    for line in steps:
        step = parse_step(line)
        if step is None:
            raise ValueError(f"not a step: {line!r}")
        a, op, b, c = step
        slots = []
        for operand in (a, b):
            slot = next((s for s, v in enumerate(values) if v == operand and s not in used), None)
            if slot is None:
                raise ValueError(f"operand {operand} of {line!r} is not available")
            used.add(slot)
            slots.append(slot)
        plan.append((slots[0], op, slots[1]))
        values.append(c)
    return plan


def _check_range(name: str, value, low: int, high: int) -> tuple[int, int]:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not low <= value[0] <= value[1] <= high):
        raise UserError(f"countdown: {name} must be [low, high] with {low} <= low <= high <= {high}, got {value!r}")
    return int(value[0]), int(value[1])


def _check_int(name: str, value, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise UserError(f"countdown: {name} must be an integer in {low}..{high}, got {value!r}")
    return value
