"""A study's figures: each arm's mean curve, and each arm's paired difference with GRPO."""
from __future__ import annotations

import math
from pathlib import Path

from cotrain.lab.pairing import difference_rows
from cotrain.lab.runs import BASELINE, LONG, Run, mean_curve


def plot_differences(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> bool:
    """Each arm's final `test` pass@1 minus grpo's, seeds paired, in points: the mean (a dot) with its 95%
    interval (a bar, two seeds or more), each seed's own difference (crosses), and the mean against GRPO on
    each seed's own machine kind (a ring) where that differs. False (nothing drawn) without a pair."""
    rows = difference_rows(arms)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the axis spans every seed and every interval of three seeds or more; a wider one (two seeds: t is 12.7)
    # is cut at the edge and marked there with an arrowhead
    shown = [v for _, d, seeds, home in rows for v in [d.mean, *seeds.values(), *([home.mean] if home else []),
                                                       *([d.lo, d.hi] if d.n > 2 and not math.isnan(d.lo) else [])]]
    lo_x, hi_x = min(shown + [0.0]) - 3, max(shown + [0.0]) + 3
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(rows)))
    for y, (arm, d, seeds, home) in enumerate(reversed(rows)):
        if not math.isnan(d.lo):
            ax.plot([max(d.lo, lo_x), min(d.hi, hi_x)], [y, y], color="tab:blue", linewidth=2)
            for end, edge, marker in ((d.lo, lo_x, "<"), (d.hi, hi_x, ">")):
                if (end < edge) if marker == "<" else (end > edge):
                    ax.plot([edge], [y], marker, color="tab:blue")
        ax.plot([d.mean], [y], "o", color="tab:blue")
        ax.plot(list(seeds.values()), [y] * len(seeds), "x", color="0.4", markersize=5)
        if home is not None:
            ax.plot([home.mean], [y], "o", markerfacecolor="none", markeredgecolor="tab:red", markersize=9)
    ax.set_yticks(range(len(rows)), [f"{arm} (n={d.n})" for arm, d, _, _ in reversed(rows)], fontsize=8)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlim(lo_x, hi_x)
    ax.set_xlabel(f"final test pass@1 minus {BASELINE}'s, seeds paired (points): mean, 95% CI, each seed (x); "
                  "ring: against GRPO on each seed's own machine kind", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_study(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> None:
    """Accuracy against generator steps and against FLOPs, every arm's mean over seeds with its 95% CI
    shaded (with more than six arms, grpo's alone: the others' bands would hide each other), clipped to
    [0, 1]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    longest = {arm: max(max(r.steps) for r in runs.values()) for arm, runs in arms.items()
               if all(r.steps for r in runs.values())}
    others = [n for arm, n in longest.items() if arm != LONG]
    clip = max(others) if others and longest.get(LONG, 0) > max(others) else None  # grpo_long runs on past the rest
    if len(longest) > 10:  # more arms than the default cycle's 10 colours: 20, then dashed
        palette = plt.get_cmap("tab20").colors
        left.set_prop_cycle(color=[palette[i % 20] for i in range(len(longest))],
                            linestyle=["-" if i < 20 else "--" for i in range(len(longest))])
    for arm, runs in arms.items():
        if arm not in longest:
            continue
        steps, acc, half, flops = mean_curve(runs, after_warmup=True)
        lo, hi = [max(0.0, a - h) for a, h in zip(acc, half)], [min(1.0, a + h) for a, h in zip(acc, half)]
        label = f"{arm} (n={len(runs)})" + (f"; to step {longest[arm]} on the right" if clip and arm == LONG else "")
        line, = left.plot(steps, acc, label=label)
        right.plot(flops, acc, color=line.get_color(), linestyle=line.get_linestyle())
        if len(longest) <= 6 or arm == BASELINE:
            left.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
            right.fill_between(flops, lo, hi, alpha=0.2, color=line.get_color())
    if clip:
        left.set_xlim(0, clip)
    left.set_xlabel("generator step")
    right.set_xlabel("FLOPs after the warm-up (cumulative; the table counts the warm-up)")
    spent = [x for line in right.get_lines() for x in line.get_xdata() if x > 0]
    if spent and max(spent) > 100 * min(spent):  # log only where the FLOPs span more than two decades
        right.set_xscale("log")
        right.xaxis.set_minor_formatter(NullFormatter())  # the minor ticks' labels overlap over a decade or less
    else:  # each tick its own exponent: matplotlib's shared one sits on the axis label
        right.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.1e}".replace("e+", "e") if x else "0"))
    for ax in (left, right):
        ax.set_ylabel("greedy pass@1 (test, in training)")
        ax.grid(alpha=0.3)
    if len(longest) > 6:  # many arms: the legend beside the panels, not over the curves
        fig.legend(*left.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    else:
        left.legend()
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def finish_axes(ax, xlabel: str, ylabel: str, title: str = "") -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)


def save_figure(fig, path: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
