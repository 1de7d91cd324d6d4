"""The proposer role: how a model is asked for a new problem, and how its output is read. Pure string
functions; `parse` never raises.

The tiny world's proposer sees only the mark line and writes a question in the task's own notation
(`12+34-5`); an instruction-tuned proposer is shown one example problem of the task and asked for a
new one of the same kind.
"""
from __future__ import annotations

PLAIN_MARK = "@propose"
"""The whole prompt of a from-scratch proposer (followed by a newline)."""

CHAT_INSTRUCTION = (
    "Here is an example of a problem:\n\n{example}\n\nWrite one new problem of the same kind that has a single, "
    "checkable final answer. Write only the problem, without its solution.")

MAX_QUESTION_CHARS = 1000
"""A proposed question longer than this is malformed (a runaway sample must not reach the solver)."""


def plain_prompt() -> str:
    return PLAIN_MARK + "\n"


def chat_messages(example: str) -> list[dict[str, str]]:
    """Chat messages for an instruction-tuned proposer, with one example problem of the task."""
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(example=example)}]


def parse(text: str, chat: bool = False) -> str | None:
    """The question a proposer wrote, or None when it wrote none. Never raises.

    Plain: the first non-empty line, stripped. Chat: the whole reply, stripped, without a leading
    "Problem:" label. None when empty or longer than MAX_QUESTION_CHARS.
    """
    if not isinstance(text, str):
        return None
    if chat:
        question = text.strip()
        if question.lower().startswith("problem:"):
            question = question[len("problem:"):].strip()
    else:
        question = next((line.strip() for line in text.split("\n") if line.strip()), "")
    return question if question and len(question) <= MAX_QUESTION_CHARS else None
