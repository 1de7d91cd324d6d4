"""Compute accounting: tokens and estimated FLOPs per role over a run (`Compute`), and where each
step's wall time goes (`StepTimer`)."""
from __future__ import annotations

import time

import torch

from cotrain import dist
from cotrain.train.rollout import rollout_tokens


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

    def add_rollout(self, role: str, ro, generated: bool = True) -> int:
        """Count a rollout as `role`'s work: its tokens run forward (each prompt's prefill once per group, plus the
        samples) and, unless `generated` is False (a verifier's verdicts, counted as forward passes alone), its
        samples as generated. Returns the tokens it sampled, for the step's timer."""
        forward, sampled = rollout_tokens(ro)
        self.add(role, forward=forward, generated=sampled if generated else 0)
        return sampled

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
    ver_update (a verifier's own RL step: its rollouts and update), eval. On GPUs, `memory/peak_gib` is
    the step's peak of allocated GPU memory and `memory/reserved_gib` the peak held by torch's caching
    allocator (what the device really gives up, fragmentation included).
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
            # what the caching allocator holds: the device's real use, fragmentation included
            out["memory/reserved_gib"] = max(torch.cuda.max_memory_reserved(i) for i in self.gpus) / 2**30
        return out
