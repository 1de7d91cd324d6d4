"""A study's table (`cotrain study results/<study>`): the plan's criteria for each arm, what each arm cost, and
`build_study`, which writes `table.md`, `curves.png` and `differences.png`."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cotrain.lab.reading import read_spec, reading_table
from cotrain.lab.figures import plot_differences, plot_study
from cotrain.lab.judges import best_of_n_by_arm, bon_table, judge_table, plot_bon, plot_judge
from cotrain.lab.pairing import (
    HOME,
    SECOND_HALF,
    VERDICT,
    ceiling_table,
    cross_machine_pairs,
    final_values,
    home_baseline,
    kinds_table,
    larger_table,
    resolution,
    runs_alike,
    vs_grpo,
)
from cotrain.lab.runs import (
    AUTO,
    BASELINE,
    LABELFREE,
    LONG,
    SCHEDULE,
    Run,
    add_shared_warmups,
    at_equal_samples,
    at_flops,
    build_start,
    cell,
    load_study,
    mean_alpha,
    mean_curve,
    step_seconds,
    steps_to_reach,
)
from cotrain.registry import RECIPES, STUDY
from cotrain.stats import POINTS, Criterion, Paired, auto_criteria, paired_difference, plan_criteria


def study_criteria(arms: dict[str, dict[int, Run]], start: float | None = None) -> list[tuple[str, Criterion]]:
    """The plan's criteria (`stats.plan_criteria`) of each co-training arm (not the grpo and sft controls)
    against grpo (`vs_grpo`: GRPO on each seed's own machine kind where it ran there), and `cotraining.alpha:
    auto`'s two rules for its arm, as (arm, criterion) in the study's order of arms. The label-free gain needs
    the start's `test` pass@1 (`start`); label-free against the arm pairs the seeds both ran on one machine kind."""
    out = []
    for arm, runs in arms.items():
        (d_test, note), (d_ood, ood_note) = vs_grpo(arms, arm, "test"), vs_grpo(arms, arm, "ood")
        single = all(r.recipe in RECIPES and RECIPES[r.recipe].control for r in runs.values())  # grpo_long, sft: controls
        if d_test is None or arm == LABELFREE or single:  # the criteria compare co-training with grpo
            continue
        test = final_values(runs, "test")
        gain = vs = None
        if LABELFREE in arms and start is not None:
            lf = final_values(arms[LABELFREE], "test")
            gain = paired_difference({s: start for s in lf}, lf, POINTS)
            alike = {s for s in set(lf) & set(test) if runs_alike(arms[LABELFREE][s], runs[s])}
            if alike:
                vs = paired_difference({s: test[s] for s in alike}, {s: lf[s] for s in alike}, POINTS)
        extra = auto_criteria(d_test, mean_alpha(runs), mean_alpha(arms.get(SCHEDULE, {}))) if arm == AUTO else []
        notes = {"minimum": note, "good": note, "great": ood_note}
        out += [(arm, replace(c, figures=c.figures + notes.get(c.name, ""))) for c in plan_criteria(d_test, d_ood, gain, vs, arm) + extra]
    return out


CHECKERS = (  # (eval.json section, metric, what it is): the first a run has is its checker's quality
    ("verifier", "balanced_accuracy", "verifier's balanced accuracy"),
    ("judge", "balanced_accuracy", "judge's balanced accuracy"),
    ("prm", "auroc", "implicit PRM's AUROC"),
)


def checker_quality(runs: dict[int, Run]) -> str:
    """The quality of the arm's verifier, judge or implicit PRM on its final generator's `test` samples
    (mean ± 95% CI over seeds), or V-STaR's best-of-N at the largest N against a random pick; "–" where
    the arm has none."""
    for section, metric, what in CHECKERS:
        values = [r.eval.get(section, {}).get("test", {}).get(metric) for r in runs.values()]
        values = [v for v in values if isinstance(v, (int, float))]
        if values:
            return f"{what} {cell(values)}"
    bon = [r.eval.get(STUDY.best_of_n, {}).get("test", {}) for r in runs.values()]
    ns = sorted({int(k.split("/")[0][4:]) for b in bon for k in b if k.startswith("bon@") and k.endswith("/vstar")})
    if ns:
        n = ns[-1]
        picked = [b[f"bon@{n}/vstar"] for b in bon if f"bon@{n}/vstar" in b]
        rand = [b[f"bon@{n}/random"] for b in bon if f"bon@{n}/random" in b]
        return f"V-STaR verifier's best of {n} {cell(picked)} (random pick {cell(rand)})"
    return "–"


def role_compute(runs: dict[int, Run]) -> str:
    """Each role's compute at the end of training (eval.json `compute`, means over seeds): its FLOPs and
    the tokens through it (run forward to sample or score, plus trained on), e.g. "gen 2.3e+12 (627k);
    ver 3.7e+12 (1,683k)"; the shared warm-up a study adds is not in it. "–" where no run recorded any."""
    roles: dict[str, list[tuple[float, float]]] = {}
    for r in runs.values():
        for role, c in (r.eval.get("compute") or {}).items():
            if role != "total" and isinstance(c, dict) and "flops" in c:
                through = float(c.get("tokens_forward", 0)) + float(c.get("tokens_trained", 0))
                roles.setdefault(role, []).append((float(c["flops"]), through))
    if not roles:
        return "–"
    cells = []
    for role, rows in roles.items():
        flops, through = (sum(x) / len(rows) for x in zip(*rows))
        cells.append(f"{role} {flops:.1e} ({through / 1e3:,.0f}k)")
    return "; ".join(cells)


MARK = "‡"


def _paired_cell(d: Paired | None, note: str) -> str:
    return "–" if d is None else d.text() + (f" {MARK}" if note else "")


def _home_target(arms: dict[str, dict[int, Run]], arm: str) -> float | None:
    """GRPO's final in-training accuracy (mean curve) over the runs `home_baseline` reads `arm`'s seeds
    against: its runs on each seed's own machine kind; None where one of them has no curve."""
    _, names = home_baseline(arms, arm)
    runs = {s: arms[name][s] for s, name in names.items()}
    return mean_curve(runs)[1][-1] if runs and all(r.steps for r in runs.values()) else None


def study_table(arms: dict[str, dict[int, Run]], start: float | None = None) -> str:
    """The study's markdown table: per arm its seeds, final greedy pass@1 (`test`, `ood`; mean ± 95% CI
    half-width), the paired difference with the baseline in points, the steps its mean curve takes to
    reach the baseline's final in-training accuracy (GRPO's on each seed's own machine kind where the paired
    difference reads it, `vs_grpo`), its FLOPs, its mean process-reward weight α (and
    reliability r with `cotraining.alpha: auto`), its gain over the start's `test` pass@1 (`start`, where
    known; a run from another committed start, a judge's warm-up, against that one's); then the plan's
    criteria per arm."""
    base = arms.get(BASELINE)
    target = mean_curve(base)[1][-1] if base and all(r.steps for r in base.values()) else None
    long = mean_curve(arms[LONG]) if LONG in arms and all(r.steps for r in arms[LONG].values()) else None
    at_home = False
    lines = ["| arm | seeds | test pass@1 | ood pass@1 | paired vs grpo, test (points) | paired vs grpo, ood | "
             "steps to grpo's final | in-training pass@1, 2nd half: paired vs grpo | FLOPs (warm-up) | "
             "grpo at these FLOPs (without the warm-up) | mean α (r) | gain over the start (points) | CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        test = final_values(runs, "test")
        ood = final_values(runs, "ood")
        (d_test, t_note), (d_ood, o_note), (d_half, h_note) = (vs_grpo(arms, arm, w) for w in ("test", "ood", SECOND_HALF))
        at_home |= bool(t_note or o_note or h_note)
        reach = "–"
        if target is not None and all(r.steps for r in runs.values()):
            steps, acc, _, _ = mean_curve(runs)
            goal = _home_target(arms, arm) if t_note else target
            hit = None if goal is None else steps_to_reach(steps, acc, goal)
            reach = "–" if goal is None else ("not reached" if hit is None else str(hit)) + (f" {MARK}" if t_note else "")
        flops = sum(r.flops[-1] if r.flops else 0.0 for r in runs.values()) / len(runs)
        warm = sum(r.warmup_flops for r in runs.values()) / len(runs)
        cpus = ", ".join(sorted({r.cpu for r in runs.values()}))
        equal = "–"
        if long is not None and arm not in (BASELINE, LONG):
            # the generator's share alone: GRPO's curve is shifted by no warm-up
            per_step = long[3][-1] / long[0][-1] if long[0][-1] else 0.0
            shown = []
            for budget in (flops, flops - warm):
                x = at_flops(long[3], long[1], budget)
                shown.append(f"{x:.3f}" if x is not None else
                             f"past its end: ≈{budget / per_step:,.0f} steps" if per_step else "past its end")
            equal = " (".join(shown) + ")"
        alphas = [r.alpha for r in runs.values() if r.alpha is not None]
        trusts = [r.trust for r in runs.values() if r.trust is not None]
        alpha = "–" if not alphas else f"{sum(alphas) / len(alphas):.4f}" + (
            f" ({sum(trusts) / len(trusts):.3f})" if trusts else "")
        own = {s: runs[s].start if runs[s].start is not None else start for s in test}  # e.g. a judge's warm-up
        over = paired_difference(own, test, POINTS).text() if test and None not in own.values() else "–"
        lines.append(f"| {arm} | {','.join(map(str, sorted(runs)))} | {cell(list(test.values()))} | "
                     f"{cell(list(ood.values()))} | {_paired_cell(d_test, t_note)} | "
                     f"{_paired_cell(d_ood, o_note)} | {reach} | {_paired_cell(d_half, h_note)} | {flops:.2e} ({warm:.1e}) | "
                     f"{equal} | {alpha} | {over} | {cpus} |")
    criteria = [f"- {arm}, **{c.name}** ({c.rule}): {VERDICT[c.holds]}; {c.figures}"
                for arm, c in study_criteria(arms, start)]
    lines += ["", "| arm | recipe | labels its training reads | its checker at the end (test) | "
              "FLOPs by role (tokens through it) | generator tokens sampled (grpo's accuracy at as many) | "
              "seconds a step |", "|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        recipes = sorted({r.recipe for r in runs.values()})
        labels = sorted({RECIPES[r].labels for r in recipes if r in RECIPES}) or ["?"]
        sources = sorted({r.verifier_source for r in runs.values()} - {"model"})
        if sources:  # the oracle reads the task's labels in training: its verdicts are process labels
            labels = [f"outcomes; process labels (verifier.source: {', '.join(sources)})"]
        lines.append(f"| {arm} | {', '.join(recipes)} | {'; '.join(labels)} | {checker_quality(runs)} | "
                     f"{role_compute(runs)} | {at_equal_samples(arms, arm)} | {step_seconds(runs)} |")
    if target is not None:
        lines.append(f"\ngrpo's final in-training accuracy (mean curve): {target:.3f}")
    if at_home:
        lines.append(f"\n{MARK} {HOME}: a seed of the arm ran on another machine kind than {BASELINE}'s, and GRPO ran "
                     f"every paired seed on its own machine kind too (which run, below; the criteria read the same)")
    apart = cross_machine_pairs(arms)
    return "\n".join(lines + ([""] + apart if apart else []) + ([""] + criteria if criteria else []))


def build_study(study_dir: str | Path) -> str:
    """Table (printed and written to table.md) and curves.png of a study directory; where an arm measured
    best-of-N (V-STaR), its table follows and bon.png draws it."""
    study_dir = Path(study_dir)
    arms = load_study(study_dir)
    add_shared_warmups(arms, study_dir)
    text = study_table(arms, build_start(study_dir))
    if (study_dir / "reading.yaml").is_file():  # the reading fixed before the runs comes first
        text = reading_table(arms, read_spec(study_dir / "reading.yaml")) + "\n\n" + text
    picks = best_of_n_by_arm(arms)
    if picks:
        text += "\n\nBest of N samples against N (`test`, the final generator; mean ± 95% CI over seeds):\n\n"
        text += bon_table(picks)
        plot_bon(picks, study_dir / "bon.png", title=study_dir.name)
    judged = {arm: runs for arm, runs in arms.items() if all(r.agree for r in runs.values())}
    if judged:
        text += ("\n\nThe judge's agreement with the truth over training (its verdicts on the generator's samples, "
                 "each seed's mean over a window of steps; mean ± 95% CI over seeds):\n\n" + judge_table(judged))
        plot_judge(judged, study_dir / "judge.png", title=study_dir.name)
    shares = ceiling_table(arms)
    if shares:
        text += ("\n\nThe share of its ceiling each verifier captures: its lead over grpo against the lead of the "
                 "oracle under the same construction and α, seeds paired on one machine kind (Fieller's 95% interval):\n\n" + shares)
    if reach := resolution(arms):
        text += "\n\n" + reach
    if together := kinds_table(arms):
        text += ("\n\nOne setting run on several machine kinds, each pair against GRPO on its own kind. Pairs of one seed "
                 "share their start, their problems in one order and their first steps' samples, so the interval over "
                 "the pairs is narrower than its seeds allow; read the one over seeds:\n\n" + together)
    if again := larger_table(arms):
        text += ("\n\nThe final models evaluated again on more problems (`<run>/larger/`), each seed against the GRPO "
                 "run the table pairs it with:\n\n" + again)
    (study_dir / "table.md").write_text(text + "\n", encoding="utf-8")
    plot_study(arms, study_dir / "curves.png", title=study_dir.name)
    plot_differences(arms, study_dir / "differences.png", title=study_dir.name)
    return text


def documented(study: str | Path | dict, arm: str, step: int | None = None) -> list[str]:
    """What a study (its directory, or its runs as `load_study` reads them) documents of `arm` against grpo, a line
    each: the paired difference of the final greedy pass@1 on `test` and `ood`, and (with `step`) of the in-training
    accuracy at that step, where both arms evaluated it, then the machines the runs ran on. Lines a study cannot
    give are left out; a study without the two arms gives []."""
    arms = study if isinstance(study, dict) else load_study(study)
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
                         f"{cell([a[s] for s in d.seeds])} → {cell([b[s] for s in d.seeds])}")
    if step is not None:
        a = {s: r.acc[r.steps.index(step)] for s, r in base.items() if step in r.steps}
        b = {s: r.acc[r.steps.index(step)] for s, r in runs.items() if step in r.steps}
        if set(a) & set(b):
            d = paired_difference(a, b, POINTS)
            lines.append(f"{arm} − {BASELINE}, in-training pass@1 on test at step {step}: {d.text()} points")
    if lines:
        lines.append("ran on " + ", ".join(sorted({r.cpu for r in [*base.values(), *runs.values()]})))
    return lines
