"""Run configs: declared once, loaded from YAML plus dotted command-line overrides, validated on load.

A config file carries only what differs from the defaults below. Every mistake a user can make here
raises `UserError` with one line that says how to fix it (unknown keys name the closest valid key).
"""
from __future__ import annotations

import difflib
import functools
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from cotrain.declare import MAX_COUNT, Section, too_large
from cotrain.errors import UserError
from cotrain.registry import RECIPES, USER_SECTIONS, recipe_sections, register, unknown

GUARDED = tuple(name for name, r in RECIPES.items() if r.guarded)
"""The recipes whose solver updates `safeguard` can scale."""


def _compiled_decoding(what: str) -> str:
    """The description of a section's `compile` option, `what` naming the outputs it decodes."""
    return f"Decode {what} with a static KV cache through torch.compile (not with draft_tokens)."


def _one_decoding(section: str, settings) -> None:
    """Compiled decoding has no drafting: a section may turn on one of them."""
    if settings.compile and settings.draft_tokens:
        raise ValueError(f"{section}.compile and {section}.draft_tokens cannot be combined: choose one")


class ModelConfig(Section):
    """The model a run trains: a preset built here, a saved directory or a published one, and how it is held in memory."""

    preset: Literal["nano", "tiny", "small", "base"] | None = Field(
        "tiny", description="Build a Llama-architecture model from scratch with this size preset.")
    tokenizer: Literal["char"] = Field("char", description="Tokenizer for a preset model (character level).")
    path: str | None = Field(None, description=(
        "Load a pretrained model instead of a preset: a directory, a hub id, a .gguf file, or `smollm2`."))
    max_length: int = Field(512, ge=16, description="Maximum positions of a preset model.")
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = Field("float32", description=(
        "Dtype the weights are loaded or built in (each choice in docs/reference.md); train.bf16 (autocast) is separate."))
    gradient_checkpointing: bool = Field(False, description=(
        "Recompute each layer's activations in the backward pass: less memory, ~30% more compute per update."))
    lora_r: int = Field(0, ge=0, description="Rank of LoRA adapters trained instead of the weights (0: full fine-tuning).")
    lora_alpha: int = Field(16, ge=1, description="LoRA scaling numerator: the update is (lora_alpha / lora_r) B A.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the input of the LoRA adapters.")
    lora_target: list[str] | str = Field("all-linear", description=(
        "Modules that get adapters: 'all-linear' (every linear layer but the output head) or a list of "
        "module names, e.g. [q_proj, v_proj]."))
    lora_init: str | None = Field(None, description=(
        "Start the LoRA adapters from a directory holding `adapter/` on the same base (its lora_r, alpha and target)."))
    device: str | None = Field(None, description=(
        "Device of this model: cpu, cuda, cuda:N or mps (default: cuda if available, else cpu)."))

    @model_validator(mode="after")
    def _one_source(self):
        if self.path is not None:
            self.__dict__["preset"] = None  # a path wins over the default preset
        if self.path is None and self.preset is None:
            raise ValueError("set model.preset or model.path")
        return self

    @staticmethod
    def check_device(device: str | None) -> None:
        """Raise ValueError unless `device` names a kind of device (None: the default one)."""
        kind, _, index = (device or "cpu").partition(":")
        if kind not in ("cpu", "cuda", "mps") or (index and not (kind == "cuda" and index.isdigit())):
            raise ValueError(f"device must be cpu, cuda, cuda:N or mps (got {device!r})")

    @model_validator(mode="after")
    def _memory_options(self):
        self.check_device(self.device)
        if not self.lora_target or (isinstance(self.lora_target, list) and not all(self.lora_target)):
            raise ValueError("lora_target must be 'all-linear' or a non-empty list of module names, e.g. [q_proj, v_proj]")
        if self.lora_init and not self.lora_r:
            raise ValueError("lora_init starts LoRA adapters: set lora_r (and lora_alpha, lora_target) to the adapter's")
        return self


class TaskConfig(BaseModel):
    """Which task and its knobs; keys other than `name` are passed to the task's constructor."""

    model_config = ConfigDict(extra="allow")
    name: str = Field("arith", description=(
        "arith, countdown, codeworld, humaneval, code_jsonl, wordproblems, gsm8k, math500, jsonl, rg:<name>, or one's own."))

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _bounded(self):
        for key, value in self.options().items():
            if too_large(value):
                raise ValueError(f"task.{key}: must be at most {MAX_COUNT:,} in size")
        return self


