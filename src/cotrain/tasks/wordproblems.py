"""GSM8K-style word problems of one to three steps, generated: the real-model task a 135M instruction
model can start on and learn from on a CPU.

A problem tells a short story about a count of things and asks for the count at the end:

    Mia buys 3 boxes with 4 pencils in each box. She gives away 5 pencils.
    How many pencils does Mia have now?

    3 * 4 = 12
    12 - 5 = 7
    #### 7

The first sentence either states a count ("Mia has 12 pencils.") or makes one by a product ("buys 3
boxes with 4 pencils in each box": one step); each later sentence adds or takes away some ("She gets 6
more pencils.", "She gives away 5 pencils.", "She loses 2 pencils."), one step each. Counts never go
below zero. The reference solution writes each step as `a op b = c`, then `#### answer`; a completion
is graded by its final answer (`extract_gsm8k_answer`: after `####`, else the last `\\boxed{}`, else
the last number), compared exactly.

Process labels (the verifier's warm-up and its held-out injected errors, the oracle verifier): `corrupt`
states a wrong result at chosen steps of the reference solution, later steps computing correctly from it;
`step_labels` judges each step against what the story allows (`story_step_faults`): every equation
in it, as a model writes it (`stated_equations`: `a op b = c`, with `x` for `*`, a unit word after a
number, or a chain read as its steps), must take its operands from the story's quantities or the results stated before it
(right or wrong: an error carried forward is one wrong step), do an operation the story calls for (the
product of the two factors it names; adding an amount it gains; taking away an amount it loses), and hold.
A step with no equation, prose, counts as right: there is nothing in it to check. (`equation_labels`
checks only that the equations hold: a true equation on the wrong numbers passes it.)

Splits: `train` and `test` draw from the same distribution and never share a question (a stable hash
puts about 1 in 10 questions in `test`); `ood` has numbers up to `ood_max_number` (default 3x larger)
and one more step than the largest of `n_steps`, drawn without that split's own test/train rule.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import NamedTuple

from cotrain.errors import UserError
from cotrain.tasks.arith import APPLY
from cotrain.tasks.base import Problem, labelled
from cotrain.tasks.mathdata import extract_gsm8k_answer

NAMES = (("Mia", "She"), ("Tom", "He"), ("Ava", "She"), ("Sam", "He"), ("Lena", "She"), ("Ben", "He"),
         ("Zoe", "She"), ("Leo", "He"), ("Ella", "She"), ("Max", "He"), ("Nora", "She"), ("Omar", "He"))
THINGS = (("apple", "apples", "bag", "bags"), ("pencil", "pencils", "box", "boxes"),
          ("sticker", "stickers", "sheet", "sheets"), ("marble", "marbles", "jar", "jars"),
          ("cookie", "cookies", "tray", "trays"), ("card", "cards", "pack", "packs"),
          ("egg", "eggs", "carton", "cartons"), ("flower", "flowers", "vase", "vases"),
          ("book", "books", "shelf", "shelves"), ("shell", "shells", "bucket", "buckets"))
GAINS = ("{p} gets {n} more {things}.", "{p} buys {n} more {things}.", "{p} finds {n} more {things}.",
         "A friend gives {o} {n} more {things}.")
LOSSES = ("{p} gives away {n} {things}.", "{p} loses {n} {things}.", "{p} uses {n} {things}.",
          "{p} gives {n} {things} to a friend.")
QUESTIONS = ("How many {things} does {name} have now?", "How many {things} does {name} have in the end?")
OBJECT = {"She": "her", "He": "him"}


def is_test_question(question: str) -> bool:
    """Whether a question belongs to the test split (about 1 in 10), by a stable hash."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % 10 == 0


