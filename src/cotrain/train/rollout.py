"""Sampling: the generator's rollouts on the configured engine (`Sampler`) and their token counts.
(A verifier's verdicts on a batch of samples: `train.verifier.verify_samples`.)"""
from __future__ import annotations

from pathlib import Path

import torch

from cotrain import dist
from cotrain.config import GrpoConfig, ModelConfig, RolloutConfig
from cotrain.models.generate import Rollout, generate, split_by_rank
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.losses import masked_mean
from cotrain.roles.verifier import split_steps
from cotrain.runs.rundir import resolve_model_dir
from cotrain.train.setup import derive_seed, sample_batch


class Sampler:
    """The generator's rollouts (`rollout.engine`): transformers' `generate`, or a vLLM engine on the
    trainer's GPU whose weights follow the trainer's after every update.

    With vLLM the prompts are split by rank as `generate` splits them, and `tis_cap` tells the update
    to correct for the sampler/trainer mismatch (truncated importance sampling). With `rollout.sleep`
    the engine is awake only while it samples: it wakes for a rollout, takes the trainer's weights
    then, and sleeps at level 2 (weights and KV cache freed) as soon as the rollout is done, so the
    verification, every update and evaluation run without it. Without sleep mode the weights are
    pushed after each update, as soon as they change. `r` is the run's `rollout` section; vLLM reads the
    generator's weights from its model config `m` (`path`, `dtype`), else its start `init`, else the run's own copy.
    """

    def __init__(self, r: RolloutConfig, m: ModelConfig, init: str | None, seed: int, model, tokenizer, run_dir: Path):
        self.engine, self.tis_cap, self.pad_id = None, None, tokenizer.pad_token_id
        self.draft_tokens, self.compiled = r.draft_tokens, r.compile
        if r.engine != "vllm":
            return
        from cotrain.models.build import save_model
        from cotrain.models.vllm_engine import VllmEngine

        path = m.path or (str(resolve_model_dir(init)) if init else None)
        if path is None:  # a preset built in this run: vLLM reads the architecture from a directory
            path = run_dir / "rollout_model"
            dist.on_main(save_model, model, tokenizer, path)
        self.engine = VllmEngine(str(path), gpu_memory_utilization=r.gpu_memory_utilization,
                                 max_model_len=r.max_model_len, seed=seed, enable_sleep_mode=r.sleep,
                                 dtype="auto" if m.dtype == "float32" else m.dtype)
        self.sleeps = r.sleep
        self.stale = True  # a resumed or warmed-up start differs from the directory
        if self.sleeps:
            self.engine.sleep(level=2)  # until the first rollout, which pushes the start's weights
        else:
            self._sync(model)
        self.tis_cap = r.tis_cap

    def _sync(self, model) -> None:
        self.engine.sync_weights(model)
        self.stale = False

    def __call__(self, model, prompts: list[list[int]], *, seed: int, bf16: bool = False, **kwargs):
        """`generate(model, prompts, seed=seed, bf16=bf16, **kwargs)`, on the configured engine."""
        if self.engine is None:
            return generate(model, prompts, seed=seed, bf16=bf16, draft_tokens=self.draft_tokens,
                            compiled=self.compiled, **kwargs)
        self.engine.wake_up()  # a no-op when awake
        if self.stale or self.sleeps:  # a level-2 sleep discarded the engine's weights
            self._sync(model)
        ro = split_by_rank(prompts, self.pad_id, lambda mine, first: self.engine.generate(
            mine, seed=derive_seed(seed, first), **kwargs))
        if self.sleeps:
            self.engine.sleep(level=2)
        return ro

    def batch(self, model, tokenizer, pool: list, n_prompts: int, g: GrpoConfig, step: int, compute, timer, *,
              seed: int, bf16: bool = False) -> tuple[list, Rollout, list[str], int]:
        """A step's generator rollout: `n_prompts` problems of `pool` drawn for (seed, step) (`sample_batch`: a
        resumed run redraws the same), `g.group_size` samples of each (`groups`), counted as the generator's in
        `compute` (a `Compute`) and timed as the `timer`'s phase "gen". Returns (problems, rollout, texts, tokens
        sampled), the problems repeated to one per sample, groups contiguous."""
        prompt_problems = sample_batch(pool, n_prompts, seed, step)                   # [B]
        ro, texts = self.groups(model, tokenizer, [p.question for p in prompt_problems], g,
                                seed=derive_seed(seed, "rollout", step), bf16=bf16)
        generated = compute.add_rollout("gen", ro)
        timer.lap("gen", generated)
        return [p for p in prompt_problems for _ in range(g.group_size)], ro, texts, generated  # [B*G]

    def groups(self, model, tokenizer, questions: list[str], g: GrpoConfig, *, seed: int,
               bf16: bool = False) -> tuple[Rollout, list[str]]:
        """`g.group_size` samples of each question at the generator's settings (groups contiguous), and
        their decoded texts."""
        ro = self(model, encode_generator_prompts(tokenizer, questions), group_size=g.group_size,
                  max_new_tokens=g.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                  temperature=g.temperature, top_p=g.top_p, top_k=g.top_k, seed=seed, bf16=bf16)
        return ro, decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)

    def after_update(self, model) -> None:
        """The trainer's weights changed: pushed into the engine now (awake all along) or when it next
        wakes to sample (sleep mode)."""
        if self.engine is None:
            return
        self.stale = True
        if not self.sleeps:
            self._sync(model)