class TrainConfig(Section):
    """The optimizer, its schedule, the batch, precision and threads of every recipe's updates."""

    steps: int = Field(200, ge=0, description="Optimizer steps of the run.")
    batch_size: int = Field(64, ge=1, description="SFT: sequences per step. GRPO: completions per step (prompts x group_size).")
    lr: float = Field(1e-4, gt=0, description="Peak learning rate of AdamW.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="Learning-rate decay after warm-up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW betas.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping by global norm.")
    threads: int | None = Field(None, ge=1, le=4096, description=(
        "Intra-op CPU threads. Unset: OMP_NUM_THREADS, else the cores other processes leave free at the start."))
    bf16: bool | Literal["auto"] = Field("auto", description=(
        "torch.autocast to bfloat16 for forward passes; auto: where bf16 is native (CUDA, AVX512-BF16, AMX), kept in env.json."))
    fsdp: bool = Field(False, description=(
        "Under torchrun, shard weights, gradients and optimizer states over the processes (FSDP2; docs/reference.md)."))
    offload_optimizer: bool = Field(False, description=(
        "Keep AdamW's two moments in host memory between optimizer steps (not with fsdp; docs/reference.md)."))
    micro_batch_size: int | None = Field(None, ge=1, description=(
        "Sequences per forward and backward pass (gradient accumulation, the same update); null: all at once."))
    n_problems: int | None = Field(20000, ge=1, description="Training problems drawn from the train split (null: all).")
    stop_at_acc: float | None = Field(None, gt=0, le=1, description=(
        "SFT: stop once greedy pass@1 on held-out train-split problems reaches this (checked every eval.every steps)."))

    @model_validator(mode="after")
    def _check(self):
        if self.offload_optimizer and self.fsdp:
            raise ValueError("train.offload_optimizer does not combine with train.fsdp (FSDP2 shards the moments "
                             "over the processes already): set one of them to false")
        return self


class GrpoConfig(Section):
    """Sampling and the policy-gradient loss of the generator's update (GRPO and its variants)."""

    group_size: int = Field(8, description="G: completions sampled per prompt; must be at least 2.")
    max_new_tokens: int = Field(48, ge=1, description="Completion length limit.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling of rollouts.")
    top_k: int = Field(0, ge=0, le=1_000_000, description="Sample rollouts among the k most likely tokens (0: all; nanochat: 50).")
    beta: float = Field(0.0, ge=0, description="KL coefficient to the frozen reference (no reference is built when 0).")
    epsilon: float = Field(0.2, gt=0, description="Lower PPO clip range.")
    epsilon_high: float | None = Field(None, gt=0, description="Upper PPO clip range (DAPO clip-higher); defaults to epsilon.")
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field("grpo", description="Token aggregation of the loss.")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Std used to scale advantages.")
    num_iterations: int = Field(1, ge=1, description="mu: optimisation passes over each generated batch.")
    num_minibatches: int = Field(1, ge=1, description="Optimizer steps per pass; the batch is split this many ways.")
    mask_truncated: bool = Field(False, description="Drop completions that hit max_new_tokens from the loss (DAPO).")

    @model_validator(mode="after")
    def _check(self):
        if self.group_size < 2:
            raise ValueError(f"grpo.group_size must be at least 2 (got {self.group_size}): advantages are relative within a group")
        return self


class VerifierConfig(Section):
    """The generative verifier of `tango` and `frozen_verifier`: its model, warm-up and RL settings."""

    init: str | None = Field(None, description=(
        "Start the verifier from this checkpoint (run dir, step dir or model dir); default: the run's `init`."))
    model: ModelConfig | None = Field(None, description=(
        "Build the verifier from scratch with this model config instead (asymmetric sizes); overrides init."))
    device: str | None = Field(None, description=(
        "Device of the verifier (and of a separate judge): cpu, cuda, cuda:N or mps; default: its model's."))
    lr: float = Field(1e-4, gt=0, description="Peak learning rate of the verifier's RL.")
    group_size: int = Field(4, ge=2, description="Verifications sampled per solution: the verifier's GRPO group.")
    solutions: int = Field(32, ge=1, description="Solutions verified per verifier RL step (one per prompt, fresh).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the verifier's RL rollouts.")
    max_new_tokens: int = Field(64, ge=1, description="Length limit of a verification.")
    greedy_verdicts: bool = Field(True, description=(
        "Verify the generator's samples greedily for its process rewards (else one sampled verification)."))
    verify_share: float = Field(1.0, gt=0, le=1, description=(
        "tango: verify only this share of each step's distinct samples, those of highest mean entropy (1: all)."))
    w_format: float = Field(0.8, ge=0, description="Weight of the format score in the verifier's reward (RL Tango: 0.8).")
    class_decay: float = Field(0.8, ge=0, lt=1, description="EMA decay of the class counts behind the class reweighting.")
    reweight: bool = Field(True, description="Reweight the verifier's advantages by class (GT-correct vs incorrect).")
    warmup_sft_steps: int = Field(300, ge=0, description="SFT steps on auto-labelled verifications before RL (0: zero warm-up).")
    warmup_sft_lr: float = Field(1e-3, gt=0, description="Learning rate of the verifier's SFT warm-up.")
    warmup_batch_size: int = Field(64, ge=1, description="Verifications per SFT warm-up step.")
    warmup_samples: int = Field(2048, ge=2, description=(
        "Generator samples drawn (temperature 1) for the warm-up data, labelled by ground-truth outcome."))
    warmup_corrupt_frac: float = Field(0.5, ge=0, le=1, description=(
        "Share of warm-up examples that are reference solutions with an injected step error (tasks with `corrupt`)."))
    warmup_clean_frac: float = Field(0.0, ge=0, le=1, description=(
        "Share of warm-up examples that are clean reference solutions (tasks with `corrupt`)."))
    warmup_error_rate: float = Field(0.0, ge=0, le=1, description=(
        "In an injected-error example, the chance that each further step is wrong too (one step always is)."))
    warmup_pair_frac: float = Field(0.0, ge=0, le=1, description=(
        "Share of each SFT warm-up batch given as pairwise judgments, which teach a judge to compare (roles/verifier.py)."))
    warmup_rl_steps: int = Field(0, ge=0, description="Verifier-only RL steps after the SFT warm-up (RL Tango: 40).")
    draft_tokens: int = Field(0, ge=0, le=64, description=(
        "Drafted decoding (prompt lookup) of verifications in training, up to this many guessed tokens a pass (0: off)."))
    compile: bool = Field(False, description=_compiled_decoding("the verifier's or judge's verifications"))
    source: Literal["model", "oracle", "noisy", "rollouts"] = Field("model", description=(
        "Where the generator's step and final verdicts come from: model, oracle, noisy or rollouts (docs/reference.md)."))
    rollouts_k: int = Field(4, ge=1, le=256, description=(
        "source rollouts: continuations sampled from the generator at each step boundary of each sample."))
    noise_fp: float = Field(0.0, ge=0, le=1, description=(
        "source noisy: the chance that a false step (or a wrong solution's final verdict) is approved."))
    noise_fn: float = Field(0.0, ge=0, le=1, description=(
        "source noisy: the chance that a right step (or a correct solution's final verdict) is rejected."))
    noise_final_fp: float | None = Field(None, ge=0, le=1, description=(
        "source noisy: the chance that a wrong solution's final verdict is approved (None: noise_fp)."))
    noise_final_fn: float | None = Field(None, ge=0, le=1, description=(
        "source noisy: the chance that a correct solution's final verdict is rejected. None: noise_fn."))
    final_strict: bool = Field(False, description=(
        "source oracle or noisy: approve a solution only when every step verdict it was given approves too."))

    @model_validator(mode="after")
    def _check(self):
        ModelConfig.check_device(self.device)
        _one_decoding("verifier", self)
        if self.final_strict and self.source not in ("oracle", "noisy"):
            raise ValueError("verifier.final_strict overrules the oracle's final verdicts by its step verdicts: set "
                             "verifier.source: oracle or noisy")
        if self.source != "noisy" and (self.noise_fp or self.noise_fn or self.noise_final_fp is not None
                                       or self.noise_final_fn is not None):
            raise ValueError(f"verifier.noise_fp, noise_fn, noise_final_fp and noise_final_fn flip the oracle's verdicts: "
                             f"set verifier.source: noisy (it is {self.source})")
        if self.warmup_corrupt_frac + self.warmup_clean_frac > 1:
            raise ValueError(f"verifier.warmup_corrupt_frac + warmup_clean_frac must be at most 1, got "
                             f"{self.warmup_corrupt_frac} + {self.warmup_clean_frac}")
        return self


class CoTrainingConfig(Section):
    """The co-training family's schedule, advantage mixing and evaluation sizes (tango, consistency; the
    verifier evaluations of self_rewarding); read under its old name `tango:` too."""

    alpha: float = Field(0.1, ge=0, le=1, description=(
        "Weight of the process advantage: A = (1-alpha) A_out + alpha A_proc (RL Tango: 0.1, decaying). "
        "auto: 0.1 with alpha_schedule auto."))
    alpha_schedule: Literal["constant", "exp", "auto"] = Field("exp", description=(
        "exp: alpha decays to 1e-3 over the run (RL Tango); constant; auto: exp times the verifier's reliability."))
    gen_steps: int = Field(3, ge=1, description="Ng: generator steps per round.")
    ver_steps: int = Field(1, ge=0, description="Nv: verifier steps per round (0: the verifier is frozen).")
    adversarial: bool = Field(False, description=(
        "GAR: the verifier also earns w_catch for rejecting incorrect solutions, the generator w_approve "
        "for correct solutions the verifier approves."))
    w_catch: float = Field(1.0, ge=0, description="GAR: the verifier's bonus for catching an incorrect solution.")
    w_approve: float = Field(0.5, ge=0, description="GAR: the generator's bonus for a correct, approved solution.")
    eval_n: int = Field(200, ge=1, description="Held-out solutions of the verifier evaluation during training.")
    process_groups: Literal["all", "mixed"] = Field("all", description=(
        "Which groups get the process advantage: all (RL Tango), or mixed, those holding right and wrong samples."))
    credit: Literal["to_go", "min", "final", "min_final", "first_error", "final_compute", "step"] = Field("to_go", description=(
        "How step rewards become each token's process advantage (rl/tango.py; each construction in docs/reference.md)."))
    verify_groups: Literal["all", "trained"] = Field("all", description=(
        "Whose samples a verifier model judges each step: all (RL Tango), or trained, the groups the process term trains."))

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data):
        if isinstance(data, dict) and data.get("alpha") == "auto":
            data = {**data, "alpha": 0.1, "alpha_schedule": "auto"}
        return data

    @model_validator(mode="after")
    def _trained_groups(self):
        if self.verify_groups == "trained":
            reads = [why for why, on in (("process_groups is not mixed (every group is trained)", self.process_groups != "mixed"),
                                         ("adversarial reads every verdict", self.adversarial),
                                         ("alpha_schedule auto reads every verdict", self.alpha_schedule == "auto")) if on]
            if reads:
                raise ValueError(f"verify_groups trained: {'; '.join(reads)}")
        return self


