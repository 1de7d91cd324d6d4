"""What `prime` is beside its loop (recipes/prime.py), free of torch: its flags and its config section (`prime`)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cotrain.declare import Recipe, Section


class PrimeConfig(Section):
    """Implicit process rewards (`recipe: prime`, PRIME): a second model started from the generator's
    start, beside its frozen copy, learns online from outcome labels; its log-ratio is the process reward."""

    beta: float = Field(0.05, gt=0, description="β: process reward r_t = β (log π_prm − log π_ref) (PRIME: 0.05).")
    lr: float = Field(1e-6, gt=0, description="The PRM's learning rate (PRIME: 1e-6 at 7B; the tiny world needs more).")
    prm_init: str | None = Field(None, description=(
        "Start the PRM from this checkpoint instead of the generator's start (its reference stays the generator's)."))
    update: Literal["before", "after", "none"] = Field("before", description=(
        "before: the PRM steps, then scores (PRIME's default); after: it scores in its training pass; none: frozen."))
    prm_coef: float = Field(5.0, ge=0, description="Weight of the process rewards' RLOO in the return (PRIME: 5).")
    gt_coef: float = Field(5.0, ge=0, description="Weight of the outcome's RLOO in the return (PRIME: 5).")
    norm: Literal["batch_norm", "none"] = Field("batch_norm", description=(
        "batch_norm: divide the process rewards by the largest |return| in the batch (PRIME's default)."))
    filter: bool = Field(True, description=(
        "Keep prompts whose samples' accuracy lies within [lower, upper], drawing `oversample` times the prompts first."))
    lower: float = Field(0.2, ge=0, le=1, description="The filter's lower bound (inclusive).")
    upper: float = Field(0.8, ge=0, le=1, description="The filter's upper bound (inclusive).")
    oversample: float = Field(4.0, ge=1, le=64, description="Prompts sampled per prompt kept, with the filter on.")

    @model_validator(mode="after")
    def _check(self):
        if self.lower > self.upper:
            raise ValueError(f"prime.lower ({self.lower}) must be at most prime.upper ({self.upper})")
        return self


RECIPES = {"prime": Recipe("prime", fsdp=False)}
SECTIONS = {"prime": PrimeConfig}
