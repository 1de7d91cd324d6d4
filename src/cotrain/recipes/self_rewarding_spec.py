"""What `self_rewarding` is beside its loop (recipes/self_rewarding.py), free of torch: its flags and its config
section (`self_rewarding`)."""
from __future__ import annotations

from pydantic import Field

from cotrain.declare import Recipe, Section


class SelfRewardingConfig(Section):
    """Self-Rewarding LMs (`recipe: self_rewarding`): the model judges its own samples, its best and worst
    of a problem become a DPO pair, iteration after iteration; the judge is the model itself."""

    beta: float = Field(0.1, gt=0, description="β of the DPO loss (Self-Rewarding: 0.1).")
    iteration_steps: int = Field(50, ge=1, description=(
        "Optimizer steps per iteration: DPO's reference is the model as the iteration began (M_t), frozen."))
    min_gap: float = Field(0.0, ge=0, description=(
        "The least judge-score gap between a problem's best and worst sample for them to make a pair (0: any gap)."))
    rehearse: float = Field(0.5, ge=0, lt=1, description=(
        "Share of each judge warm-up batch (verifier.warmup_sft_steps) that rehearses the generator on "
        "reference solutions: the judge is the generator too."))


RECIPES = {"self_rewarding": Recipe("self_rewarding", fsdp=False, labels="its judge's warm-up: process labels; then none")}
SECTIONS = {"self_rewarding": SelfRewardingConfig}
