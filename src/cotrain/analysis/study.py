"""A study's table and figure, built from what `results/<study>/` keeps (runs/archive.py).

Layout read: `<study>/<arm>/seed<S>/{eval.json, metrics.jsonl.gz, env.json}`; the arm named `grpo` is the
baseline every other arm is paired with, seed by seed (cotrain.stats); an arm named `labelfree` is the
label-free arm of the plan's "excellent" criterion, whose gain is read against the start's greedy pass@1
(`<study>/starts/sft/eval.json`, the same problems as the arms' final evaluation); an arm named
`grpo_long` is GRPO run on past the others' steps, read at each arm's FLOPs (equal compute).

    cotrain study results/<study>        prints the table, writes <study>/table.md and <study>/curves.png
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cotrain.analysis.plot import load_metrics
from cotrain.errors import UserError
from cotrain.stats import POINTS, mean_ci95, paired_difference, plan_criteria

BASELINE, LABELFREE, LONG, CURVE = "grpo", "labelfree", "grpo_long", "eval/test/pass@1"


@dataclass
class Run:
    """One archived run: its final evaluation, its in-training curve and the machine it ran on."""

    eval: dict
    steps: list[int] = field(default_factory=list)   # steps of the in-training evaluations
    acc: list[float] = field(default_factory=list)   # greedy pass@1 there (eval.n_during problems)
    flops: list[float] = field(default_factory=list)  # cumulative FLOPs there, warm-up included
    warmup_flops: float = 0.0                          # FLOPs spent before the first generator step
    alpha: float | None = None                         # mean process-reward weight over the steps (tango)
    trust: float | None = None                         # mean reliability r_t over the steps (tango.alpha: auto)
    cpu: str = "?"

    def final(self, split: str) -> float | None:
        return self.eval.get("generator", {}).get(split, {}).get("pass@1")


def load_run(run_dir: Path) -> Run:
    run = Run(json.loads((run_dir / "eval.json").read_text(encoding="utf-8")))
    flops, alphas, trusts = 0.0, [], []
    for row in load_metrics(run_dir):
        flops = row.get("flops/total", flops)
        alphas += [row["gen/alpha"]] if "gen/alpha" in row else []
        trusts += [row["gen/alpha_trust"]] if "gen/alpha_trust" in row else []
        if row.get("step") == 0:
            run.warmup_flops = flops
        if CURVE in row:
            run.steps.append(int(row["step"]))
            run.acc.append(float(row[CURVE]))
            run.flops.append(float(flops))
    run.alpha = sum(alphas) / len(alphas) if alphas else None
    run.trust = sum(trusts) / len(trusts) if trusts else None
    env = run_dir / "env.json"
    if env.is_file():
        e = json.loads(env.read_text(encoding="utf-8"))
        autocast = (e.get("precision") or {}).get("bf16_autocast")
        run.cpu = f"{e.get('cpu', '?')} ({e.get('cpu_capability', '?')}" + (
            "" if autocast is None else ", bf16 autocast" if autocast else ", fp32") + ")"
    return run


def load_study(study_dir: str | Path) -> dict[str, dict[int, Run]]:
    """{arm: {seed: Run}} of every `<arm>/seed<S>/eval.json` under the study; arms sorted, baseline first."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise UserError(f"{study_dir}: no such study directory")
    arms: dict[str, dict[int, Run]] = {}
    for ev in sorted(study_dir.glob("*/seed*/eval.json")):
        arm, seed = ev.parent.parent.name, ev.parent.name.removeprefix("seed")
        if arm != "starts" and seed.isdigit():
            arms.setdefault(arm, {})[int(seed)] = load_run(ev.parent)
    if not arms:
        raise UserError(f"{study_dir}: no finished runs (<arm>/seed<S>/eval.json)")
    return dict(sorted(arms.items(), key=lambda kv: (kv[0] != BASELINE, kv[0])))


