"""The label-free recipes' judges against the truth, and best-of-N selection by each selector."""
from __future__ import annotations

import math
import re
from pathlib import Path

from cotrain.lab.figures import finish_axes, save_figure
from cotrain.lab.runs import Run, cell
from cotrain.registry import STUDY
from cotrain.stats import POINTS, mean_ci95, paired_difference


def judge_agreement(runs: dict[int, Run], window: int = 10) -> list[tuple[int, list[float]]]:
    """The judge's agreement with the truth in windows of `window` steps (steps 1-10, 11-20, ...), as
    (the window's last step, each seed's mean over the steps it logged there, in seed order); windows
    some seed logged nothing in are left out."""
    out = []
    last = max(max(r.agree) for r in runs.values())
    for end in range(window, last + window, window):
        means = []
        for _, r in sorted(runs.items()):
            vals = [v for s, v in r.agree.items() if end - window < s <= end]
            means.append(sum(vals) / len(vals) if vals else None)
        if None not in means:
            out.append((end, means))
    return out


def judge_table(arms: dict[str, dict[int, Run]]) -> str:
    """Per arm: the judge's agreement in its first and last window (`judge_agreement`) and the change
    between them, paired by seed, in points."""
    lines = ["| arm | seeds | first 10 steps | last 10 steps | change (points) |", "|---|---|---|---|---|"]
    for arm, runs in arms.items():
        windows = judge_agreement(runs)
        if not windows:
            continue
        first, last = windows[0][1], windows[-1][1]
        seeds = sorted(runs)
        change = paired_difference(dict(zip(seeds, first)), dict(zip(seeds, last)), POINTS).text()
        lines.append(f"| {arm} | {','.join(map(str, seeds))} | {cell(first)} | {cell(last)} | {change} |")
    return "\n".join(lines)


def plot_judge(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> None:
    """The judge's agreement with the truth against steps, an arm a line (mean over seeds of 10-step
    windows) with its 95% CI shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, runs in arms.items():
        windows = judge_agreement(runs)
        if not windows:
            continue
        steps = [w[0] for w in windows]
        stats = [mean_ci95(w[1]) for w in windows]
        m = [x for x, _ in stats]
        h = [0.0 if math.isnan(y) else y for _, y in stats]
        ax.plot(steps, m, marker=".", label=arm)
        ax.fill_between(steps, [a - b for a, b in zip(m, h)], [a + b for a, b in zip(m, h)], alpha=0.2)
    finish_axes(ax, "generator step", "judge verdict = truth", title)
    save_figure(fig, path)


BON_NAMES = {"oracle": "oracle (pass@N)", "random": "random pick", "majority": "majority vote",
             STUDY.best_of_n: "V-STaR verifier"}


def best_of_n(runs: dict[int, Run]) -> dict[str, dict[int, list[float]]]:
    """The best-of-N accuracies a V-STaR run measured at its end (eval.json vstar/test `bon@N/<selector>`:
    the oracle, a random pick, majority voting, its verifier and any named generative verifier), as
    selector -> N -> the values over seeds in seed order; {} where no run measured any."""
    out: dict[str, dict[int, list[float]]] = {}
    for _, run in sorted(runs.items()):
        for key, value in (run.eval.get(STUDY.best_of_n, {}).get("test", {}) or {}).items():
            found = re.fullmatch(r"bon@(\d+)/(\w+)", key)
            if found and isinstance(value, (int, float)):
                out.setdefault(found.group(2), {}).setdefault(int(found.group(1)), []).append(float(value))
    return out


def best_of_n_by_arm(arms: dict[str, dict[int, Run]]) -> dict[str, dict[str, dict[int, list[float]]]]:
    """`best_of_n` of each arm that measured it."""
    picks = {arm: best_of_n(runs) for arm, runs in arms.items()}
    return {arm: p for arm, p in picks.items() if p}


def _selectors(p: dict[str, dict[int, list[float]]]) -> list[str]:
    """The selectors in display order: oracle, random, majority, V-STaR's verifier, then named verifiers."""
    return sorted(p, key=lambda k: (list(BON_NAMES).index(k) if k in BON_NAMES else len(BON_NAMES), k))


def bon_table(picks: dict[str, dict[str, dict[int, list[float]]]]) -> str:
    """Best-of-N against N as a markdown table, a row per arm and selector, mean ± 95% CI over seeds
    (`best_of_n_by_arm`)."""
    ns = sorted({n for p in picks.values() for sel in p.values() for n in sel})
    lines = ["| arm | selector | seeds | " + " | ".join(f"N = {n}" for n in ns) + " |",
             "|---|---|---|" + "---|" * len(ns)]
    for arm, p in picks.items():
        for sel in _selectors(p):
            seeds = max(len(v) for v in p[sel].values())
            cells = [cell(p[sel][n]) if n in p[sel] else "–" for n in ns]
            lines.append(f"| {arm} | {BON_NAMES.get(sel, sel + ' verifier')} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_bon(picks: dict[str, dict[str, dict[int, list[float]]]], path: str | Path, title: str = "") -> None:
    """Best-of-N accuracy against N, a panel per arm, a line per selector with its 95% CI as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(picks), figsize=(5.5 * len(picks), 4), squeeze=False)
    for ax, (arm, p) in zip(axes[0], picks.items()):
        for sel in _selectors(p):
            ns = sorted(p[sel])
            stats = [mean_ci95(p[sel][n]) for n in ns]
            ax.errorbar(ns, [m for m, _ in stats], yerr=[0 if math.isnan(h) else h for _, h in stats],
                        marker="o", capsize=3, label=BON_NAMES.get(sel, sel + " verifier"),
                        linestyle="--" if sel == "oracle" else "-")
        ax.set_xscale("log", base=2)
        finish_axes(ax, "N (samples to pick from)", "accuracy of the pick (test)", arm)
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
