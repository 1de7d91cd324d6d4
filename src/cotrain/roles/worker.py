"""The worker role of `mars`: how one planned operation is put to the model that carries it out, how its
step is read, and how the steps become a solution. Pure string functions; none raises.

The worker is called once per planned operation. It sees the question, the steps written so far and
the operation to carry out, and writes one step line ("3*5=15"). The solution is the steps, then the
final line `#` + the result of the last step, the task's own format (tasks/countdown.py, tasks/arith.py).
With an empty plan (`mars.plan: false`) the operation is left blank and the worker chooses it itself.
"""
from __future__ import annotations

PLAIN_MARK = "@do"
"""The tiny world's prompt: the question, the steps so far (a line each), then this mark, a space and
the operation, and a newline."""

CHAT_INSTRUCTION = (
    "Problem: {question}\n\nSteps so far:\n{done}\n\nCarry out the next step{planned}. Write only that step "
    "as `a OP b=c`, on one line.")

MAX_LINE_CHARS = 200


def plain_prompt(question: str, done: list[str], op: str) -> str:
    return question + "\n" + "".join(line + "\n" for line in done) + f"{PLAIN_MARK} {op}\n"


def chat_messages(question: str, done: list[str], op: str) -> list[dict[str, str]]:
    planned = f": {op}" if op else ""
    text = CHAT_INSTRUCTION.format(question=question, done="\n".join(done) or "(none)", planned=planned)
    return [{"role": "user", "content": text}]


def parse(text: str) -> str:
    """The step a worker wrote: its first non-empty line, stripped ("" when there is none, or when the
    line is longer than MAX_LINE_CHARS: the solution is then wrong, the run goes on)."""
    if not isinstance(text, str):
        return ""
    line = next((line.strip() for line in text.split("\n") if line.strip()), "")
    return line if len(line) <= MAX_LINE_CHARS else ""


def assemble(steps: list[str]) -> str:
    """The solution the steps make: the non-empty steps, one per line, then `#` and the text after the
    last step's last `=` (nothing when it has none: the solution is then wrong)."""
    steps = [s for s in steps if s]
    answer = steps[-1].rsplit("=", 1)[1].strip() if steps and "=" in steps[-1] else ""
    return "\n".join([*steps, f"#{answer}"])