def draw_problem(rng: random.Random, n_steps: int, max_number: int) -> Problem:
    """One problem of exactly `n_steps` steps with numbers from 1 to `max_number` (factors of a
    product up to min(max_number, 9)), from `rng`."""
    name, pronoun = rng.choice(NAMES)
    thing, things, container, containers = rng.choice(THINGS)
    sentences, steps = [], []
    if n_steps >= 2 and rng.random() < 0.5 or n_steps == 1 and rng.random() < 0.3:
        a, b = rng.randint(2, min(max_number, 9)), rng.randint(2, min(max_number, 9))
        count = a * b
        sentences.append(f"{name} buys {a} {containers} with {b} {things} in each {container}.")
        steps.append(f"{a} * {b} = {count}")
    else:
        count = rng.randint(1, max_number)
        sentences.append(f"{name} has {count} {things if count != 1 else thing}.")
    while len(steps) < n_steps:
        if count > 1 and rng.random() < 0.5:
            n = rng.randint(1, min(count, max_number))
            sentences.append(rng.choice(LOSSES).format(p=pronoun, n=n, things=things if n != 1 else thing))
            steps.append(f"{count} - {n} = {count - n}")
            count -= n
        else:
            n = rng.randint(1, max_number)
            sentences.append(rng.choice(GAINS).format(p=pronoun, o=OBJECT[pronoun], n=n,
                                                      things=things if n != 1 else thing))
            steps.append(f"{count} + {n} = {count + n}")
            count += n
    sentences.append(rng.choice(QUESTIONS).format(things=things, name=name))
    answer = str(count)
    return Problem(question=" ".join(sentences), answer=answer, steps=tuple(steps),
                   solution="\n".join(steps) + f"\n#### {answer}", meta={"n_ops": n_steps})


_EQUATION = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)")
"""A reference step, `a op b = c`, exactly."""

_UNIT = r"(?:\s+[A-Za-z]+)?"  # one word after a number: "5 sheets x 9 stickers = 45"
_STATED = re.compile(rf"(?<![\w.])(-?\d+{_UNIT}(?:\s*[-+*x\u00d7]\s*\d+{_UNIT})+)\s*=\s*(-?\d+)")
_TERM = re.compile(r"([-+*x\u00d7])?\s*(-?\d+)")


def stated_equations(text: str) -> list[tuple[int, str, int, int]]:
    """The equations a written step states, as (a, op, b, c) with op one of + - *, in order. Reads what a
    model writes, not only the reference's `a op b = c`: `x` and `\u00d7` for `*`, a word after a number
    ("7 boxes * 3 pencils = 21"), and a chain ("7 + 5 - 3 = 9") as its steps left to right, each result
    but the last the true value of its part ((7, "+", 5, 12), (12, "-", 3, 9)): the chain states only
    its end. Never raises; reads the first 1,000 characters.

    Example: "So 5 sheets x 9 stickers = 45, then 45 + 5 = 50." gives [(5, "*", 9, 45), (45, "+", 5, 50)].
    """
    return [e[:4] for e in _stated(text)]


def _stated(text: str) -> list[tuple[int, str, int, int, bool]]:
    """`stated_equations`, each with whether its result is written (False for a chain's middle values)."""
    out = []
    for left, result in _STATED.findall(str(text)[:1000]):
        left = re.sub(r"[A-Za-z]{2,}|[A-Za-wyz]", " ", left)  # the unit words go, a lone x stays
        first = re.match(r"\s*(-?\d+)", left)
        terms = [(op, int(n)) for op, n in _TERM.findall(left[first.end():])]
        if not terms or not all(op for op, _ in terms):
            continue
        value = int(first[1])
        for i, (op, n) in enumerate(terms, start=1):
            op = "*" if op in ("x", "\u00d7") else op
            end = int(result) if i == len(terms) else APPLY[op](value, n)
            out.append((value, op, n, end, i == len(terms)))
            value = end
    return out


STEP_FAULTS = ("operand", "operation", "arithmetic")
"""How a step goes wrong against its story, the first that applies: an operand that is neither a quantity
of the story nor a result stated before; an operation the story does not call for; a false equation."""


def equation_labels(steps: tuple[str, ...] | list[str]) -> list[bool]:
    """Per step: False when an equation `a op b = c` in it does not hold, else True. Never raises."""
    return [all(APPLY[op](a, b) == c for a, op, b, c in stated_equations(step)) for step in steps]


step_labels = equation_labels
"""The equation check alone (the name older callers use); the task's own labels are `story_step_faults`."""


