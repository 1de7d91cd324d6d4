"""What a recipe declares beside its loop, free of torch: its flags (`Recipe`: what the config may ask of it,
which models `cotrain check` builds) and the base of its config section (`Section`: unknown keys refused,
sizes bounded). Each recipe's declaration is `recipes/<module>_spec.py`; the registry reads it, and config.py
builds the run config from the sections declared there."""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, field_validator

MAX_COUNT = 10**9
"""The largest step, size or token count a config may ask for: no run on any machine gets near it, and a
larger one (10**4000, say) would only fail deep inside torch or numpy."""


def too_large(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) > MAX_COUNT
    if isinstance(value, (list, tuple)):
        return any(too_large(v) for v in value)
    if isinstance(value, dict):
        return any(too_large(v) for v in value.values())
    return False


class Section(BaseModel):
    """A config section: its keys are its fields, each with a default and a one-sentence description."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value, info):
        if info.field_name != "seed" and too_large(value):
            raise ValueError(f"must be at most {MAX_COUNT:,} in size")
        return value


@dataclass(frozen=True)
class Recipe:
    module: str                 # recipes/<module>.py runs it
    roles: tuple[str, ...] = ("generator",)  # the roles it trains (`cotrain check` builds their models)
    label_free: bool = False    # its training path never sees a ground-truth answer
    vllm: bool = False          # its generator's rollouts can run on a vLLM engine (rollout.engine: vllm)
    fsdp: bool = True           # it supports train.fsdp
    summary: str | None = None  # a variant's own line (else the first line of its file's docstring)
    labels: str = "outcomes"    # the labels its training reads (the comparison tables' column)
    step_verdicts: bool = False  # its generator's process reward reads step verdicts (verifier.source can stand in)
    control: bool = False       # it trains one model on labels alone: a study's control, never a co-training arm
    groups: bool = True         # it samples groups of completions (grpo.group_size divides its batch); sft does not
    rewards_every_verdict: bool = False  # its reward reads the verifier's verdict on every sample (verify_groups: all)
    guarded: bool = False       # the safeguard (safeguard.enabled) can guard it
    custom_reward: bool = False  # its training reward can be a user's function (task.reward)


CO_TRAINING = ("generator", "verifier")
SELF_PLAY = ("proposer", "solver", "judge")  # the solver is the generator; one model may play all three
