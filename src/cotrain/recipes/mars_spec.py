"""What `mars` is beside its loop (recipes/mars.py), free of torch: its flags and its config section (`mars`)."""
from __future__ import annotations

from pydantic import Field

from cotrain.declare import Recipe, Section


class MarsConfig(Section):
    """Multi-agent GRPO (`recipe: mars`, MARS): a planner writes a solution's operations, a worker carries
    out one per call; both share the trajectory's reward, each normalised within its own group."""

    plan: bool = Field(True, description=(
        "false: the empty-plan ablation: no planner; the worker chooses each operation itself, called as many "
        "times as the reference solution has steps."))
    two_models: bool = Field(False, description=(
        "A planner model of its own (a copy of the run's start, its own optimizer at train.lr); false: one "
        "model in two role prompts (MARS's default)."))
    balance: bool = Field(True, description=(
        "Advantage-weighted balanced sampling of the worker's samples (false: every worker sample trains)."))
    worker_max_new_tokens: int = Field(24, ge=1, le=4096, description="Length limit of one worker step.")
    warmup_steps: int = Field(0, ge=0, le=1_000_000, description=(
        "SFT steps teaching the roles their formats from reference solutions, checkpointed as step 0."))
    warmup_batch_size: int = Field(32, ge=2, le=65536, description="Examples per warm-up step.")
    warmup_lr: float = Field(1e-3, gt=0, description="Learning rate of the warm-up (constant after 10 steps).")


RECIPES = {"mars": Recipe("mars", fsdp=False, labels="outcomes; the roles' warm-up: reference solutions")}
SECTIONS = {"mars": MarsConfig}