def _events(problem: Problem) -> tuple[set[frozenset], set[int], set[int]]:
    """What the story calls for, read off its reference steps: (the factor pairs of its product, the
    amounts it gains, the amounts it loses)."""
    products, gains, losses = set(), set(), set()
    for step in problem.steps:
        m = _EQUATION.fullmatch(step.strip())
        if m is None:
            continue
        a, op, b = int(m[1]), m[2], int(m[3])
        if op == "*":
            products.add(frozenset((a, b)))
        else:
            (gains if op == "+" else losses).add(b)
    return products, gains, losses


class CheckedEquation(NamedTuple):
    """One equation of a step judged against its story (`checked_equations`)."""

    a: int
    op: str
    b: int
    c: int
    written: bool             # whether c is written (False for a chain's middle value: computed, not stated)
    sources: tuple[str, str]  # each operand "given" (a quantity of the story), "from before" (a result stated
    #                           before it) or "not given"
    event: str                # what the story would have to do for this operation: "3 * 4", "+5", "-4"
    called: bool              # whether it does
    fault: str | None         # None when right, else the first of `STEP_FAULTS` that applies


def story_quantities(problem: Problem) -> set[int]:
    """The numbers its story states (the operands a step may take as "given")."""
    return {int(x) for x in re.findall(r"\d+", problem.question[:5000])}


def checked_equations(problem: Problem, steps: tuple[str, ...] | list[str]) -> list[list[CheckedEquation]]:
    """Each step's equations judged against the story, in order. An operand must be a quantity of the
    question or a result stated before (earlier steps', or earlier in the same step); `*` must multiply the
    story's two factors, `+` add an amount it gains (either side), `-` take away an amount it loses; the
    equation must hold. Never raises."""
    quantities = story_quantities(problem)
    products, gains, losses = _events(problem)
    results = set()
    out = []
    for step in steps:
        checked = []
        for a, op, b, c, written in _stated(step):
            sources = tuple("given" if x in quantities else "from before" if x in results else "not given"
                            for x in (a, b))
            if op == "*":
                called, event = frozenset((a, b)) in products, f"{a} * {b}"
            elif op == "+":
                called, event = a in gains or b in gains, f"+{a if a in gains and b not in gains else b}"
            else:
                called, event = b in losses, f"-{b}"
            fault = ("operand" if "not given" in sources else "operation" if not called else
                     "arithmetic" if APPLY[op](a, b) != c else None)
            checked.append(CheckedEquation(a, op, b, c, written, sources, event, called, fault))
            results.add(c)
        out.append(checked)
    return out


def story_step_faults(problem: Problem, steps: tuple[str, ...] | list[str]) -> list[str | None]:
    """Each step judged against its story: None when right, else the first fault of its equations
    (`checked_equations`). Never raises.

    Example: "Mia has 7 pencils. She gets 5 more pencils. ..." (reference `7 + 5 = 12`): "7 + 5 = 12" is
    right; "7 + 6 = 13" takes 6 from nowhere ("operand"); "7 - 5 = 2" loses what she gains ("operation");
    "7 + 5 = 13" is false ("arithmetic"); "12 + 0 = 12" after it takes 0 from nowhere.
    """
    return [next((e.fault for e in step if e.fault), None) for step in checked_equations(problem, steps)]


def story_summary(problem: Problem) -> str:
    """What the story does, as its reference steps do it: the first count or product, then each amount it
    gains (+) or loses (-). "Mia has 7 pencils. She gets 5 more pencils. She gives away 4 pencils." gives
    "7, +5, -4"; "Mia buys 3 boxes with 4 pencils in each box. She gives away 5 pencils." gives "3 * 4, -5".
    A verifier copies it before its first check, so that every later check compares a step with what
    stands beside it. Never raises."""
    parts = []
    for step in problem.steps:
        m = _EQUATION.fullmatch(str(step).strip())
        if m is None:
            continue
        if m[2] == "*":
            parts.append(f"{m[1]} * {m[3]}")
        else:
            parts += [m[1]] * (not parts) + [f"{m[2]}{m[3]}"]
    return ", ".join(parts)


