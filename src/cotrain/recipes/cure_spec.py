"""What `cure` is beside its loop (recipes/cure.py), free of torch: its flags and its config section (`cure`)."""
from __future__ import annotations

from pydantic import Field

from cotrain.declare import Recipe, Section


class CureConfig(Section):
    """Code co-training (`recipe: cure`, `cure_label_free`): a coder and a unit tester, one model in two
    prompts (CURE's default) or two models."""

    n_tests: int = Field(8, ge=2, description="Unit tests the tester writes per problem (its GRPO group).")
    test_max_new_tokens: int = Field(32, ge=1, description="Length limit of a generated test.")
    post_stage: bool = Field(False, description="CURE's later-stage tester reward: all-or-nothing scales.")
    train_tester: bool = Field(True, description="Train the tester role (false: the coder alone, as GRPO).")
    two_models: bool = Field(False, description=(
        "A separate tester model with its own optimizer (false: one model in two role prompts, CURE's default)."))
    tester_warmup_steps: int = Field(0, ge=0, description=(
        "cure: SFT steps teaching the tester the test notation on ground-truth tests (labels; none in cure_label_free)."))
    eval_problems: int = Field(100, ge=1, description="Problems per split in the final CURE evaluation.")
    eval_codes: int = Field(8, ge=1, description="Codes sampled per problem in the CURE evaluation (Best-of-N's N).")
    eval_tests: int = Field(8, ge=1, description="Tests generated per problem in the CURE evaluation.")


RECIPES = {
    "cure": Recipe("cure", fsdp=False, labels="unit tests; the tester's warm-up: reference tests"),
    "cure_label_free": Recipe("cure", label_free=True, fsdp=False, summary=(
        "CURE without labels: the generated unit tests stand in for the ground-truth ones on the training path."),
        labels="none (generated tests)"),
}
SECTIONS = {"cure": CureConfig}
