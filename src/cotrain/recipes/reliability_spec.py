"""What `reliability` is beside its loop (recipes/reliability.py), free of torch: its flags and its config
section (`reliability`)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from cotrain.declare import SELF_PLAY, Recipe, Section


class ReliabilityConfig(Section):
    """Reliability-guided task generation (`recipe: reliability`): questions rewarded where the judge is reliable."""

    n_strong: int = Field(2, ge=1, description="Candidates per question from the strong regime (low temperature).")
    strong_temperature: float = Field(0.3, gt=0, description="Sampling temperature of the strong regime.")
    n_weak: int = Field(2, ge=0, description="Candidates per question from the weak regime (high temperature).")
    weak_temperature: float = Field(1.5, gt=0, description="Sampling temperature of the weak regime.")
    n_old: int = Field(2, ge=0, description="Weak candidates from the solver's start checkpoint (temperature 1).")
    n_best_of: int = Field(0, ge=0, description=(
        "Strong candidates chosen best-of-N: of `best_of` samples, one that gives their majority answer."))
    best_of: int = Field(4, ge=2, description="N of the best-of-N strong regime.")
    weights: dict[str, float] = Field({"cons": 1.0, "sep": 1.0, "stab": 1.0}, description=(
        "Proposer reward: weighted sum of the reliability signals cons, sep, stab."))
    thresholds: dict[str, float] = Field({"cons": 0.85, "sep": 0.1, "stab": 0.7}, description=(
        "The solver trains only on questions with every signal at or above these."))
    filter: bool = Field(True, description="Train the solver only on questions above the thresholds (false: on all).")
    pairwise: bool = Field(False, description=(
        "R_stab from pairwise judgments, two candidates shown at once (false: from the pointwise scores)."))
    pairs_per_question: int = Field(0, ge=0, description=(
        "With pairwise: the candidate pairs judged per question, drawn at random (0: all C(C-1)/2)."))
    solver_loss: Literal["dpo", "pg", "rank"] = Field("dpo", description=(
        "Solver update: DPO on (best, worst) judged candidates, policy gradient on judge scores, or a ranking loss."))
    dpo_beta: float = Field(0.1, gt=0, description="DPO temperature beta.")
    min_gap: float = Field(0.3, ge=0, description="Smallest judge-score gap of a DPO pair.")
    invalid_reward: float = Field(-0.5, description="Proposer reward of a parsable question outside the limits.")
    malformed_reward: float = Field(-1.0, description="Proposer reward of an unparsable question.")

    @model_validator(mode="after")
    def _check(self):
        for name, d in (("weights", self.weights), ("thresholds", self.thresholds)):
            unknown = set(d) - {"cons", "sep", "stab"}
            if unknown:
                raise ValueError(f"reliability.{name}: unknown signal {sorted(unknown)[0]!r} (valid: cons, sep, stab)")
        return self


RECIPES = {"reliability": Recipe("reliability", roles=SELF_PLAY, label_free=True, fsdp=False, labels="none", guarded=True)}
SECTIONS = {"reliability": ReliabilityConfig}
