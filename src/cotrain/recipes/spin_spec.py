"""What `spin` is beside its loop (recipes/spin.py), free of torch: its flags and its config section (`spin`)."""
from __future__ import annotations

from pydantic import Field

from cotrain.declare import Recipe, Section


class SpinConfig(Section):
    """Self-play fine-tuning (`recipe: spin`): the reference solution against the previous iterate's sample."""

    beta: float = Field(0.1, gt=0, description="β of SPIN's logistic loss (SPIN: 0.1).")
    iteration_steps: int = Field(50, ge=1, description=(
        "Optimizer steps per iteration: the opponent is the model as the iteration began, frozen for it."))
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the opponent's synthetic solutions.")


RECIPES = {"spin": Recipe("spin", fsdp=False, labels="reference solutions")}
SECTIONS = {"spin": SpinConfig}
