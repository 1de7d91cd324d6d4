"""Turning role prompts into token ids, with the tokenizer's chat template when it has one."""
from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from cotrain.roles import planner, proposer, tester, worker
from cotrain.roles.generator import chat_messages, plain_prompt


def uses_chat(tokenizer: PreTrainedTokenizerBase) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def encode_generator_prompts(tokenizer: PreTrainedTokenizerBase, questions: list[str]) -> list[list[int]]:
    """Token ids of each question's generator prompt (chat template when present, else plain)."""
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(chat_messages(q), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for q in questions]
    return [tokenizer(plain_prompt(q))["input_ids"] for q in questions]


def encode_completion(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of a target completion followed by eos."""
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def decode_completions(tokenizer: PreTrainedTokenizerBase, completion_ids, completion_mask) -> list[str]:
    rows = [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids, completion_mask)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def encode_proposer_prompts(tokenizer: PreTrainedTokenizerBase, examples: list[str]) -> list[list[int]]:
    """Token ids of one proposer prompt per example problem (chat models see the example; the plain
    prompt of a from-scratch model is the mark line alone)."""
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(proposer.chat_messages(e), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for e in examples]
    return [tokenizer(proposer.plain_prompt())["input_ids"] for _ in examples]


def encode_tester_prompts(tokenizer: PreTrainedTokenizerBase, questions: list[str],
                          notation: str) -> list[list[int]]:
    """Token ids of each question's unit-tester prompt (roles/tester.py); `notation`: how a chat model is
    asked to write the test (the task's `test_notation`)."""
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(tester.chat_messages(q, notation), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for q in questions]
    return [tokenizer(tester.plain_prompt(q))["input_ids"] for q in questions]


def encode_planner_prompts(tokenizer: PreTrainedTokenizerBase, questions: list[str]) -> list[list[int]]:
    """Token ids of each question's planner prompt (roles/planner.py)."""
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(planner.chat_messages(q), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for q in questions]
    return [tokenizer(planner.plain_prompt(q))["input_ids"] for q in questions]


def encode_worker_prompts(tokenizer: PreTrainedTokenizerBase, calls: list[tuple[str, list[str], str]]) -> list[list[int]]:
    """Token ids of each worker call's prompt (roles/worker.py): (question, steps so far, operation)."""
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(worker.chat_messages(*c), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for c in calls]
    return [tokenizer(worker.plain_prompt(*c))["input_ids"] for c in calls]
