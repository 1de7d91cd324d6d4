"""A judge's label-free reliability as pure functions, for the `reliability` recipe: the proposer is
rewarded for questions whose answers the judge evaluates reliably.

- The signals (`reliability_signals`): consistency across passes, separation of strong from weak
  answers, and stable pairwise preferences (`preference_stability`, the preferences read off
  pointwise scores by `pairwise_from_pointwise` unless the judge states them).
- What they decide: the proposer's reward (`reliability_reward`) and whether the solver trains on a
  question (`passes_thresholds`).

Shape letters: C candidate answers, P judging passes, n pairs.
"""
from __future__ import annotations

import torch


def preference_stability(prefs: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of the fraction of passes that agree with the pair's modal preference.

    Args:
        prefs: [n, P] preferences in {-1, 0, 1} (j preferred / tie / i preferred), P >= 1; any other
            value (a judgment that stated none) is counted in P but never forms the mode.

    Returns:
        A 0-dim tensor in [1/3, 1]; 1.0 when there are no pairs.
    """
    assert prefs.ndim == 2, "prefs must be [n_pairs, n_passes]"
    if prefs.shape[0] == 0:
        return torch.tensor(1.0)
    assert prefs.shape[1] > 0, "every pair needs at least one pass"
    counts = torch.stack([(prefs == v).sum(dim=1) for v in (-1, 0, 1)], dim=1)     # [n, 3]
    return (counts.max(dim=1).values.float() / prefs.shape[1]).mean()


def pairwise_from_pointwise(scores: torch.Tensor) -> torch.Tensor:
    """Per-pass preferences sign(s_i - s_j) of every pair i < j, in order (0,1), (0,2), ..., (1,2), ...

    Args:
        scores: [C, P] pointwise scores.

    Returns:
        [C*(C-1)/2, P] float tensor of -1 / 0 / 1.
    """
    assert scores.ndim == 2, "scores must be [n_candidates, n_passes]"
    i, j = torch.triu_indices(scores.shape[0], scores.shape[0], offset=1)          # row-major: (0,1), (0,2), ...
    return torch.sign(scores[i] - scores[j]).float()                               # [n, P]


def reliability_signals(scores: torch.Tensor, strong: torch.Tensor, prefs: torch.Tensor | None = None
                        ) -> dict[str, float]:
    """Label-free reliability of a judge from its scores of candidate answers over several passes.

    Args:
        scores: [C, P] judge scores in [0, 1].
        strong: [C] bool, the candidate comes from the strong sampling regime.
        prefs: [n, P] pairwise preferences; by default derived from the scores.

    Returns:
        {"cons": 1 - mean over candidates of the population variance over passes,
         "sep": mean score of strong candidates - mean score of weak ones (0.0 if either is empty),
         "stab": preference_stability(prefs)}, as Python floats.
    """
    assert scores.ndim == 2 and strong.shape == (scores.shape[0],), "scores [C, P], strong [C]"
    scores = scores.float()
    strong = strong.bool()
    cons = 1.0 - scores.var(dim=1, unbiased=False).mean().item() if scores.shape[0] else 1.0
    if strong.any() and (~strong).any():
        sep = (scores[strong].mean() - scores[~strong].mean()).item()
    else:
        sep = 0.0
    stab = preference_stability(prefs if prefs is not None else pairwise_from_pointwise(scores)).item()
    return {"cons": cons, "sep": sep, "stab": stab}


def reliability_reward(signals: dict[str, float], weights: dict[str, float]) -> float:
    """sum_k weights[k] * signals[k] over the keys of weights.

    Args:
        signals: e.g. the output of reliability_signals.
        weights: a weight per signal used; a key missing from signals raises KeyError.

    Returns:
        The weighted sum.
    """
    return sum(w * signals[k] for k, w in weights.items())


def passes_thresholds(signals: dict[str, float], thresholds: dict[str, float]) -> bool:
    """Whether signals[k] >= thresholds[k] for every key of thresholds.

    Args:
        signals: e.g. the output of reliability_signals.
        thresholds: a minimum per signal checked; a key missing from signals raises KeyError.

    Returns:
        True when every threshold is met (also when there are none).
    """
    return all(signals[k] >= t for k, t in thresholds.items())
