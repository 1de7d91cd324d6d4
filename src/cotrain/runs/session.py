"""Pieces every recipe composes: device, optimizer and schedule, the starting model, resume, sampling
of training problems, the final evaluation. No training logic lives here."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cotrain import dist
from cotrain.config import RunConfig, TrainConfig
from cotrain.errors import UserError
from cotrain.eval.evaluate import evaluate_generator, evaluate_split
from cotrain.models.build import build_model, load_model, load_weights, prepare_for_training
from cotrain.models.generate import generate, split_by_rank
from cotrain.precision import dtype_warning, machine, resolve_bf16
from cotrain.runs.rundir import (
    MetricsLogger,
    NullLogger,
    Progress,
    list_checkpoints,
    load_checkpoint_state,
    prepare_run_dir,
    resolve_model_dir,
    save_checkpoint,
    write_config,
    write_json_atomic,
)
from cotrain.tasks import make_task
from cotrain.tasks.base import Problem, Task


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from the run seed and any labels (step, role, ...): stable across processes."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, total_steps: int):
    """AdamW with linear warm-up, then constant, cosine or linear decay (stepped once per step)."""
    trainable = [p for p in model.parameters() if p.requires_grad]  # with LoRA: the adapters alone
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        frac = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        if cfg.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        return max(0.0, 1 - frac)

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def initial_model(cfg: RunConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model a run starts from: `init` (a run, checkpoint or model dir) or the model config, with
    the memory options of `model` applied (dtype, device, gradient checkpointing, LoRA)."""
    if cfg.init:
        model, tokenizer = load_model(resolve_model_dir(cfg.init), dtype=cfg.model.dtype)
    else:
        model, tokenizer = build_model(cfg.model, seed=cfg.seed)
    return shard_if_asked(prepare_for_training(model, cfg.model, device()), cfg), tokenizer


def initial_verifier(cfg: RunConfig):
    """The verifier a run starts from: `verifier.model` (from scratch), `verifier.init`, or the run's start;
    with the memory options of `verifier.model` (else of `model`), on `verifier.device` when set."""
    v = cfg.verifier
    mcfg = v.model or cfg.model
    if v.model is not None:
        verifier, vtok = build_model(v.model, seed=derive_seed(cfg.seed, "verifier"))
    elif v.init or cfg.init:
        verifier, vtok = load_model(resolve_model_dir(v.init or cfg.init), dtype=mcfg.dtype)
    else:
        verifier, vtok = build_model(cfg.model, seed=derive_seed(cfg.seed, "verifier"))
    mcfg = mcfg.model_copy(update={"device": v.device}) if v.device else mcfg
    return shard_if_asked(prepare_for_training(verifier, mcfg, device()), cfg), vtok


def shard_if_asked(model, cfg: RunConfig):
    """`model` sharded with FSDP2 when `train.fsdp` is set and the run has several processes."""
    return dist.shard_model(model) if cfg.train.fsdp and dist.world() > 1 else model


def build_task(cfg: RunConfig) -> Task:
    return make_task(cfg.task.name, **cfg.task.options())


def training_pool(task: Task, cfg: RunConfig, n: int | None, n_val: int = 0) -> tuple[list[Problem], list[Problem]]:
    """Training problems and `n_val` held-out problems of the train split (disjoint from the pool)."""
    problems = task.problems("train", None if n is None else n + n_val, seed=cfg.seed)
    pool, val = (problems[:-n_val], problems[-n_val:]) if n_val else (problems, [])
    if not pool:
        raise UserError(f"task {cfg.task.name} has no training problems")
    return pool, val


def sample_batch(pool: list, size: int, seed: int, step: int) -> list:
    """The step's problems: a deterministic function of (seed, step), so resume redraws the same."""
    rng = np.random.default_rng(derive_seed(seed, "batch", step))
    idx = rng.choice(len(pool), size=size, replace=len(pool) < size)
    return [pool[i] for i in idx]


@dataclass
class Session:
    """What a recipe's loop needs from the outside world."""

    run_dir: Path
    logger: MetricsLogger
    progress: Progress
    start_step: int
    stopped: bool = False  # the run ended early (a stopping rule fired) before its last checkpoint
    state: dict = field(default_factory=dict)  # the resumed checkpoint's run state (step, RNG, recipe extras)


