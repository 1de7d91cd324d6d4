"""Running a generative verifier over (problem, solution) pairs, and mapping a solution's steps to its tokens."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cotrain.models.generate import Rollout, generate
from cotrain.models.prompts import decode_completions, uses_chat
from cotrain.rl.tango import step_token_ends
from cotrain.roles import verifier as vrole

MAX_SOLUTION_CHARS = 2000
"""A solution is cut to this many characters in the verifier's prompt (a runaway sample must not
blow the verifier's context)."""


def encode_verifier_prompts(tokenizer: PreTrainedTokenizerBase, questions: list[str],
                            completions: list[str]) -> list[list[int]]:
    """Token ids of each verifier prompt (chat template when present, else the plain prompt)."""
    completions = [c[:MAX_SOLUTION_CHARS] for c in completions]
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(vrole.chat_messages(q, c), add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for q, c in zip(questions, completions)]
    return [tokenizer(vrole.plain_prompt(q, c))["input_ids"] for q, c in zip(questions, completions)]


def verify(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, questions: list[str], completions: list[str],
           *, group_size: int = 1, greedy: bool = False, temperature: float = 1.0, max_new_tokens: int = 64,
           seed: int | None = None, bf16: bool = False, draft_tokens: int = 0, compiled: bool = False
           ) -> tuple[Rollout, list[str], list[vrole.Verification]]:
    """`group_size` verifications of each (question, completion), groups contiguous; never raises on
    malformed text. `draft_tokens`: drafted decoding, `compiled`: compiled decoding (see `generate`).

    Returns:
        (rollout [N*group_size rows], decoded verifications, parsed verifications).
    """
    prompts = encode_verifier_prompts(tokenizer, questions, completions)
    ro = generate(model, prompts, group_size=group_size, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
                  pad_id=tokenizer.pad_token_id, greedy=greedy, temperature=temperature, seed=seed, bf16=bf16,
                  draft_tokens=draft_tokens, compiled=compiled)
    texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
    n_steps = [len(vrole.split_steps(c)) for c in completions for _ in range(group_size)]
    return ro, texts, [vrole.parse(t, k) for t, k in zip(texts, n_steps)]


def encode_pair_prompts(tokenizer: PreTrainedTokenizerBase, questions: list[str], firsts: list[str],
                        seconds: list[str]) -> list[list[int]]:
    """Token ids of each pairwise judge prompt (chat template when present, else the plain prompt)."""
    firsts, seconds = [c[:MAX_SOLUTION_CHARS] for c in firsts], [c[:MAX_SOLUTION_CHARS] for c in seconds]
    if uses_chat(tokenizer):
        return [tokenizer.apply_chat_template(vrole.pair_chat_messages(q, a, b), add_generation_prompt=True,
                                              tokenize=True, return_dict=False)
                for q, a, b in zip(questions, firsts, seconds)]
    return [tokenizer(vrole.pair_plain_prompt(q, a, b))["input_ids"] for q, a, b in zip(questions, firsts, seconds)]


def prefer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, questions: list[str], firsts: list[str],
           seconds: list[str], *, group_size: int = 1, temperature: float = 1.0, max_new_tokens: int = 128,
           seed: int | None = None, bf16: bool = False) -> tuple[Rollout, list[int | None]]:
    """`group_size` pairwise judgments of each (question, first, second), groups contiguous; never raises
    on malformed text.

    Returns:
        (rollout [N*group_size rows], each judgment's preference: 1 first, -1 second, 0 neither, None
        unparsable).
    """
    prompts = encode_pair_prompts(tokenizer, questions, firsts, seconds)
    ro = generate(model, prompts, group_size=group_size, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
                  pad_id=tokenizer.pad_token_id, temperature=temperature, seed=seed, bf16=bf16)
    return ro, [vrole.parse_preference(t) for t in decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)]


def verify_batched(model, tokenizer, questions: list[str], completions: list[str], *, batch_size: int = 256,
                   texts: list[str] | None = None, **kwargs) -> list[vrole.Verification]:
    """`verify` in batches of `batch_size` pairs (group_size 1), the parsed verifications; with `texts`
    (a list), the decoded verifications are appended to it as well, in the same order."""
    out: list[vrole.Verification] = []
    for i in range(0, len(questions), batch_size):
        _, decoded, parsed = verify(model, tokenizer, questions[i:i + batch_size], completions[i:i + batch_size],
                                    **kwargs)
        out += parsed
        if texts is not None:
            texts += decoded
    return out


def step_ends(tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor, completion_mask: torch.Tensor,
              texts: list[str], answer: bool = False) -> list[list[int]]:
    """For each completion, the token index at which each of its steps (`roles.verifier.split_steps`) ends;
    with `answer`, then the token at which its answer line (`roles.verifier.answer_line`) ends, the last
    token when it has none."""
    cache: dict[int, str] = {}

    def piece(i: int) -> str:
        if i not in cache:
            cache[i] = tokenizer.decode([i], skip_special_tokens=True)
        return cache[i]

    out = []
    for ids, mask, text in zip(completion_ids, completion_mask, texts):
        pieces = [piece(i) for i in ids[mask.bool()].tolist()]
        lines = [line for line, _ in vrole.split_steps(text)] + ([vrole.answer_line(text)] if answer else [])
        out.append(step_token_ends(pieces, lines))
    return out