def step_rationales(problem: Problem, steps: tuple[str, ...] | list[str]) -> list[str]:
    """A verifier's rationale for each step, every check written after what it checks, so that each
    decision sits beside the number it is about: the first step's opens with the story
    (`story_summary`); then for every equation in a step, its operands, each "given" (a quantity of the
    story), "from before" (a result stated before it) or "not given"; its operation, "in the story" or
    "not in the story" (a product of the story's two factors, an amount the story adds, an amount it takes
    away); and its result recomputed beside the written one (a chain's middle value, "7 + 5" of
    "7 + 5 - 4 = 8", is not written: recomputed alone). The verdict reads off the line: a "not", or
    a recomputed result that is not the written one. A step without an equation computes nothing and
    has only the story, for the first step, or nothing. The checks are `checked_equations`'s. Never
    raises.

    Example (the story of `story_step_faults`, "Mia has 7 pencils. She gets 5 more pencils. She gives away
    4 pencils."): steps ("7 + 6 = 13", "13 - 4 = 8") give ["story 7, +5, -4; 7 given, 6 not given, +6 not in
    the story; 7 + 6 is 13, written 13", "13 from before, 4 given, -4 in the story; 13 - 4 is 9, written 8"].
    """
    out = []
    for k, step in enumerate(checked_equations(problem, steps)):
        parts = [f"story {story_summary(problem)}"] if k == 0 else []
        for e in step:
            parts.append(f"{e.a} {e.sources[0]}, {e.b} {e.sources[1]}, {e.event} {'in' if e.called else 'not in'} the "
                         f"story; {e.a} {e.op} {e.b} is {APPLY[e.op](e.a, e.b)}" + f", written {e.c}" * e.written)
        out.append("; ".join(parts))
    return out


def story_worked(problem: Problem) -> str:
    """The count the story makes, worked one operation at a time as its reference steps work it, each
    result beside its operation: "Mia has 7 pencils. She gets 5 more pencils. She gives away 4 pencils."
    gives "7 + 5 is 12, 12 - 4 is 8". Never raises."""
    worked = []
    for step in problem.steps:
        m = _EQUATION.fullmatch(str(step).strip())
        if m is not None:
            worked.append(f"{m[1]} {m[2]} {m[3]} is {m[4]}")
    return ", ".join(worked)


def final_rationale(problem: Problem, steps: tuple[str, ...] | list[str], answer: str | None = None) -> str:
    """What a verifier writes before its final verdict: the steps the story needs (its reference's) against
    the steps the solution shows (its lines or its equations, whichever are more, as `complete_solutions`
    counts them: "needs 3, shows 2" is a solution that stopped early, which `cotraining.credit: final`
    rejects at its answer whatever the verdict), then the count the story makes, worked one operation at a
    time (`story_worked`: each a check the step verdicts already make), then the solution's answer copied
    beside it ("none" without one). The verdict reads off the end of the line: the answer against the
    count just before it. Never raises on any text.

    Example (the story "7, +5, -4"): steps ("12 - 4 = 8",) and answer "8" give "needs 2, shows 1; story
    7 + 5 is 12, 12 - 4 is 8; answer 8"."""
    shown = max(len(steps), sum(len(stated_equations(step)) for step in steps))
    copied = str(answer).strip()[:40] if answer is not None and str(answer).strip() else "none"
    return f"needs {len(problem.steps)}, shows {shown}; story {story_worked(problem)}; answer {copied}"


