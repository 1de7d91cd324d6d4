"""PRIME's implicit process reward model scored like a verifier, as pure functions.

Its score of a sample is Σ_t q_t, q_t = log π_prm(y_t) − log π_ref(y_t); of a step, the sum over the
step's tokens (from after the previous step's last token to its own). Reported against the samples'
outcomes and, where the task labels steps (`task.step_labels`), against each step's label: the
process-reward quality a verifier's step verdicts are measured by.
"""
from __future__ import annotations

import numpy as np
import torch

from cotrain.eval.verifier_metrics import mann_whitney_auroc
from cotrain.rl.prime import ranking_accuracy


def step_scores(q: list[float], ends: list[int]) -> list[float]:
    """Each step's summed log-ratio: the tokens after the previous step's last token through its own."""
    out, start = [], 0
    for end in ends:
        out.append(float(sum(q[start:end + 1])))
        start = end + 1
    return out


def _auroc(scores: list[float], positive: list[bool]) -> float | None:
    if not positive or all(positive) or not any(positive):
        return None
    return mann_whitney_auroc(np.array(scores, dtype=float), np.array(positive, dtype=bool))


def prm_metrics(sample_scores: list[float], correct: list[bool], k: int, steps: list[list[float]],
                labels: list[list[bool] | None]) -> dict[str, float]:
    """The PRM's quality from its scores.

    Args:
        sample_scores: each sample's Σ_t q_t; k samples of each problem, contiguous.
        correct: each sample's outcome.
        steps: each sample's step scores; labels: each step's label (True: correct), None where the
            task labels no steps.

    Returns:
        `auroc` (sample scores against outcomes), `ranking_acc` (within each problem's k samples, as
        PRIME's `dpo_acc`), `step_auroc` (step scores against step labels), `first_error_match` (of the
        wrong samples with a false step, the share whose lowest-scored step is the first false one),
        with the counts behind them; a figure that has one class only is left out.
    """
    out: dict[str, float] = {"n": float(len(correct)), "n/correct": float(sum(correct))}
    auroc = _auroc(sample_scores, correct)
    if auroc is not None:
        out["auroc"] = auroc
    if k >= 2 and len(correct) % k == 0:
        out["ranking_acc"] = ranking_accuracy(torch.tensor(sample_scores), torch.tensor(correct, dtype=torch.float), k)
    flat = [(s, lab) for ss, ls in zip(steps, labels) if ls is not None and len(ls) == len(ss) for s, lab in zip(ss, ls)]
    if flat:
        out["n_steps"], out["n_false_steps"] = float(len(flat)), float(sum(not lab for _, lab in flat))
        step_auroc = _auroc([s for s, _ in flat], [lab for _, lab in flat])
        if step_auroc is not None:
            out["step_auroc"] = step_auroc
    matches = [int(np.argmin(ss)) == ls.index(False) for ss, ls, c in zip(steps, labels, correct)
               if not c and ls is not None and len(ls) == len(ss) and False in ls]
    if matches:
        out["first_error_match"], out["n_first_error"] = sum(matches) / len(matches), float(len(matches))
    return out