class SelfPlayConfig(Section):
    """The proposer-solver-judge loops (`triad`, `reliability`); the judge uses the `verifier` settings."""

    shared_model: bool = Field(True, description=(
        "One model plays proposer, solver and judge (one joint update); false: three models."))
    proposer_init: str | None = Field(None, description="The proposer's start when not shared (default: the run's init).")
    proposals: int = Field(16, ge=2, description="Questions the proposer writes per step (its GRPO group).")
    proposer_temperature: float = Field(1.0, gt=0, description="Sampling temperature of the proposer.")
    proposer_lr: float | None = Field(None, gt=0, description="The proposer's learning rate (default: train.lr).")
    question_max_new_tokens: int = Field(24, ge=1, description="Length limit of a proposed question.")
    max_ops: int | None = Field(None, ge=1, description="arith validity: most operations (default: the task's).")
    max_operand: int | None = Field(None, ge=1, description="arith validity: largest operand (default: the task's).")
    check_solvable: bool = Field(True, description=(
        "countdown: a proposed instance is valid only when the task's exact solver solves it (false: its form alone)."))
    proposer_warmup_steps: int = Field(0, ge=0, description=(
        "SFT steps teaching the proposer the task's question format on train-split questions (no answers)."))
    seed_questions: int = Field(512, ge=1, description="Train-split questions, without answers, that seed the buffer.")
    buffer_size: int = Field(1024, ge=1, description="Most questions kept in the question buffer (oldest leave first).")
    min_quality: float = Field(0.7, ge=0, le=1, description=(
        "MAE quality filter: below it a question earns no difficulty reward and does not enter the buffer."))
    judge_passes: int = Field(3, ge=1, description="Judging passes per answer (sampled at verifier.temperature).")
    judge_distinct: bool = Field(True, description=(
        "Judge each distinct (question, answer) pair once, its copies sharing its passes."))
    judge_early_stop: bool = Field(False, description=(
        "Judge in two rounds, the second only for answers whose first passes disagree (an approximation)."))
    train_judge: bool = Field(True, description="triad: train the judge on its format reward (MAE).")
    solver_norm: Literal["role", "group"] = Field("role", description=(
        "triad: normalise the solver's advantages over its whole batch (MAE's per-role normalisation) or "
        "within each question's G answers (GRPO)."))
    proposer_reward: Literal["mae", "learnability"] = Field("mae", description=(
        "triad: MAE's (quality + difficulty + format) / 3, or learnability 1 - p (Absolute Zero)."))


