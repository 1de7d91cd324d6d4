"""Monte Carlo values of the generator's partial solutions (`verifier.source: rollouts`): continuations of each
sample's prefix at each step boundary, drawn from the current generator without gradient, graded by the task.
The rewards they give are rl/progress.py's."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from cotrain.config import CoTrainingConfig, GrpoConfig, VerifierConfig
from cotrain.models.generate import Rollout
from cotrain.models.verify import step_ends
from cotrain.rl.progress import progress_advantages, progress_rewards, prompt_values
from cotrain.rl.tango import only_mixed_groups
from cotrain.train.compute import Compute
from cotrain.train.rollout import rollout_tokens


@dataclass
class Progress:
    """What one step's continuations gave: each sample's values after its steps, its item rewards and ends, and
    what the continuations cost."""

    values: list[list[float]]          # [N][K_i]: V after each step
    rewards: list[list[float]]         # [N][K_i + 1]: progress_rewards
    ends: list[list[int]]              # [N][K_i + 1]: the steps' end tokens, then the answer's
    prefixes: int                      # distinct prefixes continued
    forward: int                       # tokens run forward: each distinct prefix once, and the continuations
    generated: int                     # continuation tokens generated
    outcomes: list[float]              # [N]: each sample's own outcome


def prefix_values(sample: Callable[..., Rollout], tokenizer, ro: Rollout, texts: list[str], prompts: list[list[int]],
                  grade: Callable[[list[str], list], list[bool]], problems: list, *, k: int, max_new_tokens: int,
                  seed: int, group_size: int, outcomes: list[float], credit: str = "step"
                  ) -> tuple[Progress, torch.Tensor]:
    """The step rewards of Monte Carlo progress for a rollout, and the process advantages [N, T] they give.

    At the end token of each step of each sample (`step_ends`), `k` continuations of the prompt and the
    completion up to and including that token are sampled (`sample(prompts, seed=, group_size=k,
    max_new_tokens=)`: the generator's own settings), each cut to the sample's remaining budget
    (`max_new_tokens` less the prefix's tokens). Equal prefixes of one prompt are continued once. A prefix that
    already ends the completion (its last token, with the eos or at the budget) is its own outcome: no
    continuation. V(prefix) is the share of its continuations that `grade` finds right.

    Args:
        sample: draws continuations, `generate`'s signature (the recipe's `Sampler` bound to its model).
        ro, texts: the generator's rollout [N] and its decoded completions.
        prompts: the N samples' prompt token ids (unpadded).
        grade: (texts, problems) -> right or not, per text.
        outcomes: each sample's outcome (1 right, 0 wrong), for V(prompt) and the answer's reward.
        credit: "step" or "to_go" (`progress_advantages`).
    """
    n = len(texts)
    ends = step_ends(tokenizer, ro.completion_ids, ro.completion_mask, texts, answer=True)     # [N][K_i + 1]
    lengths = ro.completion_mask.sum(-1).tolist()
    eos = tokenizer.eos_token_id
    keys, where, done, owner = {}, [], {}, {}           # prefix -> index; (sample, step) -> prefix; value; a sample
    for i in range(n):
        ids = ro.completion_ids[i, :lengths[i]].tolist()
        for end in ends[i][:-1]:
            prefix = (tuple(prompts[i]), tuple(ids[:end + 1]))
            where.append(prefix)
            owner.setdefault(prefix, i)
            if end + 1 >= lengths[i] and (ids and ids[-1] == eos or lengths[i] >= max_new_tokens):
                done[prefix] = outcomes[i]              # the prefix is the whole completion: its own outcome
            else:
                keys.setdefault(prefix, len(keys))
    prefixes = [p for p in keys if p not in done]
    value, forward, generated = dict(done), 0, 0
    if prefixes:
        budgets = [max_new_tokens - len(c) for _, c in prefixes]
        cro = sample([list(p) + list(c) for p, c in prefixes], seed=seed, group_size=k, max_new_tokens=max(budgets))
        conts = cro.completion_ids.tolist()
        lens = cro.completion_mask.sum(-1).tolist()
        rows = [(j, r) for j in range(len(prefixes)) for r in range(k)]              # groups contiguous
        texts_c, problems_c = [], []
        for row, (j, _) in enumerate(rows):
            cut = conts[row][:min(lens[row], budgets[j])]
            texts_c.append(tokenizer.decode(list(prefixes[j][1]) + cut, skip_special_tokens=True))
            problems_c.append(problems[owner[prefixes[j]]])
        right = grade(texts_c, problems_c)
        for j, p in enumerate(prefixes):
            value[p] = sum(bool(x) for x in right[j * k:(j + 1) * k]) / k
        forward, generated = rollout_tokens(cro)                # counted as the generator's rollouts are
    v_prompt = prompt_values(outcomes, group_size)
    values, rewards, cursor = [], [], 0
    for i in range(n):
        steps = len(ends[i]) - 1
        mine = [value[p] for p in where[cursor:cursor + steps]]
        cursor += steps
        values.append(mine)
        rewards.append(progress_rewards(mine, outcomes[i], v_prompt[i]))
    progress = Progress(values, rewards, ends, len(prefixes), forward, generated, list(outcomes))
    return progress, progress_advantages(rewards, ends, ro.completion_ids.shape[1], credit)


def progress_term(sampler: Callable[..., Rollout], model, tokenizer, ro: Rollout, texts: list[str], grade, problems: list,
                  rewards: torch.Tensor, g: GrpoConfig, v: VerifierConfig, tg: CoTrainingConfig, compute: Compute, seed: int,
                  bf16: bool) -> tuple[Progress, torch.Tensor]:
    """Monte Carlo progress of a generator rollout and its process advantages [N, T] (`prefix_values`):
    `v.rollouts_k` continuations drawn by `sampler(model, ...)` (`generate`'s signature: the recipe's `Sampler`) at
    the generator's sampling settings `g`, placed by `tg.credit`, set to 0 in the groups whose outcome rewards [N]
    are all equal under `tg.process_groups: mixed`. The continuations' tokens are added to `compute`'s role
    `progress`."""
    draw = partial(sampler, model, bf16=bf16, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                   temperature=g.temperature, top_p=g.top_p, top_k=g.top_k)
    prompts = [ids[m.bool()].tolist() for ids, m in zip(ro.prompt_ids, ro.prompt_mask)]
    progress, process_adv = prefix_values(draw, tokenizer, ro, texts, prompts, grade, problems, k=v.rollouts_k,
                                          max_new_tokens=g.max_new_tokens, seed=seed, group_size=g.group_size,
                                          outcomes=rewards.tolist(), credit=tg.credit)
    if tg.process_groups == "mixed":
        process_adv = only_mixed_groups(process_adv, rewards, g.group_size)
    compute.add("progress", forward=progress.forward, generated=progress.generated)
    return progress, process_adv


def progress_monitors(progress: Progress, outcome_adv: torch.Tensor, group_size: int) -> dict[str, float]:
    """The scale of the progress rewards beside the outcome advantage's (neither is normalised to the other),
    and what the continuations covered: `gen/progress_abs` (mean |reward| over the items), `gen/progress_nonzero`
    (the share of items with a nonzero reward), the same two over the items of all-wrong groups (where GRPO has
    no signal), `gen/adv_outcome_abs`, `gen/progress_prefixes` and `tokens/progress_generated`."""
    def scale(rows: list[list[float]], key: str) -> dict[str, float]:
        items = [r for rs in rows for r in rs]
        return {f"gen/progress_abs{key}": sum(abs(r) for r in items) / max(len(items), 1),
                f"gen/progress_nonzero{key}": sum(r != 0 for r in items) / max(len(items), 1)}

    n, o = len(progress.rewards), progress.outcomes
    all_wrong = [i for s in range(0, n, group_size) if max(o[s:s + group_size]) <= 0 for i in range(s, s + group_size)]
    return {**scale(progress.rewards, ""), **scale([progress.rewards[i] for i in all_wrong], "_all_wrong"),
            "gen/adv_outcome_abs": outcome_adv.abs().mean().item(),
            "gen/progress_prefixes": progress.prefixes, "tokens/progress_generated": progress.generated}
