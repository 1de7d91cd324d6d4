"""The unit-tester role (CURE): how a model is asked for one test of a code problem, and how its output
is read. Pure string functions; `parse` never raises.

A from-scratch tester sees the mark and the problem and writes one test in the task's notation
(`[1,2,3]>10` in the tiny code world: an input, `>`, the output the function must return; `assert
add(2, 3) == 5` in humaneval and code_jsonl); an instruction-tuned tester is asked the same in words
(the task's `test_notation`). What a test line means is the task's business (`task.parse_test`).
"""
from __future__ import annotations

PLAIN_MARK = "@test"
"""The start of a from-scratch tester's prompt: the mark, a space, the problem, a newline."""

CHAT_INSTRUCTION = (
    "Here is a programming problem:\n\n{question}\n\nWrite one unit test for a correct solution, as "
    "{notation}. Write only the test.")

MAX_TEST_CHARS = 200
"""A test line longer than this is malformed."""


def plain_prompt(question: str) -> str:
    return f"{PLAIN_MARK} {question}\n"


def chat_messages(question: str, notation: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(question=question, notation=notation)}]


def parse(text: str) -> str | None:
    """The test line a tester wrote: its first line that begins with `assert` (a chat model's test
    among its words), else its first non-empty line that is not a code fence (```, ```python), stripped
    of spaces and backticks; None when there is none or it is longer than MAX_TEST_CHARS."""
    if not isinstance(text, str):
        return None
    lines = [ln.strip().strip("`").strip() for ln in text.split("\n") if not ln.strip().startswith("```")]
    line = next((ln for ln in lines if ln.startswith("assert ")), None) or next((ln for ln in lines if ln), "")
    return line if line and len(line) <= MAX_TEST_CHARS else None