def corrupt_solution(problem: Problem, k: int | list[int], rng: random.Random,
                     kinds: tuple[str, ...] = ("arithmetic",)) -> tuple[tuple[str, ...], str]:
    """The reference solution with a false step at step k (or at each step of a list), every later step
    computing correctly from the previous, possibly wrong, result; the final line is the last result.
    Each false step is of a kind drawn from `kinds` (`STEP_FAULTS`; drawn only when there are several):
    "arithmetic" states a wrong result (the true one moved by 1 to 3 either way); "operation" does
    another operation than the story's (+ for -, - for +, + for *) correctly; "operand" takes an amount
    1 to 3 away from the story's, one the story does not state, correctly. A step that cannot go wrong in
    its kind there (its story calls for the other operation too; no unstated amount near) goes wrong in
    its arithmetic. The false step's result is never the reference's result of that step, so the final
    answer is wrong too (only + and - follow the first step), and the task's labels (`story_step_faults`)
    name that step's kind.

    Raises:
        ValueError: a step index out of range, an unknown kind, or a problem whose steps are not `a op b = c`.
    """
    wrong = {k} if isinstance(k, int) else set(k)
    if not wrong or not all(isinstance(i, int) and 0 <= i < len(problem.steps) for i in wrong):
        raise ValueError(f"step index {k} out of range for {len(problem.steps)} steps")
    if not kinds or not set(kinds) <= set(STEP_FAULTS):
        raise ValueError(f"corruption kinds must be among {', '.join(STEP_FAULTS)}; got {kinds!r}")
    quantities = story_quantities(problem)
    steps, count = [], 0
    for i, step in enumerate(problem.steps):
        m = _EQUATION.fullmatch(step.strip())
        if m is None:
            raise ValueError(f"not a wordproblems step: {step!r}")
        a, op, b = (int(m[1]) if i == 0 else count), m[2], int(m[3])
        count = APPLY[op](a, b)
        line = f"{a} {op} {b} = {count}"
        if i in wrong:  # never back on the reference's own result: the final answer stays wrong
            kind = rng.choice(kinds) if len(kinds) > 1 else kinds[0]
            line = _false_step(problem, steps, a, op, b, kind, quantities, int(m[4]), rng)
            count = int(line.rsplit("=", 1)[1])
        steps.append(line)
    return tuple(steps), "\n".join(steps) + f"\n#### {count}"


def _false_step(problem: Problem, before: list[str], a: int, op: str, b: int, kind: str, quantities: set[int],
                reference: int, rng: random.Random) -> str:
    """Step `a op b` of `corrupt_solution` made false in `kind`, after the steps `before`; in its
    arithmetic where `kind` cannot be made there."""
    true = APPLY[op](a, b)
    candidates = []
    if kind == "operation":
        other = {"+": "-", "-": "+", "*": "+"}[op]
        candidates = [f"{a} {other} {b} = {APPLY[other](a, b)}"]
    elif kind == "operand":
        results = {c for line in before for *_, c in stated_equations(line)}
        near = [x for x in range(b - 3, b + 4) if x >= 1 and x not in quantities | results]
        candidates = [f"{a} {op} {x} = {APPLY[op](a, x)}" for x in rng.sample(near, len(near))]
    for line in candidates:
        if int(line.rsplit("=", 1)[1]) not in (true, reference) and story_step_faults(problem, [*before, line])[-1] == kind:
            return line
    return f"{a} {op} {b} = {rng.choice([v for v in range(true - 3, true + 4) if v not in (true, reference)])}"