def open_session(cfg: RunConfig, run_dir: str | Path, resume: bool, roles: dict, desc: str) -> Session:
    """Prepare the run directory; on resume, restore each role's weights, optimizer and the RNG.

    Args:
        roles: {role: (model, tokenizer, optimizer, scheduler)}; model weights are reloaded in place.
    """
    dist.on_main(prepare_run_dir, run_dir, resume=resume)
    run_dir = Path(run_dir)
    dist.on_main(write_config, run_dir, cfg.to_dict())
    choose_precision(cfg, [model for model, _, _, _ in roles.values()], run_dir, resume)
    start, stopped, state = 0, False, {}
    ckpts = list_checkpoints(run_dir) if resume else []
    if ckpts:
        ckpt = ckpts[-1]
        for role, (model, _, _, _) in roles.items():
            load_weights(model, ckpt / role)
        state = load_checkpoint_state(ckpt, roles)
        start, stopped = state["step"], state.get("stopped", False)
    logger = (MetricsLogger(run_dir, cfg.log.tensorboard, resume_step=start if resume else None) if dist.is_main()
              else NullLogger())
    progress = Progress(cfg.train.steps, start=start, enabled=cfg.log.progress and dist.is_main(), desc=desc)
    return Session(run_dir, logger, progress, start, stopped, state)


def choose_precision(cfg: RunConfig, models: list, run_dir: Path, resume: bool) -> None:
    """Settle `train.bf16` (auto: on where bf16 is native on every model's device) in `cfg`, say the
    choice once, warn of weights in a dtype this hardware computes slowly, and record the machine in
    `env.json` (a resumed run keeps the machines of its earlier parts under `earlier`)."""
    devices = [next(m.parameters()).device for m in models] or [device()]
    bf16, line = resolve_bf16(cfg.train.bf16, devices)
    setting = cfg.train.bf16
    cfg.train.bf16 = bf16
    lines = [line] + [w for w in {dtype_warning(cfg.model.dtype, d) for d in devices} if w]
    if dist.is_main():
        for text in lines:
            print(text, file=sys.stderr, flush=True)
        env = {**machine(), "processes": dist.world(),
               "precision": {"train.bf16": setting, "bf16_autocast": bf16, "model.dtype": cfg.model.dtype,
                             "devices": sorted({str(d) for d in devices}), "reason": line}}
        path = run_dir / "env.json"
        if resume and path.is_file():
            try:
                before = json.loads(path.read_text(encoding="utf-8"))
                env["earlier"] = before.pop("earlier", []) + [before]
            except (OSError, ValueError):
                pass  # an unreadable record is replaced, never fatal
        write_json_atomic(path, env)


def maybe_checkpoint(cfg: RunConfig, session: Session, step: int, roles: dict, stop: bool = False,
                     extra: dict | None = None, force: bool = False) -> None:
    """Checkpoint every `checkpoint.every` steps, at the last step, when a stopping rule fires, or when
    forced; `extra` is recipe state restored on resume as `session.state`."""
    if force or stop or step == cfg.train.steps or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0):
        dist.on_main(save_checkpoint, session.run_dir, step, savable(roles), {"stopped": stop, **(extra or {})},
                     cfg.checkpoint.keep_last)


class _GatheredOptimizer:
    """The whole optimizer state of a sharded model, gathered to be saved."""

    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state


def savable(roles: dict) -> dict:
    """`roles` with each model sharded by FSDP2 replaced by its plain copy and its optimizer by its
    gathered state (collectives: every process calls it)."""
    out = {}
    for role, (model, tok, opt, sched) in roles.items():
        if dist.is_sharded(model):
            # before the first step there is no state to gather (gathering would initialise AdamW's
            # moments with a zero step, which counts in its bias correction)
            opt = _GatheredOptimizer(dist.full_optimizer_state(model, opt) if opt.state else opt.state_dict())
            model = dist.plain_copy(model)
        out[role] = (model, tok, opt, sched)
    return out


def flops_estimate(n_params: int, forward_tokens: int, trained_tokens: int) -> float:
    """Training-compute estimate (Kaplan et al. 2020): 2 N FLOPs per token of a forward pass, 6 N per
    token of a forward and backward pass; attention's share is left out (small at these lengths)."""
    return 2.0 * n_params * forward_tokens + 6.0 * n_params * trained_tokens


