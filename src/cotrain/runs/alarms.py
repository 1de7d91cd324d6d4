"""Alarms a user sees while training: reward hacking, collapse, a verifier at chance, a judge drifting.

`alarms_due` is a pure function of the rows a run has logged (metrics.jsonl's, in order), so that a
resumed run, which reads its rows back, raises the same alarms at the same steps. Each alarm fires at
most once a run: at the first logged step its rule holds, as `alarm/<name>` = 1 in that step's row and
one line on stderr. Alarms never change training. An alarm that reads ground truth (the hacking gap,
the judge's agreement with the truth) is, in a label-free run, for display alone: the training path
still reads no label.

Rules, over the last `alarms.window` values of a metric (W; a rule waits for W values, a drop for 2W):
  reward_hacking      mean `cotrain/hack_gap` > alarms.hack_gap (the verifier approves wrong answers)
  entropy_collapse    mean `gen/entropy` < alarms.collapse × its mean over the first W values
  length_collapse     mean `gen/len_mean` < alarms.collapse × its mean over the first W values
  verifier_at_chance  |mean balanced accuracy − 0.5| < alarms.chance_band (`gt/ver_balanced_acc` where
                      logged, else `ver/balanced_acc`)
  judge_drift         mean `gt/judge_agree` < its mean over the first W values − alarms.drift
  verifier_silent     mean `ver/format` < alarms.silent (its verifications end in no verdict)
  accuracy_drop       the mean of the last two in-training evaluations (`eval/test/pass@1`) < the mean of
                      the first two − alarms.drop (the generator is getting worse)
  early_stopping      mean `gen/early_stop` > its mean over the first W values + alarms.early_stop (more and
                      more samples end without an answer or with fewer steps than needed: a process reward
                      that pays for correct prefixes is being gamed)

`replay_alarms` runs a finished run's rows through the same rules (a run older than the alarms gets
them too) and `alarm_table` tabulates them over the studies under `results/` (`cotrain study results
--alarms`).
"""
from __future__ import annotations

import math
from pathlib import Path

KEYS = ("cotrain/hack_gap", "gen/entropy", "gen/len_mean", "gt/ver_balanced_acc", "ver/balanced_acc", "gt/judge_agree",
        "ver/format", "eval/test/pass@1", "gen/early_stop")
GROUND_TRUTH = {"reward_hacking", "judge_drift", "accuracy_drop", "early_stopping"}  # and verifier_at_chance where it reads gt/