class SafeguardConfig(Section):
    """Label-free recipes (`consistency`, `triad`, `reliability`): shrink or skip the solver's updates when
    label-free signals say its judge cannot be trusted (rl/safeguard.py)."""

    enabled: bool = Field(False, description="Probe the judge and the solver, and scale the solver's updates.")
    every: int = Field(5, ge=1, description="Steps between probes; a probe's scale holds until the next one.")
    questions: int = Field(64, ge=1, description="Probe questions (fixed, from the blinded training questions).")
    n_strong: int = Field(2, ge=1, description="Strong (low-temperature) answers per probe question.")
    n_weak: int = Field(2, ge=1, description="Weak (high-temperature) answers per probe question.")
    strong_temperature: float = Field(0.3, gt=0, description="Sampling temperature of the strong answers.")
    weak_temperature: float = Field(1.5, gt=0, description="Sampling temperature of the weak answers.")
    min_separation: float = Field(0.06, ge=-1, le=1, description=(
        "Judge separation E[J(strong)] - E[J(weak)] at or below which updates are skipped."))
    full_separation: float = Field(0.12, ge=-1, le=1, description=(
        "Separation from which updates run at full scale (linear between the two)."))
    ema: float = Field(0.7, ge=0, lt=1, description="Decay of the moving average of the separation over probes.")
    kl_max: float | None = Field(0.2, gt=0, description=(
        "Per-token KL to the start at which updates stop (shrinking from half of it); null: no KL limit."))
    min_entropy_ratio: float | None = Field(0.5, gt=0, le=1, description=(
        "Entropy relative to the first probe's below which updates are skipped; null: no entropy floor."))

    @property
    def measures_kl(self) -> bool:
        """Whether the probe needs the solver's frozen start (for the KL)."""
        return self.enabled and self.kl_max is not None

    @model_validator(mode="after")
    def _check(self):
        if self.full_separation <= self.min_separation:
            raise ValueError("safeguard.full_separation must be above safeguard.min_separation")
        return self