class Compute:
    """Cumulative tokens and estimated FLOPs per role (restored on resume)."""

    def __init__(self, n_params: dict[str, int], state: dict | None = None):
        self.n_params = n_params
        self.tokens = state or {r: {"forward": 0, "trained": 0, "generated": 0} for r in n_params}

    def add(self, role: str, forward: int = 0, trained: int = 0, generated: int = 0) -> None:
        t = self.tokens[role]
        t["forward"] += forward
        t["trained"] += trained
        t["generated"] += generated

    def flops(self, role: str) -> float:
        return flops_estimate(self.n_params[role], self.tokens[role]["forward"], self.tokens[role]["trained"])

    def metrics(self) -> dict[str, float]:
        out = {}
        for r in self.n_params:
            out[f"tokens/{r}_generated_total"] = self.tokens[r]["generated"]
            out[f"tokens/{r}_trained_total"] = self.tokens[r]["trained"]
            out[f"flops/{r}"] = self.flops(r)
        out["flops/total"] = sum(self.flops(r) for r in self.n_params)
        return out

    def summary(self) -> dict:
        return {r: {"tokens_generated": t["generated"], "tokens_trained": t["trained"],
                    "tokens_forward": t["forward"], "flops": self.flops(r)} for r, t in self.tokens.items()} | \
            {"total": {"flops": sum(self.flops(r) for r in self.n_params)}}


class StepTimer:
    """Where a step's wall time goes. `lap(phase, tokens)` adds the time since the previous lap (or the
    start) to the phase, and the tokens it generated or trained; `time/sync` is the part of the step
    spent in collectives (inside the phases that ran them).

    Phases, each one role's work: gen (the generator's or solver's rollouts), verify (a verifier or
    judge generating verdicts), propose (the proposer's questions), reward (grading, rewards,
    advantages), update (backward passes and optimizer steps; tokens trained, prompts included),
    ver_update (a verifier's own RL step: its rollouts and update), eval. On GPUs, `memory/peak_gib`
    is the step's peak of allocated GPU memory.
    """

    def __init__(self):
        # this process's GPUs: under torchrun its own one (touching the others would open a context on each)
        self.gpus = (() if not (torch.cuda.is_available() and torch.cuda.is_initialized()) else
                     [torch.cuda.current_device()] if dist.world() > 1 else range(torch.cuda.device_count()))
        for i in self.gpus:  # memory/peak_gib is this step's peak
            torch.cuda.reset_peak_memory_stats(i)
        self.start = self.mark = time.perf_counter()
        self.sync_start = dist.sync_seconds()
        self.seconds: dict[str, float] = {}
        self.tokens: dict[str, int] = {}

    def lap(self, phase: str, tokens: int = 0) -> None:
        for i in self.gpus:  # kernels run asynchronously: a phase ends when its kernels have
            torch.cuda.synchronize(i)
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.mark
        self.tokens[phase] = self.tokens.get(phase, 0) + tokens
        self.mark = now

    def metrics(self) -> dict[str, float]:
        """time/<phase>, time/sync, time/step, and throughput/<phase>_tokens_per_s of each phase with tokens."""
        out = {f"time/{k}": v for k, v in self.seconds.items()}
        out["time/sync"] = dist.sync_seconds() - self.sync_start
        out["time/step"] = time.perf_counter() - self.start
        out.update({f"throughput/{k}_tokens_per_s": n / self.seconds[k] for k, n in self.tokens.items()
                    if n and self.seconds[k] > 0})
        if self.gpus:  # the most any one of this process's GPUs held during the step
            out["memory/peak_gib"] = max(torch.cuda.max_memory_allocated(i) for i in self.gpus) / 2**30
        return out