def steps_to_reach(steps: list[int], acc: list[float], target: float) -> int | None:
    """The first step whose accuracy is at least `target` (up to float rounding of the means), or None if
    the curve never gets there."""
    return next((s for s, a in zip(steps, acc) if a >= target - 1e-9), None)


def mean_curve(runs: dict[int, Run]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, mean accuracy, CI half-width, mean FLOPs) over the seeds, at the steps every seed evaluated."""
    common = sorted(set.intersection(*(set(r.steps) for r in runs.values())))
    acc, half, flops = [], [], []
    for s in common:
        values = [r.acc[r.steps.index(s)] for r in runs.values()]
        m, h = mean_ci95(values)
        acc.append(m)
        half.append(0.0 if math.isnan(h) else h)
        flops.append(sum(r.flops[r.steps.index(s)] for r in runs.values()) / len(runs))
    return common, acc, half, flops


def at_flops(flops: list[float], acc: list[float], budget: float) -> float | None:
    """The accuracy of the last evaluation whose cumulative FLOPs are within `budget`, or None when the
    curve ends before the budget (it would have to run on) or starts after it."""
    if not flops or flops[-1] < budget:
        return None
    within = [a for f, a in zip(flops, acc) if f <= budget]
    return within[-1] if within else None


def _cell(values: list[float]) -> str:
    m, h = mean_ci95(values)
    return "–" if math.isnan(m) else (f"{m:.3f}" if math.isnan(h) else f"{m:.3f} ± {h:.3f}")


def study_table(arms: dict[str, dict[int, Run]], start: float | None = None) -> str:
    """The study's markdown table: per arm its seeds, final greedy pass@1 (`test`, `ood`; mean ± 95% CI
    half-width), the paired difference with the baseline in points, the steps its mean curve takes to
    reach the baseline's final in-training accuracy, its FLOPs, its mean process-reward weight α (and
    reliability r with `tango.alpha: auto`); then the plan's criteria per arm."""
    base = arms.get(BASELINE)
    target = mean_curve(base)[1][-1] if base and all(r.steps for r in base.values()) else None
    long = mean_curve(arms[LONG]) if LONG in arms and all(r.steps for r in arms[LONG].values()) else None
    lines = ["| arm | seeds | test pass@1 | ood pass@1 | paired vs grpo, test (points) | paired vs grpo, ood | "
             "steps to grpo's final | FLOPs (warm-up) | grpo at these FLOPs (without the warm-up) | mean α (r) | CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    criteria = []
    for arm, runs in arms.items():
        test = {s: r.final("test") for s, r in runs.items() if r.final("test") is not None}
        ood = {s: r.final("ood") for s, r in runs.items() if r.final("ood") is not None}
        d_test = d_ood = None
        if base and arm != BASELINE:
            b_test = {s: r.final("test") for s, r in base.items() if r.final("test") is not None}
            b_ood = {s: r.final("ood") for s, r in base.items() if r.final("ood") is not None}
            if set(b_test) & set(test):
                d_test = paired_difference(b_test, test, POINTS)
            if set(b_ood) & set(ood):
                d_ood = paired_difference(b_ood, ood, POINTS)
        reach = "–"
        if target is not None and all(r.steps for r in runs.values()):
            steps, acc, _, _ = mean_curve(runs)
            hit = steps_to_reach(steps, acc, target)
            reach = "not reached" if hit is None else str(hit)
        flops = sum(r.flops[-1] if r.flops else 0.0 for r in runs.values()) / len(runs)
        warm = sum(r.warmup_flops for r in runs.values()) / len(runs)
        cpus = ", ".join(sorted({r.cpu for r in runs.values()}))
        equal = "–"
        if long is not None and arm not in (BASELINE, LONG):
            # the generator's share alone: GRPO's curve is shifted by no warm-up
            shown = [at_flops(long[3], long[1], budget) for budget in (flops, flops - warm)]
            equal = " (".join("past its end" if x is None else f"{x:.3f}" for x in shown) + ")"
        alphas = [r.alpha for r in runs.values() if r.alpha is not None]
        trusts = [r.trust for r in runs.values() if r.trust is not None]
        alpha = "–" if not alphas else f"{sum(alphas) / len(alphas):.4f}" + (
            f" ({sum(trusts) / len(trusts):.3f})" if trusts else "")
        lines.append(f"| {arm} | {','.join(map(str, sorted(runs)))} | {_cell(list(test.values()))} | "
                     f"{_cell(list(ood.values()))} | {d_test.text() if d_test else '–'} | "
                     f"{d_ood.text() if d_ood else '–'} | {reach} | {flops:.2e} ({warm:.1e}) | {equal} | {alpha} | {cpus} |")
        if d_test is not None and arm not in (LABELFREE, LONG):  # the criteria compare co-training with grpo
            gain = vs = None
            if LABELFREE in arms and start is not None:
                lf = {s: r.final("test") for s, r in arms[LABELFREE].items() if r.final("test") is not None}
                gain = paired_difference({s: start for s in lf}, lf, POINTS)
                if set(lf) & set(test):
                    vs = paired_difference(test, lf, POINTS)
            for c in plan_criteria(d_test, d_ood, gain, vs):
                verdict = {True: "holds", False: "does not hold", None: "cannot say"}[c.holds]
                criteria.append(f"- {arm}, **{c.name}** ({c.rule}): {verdict}; {c.figures}")
    if target is not None:
        lines.append(f"\ngrpo's final in-training accuracy (mean curve): {target:.3f}")
    return "\n".join(lines + ([""] + criteria if criteria else []))


def plot_study(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> None:
    """Accuracy against generator steps and against FLOPs, every arm's mean over seeds with its 95% CI shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, runs in arms.items():
        if not all(r.steps for r in runs.values()):
            continue
        steps, acc, half, flops = mean_curve(runs)
        lo, hi = [a - h for a, h in zip(acc, half)], [a + h for a, h in zip(acc, half)]
        line, = left.plot(steps, acc, label=f"{arm} (n={len(runs)})")
        left.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
        right.plot(flops, acc, color=line.get_color())
        right.fill_between(flops, lo, hi, alpha=0.2, color=line.get_color())
    left.set_xlabel("generator step")
    right.set_xlabel("FLOPs (cumulative, warm-up included)")
    right.set_xscale("log")
    for ax in (left, right):
        ax.set_ylabel("greedy pass@1 (test, in training)")
        ax.grid(alpha=0.3)
    left.legend()
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def build_study(study_dir: str | Path) -> str:
    """Table (printed and written to table.md) and curves.png of a study directory."""
    study_dir = Path(study_dir)
    arms = load_study(study_dir)
    start_eval = study_dir / "starts" / "sft" / "eval.json"
    start = None
    if start_eval.is_file():
        start = json.loads(start_eval.read_text(encoding="utf-8")).get("generator", {}).get("test", {}).get("pass@1")
    text = study_table(arms, start)
    (study_dir / "table.md").write_text(text + "\n", encoding="utf-8")
    plot_study(arms, study_dir / "curves.png", title=study_dir.name)
    return text


def documented(study_dir: str | Path, arm: str, step: int | None = None) -> list[str]:
    """What a study documents of `arm` against grpo, a line each: the paired difference of the final greedy
    pass@1 on `test` and `ood`, and (with `step`) of the in-training accuracy at that step, where both arms
    evaluated it, then the machines the runs ran on. Lines a study cannot give are left out; a study
    without the two arms gives []."""
    arms = load_study(study_dir)
    if arm not in arms or BASELINE not in arms:
        return []
    base, runs = arms[BASELINE], arms[arm]
    lines = []
    for split in ("test", "ood"):
        a = {s: r.final(split) for s, r in base.items() if r.final(split) is not None}
        b = {s: r.final(split) for s, r in runs.items() if r.final(split) is not None}
        if set(a) & set(b):
            d = paired_difference(a, b, POINTS)
            last = max(r.steps[-1] for r in runs.values() if r.steps) if any(r.steps for r in runs.values()) else "?"
            lines.append(f"{arm} − {BASELINE}, greedy pass@1 on {split} after {last} steps: {d.text()} points, "
                         f"{_cell([a[s] for s in d.seeds])} → {_cell([b[s] for s in d.seeds])}")
    if step is not None:
        a = {s: r.acc[r.steps.index(step)] for s, r in base.items() if step in r.steps}
        b = {s: r.acc[r.steps.index(step)] for s, r in runs.items() if step in r.steps}
        if set(a) & set(b):
            d = paired_difference(a, b, POINTS)
            lines.append(f"{arm} − {BASELINE}, in-training pass@1 on test at step {step}: {d.text()} points")
    if lines:
        lines.append("ran on " + ", ".join(sorted({r.cpu for r in [*base.values(), *runs.values()]})))
    return lines


# ---------------------------------------------------------------- worlds: where step verdicts can matter

WORLD_GOALS = (  # (metric of verifier_warmup/<split>, goal, at least?) for a world where step verdicts carry
    ("all_wrong@8", 0.5, True),                        # what the outcome does not: sparse outcomes ...
    ("process/n_failed", 500, True),                    # ... on enough failed samples ...
    ("process/first_false_not_last", 0.5, True),        # ... whose first error is not the last step ...
    ("process/first_rejected_match", 0.7, True),        # ... and that the verifier points to,
    ("balanced_accuracy", 0.9, True),                   # from a verifier that judges the generator's samples
    ("n/correct", 100, True),                           # (on enough of each class)
)
KIND_GOAL = 0.8  # and catches each kind of error


def world_row(name: str, m: dict) -> tuple[str, bool]:
    """One markdown row of a world's measurements at its start (the `verifier_warmup/<split>` metrics of a
    run with no generator steps) and whether it meets every goal of WORLD_GOALS and KIND_GOAL."""
    cells, ok = [name], True
    for key, goal, _ in WORLD_GOALS:
        value = m.get(key)
        met = value is not None and value >= goal
        ok &= met
        cells.append("–" if value is None else (f"{value:.0f}" if value >= 10 else f"{value:.3f}") + ("" if met else " ✗"))
    n_wrong = sum(v for k, v in m.items() if k.startswith("n/") and k != "n/correct")
    cells.insert(-1, f"{n_wrong:.0f}")
    ok &= n_wrong >= 100
    kinds = {k.removeprefix("caught/"): v for k, v in m.items() if k.startswith("caught/") and k != "caught/correct"
             and m.get("n/" + k.removeprefix("caught/"), 0) >= 10}
    worst = min(kinds.items(), key=lambda kv: kv[1]) if kinds else None
    ok &= worst is not None and worst[1] >= KIND_GOAL
    cells.append("–" if worst is None else f"{worst[1]:.3f} ({worst[0]})" + ("" if worst[1] >= KIND_GOAL else " ✗"))
    cells.append("yes" if ok else "no")
    return "| " + " | ".join(cells) + " |", ok


def world_table(worlds_dir: str | Path, split: str = "test") -> str:
    """The measurements of every `<worlds_dir>/<world>/eval.json` against the goals (✗ marks a goal missed;
    error kinds with fewer than 10 samples are left out of the weakest catch)."""
    rows = ["| world | all-wrong groups of 8 (≥ 0.5) | failed samples with a false step (≥ 500) | first false "
            "step not the last (≥ 0.5) | verifier's first rejected step = it (≥ 0.7) | balanced accuracy (≥ 0.9) | "
            "wrong samples (≥ 100) | right samples (≥ 100) | weakest catch by error kind (≥ 0.8) | meets all |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    found = sorted(Path(worlds_dir).glob("*/eval.json"))
    if not found:
        raise UserError(f"{worlds_dir}: no <world>/eval.json")
    for ev in found:
        m = json.loads(ev.read_text(encoding="utf-8")).get("verifier_warmup", {}).get(split, {})
        rows.append(world_row(ev.parent.name, m)[0])
    return "\n".join(rows)