class EvalConfig(Section):
    """What is evaluated, on how many problems, during training and at its end."""

    splits: list[str] = Field(["test", "ood"], min_length=1, description=(
        "Splits to evaluate at the end (missing ones are skipped); the first is also evaluated during training."))
    n: int = Field(500, ge=1, description="Problems per split for greedy pass@1.")
    k: int = Field(8, ge=0, description="Samples per problem for pass@k and maj@k (0 disables).")
    n_sampled: int = Field(200, ge=0, description="Problems per split for the sampled metrics.")
    temperature: float = Field(1.0, gt=0, description="Temperature of the sampled metrics.")
    max_new_tokens: int | None = Field(None, ge=1, description="Completion limit (default: grpo.max_new_tokens).")
    batch_size: int = Field(256, ge=1, description="Sequences per generation batch.")
    every: int = Field(0, ge=0, description="Greedy eval during training every N steps (0: only at the end).")
    n_during: int = Field(200, ge=1, description="Problems of the first split evaluated during training.")
    at_start: bool = Field(False, description=(
        "Also evaluate during training before the first step (logged at step 0): curves start at the start."))
    larger_n: int = Field(0, ge=0, description=(
        "Also evaluate the final generator greedily on this many problems of each split, into RUN/larger/ (0: none)."))

    @model_validator(mode="after")
    def _larger(self):
        if self.larger_n and self.larger_n <= self.n:
            raise ValueError(f"larger_n ({self.larger_n}) must exceed n ({self.n}), the final evaluation's "
                             "problems, or be 0")
        return self


class CheckpointConfig(Section):
    """When a run saves what a resume needs, and how many such checkpoints it keeps."""

    every: int = Field(50, ge=0, description="Save a checkpoint every N steps (0: only at the end).")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept; older ones are deleted.")


class LogConfig(Section):
    """Where a run's metrics go besides metrics.jsonl, how often, and what it draws at its end."""

    every: int = Field(1, ge=1, description="Write metrics every N steps.")
    tensorboard: bool = Field(True, description="Mirror metrics to TensorBoard when it is installed.")
    wandb: bool = Field(False, description=(
        "Mirror metrics to Weights & Biases (pip install wandb), also under TRL's names, and the sampled "
        "completions as a table (runs/trackers.py)."))
    wandb_project: str = Field("cotrain", min_length=1, max_length=128, description="The W&B project.")
    wandb_mode: Literal["offline", "online"] = Field("offline", description=(
        "offline: written under RUN_DIR/wandb, uploaded later by `wandb sync`; online: streamed."))
    progress: bool = Field(True, description="Live progress bar on stderr.")
    plots: bool = Field(True, description=(
        "Draw the run's plots (curves.png, eval.png, ...) when it ends; `cotrain plot RUN_DIR` draws them any time."))


class AlarmConfig(Section):
    """Alarms raised while training (runs/alarms.py): printed once, logged as `alarm/<name>`, never acted on."""

    enabled: bool = Field(True, description="Watch the logged metrics and raise alarms.")
    window: int = Field(5, ge=1, le=10_000, description="Logged steps each rule averages over.")
    hack_gap: float = Field(0.2, description="reward_hacking: the hacking gap's mean above this.")
    collapse: float = Field(0.25, ge=0, le=1, description=(
        "entropy_collapse, length_collapse: the metric's recent mean under this share of its start's."))
    chance_band: float = Field(0.05, ge=0, le=0.5, description="verifier_at_chance: balanced accuracy within 0.5 ± this.")
    drift: float = Field(0.2, ge=0, le=1, description="judge_drift: the judge's agreement with the truth down by more.")
    silent: float = Field(0.1, ge=0, le=1, description="verifier_silent: the verifier's format rate (`ver/format`) under this.")
    drop: float = Field(0.1, ge=0, le=1, description=(
        "accuracy_drop: the last two in-training evaluations' mean below the first two's by more than this."))
    early_stop: float = Field(0.2, ge=0, le=1, description=(
        "early_stopping: the share of samples that stop early above its start's by more than this."))


class RolloutConfig(Section):
    """Which engine samples the generator's rollouts (its training samples in grpo, tango,
    frozen_verifier and consistency; verifications, evaluation and self-play always use the HF path)."""

    engine: Literal["hf", "vllm"] = Field("hf", description=(
        "hf: transformers with a KV cache (any device); vllm: a vLLM engine colocated on the trainer's GPU."))
    tis_cap: float = Field(2.0, gt=0, description=(
        "vllm: truncated importance sampling, each token's loss weighted by min(pi_trainer / pi_sampler, tis_cap)."))
    gpu_memory_utilization: float = Field(0.3, gt=0, lt=1, description="vllm: share of the GPU's memory for vLLM.")
    max_model_len: int | None = Field(None, ge=16, description="vllm: longest prompt + completion (null: the model's).")
    sleep: bool = Field(False, description="vllm: the engine awake only while it samples rollouts (sleep mode, level 2).")
    draft_tokens: int = Field(0, ge=0, le=64, description=(
        "HF path: drafted decoding (prompt lookup) of the rollouts, up to this many guessed tokens a pass (0: off)."))
    compile: bool = Field(False, description="HF path: " + _compiled_decoding("the generator's rollouts"))

    @model_validator(mode="after")
    def _check(self):
        _one_decoding("rollout", self)
        return self


