"""A study's reading fixed before its runs (`<study>/reading.yaml`): each arm against a baseline, seed by seed on
one machine kind, on the final pass@1 and on the mean in-training pass@1 over a window of steps, read as
holding, not paying, or unresolved by a margin in points.

    baseline: grpo            # the arm every other is read against
    margin: 5                 # points of pass@1
    window: [500, 1000]       # the in-training evaluations at these steps and between, both ends included
    split: test               # the final evaluation's split
    arms: [oracle_step_0.5]   # optional: the arms read (default: every other arm)

An arm HOLDS where, on both measures, its difference is at least the margin with its 95% interval (Student's t
over the seed pairs) above 0; it DOES NOT PAY where the interval's upper end is below the margin on both;
anything else is UNRESOLVED, and the reading says how many seed pairs the arm's own spread would need to
resolve it (`stats.seeds_needed`). A seed whose runs did not both run on one machine kind is not paired.
"""
from __future__ import annotations

import math
from pathlib import Path

from cotrain.config import read_yaml_mapping
from cotrain.errors import UserError
from cotrain.stats import POINTS, mean_ci95, seeds_needed

KEYS = {"baseline", "margin", "window", "split", "arms"}


def read_spec(path: Path) -> dict:
    """reading.yaml, checked: one line and exit 2 (UserError) for anything off."""
    spec = read_yaml_mapping(path, "the study's reading")
    unknown = set(spec) - KEYS
    if unknown or not {"baseline", "margin", "window"} <= set(spec):
        raise UserError(f"{path}: a reading has baseline, margin, window and optionally split and arms "
                        f"(unknown: {', '.join(sorted(map(str, unknown))) or 'none'})")
    window, margin = spec["window"], spec["margin"]
    if not (isinstance(window, list) and len(window) == 2 and all(isinstance(w, int) for w in window)
            and 0 <= window[0] <= window[1]):
        raise UserError(f"{path}: window must be two steps [first, last], got {window!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin <= 100:
        raise UserError(f"{path}: margin must be a number of points in (0, 100], got {margin!r}")
    arms = spec.get("arms")
    if arms is not None and not (isinstance(arms, list) and all(isinstance(a, str) for a in arms)):
        raise UserError(f"{path}: arms must be a list of arm names, got {arms!r}")
    return {"baseline": str(spec["baseline"]), "margin": float(margin), "window": window,
            "split": str(spec.get("split", "test")), "arms": arms}


def window_mean(run, window: list[int]) -> float | None:
    """The mean in-training pass@1 over the evaluations at steps window[0]..window[1], None unless the run
    evaluated at both ends. The final evaluation logs its pass@1 at the last step once more (on `eval.n`
    problems): that row is no in-training evaluation and is left out."""
    points = list(zip(run.steps, run.acc))
    if len(points) >= 2 and points[-1][0] == points[-2][0]:
        points = points[:-1]
    values = [a for s, a in points if window[0] <= s <= window[1]]
    steps = {s for s, _ in points}
    return sum(values) / len(values) if window[0] in steps and window[1] in steps else None


def _pairs(base: dict, runs: dict, value) -> tuple[list[float], list[int]]:
    """Seed-by-seed differences (points) of `value(run)` over the seeds both arms ran on one machine kind."""
    diffs, seeds = [], []
    for seed in sorted(set(base) & set(runs)):
        a, b = value(base[seed]), value(runs[seed])
        if a is not None and b is not None and base[seed].cpu == runs[seed].cpu:
            diffs.append(POINTS * (b - a))
            seeds.append(seed)
    return diffs, seeds


def verdict(measures: list[list[float]], margin: float) -> str:
    """HOLDS, DOES NOT PAY or UNRESOLVED over the measures' seed-by-seed differences, as the module says."""
    if any(len(d) < 2 for d in measures):
        return "UNRESOLVED: fewer than 2 seed pairs"
    stats = [mean_ci95(d) for d in measures]                                      # (mean, half-width)
    if all(m >= margin and m - h > 0 for m, h in stats):
        return "HOLDS"
    if all(m + h < margin for m, h in stats):
        return "DOES NOT PAY"
    needs = []
    for d, (m, _) in zip(measures, stats):
        sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
        room = m if m >= margin else margin - m       # what the half-width must fall below to decide it
        needs.append(seeds_needed(sd, room) if room > 0 else None)
    said = ("no number of seeds (a mean at the margin)" if None in needs else
            f"about {max(needs)} seed pairs at this spread")
    return f"UNRESOLVED: would need {said}"


def _points(x: float) -> str:
    """+1.2; a value that rounds to zero is +0.0, never -0.0."""
    return f"{x + 0.0 if round(x, 1) else 0.0:+.1f}"


def reading_table(arms: dict[str, dict], spec: dict) -> str:
    """The reading of every arm (markdown): each measure's difference with its interval and seeds, and the verdict."""
    base = arms.get(spec["baseline"])
    if base is None:
        raise UserError(f"the reading's baseline {spec['baseline']!r} has no finished runs in this study")
    w0, w1 = spec["window"]
    lines = [f"The reading fixed before the runs: each arm − {spec['baseline']}, seed pairs on one machine kind, in points; "
             f"HOLDS at ≥ +{spec['margin']:g} with the 95% interval above 0 on both measures, DOES NOT PAY with the upper "
             f"end below +{spec['margin']:g} on both.", "",
             f"| arm | final `{spec['split']}` pass@1 | mean pass@1 over steps {w0}-{w1} | reading |", "|---|---|---|---|"]
    for arm in spec["arms"] or [a for a in arms if a != spec["baseline"]]:
        if arm not in arms:
            lines.append(f"| {arm} | no finished runs | | |")
            continue
        cells, measures = [], []
        for value in (lambda r: r.final(spec["split"]), lambda r: window_mean(r, spec["window"])):
            diffs, seeds = _pairs(base, arms[arm], value)
            measures.append(diffs)
            if not diffs:
                cells.append("no pair")
                continue
            mean, half = mean_ci95(diffs)
            ci = f" [{_points(mean - half)}, {_points(mean + half)}]" if len(diffs) > 1 else ""
            cells.append(f"{_points(mean)}{ci} (seeds {', '.join(map(str, seeds))})")
        lines.append(f"| {arm} | {cells[0]} | {cells[1]} | {verdict(measures, spec['margin'])} |")
    return "\n".join(lines)
