"""The generator role: how a problem is put to a model, as pure string functions.

The tiny world's models see the bare question and a newline and answer in the task's format;
instruction-tuned models get a chat message asking for numbered steps and a final answer line.
"""
from __future__ import annotations

CHAT_INSTRUCTION = (
    "Solve the problem step by step. Write each step on its own line, then give the final answer "
    "on the last line as '#### <answer>'.\n\nProblem: {question}")


def plain_prompt(question: str) -> str:
    """Prompt of a from-scratch model: the question, then a newline."""
    return question + "\n"


def chat_messages(question: str) -> list[dict[str, str]]:
    """Chat messages for an instruction-tuned model."""
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(question=question)}]
