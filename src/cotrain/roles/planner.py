"""The planner role of `mars`: how a problem is put to the model that plans a solution, and how its plan
is read. Pure string functions; `parse` never raises.

A plan is the operations of a solution in order, one per line, without their results: "3*5" then
"15+7" for the solution "3*5=15\\n15+7=22\\n#22". The worker (roles/worker.py) then carries out one
planned operation per call. The tiny world's planner sees a mark, the question and a newline; an
instruction-tuned planner is asked for the operations in words.
"""
from __future__ import annotations

PLAIN_MARK = "@plan"
"""The tiny world's prompt is this mark, a space, the question and a newline."""

CHAT_INSTRUCTION = (
    "Plan the solution of the problem. Write only the operations it takes, one per line and in order, "
    "each as `a OP b` without its result; another model will carry them out.\n\nProblem: {question}")

MAX_STEPS = 16
"""A plan of more operations than this is malformed (a runaway sample must not call the worker on and on)."""

MAX_LINE_CHARS = 200


def plain_prompt(question: str) -> str:
    return f"{PLAIN_MARK} {question}\n"


def chat_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(question=question)}]


def operation(step: str) -> str:
    """The operation of one step line: the text before its last `=` ("3*5=15" gives "3*5"), stripped."""
    return step.rsplit("=", 1)[0].strip()


def plan_of(steps: list[str] | tuple[str, ...]) -> list[str]:
    """The plan a reference solution's steps carry: each step's operation."""
    return [operation(s) for s in steps]


def render(plan: list[str]) -> str:
    """A plan as the planner writes it (the SFT target of the warm-up)."""
    return "\n".join(plan)


def parse(text: str) -> list[str] | None:
    """The planned operations, or None when the plan is malformed. Never raises.

    The non-empty lines (stripped) before the first line that starts with `#`; a line's text after a
    `=` is dropped (a planner that wrote a result planned the same operation). None when there is no
    line, more than MAX_STEPS, or a line longer than MAX_LINE_CHARS.
    """
    if not isinstance(text, str):
        return None
    plan = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("#"):
            break
        if line:
            plan.append(operation(line))
    if not plan or len(plan) > MAX_STEPS or any(len(op) > MAX_LINE_CHARS or not op for op in plan):
        return None
    return plan