class _RunConfig(Section):
    """The run config's own keys and the sections every recipe shares; `RunConfig` adds each recipe's own
    section, declared beside it (`recipes/<module>_spec.py`)."""

    recipe: str = Field("grpo", description="Training loop to run: one of `cotrain recipes`.")
    recipe_module: str | None = Field(None, description=(
        "A file of one's own that declares and runs `recipe` (docs/new_recipe.md); recorded as its absolute path."))
    seed: int = Field(0, ge=0, le=2**63 - 1, description="The one seed; every random choice derives from it.")
    out_dir: str | None = Field(None, description="Run directory (the CLI's --out overrides it).")
    init: str | None = Field(None, description="Start from this checkpoint (a run dir, a step dir or a model dir).")
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    cotraining: CoTrainingConfig = Field(default_factory=CoTrainingConfig)
    selfplay: SelfPlayConfig = Field(default_factory=SelfPlayConfig)
    safeguard: SafeguardConfig = Field(default_factory=SafeguardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    alarms: AlarmConfig = Field(default_factory=AlarmConfig)

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, name: str) -> str:
        if name not in RECIPES:
            raise ValueError(unknown(name))
        return name

    @model_validator(mode="after")
    def _check(self):
        rl = RECIPES[self.recipe].groups
        recipe = RECIPES[self.recipe]
        if recipe.label_free and "warmup_sft_steps" not in self.verifier.model_fields_set:
            self.verifier.warmup_sft_steps = 0   # the default warm-up reads labels
        if recipe.label_free and self.verifier.warmup_sft_steps:
            raise ValueError(
                f"recipe {self.recipe} is label-free and cannot warm its verifier up on labelled verifications: set "
                "verifier.warmup_sft_steps: 0 (and verifier.init to an already warmed-up verifier, if wanted)")
        if self.verifier.source != "model" and recipe.label_free:
            reads = "answers" if self.verifier.source == "rollouts" else "process labels and answers"
            raise ValueError(f"verifier.source: {self.verifier.source} reads the task's {reads}; "
                             f"recipe {self.recipe} is label-free: set verifier.source: model")
        if self.verifier.source != "model" and not recipe.step_verdicts:
            readers = [name for name, r in RECIPES.items() if r.step_verdicts]
            raise ValueError(f"verifier.source: {self.verifier.source} stands in for the verifier of "
                             f"{', '.join(readers)}; recipe {self.recipe} reads no step verdicts: set verifier.source: model")
        if self.verifier.source == "rollouts":
            tg = self.cotraining
            reads = [why for why, on in (
                (f"cotraining.credit {tg.credit} reads verdicts (set step or to_go)", tg.credit not in ("step", "to_go")),
                ("cotraining.adversarial reads the verifier's approvals", tg.adversarial),
                ("cotraining.alpha_schedule auto reads the verifier's verdicts", tg.alpha_schedule == "auto")) if on]
            if reads:
                raise ValueError(f"verifier.source: rollouts gives no verdicts, only progress: {'; '.join(reads)}")
        if recipe.rewards_every_verdict and self.cotraining.verify_groups == "trained":
            raise ValueError(f"cotraining.verify_groups: trained judges only some groups; recipe {self.recipe} rewards every "
                             "sample by the verifier's verdict: set cotraining.verify_groups: all")
        if "reward" in self.task.options() and not recipe.custom_reward:
            raise ValueError(f"task.reward sets grpo's training reward; recipe {self.recipe} reads its task's grader")
        if self.safeguard.enabled and not recipe.guarded:
            raise ValueError(f"safeguard.enabled guards the label-free recipes {', '.join(GUARDED)}; "
                             f"recipe {self.recipe} has none: set safeguard.enabled: false")
        if self.train.fsdp and not recipe.fsdp:
            raise ValueError(f"train.fsdp is not supported by recipe {self.recipe}; set train.fsdp: false")
        if self.train.fsdp and (self.model.lora_r or (self.verifier.model and self.verifier.model.lora_r)):
            raise ValueError("train.fsdp with LoRA (model.lora_r > 0) is not supported; use one of them")
        if self.rollout.engine == "vllm" and self.train.fsdp:
            raise ValueError("rollout.engine: vllm with train.fsdp is not supported; use one of them")
        if self.rollout.engine == "vllm" and (self.grpo.top_p < 1 or self.grpo.top_k):
            raise ValueError("rollout.engine: vllm reports log-probs renormalised over the top-p nucleus or the top-k "
                             "tokens, which the importance weights cannot match; set grpo.top_p: 1 and grpo.top_k: 0")
        if self.rollout.engine == "vllm" and not recipe.vllm:
            vllm = [name for name, r in RECIPES.items() if r.vllm]
            raise ValueError(f"rollout.engine: vllm samples the generator of {', '.join(vllm)}; "
                             f"recipe {self.recipe} uses rollout.engine: hf")
        if rl and self.train.batch_size % self.grpo.group_size:
            raise ValueError(
                f"train.batch_size ({self.train.batch_size}) must be divisible by grpo.group_size "
                f"({self.grpo.group_size}): a prompt's whole group is in one batch")
        prompts = self.train.batch_size // self.grpo.group_size
        if rl and prompts % self.grpo.num_minibatches:
            raise ValueError(
                f"prompts per step (train.batch_size / grpo.group_size = {prompts}) must be divisible by "
                f"grpo.num_minibatches ({self.grpo.num_minibatches}): a minibatch holds whole groups")
        return self

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def eval_settings(self) -> dict:
        return self.run_settings().eval_settings()

    def run_settings(self) -> RunSettings:
        """What the library's session and evaluations read of this config, unpacked once."""
        return RunSettings(self.train, self.log, self.checkpoint, self.eval, self.alarms, self.model.dtype,
                           self.grpo.max_new_tokens, self.verifier.max_new_tokens, RECIPES[self.recipe].label_free)