def rollout_tokens(ro) -> tuple[int, int]:
    """(tokens run forward, tokens generated) of a rollout: each prompt's prefill once per group, plus samples."""
    generated = int(ro.completion_mask.sum())
    return int(ro.prompt_mask.sum()) + generated, generated


def rollout_metrics(role: str, ro) -> dict[str, float]:
    """<role>/len_mean, len_clipped_ratio (cut at the length limit) and entropy (of the sampler, all rows)."""
    return {f"{role}/len_mean": ro.lengths.float().mean().item(),
            f"{role}/len_clipped_ratio": ro.truncated.float().mean().item(),
            f"{role}/entropy": masked_mean(ro.entropy, ro.completion_mask).item()}


def reward_metrics(role: str, rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """<role>/reward (mean), reward_std (mean within a group) and frac_reward_zero_std (groups whose
    rewards are all equal: no gradient from their outcome advantages)."""
    grouped = rewards.view(-1, group_size)
    return {f"{role}/reward": rewards.mean().item(), f"{role}/reward_std": grouped.std(dim=1).mean().item(),
            f"{role}/frac_reward_zero_std": (grouped.std(dim=1) == 0).float().mean().item()}


def complete_solutions(task, problems: list, texts: list[str]) -> list[bool]:
    """Whether each sample states an answer and shows at least as many steps as its problem's reference
    solution: its lines before the answer (`roles.verifier.split_steps`), or, where the task counts the
    steps of work they show (`count_steps`: wordproblems counts equations), whichever of the two is larger,
    so that neither two equations on one line nor a step written in words reads as a step left out, while
    a solution that stops after its first result does. `gen/early_stop` is the share that do not, and
    `cotraining.credit: final` rejects them where the answer should be."""
    count = getattr(task, "count_steps", len)
    out = []
    for p, t in zip(problems, texts, strict=True):
        lines = [line for _, line in split_steps(t)]
        out.append(task.extract_answer(t) is not None and max(len(lines), count(lines)) >= len(p.steps))
    return out


def computing_lines(task, texts: list[str]) -> list[list[bool]]:
    """Per sample, whether each of its steps (`roles.verifier.split_steps`) computes: states a step of work
    where the task counts them (`count_steps`: wordproblems counts equations), every step elsewhere.
    `cotraining.credit: final_compute` scores these steps alone."""
    count = getattr(task, "count_steps", None)
    return [[count is None or count([line]) > 0 for _, line in split_steps(t)] for t in texts]


def early_stop_metrics(complete: list[bool], correct: list[bool]) -> dict[str, float]:
    """`gen/early_stop`: the share of samples with no answer or fewer steps than their problem needs; and
    `gen/early_stop_right`: the share of the right samples among them (a right answer written after fewer
    steps than the problem has: GRPO pays it, a construction that scores completeness blames it), left
    out where no sample is right."""
    right = [c for c, ok in zip(complete, correct, strict=True) if ok]
    out = {"gen/early_stop": 1 - sum(complete) / max(len(complete), 1)}
    if right:
        out["gen/early_stop_right"] = 1 - sum(right) / len(right)
    return out


def step_shape_metrics(task, texts: list[str]) -> dict[str, float]:
    """How the samples lay their solutions out: `gen/step_lines`, the mean number of lines before the
    answer (`roles.verifier.split_steps`), and where the task counts the steps of work (`count_steps`)
    `gen/steps_without_work`, the share of those lines that compute nothing: a restated fact, right by
    the process labels, and under step rewards of ±1/K a way to pad a solution."""
    computes = computing_lines(task, texts)
    out = {"gen/step_lines": sum(len(c) for c in computes) / max(len(texts), 1)}
    if hasattr(task, "count_steps"):
        flat = [c for cs in computes for c in cs]
        out["gen/steps_without_work"] = sum(not c for c in flat) / max(len(flat), 1)
    return out
