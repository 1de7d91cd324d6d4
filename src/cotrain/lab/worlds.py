"""The worlds and the verifiers' warm-ups measured against their goals, and a verifier's quality on a study's runs."""
from __future__ import annotations

import json
from pathlib import Path

from cotrain.errors import UserError
from cotrain.eval.verifier_metrics import sound_balanced_accuracy, whole_verdict_errors
from cotrain.lab.pairing import VERDICT
from cotrain.lab.runs import cell, load_study, read_jsonl_gz
from cotrain.stats import POINTS, paired_difference


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


def _evals(directory: str | Path, what: str) -> list[tuple[str, dict]]:
    """(name, eval.json) of every `<directory>/<name>/eval.json`, sorted by name."""
    found = sorted(Path(directory).glob("*/eval.json"))
    if not found:
        raise UserError(f"{directory}: no <{what}>/eval.json")
    return [(ev.parent.name, json.loads(ev.read_text(encoding="utf-8"))) for ev in found]


def world_table(worlds_dir: str | Path, split: str = "test") -> str:
    """The measurements of every `<worlds_dir>/<world>/eval.json` against the goals (✗ marks a goal missed;
    error kinds with fewer than 10 samples are left out of the weakest catch)."""
    rows = ["| world | all-wrong groups of 8 (≥ 0.5) | failed samples with a false step (≥ 500) | first false "
            "step not the last (≥ 0.5) | verifier's first rejected step = it (≥ 0.7) | balanced accuracy (≥ 0.9) | "
            "wrong samples (≥ 100) | right samples (≥ 100) | weakest catch by error kind (≥ 0.8) | meets all |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in _evals(worlds_dir, "world"):  # the warmed-up verifier's, or the oracle's measurement
        rows.append(world_row(name, (data.get("verifier_warmup") or data.get("oracle") or {}).get(split, {}))[0])
    return "\n".join(rows)


START_GOAL = 0.85     # a warmed-up verifier judges the generator's whole samples at this balanced accuracy ...


START_KIND_GOAL = 0.8  # ... and rejects at least this share of each kind of false step (with >= 10 of the kind)


def warmup_row(name: str, m: dict, injected: dict) -> tuple[str, bool | None]:
    """One markdown row of a verifier warm-up's measurements (eval.json `verifier_warmup`: `test`, the
    generator's own samples, and `test_injected`) and whether it meets START_GOAL and START_KIND_GOAL:
    None where the step verdicts by fault were not measured (an older run) and the whole verdicts meet
    their goal, so the row cannot say."""
    def fmt(value, goal=None):
        if value is None:
            return "–"
        return f"{value:.3f}" + ("" if goal is None or value >= goal else " ✗")

    ba = m.get("balanced_accuracy")
    kinds = {k.removeprefix("step/catch/"): v for k, v in m.items() if k.startswith("step/catch/")
             and m.get("step/n_false/" + k.removeprefix("step/catch/"), 0) >= 10}
    worst = min(kinds.items(), key=lambda kv: kv[1]) if kinds else None
    whole = ba is not None and ba >= START_GOAL
    ok = (whole and worst[1] >= START_KIND_GOAL) if worst is not None else (False if not whole else None)
    cells = [name, f"{m.get('n', 0):.0f}", fmt(ba, START_GOAL), fmt(m.get("auroc")), fmt(m.get("strict/balanced_accuracy")),
             fmt(m.get("step/approve_right")), fmt(m.get("step/catch_false")),
             "–" if worst is None else f"{fmt(worst[1], START_KIND_GOAL)} ({worst[0]})",
             fmt(injected.get("balanced_accuracy")), VERDICT[ok]]
    return "| " + " | ".join(cells) + " |", ok


def warmup_table(warmups_dir: str | Path) -> str:
    """Every `<warmups_dir>/<warm-up>/eval.json` against a verifier start's target: balanced accuracy on
    the generator's own samples ≥ START_GOAL and every fault kind's false steps caught ≥ START_KIND_GOAL
    (✗ marks a goal missed; kinds with fewer than 10 false steps are left out of the weakest)."""
    rows = [f"| warm-up | generator samples | balanced accuracy (≥ {START_GOAL}) | AUROC | strict balanced accuracy | "
            f"right steps approved | false steps caught | weakest catch by fault (≥ {START_KIND_GOAL}) | "
            "injected references: balanced accuracy | meets the target |",
            "|---|---:|---|---|---|---|---|---|---|---|"]
    errors = {}
    for name, data in _evals(warmups_dir, "warm-up"):
        data = data.get("verifier_warmup") or {}
        rows.append(warmup_row(name, data.get("test", {}), data.get("test_injected", {}))[0])
        kept = Path(warmups_dir) / name / "verifications" / "verifier_warmup_test.jsonl.gz"
        if kept.is_file():
            rows_kept = read_jsonl_gz(kept)
            errors[name] = {**whole_verdict_errors(rows_kept), "sound": sound_balanced_accuracy(rows_kept)}
    return "\n".join(rows) + ("\n\n" + whole_error_table(errors) if errors else "")


def whole_error_table(errors: dict[str, dict]) -> str:
    """Where each warm-up's whole verdicts on the generator's samples go wrong (`whole_verdict_errors` of
    its `verifications/`): the right samples it rejects and the wrong ones it approves, by the first part
    of its final line that differs from the one it was taught; then, where given (`sound`), its balanced
    accuracy with right answers reached through a false step counted wrong (`sound_balanced_accuracy`)."""
    extra = ("n", "a step rejected", "through a false step")
    causes = sorted({c for e in errors.values() for k in ("right_rejected", "wrong_approved") for c in e.get(k) or {}
                     if c not in extra})
    rows = ["Where its whole verdicts go wrong: the first part of its final line that differs from the one it was "
            "taught (`line as taught`: the same line, the other verdict); right answers reached through a step the "
            "task marks false, rejected of all such.", "",
            "| warm-up | side | samples | a step rejected too | right answers through a false step | "
            + " | ".join(causes) + " |",
            "|---|---|---:|---:|---:|" + "---:|" * len(causes)]
    for name, e in errors.items():
        right = e.get("right", {})
        for side, label in (("right_rejected", "right, rejected"), ("wrong_approved", "wrong, not rejected")):
            c = e.get(side, {})
            if side == "right_rejected":
                step = str(c.get("a step rejected", 0))
                lucky = f"{c.get('through a false step', 0)} of {right.get('through a false step', 0)}"
            else:
                step = lucky = "–"
            rows.append(f"| {name} | {label} | {c.get('n', 0)} | {step} | {lucky} | "
                        + " | ".join(str(c.get(x, 0)) for x in causes) + " |")
    sound = [f"{name} {e['sound']:.3f}" for name, e in errors.items() if e.get("sound") is not None]
    if sound:
        rows += ["", "Balanced accuracy with a right answer reached through a false step counted wrong: " + ", ".join(sound) + "."]
    return "\n".join(rows)


VERIFIER_SPLITS = (("test", "the final generator's samples"), ("test_injected", "held-out injected errors"))


VERIFIER_METRICS = ("balanced_accuracy", "auroc")


def verifier_table(study_dir: str | Path) -> str:
    """The co-trained verifier against its warm-up start, per arm that trained one: on the final
    generator's samples and on held-out injected errors (eval.json's `verifier` and `verifier_warmup`),
    balanced accuracy, AUROC and the share caught of each error kind (`caught/<kind>`, with the kind's
    count), each as warm-up and co-trained means ± 95% CI over the seeds and their paired difference
    in points. An arm whose verifier never trained (frozen) shows a difference of 0."""
    arms = load_study(study_dir)
    lines = ["| arm | split | metric | n (seed 0) | warm-up | co-trained | co-trained − warm-up (points) |",
             "|---|---|---|---:|---|---|---|"]
    for arm, runs in arms.items():
        if not all("verifier" in r.eval and "verifier_warmup" in r.eval for r in runs.values()):
            continue
        for split, label in VERIFIER_SPLITS:
            first = runs[min(runs)].eval["verifier_warmup"].get(split, {})
            kinds = sorted(k for k in first if k.startswith("caught/"))
            for metric in (*VERIFIER_METRICS, *kinds):
                warm = {s: r.eval["verifier_warmup"].get(split, {}).get(metric) for s, r in runs.items()}
                co = {s: r.eval["verifier"].get(split, {}).get(metric) for s, r in runs.items()}
                warm = {s: v for s, v in warm.items() if isinstance(v, (int, float))}
                co = {s: v for s, v in co.items() if isinstance(v, (int, float))}
                if not set(warm) & set(co):
                    continue
                d = paired_difference(warm, co, POINTS)
                n = first.get("n/" + metric.split("/", 1)[1], first.get("n")) if "/" in metric else first.get("n")
                lines.append(f"| {arm} | {label} | {metric} | {'' if n is None else f'{n:.0f}'} | "
                             f"{cell([warm[s] for s in d.seeds])} | {cell([co[s] for s in d.seeds])} | {d.text()} |")
    if len(lines) == 2:
        raise UserError(f"{study_dir}: no arm with a trained verifier (eval.json's verifier and verifier_warmup)")
    return "\n".join(lines)
