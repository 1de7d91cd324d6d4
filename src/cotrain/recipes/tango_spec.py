"""What `tango` is beside its loop (recipes/tango.py), free of torch: its flags."""
from __future__ import annotations

from cotrain.declare import CO_TRAINING, Recipe

RECIPES = {
    "tango": Recipe("tango", roles=CO_TRAINING, vllm=True, labels="outcomes; the verifier's warm-up: process labels",
                    step_verdicts=True),
    "frozen_verifier": Recipe("tango", roles=CO_TRAINING, vllm=True, summary=(
        "RL Tango's baseline: the verifier warmed up, then frozen; only the generator trains."),
        labels="outcomes; the verifier's warm-up: process labels", step_verdicts=True),
}