class Sampler:
    """The generator's rollouts (`rollout.engine`): transformers' `generate`, or a vLLM engine on the
    trainer's GPU whose weights follow the trainer's after every update.

    With vLLM the prompts are split by rank as `generate` splits them, and `tis_cap` tells the update
    to correct for the sampler/trainer mismatch (truncated importance sampling).
    """

    def __init__(self, cfg: RunConfig, model, tokenizer, run_dir: Path):
        self.engine, self.tis_cap, self.pad_id = None, None, tokenizer.pad_token_id
        r = cfg.rollout
        if r.engine != "vllm":
            return
        from cotrain.models.build import save_model
        from cotrain.models.vllm_engine import VllmEngine

        path = cfg.model.path or (str(resolve_model_dir(cfg.init)) if cfg.init else None)
        if path is None:  # a preset built in this run: vLLM reads the architecture from a directory
            path = run_dir / "rollout_model"
            dist.on_main(save_model, model, tokenizer, path)
        self.engine = VllmEngine(str(path), gpu_memory_utilization=r.gpu_memory_utilization,
                                 max_model_len=r.max_model_len, seed=cfg.seed, enable_sleep_mode=r.sleep,
                                 dtype="auto" if cfg.model.dtype == "float32" else cfg.model.dtype)
        self.engine.sync_weights(model)  # a resumed or warmed-up start differs from the directory
        self.tis_cap = r.tis_cap

    def __call__(self, model, prompts: list[list[int]], *, seed: int, bf16: bool = False, **kwargs):
        """`generate(model, prompts, seed=seed, bf16=bf16, **kwargs)`, on the configured engine."""
        if self.engine is None:
            return generate(model, prompts, seed=seed, bf16=bf16, **kwargs)
        return split_by_rank(prompts, self.pad_id, lambda mine, first: self.engine.generate(
            mine, seed=derive_seed(seed, first), **kwargs))

    def before_update(self) -> None:
        if self.engine is not None:
            self.engine.sleep()

    def after_update(self, model) -> None:
        """Wake the engine and push the trainer's new weights into it."""
        if self.engine is not None:
            self.engine.wake_up()
            self.engine.sync_weights(model)


def rollout_tokens(ro) -> tuple[int, int]:
    """(tokens run forward, tokens generated) of a rollout: each prompt's prefill once per group, plus samples."""
    generated = int(ro.completion_mask.sum())
    return int(ro.prompt_mask.sum()) + generated, generated


def eval_kwargs(cfg: RunConfig) -> dict:
    e = cfg.eval
    return dict(k=e.k, n_sampled=e.n_sampled, temperature=e.temperature,
                max_new_tokens=e.max_new_tokens or cfg.grpo.max_new_tokens, batch_size=e.batch_size,
                bf16=cfg.train.bf16)


def eval_during_training(cfg: RunConfig, model, tokenizer, task: Task) -> dict[str, float]:
    """Greedy pass@1 on the first eval split (`eval.n_during` problems), as `eval/<split>/pass@1`."""
    split = cfg.eval.splits[0]
    m = evaluate_split(model, tokenizer, task, split, n=cfg.eval.n_during, **{**eval_kwargs(cfg), "k": 0})
    return {f"eval/{split}/pass@1": m["pass@1"]}


def finish(cfg: RunConfig, session: Session, model, tokenizer, task: Task, step: int,
           other_models: dict | None = None, other_results: dict | None = None) -> dict:
    """Save the final model(s), evaluate every split, write eval.json and plots.

    Args:
        other_models: {role: (model, tokenizer)} saved beside the generator in `final/`.
        other_results: more eval.json entries ({role: {split: {metric: value}}}), evaluated by the recipe.
    """
    session.progress.close()
    others = {role: (dist.plain_copy(m), tok) for role, (m, tok) in (other_models or {}).items()}
    dist.on_main(_save_final, session.run_dir, dist.plain_copy(model), tokenizer, others)
    results = {"generator": evaluate_generator(model, tokenizer, task, cfg.eval.splits, n=cfg.eval.n,
                                               **eval_kwargs(cfg))}
    results.update(other_results or {})
    row = {f"eval/{split}/{k}": v for split, m in results["generator"].items() for k, v in m.items()}
    row.update({f"eval/{role}/{split}/{k}": v for role, splits in (other_results or {}).items()
                for split, m in splits.items() for k, v in m.items()})
    session.logger.log(step, row)
    session.logger.close()
    dist.on_main(write_json_atomic, session.run_dir / "eval.json", results)
    if dist.is_main():
        try:
            from cotrain.analysis.plot import plot_runs
            plot_runs([session.run_dir])
        except Exception as err:  # a plot must never cost a finished run
            print(f"warning: plotting failed: {err}")
    return results


def _save_final(run_dir: Path, model, tokenizer, other_models: dict) -> None:
    """`final/`: written beside and renamed into place (a run dir's `final/` is what `init:` and
    `cotrain eval` load)."""
    from cotrain.models.build import save_model

    final, tmp = run_dir / "final", run_dir / ".tmp_final"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tokenizer, tmp / "generator")
    for role, (m, tok) in other_models.items():
        save_model(m, tok, tmp / role)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
