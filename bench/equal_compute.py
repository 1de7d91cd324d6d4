"""Co-training against GRPO at equal compute, from the runs of `configs/sweeps/compare.yaml`.

Every run logs its cumulative estimated training FLOPs (`flops/total`: 2N per token run forward, 6N
per token trained, for every role, the verifier's warm-up included) and, every `eval.every` steps,
greedy pass@1 on held-out `test` problems (`eval/test/pass@1`, the same problems for every run). For
each seed, the GRPO run's final FLOPs F is the budget; each other run's pass@1 at F is read off its
curve by linear interpolation between the evaluations around F (or reported as not reached, when its
first evaluation already cost more). The same is reported with the verifier's warm-up left out of
the budget (FLOPs counted from step 1).

Run:  python bench/equal_compute.py runs/compare
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

KEY = "eval/test/pass@1"


def curve(run_dir: Path, from_step_1: bool) -> list[tuple[float, float]]:
    """(FLOPs, pass@1) at each in-training evaluation (FLOPs from step 1 when `from_step_1`)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    base = 0.0
    if from_step_1:
        base = next((r["flops/total"] for r in rows if r.get("step") == 0 and "flops/total" in r), 0.0)
    flops, points = base, []
    for r in rows:
        flops = r.get("flops/total", flops)
        if KEY in r and r.get("step", 0) > 0:
            points.append((flops - base, r[KEY]))
    return points


def at(points: list[tuple[float, float]], budget: float) -> float | None:
    """pass@1 at `budget` FLOPs by linear interpolation; None when the first point costs more."""
    if not points or points[0][0] > budget:
        return None
    for (f0, a0), (f1, a1) in zip(points, points[1:]):
        if f0 <= budget <= f1:
            return a0 + (a1 - a0) * (budget - f0) / max(f1 - f0, 1e-9)
    return points[-1][1]  # budget beyond the run: its last evaluation


def main(sweep_dir: str) -> None:
    root = Path(sweep_dir)
    recipes = sorted(d.name.split("=", 1)[1] for d in root.glob("recipe=*"))
    seeds = sorted({p.name for r in recipes for p in (root / f"recipe={r}").glob("seed*") if p.is_dir()})
    for from_step_1 in (False, True):
        print(f"\n{'budget: FLOPs from step 1 (warm-up excluded)' if from_step_1 else 'budget: all FLOPs'}")
        print("| recipe | " + " | ".join(seeds) + " | mean |")
        print("|---" * (len(seeds) + 2) + "|")
        budgets = {s: curve(root / "recipe=grpo" / s, from_step_1)[-1][0] for s in seeds
                   if (root / "recipe=grpo" / s / "metrics.jsonl").is_file()}
        for r in recipes:
            vals = []
            for s in seeds:
                path = root / f"recipe={r}" / s
                if s not in budgets or not (path / "metrics.jsonl").is_file():
                    vals.append(None)
                    continue
                vals.append(at(curve(path, from_step_1), budgets[s]))
            shown = ["not reached" if v is None else f"{v:.3f}" for v in vals]
            got = [v for v in vals if v is not None]
            mean = f"{statistics.mean(got):.3f}" if got else "–"
            print(f"| {r} | " + " | ".join(shown) + f" | {mean} |")
        print("GRPO budgets (FLOPs): " + ", ".join(f"{s} {b:.3g}" for s, b in budgets.items()))
        for r in recipes:
            finals = [curve(root / f"recipe={r}" / s, from_step_1)[-1][0] for s in seeds
                      if (root / f"recipe={r}" / s / "metrics.jsonl").is_file()]
            if finals:
                ratio = statistics.mean(finals) / statistics.mean(budgets.values()) if budgets else math.nan
                print(f"  {r}: final FLOPs {statistics.mean(finals):.3g} ({ratio:.2f}x GRPO)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/compare")
