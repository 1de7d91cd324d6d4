"""Monte Carlo progress as process rewards (`verifier.source: rollouts`), as pure functions.

V(prefix) is the share of continuations of a prefix, sampled from the current generator, that are graded right
(VinePPO, arXiv 2410.01679: Monte Carlo values; PAV, arXiv 2410.08146: a step's progress is the change it makes
to the chance of success). A solution's items are its steps, then its answer; item k's reward is
V(after k) - V(before k), the answer's is outcome - V(before it), and V before the first item is V(prompt), the
group's mean outcome (its G samples are G continuations of the prompt). So a sample's rewards add up to
outcome - V(prompt), GRPO's advantage unnormalised: progress redistributes it over the items, and each reward
lies in [-1, 1]. No verifier model, no process labels, only the grader.

Shape letters: N = B*G generator samples, T completion tokens, K_i steps of sample i.
"""
from __future__ import annotations

import torch

from cotrain.rl.tango import on_own_tokens


def progress_rewards(values: list[float], outcome: float, v_prompt: float) -> list[float]:
    """One sample's K + 1 item rewards from the values after each of its K steps: V(after k) - V(before k) for
    the steps (V before the first: `v_prompt`), outcome - V(after K) for the answer. With no steps, the one
    reward outcome - V(prompt).

    Args:
        values: V after step 1..K (K entries, each in [0, 1]).
        outcome: the sample's own outcome (1 right, 0 wrong).
        v_prompt: V(prompt).
    """
    before, after = [v_prompt, *values], [*values, outcome]
    return [a - b for a, b in zip(after, before)]


def prompt_values(outcomes: list[float], group_size: int) -> list[float]:
    """V(prompt) of each sample [N]: its group's mean outcome."""
    assert len(outcomes) % group_size == 0, "whole groups"
    means = [sum(outcomes[s:s + group_size]) / group_size for s in range(0, len(outcomes), group_size)]
    return [m for m in means for _ in range(group_size)]


def progress_advantages(rewards: list[list[float]], ends: list[list[int]], length: int, credit: str = "step") -> torch.Tensor:
    """Per-token process advantages [N, T] from progress rewards, not normalised (they are in [-1, 1] already,
    the outcome advantage beside them about +-1 in a group that holds both outcomes).

        step   A_proc[i, t] = the reward of the item whose tokens hold t (`on_own_tokens`)
        to_go  A_proc[i, t] = the sum of the rewards of the items ending at or after t = outcome - V(before the
               item holding t): a Monte Carlo return less its value, bounded by 1 in size

    Args:
        rewards: N entries, each K_i + 1 item rewards (`progress_rewards`).
        ends: N entries, each the items' end tokens (the K_i steps', then the answer's).
        length: T.
    """
    assert credit in ("step", "to_go"), f"progress credit must be step or to_go, got {credit!r}"
    assert len(rewards) == len(ends), "one entry per sample"
    out = torch.zeros(len(rewards), length)                                           # [N, T]
    for i, (items, item_ends) in enumerate(zip(rewards, ends, strict=True)):
        assert len(items) == len(item_ends), "one end per item"
        if credit == "step":
            out[i] = on_own_tokens(items, item_ends, length)
            continue
        for r, end in zip(items, item_ends):
            out[i, :min(end, length - 1) + 1] += r
    return out