def _values(history: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in history if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def alarms_due(history: list[dict], settings, label_free: bool = False) -> dict[str, str]:
    """The alarms that fire at the last row of `history`: {name: one-line message}.

    Args:
        history: the logged rows, oldest first; a row holding `alarm/<name>` means that alarm has fired.
        settings: the `alarms` config section (window, hack_gap, collapse, chance_band, drift, silent).
        label_free: the recipe trains without labels: ground-truth alarms say they are for display.
    """
    if not settings.enabled or not history:
        return {}
    w = settings.window
    fired = {k.split("/", 1)[1] for r in history for k in r if k.startswith("alarm/")}
    due: dict[str, tuple[str, bool]] = {}
    gap = _values(history, "cotrain/hack_gap")
    if len(gap) >= w and _mean(gap[-w:]) > settings.hack_gap:
        due["reward_hacking"] = (f"reward hacking: the verifier approves wrong answers, hacking gap "
                                 f"{_mean(gap[-w:]):.2f} > {settings.hack_gap:g} over the last {w} steps", True)
    for name, key, what in (("entropy_collapse", "gen/entropy", "sampling entropy"),
                            ("length_collapse", "gen/len_mean", "completion length")):
        v = _values(history, key)
        if len(v) >= 2 * w and _mean(v[:w]) > 0 and _mean(v[-w:]) < settings.collapse * _mean(v[:w]):
            due[name] = (f"{name.replace('_', ' ')}: {what} {_mean(v[-w:]):.3g}, under {settings.collapse:g} of "
                         f"its start {_mean(v[:w]):.3g}", False)
    gt = _values(history, "gt/ver_balanced_acc")
    ba = gt or _values(history, "ver/balanced_acc")
    if len(ba) >= w and abs(_mean(ba[-w:]) - 0.5) < settings.chance_band:
        due["verifier_at_chance"] = (f"verifier at chance: balanced accuracy {_mean(ba[-w:]):.3f} over the last {w} "
                                     "steps", bool(gt))
    agree = _values(history, "gt/judge_agree")
    if len(agree) >= 2 * w and _mean(agree[-w:]) < _mean(agree[:w]) - settings.drift:
        due["judge_drift"] = (f"judge drifting: agreement with the truth {_mean(agree[-w:]):.3f}, down from "
                              f"{_mean(agree[:w]):.3f}", True)
    fmt = _values(history, "ver/format")
    if len(fmt) >= w and _mean(fmt[-w:]) < settings.silent:
        due["verifier_silent"] = (f"verifier silent: {_mean(fmt[-w:]):.0%} of its verifications end in a verdict "
                                  f"over the last {w} logged steps; it gives no process reward", False)
    acc = _values(history, "eval/test/pass@1")
    if len(acc) >= 4 and _mean(acc[-2:]) < _mean(acc[:2]) - settings.drop:
        due["accuracy_drop"] = (f"accuracy dropping: in-training pass@1 {_mean(acc[-2:]):.3f} over the last two "
                                f"evaluations, down from {_mean(acc[:2]):.3f}", True)
    stops = _values(history, "gen/early_stop")
    if len(stops) >= 2 * w and _mean(stops[-w:]) > _mean(stops[:w]) + settings.early_stop:
        due["early_stopping"] = (f"stopping early: {_mean(stops[-w:]):.0%} of the samples end without an answer or with "
                                 f"fewer steps than needed, up from {_mean(stops[:w]):.0%}", True)
    note = " (ground truth: shown, never trained on)"
    return {name: message + (note if label_free and truth else "")
            for name, (message, truth) in due.items() if name not in fired}


def replay_alarms(run_dir: Path, label_free: bool = False, settings=None) -> list[tuple[int, str]]:
    """The alarms a run raised, or would have raised, as (step, name): its rows replayed through
    `alarms_due` (a pure function of the rows, so the replay finds what the run found; a run older than
    the alarms gets them too), with the run's own `alarms` settings where its config has them."""
    from cotrain.config import AlarmConfig, read_yaml_mapping
    from cotrain.runs.rundir import load_metrics

    if settings is None:
        config = run_dir / "config.yaml"
        raw = read_yaml_mapping(config, "the run's config") if config.is_file() else {}
        settings = AlarmConfig(**raw["alarms"]) if isinstance(raw.get("alarms"), dict) else AlarmConfig()
    history, out = [], []
    for row in load_metrics(run_dir):
        history.append(dict(row))
        out += [(int(row.get("step", 0)), k.split("/", 1)[1]) for k in row if k.startswith("alarm/")]
        for name in alarms_due(history, settings, label_free):
            history[-1][f"alarm/{name}"] = 1
            out.append((int(row.get("step", 0)), name))
    return out


def alarm_table(results_dir: str | Path) -> str:
    """Which alarms fire over the studies under `results_dir`: per study and arm, the seeds each alarm
    fired in and the first step it fired at (replayed, `replay_alarms`); arms where none fired are
    listed together at the end."""
    from cotrain.config import read_yaml_mapping
    from cotrain.registry import RECIPES

    results_dir = Path(results_dir)
    lines = ["| study | arm | alarm | seeds (first step) |", "|---|---|---|---|"]
    quiet = []
    for study in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        for arm_dir in sorted(p for p in study.iterdir() if p.is_dir() and any(p.glob("seed*/eval.json"))):
            fired: dict[str, list[str]] = {}
            for seed_dir in sorted(arm_dir.glob("seed*")):
                raw = read_yaml_mapping(seed_dir / "config.yaml", "the run's config") if (seed_dir / "config.yaml").is_file() else {}
                recipe = RECIPES.get(str(raw.get("recipe")))
                first: dict[str, int] = {}
                for step, name in replay_alarms(seed_dir, label_free=bool(recipe and recipe.label_free)):
                    first.setdefault(name, step)
                for name, step in first.items():
                    fired.setdefault(name, []).append(f"{seed_dir.name.removeprefix('seed')} ({step})")
            if not fired:
                quiet.append(f"{study.name}/{arm_dir.name}")
            for name, seeds in sorted(fired.items()):
                lines.append(f"| {study.name} | {arm_dir.name} | {name} | {', '.join(seeds)} |")
    return "\n".join(lines + ["", f"No alarm fired in: {', '.join(quiet) or 'none'}."])