RunConfig = create_model("RunConfig", __base__=_RunConfig, __module__=__name__, __doc__=(
    "A run's whole config: the shared sections, then each recipe's own (`cotrain keys` lists every key)."),
    **{name: (section, Field(default_factory=section)) for name, section in recipe_sections().items()})


def run_config_class() -> type[RunConfig]:
    """`RunConfig`, or where recipes of one's own declare sections (`registry.register`), its subclass with them."""
    return _with_sections(tuple(USER_SECTIONS.items())) if USER_SECTIONS else RunConfig


@functools.cache
def _with_sections(sections: tuple) -> type[RunConfig]:
    return create_model("RunConfig", __base__=RunConfig, __module__=__name__, __doc__=RunConfig.__doc__,
                        **{name: (section, Field(default_factory=section)) for name, section in sections})


@dataclass
class RunSettings:
    """The sections a run's session logs, checkpoints and evaluates by, and the values it takes from others
    (`RunConfig.run_settings`); `train` is the run's own section, whose `bf16` the session settles."""

    train: TrainConfig
    log: LogConfig
    checkpoint: CheckpointConfig
    eval: EvalConfig
    alarms: AlarmConfig
    dtype: str                    # model.dtype
    rollout_max_new_tokens: int   # grpo.max_new_tokens: the evaluation's length unless eval.max_new_tokens
    verifier_max_new_tokens: int
    label_free: bool              # the recipe reads no labels (what the alarms may read)

    def eval_settings(self) -> dict:
        """The keyword arguments of every evaluation of the run's generator (`eval/evaluate.py`), in the run's
        precision (`train.bf16`, settled by the session)."""
        e = self.eval
        return dict(k=e.k, n_sampled=e.n_sampled, temperature=e.temperature,
                    max_new_tokens=e.max_new_tokens or self.rollout_max_new_tokens, batch_size=e.batch_size,
                    bf16=self.train.bf16)


def evaluation_sections(raw: dict) -> dict:
    """The parts of a run's config that set how its generator is evaluated, as today's schema names them: its
    `eval` section (less `larger_n`, which the run alone acts on), the rollouts' length it defaults to
    (`grpo.max_new_tokens`) and the precision (`train.bf16`). {} for {}."""
    sections = {name: raw[name] if isinstance(raw.get(name), dict) else {} for name in ("eval", "grpo", "train")}
    out = {"eval": {k: v for k, v in sections["eval"].items() if k in EvalConfig.model_fields and k != "larger_n"}}
    for name, key in (("grpo", "max_new_tokens"), ("train", "bf16")):
        if sections[name].get(key) is not None:
            out[name] = {key: sections[name][key]}
    return out if raw else {}


# ---------------------------------------------------------------- loading


def _valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        keys.append(prefix + name)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _valid_keys(ann, prefix + name + ".")
    return keys


def _check_keys(raw: dict, model: type[BaseModel], prefix: str = "") -> None:
    """Unknown keys name the closest valid key anywhere in the config."""
    if model.model_config.get("extra") == "allow":
        return
    for key, value in raw.items():
        if key not in model.model_fields:
            everything = _valid_keys(run_config_class())
            dotted = prefix + str(key)
            # the same name in another section first, then the closest dotted key, then the closest leaf
            same_leaf = [k for k in everything if k.rsplit(".", 1)[-1] == str(key)]
            close = same_leaf or difflib.get_close_matches(dotted, everything, n=1, cutoff=0.6) or \
                difflib.get_close_matches(str(key), [k.rsplit(".", 1)[-1] for k in everything], n=1, cutoff=0.5)
            hint = ""
            if close:
                match = close[0]
                full = next((k for k in everything if k == match or k.endswith("." + match)), match)
                hint = f" (did you mean '{full}'?)"
            raise UserError(f"unknown config key '{dotted}'{hint}")
        ann = model.model_fields[key].annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            if not isinstance(value, dict):
                raise UserError(f"config key '{prefix}{key}' must be a mapping, got {type(value).__name__}")
            _check_keys(value, ann, prefix + key + ".")