class WordProblemsTask:
    """Generated word problems (see the module docstring).

    Args:
        n_steps: inclusive range of the number of steps of `train` and `test` problems.
        max_number: largest number a story states (train and test).
        ood_max_number: largest number of the `ood` split (default 3 x max_number).
        corrupt_kinds: the kinds of false step `corrupt` injects (`STEP_FAULTS`), one drawn per false step;
            the default, wrong results alone.
    """

    name = "wordproblems"
    splits = ("train", "test", "ood")

    def __init__(self, n_steps: tuple[int, int] = (1, 2), max_number: int = 20, ood_max_number: int | None = None,
                 corrupt_kinds: tuple[str, ...] | list[str] = ("arithmetic",)):
        if (not isinstance(n_steps, (list, tuple)) or len(n_steps) != 2 or not all(type(x) is int for x in n_steps)
                or not 1 <= n_steps[0] <= n_steps[1] <= 6):
            raise UserError(f"wordproblems: n_steps must be [low, high] with 1 <= low <= high <= 6, got {n_steps!r}")
        for key, value in (("max_number", max_number), ("ood_max_number", ood_max_number)):
            if value is not None and (type(value) is not int or not 2 <= value <= 10_000):
                raise UserError(f"wordproblems: {key} must be an integer from 2 to 10000, got {value!r}")
        if (not isinstance(corrupt_kinds, (list, tuple)) or not corrupt_kinds
                or not all(isinstance(x, str) and x in STEP_FAULTS for x in corrupt_kinds)):
            raise UserError(f"wordproblems: corrupt_kinds must be a list of {', '.join(STEP_FAULTS)}, got {corrupt_kinds!r}")
        self.n_steps = (n_steps[0], n_steps[1])
        self.max_number = max_number
        self.corrupt_kinds = tuple(corrupt_kinds)
        self.ood_max_number = ood_max_number or 3 * max_number

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """`n` distinct problems of `split` (default 1,000), deterministic in (split, n, seed, knobs);
        a shorter list is a prefix of a longer one."""
        if split not in self.splits:
            raise UserError(f"wordproblems has no split {split!r} (splits: {', '.join(self.splits)})")
        n = 1000 if n is None else n
        rng = random.Random(f"wordproblems/{split}/{seed}")
        low, high = self.n_steps
        if split == "ood":
            low, high, max_number = high + 1, high + 1, self.ood_max_number
        else:
            max_number = self.max_number
        seen: set[str] = set()
        out: list[Problem] = []
        for _ in range(200 * n + 1000):
            if len(out) == n:
                break
            problem = draw_problem(rng, rng.randint(low, high), max_number)
            if problem.question in seen or (split != "ood" and is_test_question(problem.question) != (split == "test")):
                continue
            seen.add(problem.question)
            out.append(problem)
        if len(out) < n:
            raise UserError(f"wordproblems: only {len(out)} distinct {split} problems for n={n}; "
                            "raise max_number or widen n_steps")
        return out

    def extract_answer(self, completion: str) -> str | None:
        """After the last `####`, else the last `\\boxed{}`, else the last number (`extract_gsm8k_answer`)."""
        return extract_gsm8k_answer(completion)

    def answers_equal(self, a: str, b: str) -> bool:
        return _integer(a) is not None and _integer(a) == _integer(b)

    def corrupt(self, problem: Problem, k: int | list[int], rng: random.Random) -> tuple[tuple[str, ...], str]:
        """See `corrupt_solution`: (steps, solution) with a false step at step k (of a kind drawn from
        `corrupt_kinds`), carried forward."""
        return corrupt_solution(problem, k, rng, self.corrupt_kinds)

    def count_steps(self, steps: tuple[str, ...] | list[str]) -> int:
        """The steps of work a solution's lines show: the equations they state (`stated_equations`; two on
        one line are two steps, a chain of three terms is two, prose none). `complete_solutions` takes this
        or the number of lines, whichever is more, against the problem's own number of steps."""
        return sum(len(stated_equations(step)) for step in steps)

    def step_labels(self, problem: Problem, steps: tuple[str, ...] | list[str]) -> list[bool]:
        """Whether each step is right against its story (`story_step_faults`)."""
        return [fault is None for fault in story_step_faults(problem, steps)]

    def step_kinds(self, problem: Problem, steps: tuple[str, ...] | list[str]) -> list[str | None]:
        """Each step's fault against its story (`story_step_faults`), None for a right step."""
        return story_step_faults(problem, steps)

    def step_rationales(self, problem: Problem, steps: tuple[str, ...] | list[str]) -> list[str]:
        """See `step_rationales` (module level): the story, then each equation's operands, operation and
        result, each check written after what it checks."""
        return step_rationales(problem, steps)

    def final_rationale(self, problem: Problem, steps: tuple[str, ...] | list[str], answer: str | None = None) -> str:
        """See `final_rationale` (module level): the steps the story needs and the steps shown, the count
        the story makes, worked, and the solution's answer beside it."""
        return final_rationale(problem, steps, answer)

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the completion's final answer is the problem's integer, else 0.0. Never raises."""
        labelled(problem)
        return float(self.answers_equal(self.extract_answer(completion), problem.answer))


def _integer(text) -> int | None:
    """The integer an answer states ("12", "12.0", "1,200"), or None."""
    if not isinstance(text, str):
        return None
    text = text.strip().replace(",", "").rstrip(".")
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and abs(value) < 1e15 else None
