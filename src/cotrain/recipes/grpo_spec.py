"""What `grpo` is beside its loop (recipes/grpo.py), free of torch: its flags and its config section (`curriculum`)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from cotrain.declare import Recipe, Section


class CurriculumConfig(Section):
    """A difficulty schedule for a fixed task source (`grpo`): start easy, move up as accuracy rises."""

    levels: list[dict[str, Any]] = Field([], description=(
        "Task options of each level, easiest first, each overriding task.* (empty: no curriculum)."))
    raise_at: float = Field(0.8, gt=0, le=1, description=(
        "Move to the next level once the training accuracy, averaged over `window` steps, reaches this."))
    window: int = Field(10, ge=1, description="Steps of training accuracy averaged for the level decision.")


RECIPES = {"grpo": Recipe("grpo", vllm=True, control=True, custom_reward=True)}
SECTIONS = {"curriculum": CurriculumConfig}