def describe_keys(section: str | None = None) -> str:
    """Every config key (or one section's), each with its default and its one-line description: what
    `cotrain keys` prints.

    Raises:
        UserError: a section the config does not have.
    """
    sections = {name: f for name, f in RunConfig.model_fields.items()
                if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)}
    section = RENAMED_SECTIONS.get(section, section)
    if section is not None and section not in sections:
        close = difflib.get_close_matches(section, [*sections, *RENAMED_SECTIONS], n=1)
        raise UserError(f"no config section {section!r}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                        f"sections: {', '.join(sections)}")
    lines = []
    if section is None:
        lines += [f"{name} = {f.default!r}\n    {f.description}" for name, f in RunConfig.model_fields.items()
                  if name not in sections]
    for name, f in sections.items():
        if section not in (None, name):
            continue
        head = " ".join((f.annotation.__doc__ or "").strip().split("\n\n")[0].split())  # its first paragraph, whole
        lines.append("\n" + textwrap.fill(f"[{name}] {head}", 116, subsequent_indent="    "))
        for key, sub in f.annotation.model_fields.items():
            default = sub.default_factory() if sub.default_factory else sub.default
            lines.append(f"{name}.{key} = {default!r}\n    {sub.description or ''}")
    return "\n".join(lines).strip("\n")


RENAMED_SECTIONS = {"tango": "cotraining"}
"""Sections read under an old name too, {old: new}: every config and command written before the rename
still loads (`cotrain keys tango` shows the section under its new name)."""


def renamed_sections(raw: dict) -> dict:
    """`raw` with each section given under an old name (`RENAMED_SECTIONS`) moved under its new one.

    Raises:
        UserError: one mapping holds a section under both names.
    """
    if not isinstance(raw, dict) or not any(old in raw for old in RENAMED_SECTIONS):
        return raw
    out = dict(raw)
    for old, new in RENAMED_SECTIONS.items():
        if old in out:
            if new in out:
                raise UserError(f"the config has both {old}: and {new}: (the section's new name); merge them into {new}:")
            out[new] = out.pop(old)
    return out


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply `key.sub=value` overrides; values are parsed as YAML scalars/lists. A section's old name
    (`RENAMED_SECTIONS`) is read as its new one, in `raw` and in the keys."""
    raw = renamed_sections(raw)
    for item in overrides:
        if "=" not in item:
            quote = " (quote a value with spaces: 'task={name: jsonl, path: f.jsonl}')" * any(c in item for c in "{}[],:")
            raise UserError(f"override '{item}' is not of the form key.sub=value{quote}")
        key, text = item.split("=", 1)
        try:
            value = yaml.safe_load(text) if text != "" else ""
        except yaml.YAMLError:
            value = text
        except (ValueError, RecursionError) as err:  # a number over Python's digit limit, nesting too deep
            raise UserError(f"override '{key}': {_unreadable(err)}") from None
        node = raw
        parts = key.strip().split(".")
        parts[0] = RENAMED_SECTIONS.get(parts[0], parts[0])
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"override '{key}': '{part}' is not a section")
            node = child
        node[parts[-1]] = value
    return raw


def _format_validation(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    text = repr(got)
    if len(text) > 60:  # a 4,000-digit number is named, not printed
        text = f"{text[:30]}... ({len(text)} characters)"
    shown = f" (got {text})" if where and not isinstance(got, dict) else ""
    return f"invalid config: {where + ': ' if where else ''}{msg}{shown}"


def build_config(raw: dict | None = None, overrides: list[str] | None = None) -> RunConfig:
    raw = apply_overrides(dict(raw or {}), overrides or [])
    if isinstance(raw.get("recipe_module"), str) and raw["recipe_module"]:
        raw["recipe_module"] = register(raw["recipe_module"])  # found again from any directory
    schema = run_config_class()
    _check_keys(raw, schema)
    try:
        return schema.model_validate(raw)
    except ValidationError as err:
        raise UserError(_format_validation(err)) from None


def _unreadable(err: Exception) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply to read"
    return f"unreadable value ({str(err).split(';')[0]})"


def read_yaml_mapping(path: Path, what: str) -> dict:
    """A YAML file that must hold a mapping; every problem is a one-line UserError naming `what`."""
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory, not a YAML file")
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise UserError(f"{what} {path} is not UTF-8 text (byte {data[err.start]:#04x} on line {line}); "
                        "save it as UTF-8") from None
    try:
        raw = yaml.safe_load(text) or {}
    except (ValueError, RecursionError) as err:
        raise UserError(f"{what} {path}: {_unreadable(err)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"bad YAML in {path}{where}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{what} {path} must be a YAML mapping at the top level")
    return raw


def read_json_mapping(path: Path, what: str) -> dict:
    """A JSON file that must hold an object (a run's eval.json, env.json, outcomes.json); every problem is a
    one-line UserError naming `what`."""
    try:
        raw = json.loads(Path(path).read_bytes().decode("utf-8-sig"))
    except OSError as err:
        raise UserError(f"{what} {path} does not open: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at {err.start})") from None
    except (ValueError, RecursionError) as err:
        raise UserError(f"{what} {path} is not JSON: {_unreadable(err) if isinstance(err, RecursionError) else err}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{what} {path} must hold a JSON object at the top level")
    return raw


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (only overrides of the defaults) and apply dotted overrides."""
    raw = read_yaml_mapping(Path(path), "config file") if path is not None else {}
    return build_config(raw, overrides)
