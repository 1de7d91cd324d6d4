"""What `consistency` is beside its loop (recipes/consistency.py), free of torch: its flags and its config
section (`consistency`)."""
from __future__ import annotations

from pydantic import Field

from cotrain.declare import CO_TRAINING, Recipe, Section


class ConsistencyConfig(Section):
    """Label-free co-training (`recipe: consistency`): majority-vote pseudo-labels instead of answers."""

    min_share: float = Field(0.5, ge=0, le=1, description=(
        "Smallest share of a group's G samples behind the majority answer for the group to be pseudo-labelled."))
    w_verdict: float = Field(0.5, ge=0, le=1, description=(
        "Generator reward: w_verdict * verifier approval + (1 - w_verdict) * agreement with the majority answer."))


RECIPES = {"consistency": Recipe("consistency", roles=CO_TRAINING, label_free=True, vllm=True,
                                 labels="none (a given verifier)", rewards_every_verdict=True, guarded=True)}
SECTIONS = {"consistency": ConsistencyConfig}
