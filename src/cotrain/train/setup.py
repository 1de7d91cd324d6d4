"""What a recipe builds before its loop: the task and its training problems, each step's batch, the
starting models (with their memory options, sharded when asked), the optimizer and its schedule, the
seeds every random choice derives from, and the frozen iterates of the iterative recipes."""
from __future__ import annotations

import hashlib
import math
import shutil
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cotrain import dist
from cotrain.config import ModelConfig, TaskConfig, TrainConfig, VerifierConfig
from cotrain.errors import UserError
from cotrain.models.build import build_model, load_model, prepare_for_training, save_model
from cotrain.runs.rundir import resolve_model_dir
from cotrain.tasks import load_object, make_task
from cotrain.tasks.base import Problem, Task


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from the run seed and any labels (step, role, ...): stable across processes."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def build_task(cfg: TaskConfig) -> Task:
    """The task `cfg` (the run config's `task` section) names, with its options."""
    return make_task(cfg.name, **cfg.options())


def training_reward(task: Task, spec: str | None) -> Callable[[str, Problem], float]:
    """The training reward of a completion: the task's grader, or the user's function `task.reward` names
    (`path/to/file.py:function` or `package.module:function`, called as fn(completion, problem) -> float).
    Evaluation keeps the grader. A completion the function fails on scores 0, with one warning line for the first."""
    if spec is None:
        return task.grade
    fn = load_object(str(spec), "task.reward")
    if not callable(fn):
        raise UserError(f"task.reward: {spec} is not a function")
    failed: list[str] = []

    def reward(completion: str, problem: Problem) -> float:
        try:
            return float(fn(completion, problem))
        except Exception as err:  # a model's output the user's function did not expect: never a crash
            if not failed:
                print(f"warning: task.reward {spec} failed on a completion ({type(err).__name__}: {err}); it scores 0, "
                      "and further failures are not shown", file=sys.stderr, flush=True)
            failed.append(type(err).__name__)
            return 0.0
    return reward


def training_pool(task: Task, seed: int, n: int | None, n_val: int = 0) -> tuple[list[Problem], list[Problem]]:
    """Training problems and `n_val` held-out problems of the train split (disjoint from the pool), drawn
    with the run's `seed`."""
    if "train" not in task.splits:
        raise UserError(f"task {task.name} has no train split (its splits: {', '.join(task.splits)}): give it "
                        "training data, or evaluate a checkpoint on these splits with `cotrain eval`")
    problems = task.problems("train", None if n is None else n + n_val, seed=seed)
    pool, val = (problems[:-n_val], problems[-n_val:]) if n_val else (problems, [])
    if not pool:
        raise UserError(f"task {task.name} has no training problems")
    return pool, val


def sample_batch(pool: list, size: int, seed: int, step: int) -> list:
    """The step's problems: a deterministic function of (seed, step), so resume redraws the same."""
    rng = np.random.default_rng(derive_seed(seed, "batch", step))
    idx = rng.choice(len(pool), size=size, replace=len(pool) < size)
    return [pool[i] for i in idx]


def initial_model(m: ModelConfig, init: str | None, seed: int,
                  fsdp: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model a run starts from: `init` (a run, checkpoint or model dir) or the model config `m` (built
    with `seed`), with the memory options of `m` applied (dtype, device, gradient checkpointing, LoRA) and
    sharded when `fsdp` (`train.fsdp`) asks."""
    if init:
        model, tokenizer = load_model(resolve_model_dir(init), dtype=m.dtype)
    else:
        model, tokenizer = build_model(m, seed=seed)
    return shard_if_asked(prepare_for_training(model, m, dist.device()), fsdp), tokenizer


def initial_verifier(v: VerifierConfig, m: ModelConfig, init: str | None, seed: int, fsdp: bool):
    """The verifier a run starts from: `verifier.model` (from scratch), `verifier.init`, or the run's start
    (`init`, else the run's model config `m`); with the memory options of `verifier.model` (else of `m`), on
    `verifier.device` when set."""
    mcfg = v.model or m
    if v.model is not None:
        verifier, vtok = build_model(v.model, seed=derive_seed(seed, "verifier"))
    elif v.init or init:
        verifier, vtok = load_model(resolve_model_dir(v.init or init), dtype=mcfg.dtype)
    else:
        verifier, vtok = build_model(m, seed=derive_seed(seed, "verifier"))
    mcfg = mcfg.model_copy(update={"device": v.device}) if v.device else mcfg
    return shard_if_asked(prepare_for_training(verifier, mcfg, dist.device()), fsdp), vtok


def shard_if_asked(model, fsdp: bool):
    """`model` sharded with FSDP2 when `fsdp` (`train.fsdp`) is set and the run has several processes."""
    return dist.shard_model(model) if fsdp and dist.world() > 1 else model


class HostStateAdamW(torch.optim.AdamW):
    """AdamW whose moments live in host memory between its steps (`train.offload_optimizer`): each step
    copies them onto their parameters' device, steps there and copies them back into the same host
    buffers (page-locked beside a GPU), so rollouts, verification and every backward pass run without
    them. The arithmetic is AdamW's own; only where the moments wait changes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._host_buffers: dict[tuple[int, str], torch.Tensor] = {}

    def _host_buffer(self, t: torch.Tensor) -> torch.Tensor:
        return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)

    def _moments(self):
        for group in self.param_groups:
            for p in group["params"]:
                for key, value in self.state.get(p, {}).items():
                    if key != "step" and isinstance(value, torch.Tensor):
                        yield p, key, value

    @torch.no_grad()
    def step(self, closure=None):
        for p, key, host in list(self._moments()):  # always a copy, even where the host is the device
            self.state[p][key] = host.to(p.device, copy=True, non_blocking=True)
        loss = super().step(closure)
        for p, key, value in list(self._moments()):
            host = self._host_buffers.get((id(p), key))
            if host is None or host.shape != value.shape:
                host = self._host_buffers[(id(p), key)] = self._host_buffer(value)
            host.copy_(value)
            self.state[p][key] = host
        return loss

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)  # torch places the moments on each parameter's device
        for p, key, value in list(self._moments()):
            host = self._host_buffers[(id(p), key)] = self._host_buffer(value)
            host.copy_(value)
            self.state[p][key] = host


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, total_steps: int):
    """AdamW with linear warm-up, then constant, cosine or linear decay (stepped once per step); its moments
    in host memory between steps with `cfg.offload_optimizer` (`HostStateAdamW`)."""
    trainable = [p for p in model.parameters() if p.requires_grad]  # with LoRA: the adapters alone
    adamw = HostStateAdamW if cfg.offload_optimizer else torch.optim.AdamW
    opt = adamw(trainable, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)

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


def iterate_dir(run_dir: Path, name: str, iteration: int) -> Path:
    """Where an iterative recipe keeps iteration `iteration`'s frozen model (`run_dir/<name>_<k>` under
    the recipe's folder, e.g. spin/opponent_2), so that a run resumed within the iteration meets it again."""
    return Path(run_dir) / name.split("/")[0] / f"{name.split('/')[-1]}_{iteration}"


def keep_iterate(model, tokenizer, run_dir: Path, name: str, iteration: int) -> None:
    """Save this iteration's frozen model and drop those before the previous iteration's (a run resumes
    from a checkpoint of this iteration or, with checkpoints rarer than iterations, of the one before)."""
    save_model(model, tokenizer, iterate_dir(run_dir, name, iteration))
    for old in range(iteration - 1):
        shutil.rmtree(iterate_dir(run_dir, name, old), ignore_errors=True)
