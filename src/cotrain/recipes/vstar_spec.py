"""What `vstar` is beside its loop (recipes/vstar.py), free of torch: its flags, its config section (`vstar`) and its
study role."""
from __future__ import annotations

from pydantic import Field, field_validator

from cotrain.declare import CO_TRAINING, Recipe, Section


class VstarConfig(Section):
    """V-STaR (`recipe: vstar`): the generator fine-tuned on its own correct samples, a verifier trained by
    DPO on (correct, incorrect) pairs of the same problem and used to pick the best of N."""

    beta: float = Field(0.1, gt=0, description="β of the verifier's DPO loss (V-STaR: 0.1).")
    pairs_per_problem: int = Field(4, ge=1, le=4096, description=(
        "The most (correct, incorrect) pairs a problem's samples give the verifier per step."))
    verifier_lr: float | None = Field(None, gt=0, description="The verifier's learning rate (default: train.lr).")
    bon: list[int] = Field([1, 4, 16, 64], min_length=1, description=(
        "Best-of-N's N at the end: max(bon) samples of each problem drawn once and subsampled."))
    bon_problems: int = Field(100, ge=1, le=100_000, description="Problems of each eval split in the best-of-N table.")
    bon_verifiers: dict[str, str] = Field({}, description=(
        "Other generative verifiers scored on the same samples, {name: model dir}."))

    @field_validator("bon")
    @classmethod
    def _sane_bon(cls, ns: list[int]) -> list[int]:
        if any(n < 1 or n > 4096 for n in ns):
            raise ValueError(f"vstar.bon counts must lie within 1..4096; got {ns}")
        return sorted(set(ns))


RECIPES = {"vstar": Recipe("vstar", roles=CO_TRAINING, fsdp=False, labels="outcomes (correct and incorrect samples)")}
SECTIONS = {"vstar": VstarConfig}
STUDY_ROLES = {"best_of_n": "vstar"}  # the eval.json section of its best-of-N accuracies, which a study reads
