"""Plots of training runs: learning curves from `metrics.jsonl` (and, for generator-verifier co-training,
the `cotrain/` health curves), eval bars from `eval.json`.

    from pathlib import Path
    from cotrain.analysis.plot import plot_runs
    plot_runs([Path("runs/sft"), Path("runs/grpo")])   # -> [runs/curves.png, runs/eval.png]

A run directory holds `metrics.jsonl` (one JSON object per step, keys `ROLE/metric`, `eval/SPLIT/metric`,
`cotrain/...`, `time/...`, `tokens/...`; any key may be missing or null on any line; the last line may be
cut off by a killed run), optionally `eval.json` (`{"generator": {"test": {"pass@1": 0.61, ...}, ...}}`) and
`config.yaml` (its top-level `recipe:` goes into the run's label).

Figures are drawn on `matplotlib.figure.Figure` + the Agg canvas, never through pyplot, so plotting
leaves no global state behind (style settings live in an `rc_context`).
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cotrain import registry
from cotrain.runs.rundir import load_metrics

log = logging.getLogger(__name__)

# Metric namespaces that are not roles: they never go into a per-role panel. `cotrain/` (generator-verifier
# health) has its own figure, cotrain.png.
_NOT_ROLES = ("eval", "time", "tokens", "cotrain")
# Line style per role; roles not listed here take the extras in order.
_ROLE_STYLES = {"gen": "-", "ver": "--", "prop": "-.", "judge": ":"}
_EXTRA_STYLES = [(0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2, 2, 2))]
_SPLIT_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_EVAL_METRIC = re.compile(r"^(pass|maj)@(\d+)$")

_STYLE = {
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "legend.fontsize": 10,
    "figure.titlesize": 15,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
}


@dataclass(frozen=True)
class _Panel:
    """One panel of curves.png: every training key `ROLE/{metric}`."""

    title: str
    ylabel: str
    metric: str
    unit_interval: bool = False  # values are fractions: pin the y-axis to [0, 1] when they fit


_PANELS = [
    _Panel("Training reward (mean per step)", "mean reward", "reward"),
    _Panel("Training accuracy (share of correct samples)", "accuracy", "acc", unit_interval=True),
    _Panel("KL to the reference (per token)", "KL", "kl"),
    _Panel("Sampling entropy (per token)", "entropy per token", "entropy"),
    _Panel("Completion length (tokens)", "mean length", "len_mean"),
    _Panel("Training loss", "loss", "loss"),
    *(_Panel(*p) for p in registry.panels()),  # each recipe's own, declared beside its run()
]
_EVAL_PANEL = _Panel("Greedy pass@1 during training", "pass@1", "pass@1", unit_interval=True)


@dataclass(eq=False)  # compared (and hashed) by identity
class _Run:
    dir: Path
    label: str
    color: tuple
    series: dict[str, tuple[np.ndarray, np.ndarray]]  # key -> (steps, values), finite values only
    evals: dict[tuple[str, str], float] = field(default_factory=dict)  # (split, metric) -> value


# --------------------------------------------------------------------------- reading




def load_eval(run_dir: Path) -> dict[tuple[str, str], float]:
    """Read `run_dir/eval.json` into {(split, metric): value} for the generator's metrics `pass@k` and `maj@k`.

    The split is the path of keys down to the metric below "generator" (so `{"generator": {"test":
    {"pass@1": 0.6}}}` gives `{("test", "pass@1"): 0.6}`); other models' entries are left out (a
    verifier's `maj@k` is the generator's on the samples it judged, and its splits would stand as empty
    categories beside the generator's). A missing or unreadable file gives {}.
    """
    path = Path(run_dir) / "eval.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        log.warning("could not parse %s; no eval bars for this run", path)
        return {}
    out: dict[tuple[str, str], float] = {}

    def walk(obj, keys: tuple[str, ...]) -> None:
        if not isinstance(obj, dict):
            return
        for k, v in obj.items():
            if isinstance(v, dict):
                walk(v, keys + (str(k),))
            elif _EVAL_METRIC.match(str(k)) and _is_number(v):
                split = keys[1:] if keys[:1] == ("generator",) else keys
                out[("/".join(split) or "all", str(k))] = float(v)

    walk(data.get("generator", {}) if isinstance(data, dict) else {}, ("generator",))
    return out


def read_recipe(run_dir: Path) -> str | None:
    """The top-level `recipe:` of `run_dir/config.yaml`, or None.

    Read with a line match, not a YAML parser, so a config that does not parse (or a missing PyYAML)
    still yields the recipe name.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    m = re.search(r"^recipe:[ \t]*[\"']?([^\"'#\s]+)", path.read_text(encoding="utf-8", errors="replace"),
                  re.MULTILINE)
    return m.group(1) if m else None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _series(rows: list[dict]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (steps, values)} over all numeric, finite values, sorted by step.

    A row without a numeric "step" is placed at its 1-based line number. When a step appears twice (a
    resumed run re-logs the steps after its last checkpoint), the later line wins.
    """
    by_key: dict[str, dict[float, float]] = {}
    for i, row in enumerate(rows, start=1):
        step = row.get("step")
        x = float(step) if _is_number(step) else float(i)
        for key, v in row.items():
            if key != "step" and _is_number(v):
                by_key.setdefault(key, {})[x] = float(v)
    out = {}
    for key, points in by_key.items():
        steps = np.array(sorted(points))
        out[key] = (steps, np.array([points[s] for s in steps]))
    return out


def _run_names(run_dirs: list[Path]) -> list[str]:
    """Directory names; `parent/name` where two runs share a name; the full path if that still clashes."""
    dirs = [d.resolve() for d in run_dirs]
    base = [d.name for d in dirs]
    names = [f"{d.parent.name}/{d.name}" if base.count(d.name) > 1 else d.name for d in dirs]
    for i, d in enumerate(dirs):
        if names.count(names[i]) > 1:
            names[i] = str(d)
    return names


def _default_out_dir(run_dirs: list[Path]) -> Path:
    if len(run_dirs) == 1:
        return run_dirs[0]
    return Path(os.path.commonpath([d.resolve() for d in run_dirs]))


# --------------------------------------------------------------------------- smoothing


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Centered moving average over `window` points; near the ends it averages the points that exist.

    Centered rather than trailing so a smoothed curve does not lag the raw one. window <= 1 returns
    the values unchanged.
    """
    y = np.asarray(values, dtype=float)
    if window <= 1 or len(y) == 0:
        return y
    left, right = (window - 1) // 2, window // 2
    csum = np.concatenate([[0.0], np.cumsum(y)])
    i = np.arange(len(y))
    lo, hi = np.maximum(i - left, 0), np.minimum(i + right + 1, len(y))
    return (csum[hi] - csum[lo]) / (hi - lo)


def _window(n_points: int, smooth: int) -> int:
    """smooth=0: automatic, about n/20 once a curve has more than 50 points; otherwise `smooth` itself."""
    if smooth:
        return smooth
    return max(2, round(n_points / 20)) if n_points > 50 else 1


# --------------------------------------------------------------------------- plotting


def plot_finished(run_dir: Path) -> None:
    """The plots of one finished run (`plot_runs`), drawn by the command line or the Python API after the recipe
    returns (`log.plots`): a plot never costs a finished run, so a failure is one warning line."""
    try:
        plot_runs([Path(run_dir)])
    except Exception as err:  # noqa: BLE001
        print(f"warning: plotting failed: {err}")


def plot_runs(run_dirs: list[Path], out_dir: Path | None = None, smooth: int = 0,
              chain: bool | list[int | None] = False) -> list[Path]:
    """Plot the learning curves (and eval results, where present) of one or more runs.

    Writes `curves.png` (one panel per metric family any run logged: reward, accuracy, eval pass@1,
    KL, entropy, completion length, loss; x = step; a colour per run, a line style per role); when
    some run has an `eval.json`, `eval.png` (bars of pass@k / maj@k per split per run); and when some
    run logged a `cotrain/` key, `cotrain.png` (generator and verifier accuracy on one chart, and the
    reward-hacking gap; see `_cotrain_figure`); and when some run logged a label-free key (`gt/`,
    `prop/`, `rel/`), `labelfree.png` (see `_labelfree_figure`). A run with no usable metrics is logged as a warning and
    left out; the others are still plotted.

    Args:
        run_dirs: run directories, each holding `metrics.jsonl` (and optionally `eval.json`, `config.yaml`).
        out_dir: where to write the PNGs; default the run's directory for one run, else the runs'
            common parent. Created if missing.
        smooth: moving-average window in steps. 0 = automatic (about steps/20 for curves with more than
            50 points, none below that); 1 = no smoothing. A smoothed curve is drawn solid over its
            faint raw line.
        chain: the runs are consecutive stages of one pipeline (e.g. SFT then GRPO): each run's steps
            are shifted to start where the previous run's last step ended. A list gives each run's
            parent instead (an index, or None for a run that starts at 0): `[None, 0, 0]` puts two
            runs side by side after the first (SFT, then GRPO and tango from the same checkpoint).

    Returns:
        The paths of the PNGs written, in the order curves.png, eval.png, cotrain.png, labelfree.png.

    Raises:
        ValueError: no run directories, a negative `smooth`, or no run with anything to plot.
    """
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    if smooth < 0:
        raise ValueError(f"smooth must be >= 0 (0 = automatic, 1 = off), got {smooth}")
    out_dir = Path(out_dir) if out_dir is not None else _default_out_dir(run_dirs)

    palette = matplotlib.colormaps["tab10" if len(run_dirs) <= 10 else "tab20"].colors
    runs = []
    for i, (run_dir, name) in enumerate(zip(run_dirs, _run_names(run_dirs))):
        recipe = read_recipe(run_dir)
        label = f"{name} ({recipe})" if recipe and recipe != name else name  # not "grpo (grpo)"
        run = _Run(run_dir, label, palette[i % len(palette)], _series(load_metrics(run_dir)), load_eval(run_dir))
        if not run.series:
            log.warning("no metrics to plot in %s; leaving it out of curves.png", run_dir)
        runs.append(run)
    if chain:
        parents = chain if isinstance(chain, list) else [None] + list(range(len(runs) - 1))
        if len(parents) != len(runs) or any(p is not None and not 0 <= p < i for i, p in enumerate(parents)):
            raise ValueError(f"chain must give each run an earlier parent index or None, got {chain}")
        ends: list[float] = []
        for run, parent in zip(runs, parents):
            offset = 0.0 if parent is None else ends[parent]
            run.series = {k: (x + offset, y) for k, (x, y) in run.series.items()}
            ends.append(max((x.max() for x, _ in run.series.values() if len(x)), default=offset))

    def logged(run: _Run, metric: str) -> bool:  # a curve that is zero throughout (KL at beta 0) says nothing
        return any(np.any(run.series[k][1] != 0) for k in _role_keys(run, metric))

    panels = [p for p in _PANELS if any(logged(run, p.metric) for run in runs)]
    if any(_eval_keys(run) for run in runs):
        panels.insert(min(2, len(panels)), _EVAL_PANEL)  # next to training accuracy
    has_eval = any(run.evals for run in runs)
    has_cotrain = any(k.startswith("cotrain/") for run in runs for k in run.series)
    has_labelfree = any(k.startswith(("gt/", "prop/", "rel/")) for run in runs for k in run.series)
    if not panels and not has_eval and not has_cotrain:
        raise ValueError(f"no metrics to plot in: {', '.join(str(d) for d in run_dirs)}")

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(_STYLE):
        if panels:
            written.append(_save(_curves_figure(runs, panels, smooth), out_dir / "curves.png"))
        if has_eval:
            written.append(_save(_eval_figure(runs), out_dir / "eval.png"))
        if has_cotrain:
            written.append(_save(_cotrain_figure(runs, smooth), out_dir / "cotrain.png"))
        if has_labelfree:
            written.append(_save(_labelfree_figure(runs, smooth), out_dir / "labelfree.png"))
    return written


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)  # attaches the Agg canvas to the figure
    fig.savefig(path, dpi=130, facecolor="white", bbox_inches="tight")  # a wide legend is never cut off
    return path


def _role_keys(run: _Run, metric: str) -> list[str]:
    """The run's keys `ROLE/metric`, ordered gen, ver, prop, judge, then other roles alphabetically."""
    keys = [k for k in run.series if k.count("/") == 1 and k.split("/")[1] == metric
            and k.split("/")[0] not in _NOT_ROLES]
    order = list(_ROLE_STYLES)
    return sorted(keys, key=lambda k: (order.index(k.split("/")[0]) if k.split("/")[0] in order else len(order), k))


def _eval_keys(run: _Run) -> list[str]:
    return [k for k in run.series if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/pass@1")]


def _draw_curve(ax, x: np.ndarray, y: np.ndarray, smooth: int, color, linestyle) -> int:
    """One training curve: smoothed and solid-width over its faint raw line, or raw (with markers when
    there are at most 5 points). Returns the moving-average window used (1 = none)."""
    window = _window(len(y), smooth)
    if window > 1:
        # Raw line solid whatever the line style: faint dotted lines only add noise.
        ax.plot(x, y, color=color, alpha=0.2, linewidth=0.9)
        ax.plot(x, moving_average(y, window), color=color, linestyle=linestyle, linewidth=1.9)
    else:
        ax.plot(x, y, color=color, linestyle=linestyle, linewidth=1.6, marker="o" if len(y) <= 5 else None,
                markersize=4)
    return window


def _smoothing_note(windows: set[int]) -> str:
    """Suffix for a figure title naming the moving-average windows used, or "" when nothing was smoothed."""
    windows = {w for w in windows if w > 1}
    if not windows:
        return ""
    w = "–".join(str(w) for w in sorted({min(windows), max(windows)}))
    return f"   (centred moving average over {w} points; faint: raw)"


def _grid(n: int) -> tuple[int, int]:
    ncols = {1: 1, 2: 2, 3: 3, 4: 2, 5: 3, 6: 3}.get(n, 4)
    return math.ceil(n / ncols), ncols


def _curves_figure(runs: list[_Run], panels: list[_Panel], smooth: int) -> Figure:
    nrows, ncols = _grid(len(panels))
    fig = Figure(figsize=(4.8 * ncols, 3.5 * nrows + 0.9), layout="constrained")
    role_styles = dict(_ROLE_STYLES)
    extra = iter(_EXTRA_STYLES * 10)
    used_runs, used_roles, windows = [], [], set()
    first = None
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, i + 1, sharex=first)
        first = first or ax
        ax.set_title(panel.title)
        ax.set_ylabel(panel.ylabel)
        if i + ncols >= len(panels):  # bottom panel of its column
            ax.set_xlabel("step")
        values = []
        if panel is _EVAL_PANEL:
            splits = list(dict.fromkeys(k.split("/")[1] for run in runs for k in _eval_keys(run)))
            for run in runs:
                for key in _eval_keys(run):
                    j = splits.index(key.split("/")[1])
                    x, y = run.series[key]
                    ax.plot(x, y, color=run.color, marker=_SPLIT_MARKERS[j % len(_SPLIT_MARKERS)],
                            linestyle=_EXTRA_STYLES[j - 1] if j else "-", linewidth=1.4, markersize=5)
                    values.append(y)
                    used_runs.append(run)
            ax.legend(handles=[Line2D([], [], color="0.35", marker=_SPLIT_MARKERS[j % len(_SPLIT_MARKERS)],
                                      linestyle=_EXTRA_STYLES[j - 1] if j else "-", label=split)
                               for j, split in enumerate(splits)], title="split", fontsize=9, title_fontsize=9)
        else:
            items = [(run, key, key.split("/")[0]) for run in runs for key in _role_keys(run, panel.metric)]
            # roles on scales ten times apart (a generator's loss and a verifier's) get an axis of their own
            scale = {}
            for run, key, role in items:
                y = run.series[key][1]
                scale[role] = max(scale.get(role, 0.0), float(np.nanmax(np.abs(y))) if len(y) else 0.0)
            left = next(iter(scale), None)
            apart = {r for r, v in scale.items() if left and v > 0 and scale[left] > 0
                     and not 0.1 <= v / scale[left] <= 10}
            twin = ax.twinx() if apart else None
            for run, key, role in items:
                if role not in role_styles:
                    role_styles[role] = next(extra)
                x, y = run.series[key]
                windows.add(_draw_curve(twin if role in apart else ax, x, y, smooth, run.color, role_styles[role]))
                if role not in apart:
                    values.append(y)
                used_runs.append(run)
                used_roles.append(role)
            if twin is not None:
                twin.set_ylabel(f"{', '.join(sorted(apart))} (this axis)", fontsize=9)
                twin.grid(False)
                ax.set_ylabel(f"{panel.ylabel}: {left}")
        if panel.unit_interval and values:
            all_values = np.concatenate(values)
            # the whole [0, 1] only where the curves span much of it: 0.15 against 0.17 must stay apart
            if all_values.min() >= 0 and all_values.max() <= 1 and np.ptp(all_values) >= 0.5:
                ax.set_ylim(-0.03, 1.03)
        for run in runs:  # where an alarm fired (runs/alarms.py): a dotted line in the run's colour
            for step, name in _alarm_marks(run):
                ax.axvline(step, color=run.color, linestyle=":", linewidth=1.3, alpha=0.9)
                if i == 0:
                    ax.annotate(name.replace("_", " "), (step, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                                ha="right", va="top", fontsize=7, color=run.color)

    # One legend for the whole figure: colour = run, line style = role.
    handles = [Line2D([], [], color=run.color, linewidth=2.5, label=run.label)
               for run in dict.fromkeys(used_runs)]
    fired = sorted({name for run in runs for _, name in _alarm_marks(run)})
    if fired:
        handles.append(Line2D([], [], color="0.35", linestyle=":", linewidth=1.3, label="alarm: " + ", ".join(fired)))
    handles += [Line2D([], [], color="0.35", linestyle=role_styles[role], linewidth=1.8, label=f"role: {role}")
                for role in dict.fromkeys(used_roles)]
    # Below the panels: an outside legend at the top would collide with the suptitle.
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8), frameon=False)
    fig.suptitle("Training curves" + _smoothing_note(windows))
    return fig


def _alarm_marks(run: _Run) -> list[tuple[float, str]]:
    """(step, name) of each alarm the run logged (`alarm/<name>`, once a run)."""
    return [(float(x[0]), k.split("/", 1)[1]) for k, (x, _) in run.series.items() if k.startswith("alarm/") and len(x)]


def _eval_metric_order(metric: str) -> tuple[bool, int]:
    kind, k = _EVAL_METRIC.match(metric).groups()
    return kind != "pass", int(k)


def _eval_figure(runs: list[_Run]) -> Figure:
    runs = [run for run in runs if run.evals]
    metrics = sorted({m for run in runs for _, m in run.evals}, key=_eval_metric_order)
    splits = list(dict.fromkeys(s for run in runs for s, _ in run.evals))
    ncols = min(len(metrics), 3)
    nrows = math.ceil(len(metrics) / ncols)
    width = max(4.5, 1.0 + len(splits) * (0.6 + 0.45 * len(runs)))
    fig = Figure(figsize=(width * ncols, 3.8 * nrows + 0.8), layout="constrained")
    bar_w = 0.8 / len(runs)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        ax.set_title(metric)
        ax.grid(axis="x", visible=False)
        if i % ncols == 0:
            ax.set_ylabel("fraction of problems")
        values = []
        for r, run in enumerate(runs):
            xs = [j for j, s in enumerate(splits) if (s, metric) in run.evals]
            ys = [run.evals[(splits[j], metric)] for j in xs]
            if not xs:
                continue
            bars = ax.bar(np.array(xs) + (r - (len(runs) - 1) / 2) * bar_w, ys, width=bar_w * 0.92,
                          color=run.color, label=run.label)
            ax.bar_label(bars, fmt="%.2f", padding=2, fontsize=9, rotation=90 if len(runs) > 3 else 0)
            values += ys
        ax.set_xticks(range(len(splits)), splits, fontsize=11)
        if values and min(values) >= 0 and max(values) <= 1:
            ax.set_ylim(0, 1.12)  # headroom for the value labels
    fig.legend(handles=[Line2D([], [], color=run.color, linewidth=8, label=run.label) for run in runs],
               loc="outside lower center", ncols=min(len(runs), 5), frameon=False)
    fig.suptitle("Final evaluation (eval.json): pass@k and maj@k per split")
    return fig


# Keys drawn in cotrain.png (besides eval/SPLIT/pass@1).
_GEN_ACC, _AGREE, _VER_EVAL, _HACK_GAP = "gen/acc", "cotrain/agree", "eval/verifier/accuracy", "cotrain/hack_gap"
_GAP_KEYS = [(_HACK_GAP, "-", "hacking gap: approval rate - accuracy (right)"),
             ("gap/verifier", "--", "gap/verifier: acc. of approved - acc. of all (right)"),
             ("gap/majority", ":", "gap/majority: maj@G - acc. of one sample (right)")]


def _cotrain_figure(runs: list[_Run], smooth: int) -> Figure:
    """cotrain.png: is the generator-verifier pair improving together, collapsing, or being gamed?

    Left, "Generator and verifier accuracy": per run (its colour), the generator's training accuracy
    `gen/acc` (solid) and how often the verifier's verdict matches ground truth on those samples,
    `cotrain/agree` (dashed), both smoothed like curves.png; plus the periodic evals, unsmoothed:
    `eval/SPLIT/pass@1` for the first split logged (filled circles) and the verifier's accuracy on its
    fixed held-out set, `eval/verifier/accuracy` (open squares). Right, around a line at 0, per run:
    `cotrain/hack_gap` (verifier approval rate minus ground-truth accuracy: above 0 the verifier
    approves wrong answers), and the generation-verification gaps on the same samples, `gap/verifier`
    (accuracy of the approved minus accuracy of all: above 0 the verifier's reward can teach) and
    `gap/majority` (maj@G minus one sample's accuracy), so e.g. a frozen-verifier run and a co-trained
    one can be compared. Every run with any of these keys
    is drawn, so a run without a verifier still shows as a generator-accuracy baseline.
    """
    splits = [k.split("/")[1] for run in runs for k in _eval_keys(run)]
    split = next((s for s in dict.fromkeys(splits) if s != "verifier"), None)
    # (key, line style, marker, marker face, label); marker face None = the run's colour.
    left_keys = [(_GEN_ACC, "-", None, None, "generator accuracy (gen/acc)"),
                 (_AGREE, "--", None, None, "verifier verdict = truth (cotrain/agree)")]
    if split is not None:
        left_keys.append((f"eval/{split}/pass@1", ":", "o", None, f"eval pass@1 ({split})"))
    left_keys.append((_VER_EVAL, ":", "s", "white", "eval verifier accuracy (held-out)"))

    fig = Figure(figsize=(12.5, 5.0), layout="constrained")
    ax_acc, ax_gap = fig.subplots(1, 2, sharex=True)
    ax_acc.set_title("Generator and verifier accuracy")
    ax_acc.set_ylabel("accuracy")
    ax_gap.set_title("Reward hacking gap and generation-verification gaps")
    ax_gap.set_ylabel("gap")
    for ax in (ax_acc, ax_gap):
        ax.set_xlabel("step")

    used_runs, used_keys, windows, acc_values = [], [], set(), []
    for run in runs:
        for key, linestyle, marker, face, _ in left_keys:
            if key not in run.series:
                continue
            x, y = run.series[key]
            if marker is None:
                windows.add(_draw_curve(ax_acc, x, y, smooth, run.color, linestyle))
            else:  # evals are sparse and already averages over a test set: no smoothing
                ax_acc.plot(x, y, color=run.color, linestyle=linestyle, linewidth=1.0, marker=marker,
                            markersize=6, markerfacecolor=face or run.color, markeredgewidth=1.4)
            acc_values.append(y)
            used_runs.append(run)
            used_keys.append(key)
        for key, linestyle, _ in _GAP_KEYS:
            if key in run.series:
                x, y = run.series[key]
                windows.add(_draw_curve(ax_gap, x, y, smooth, run.color, linestyle))
                used_runs.append(run)
                used_keys.append(key)
    if acc_values:
        all_values = np.concatenate(acc_values)
        if all_values.min() >= 0 and all_values.max() <= 1:
            ax_acc.set_ylim(-0.03, 1.03)
    else:
        ax_acc.text(0.5, 0.5, "no accuracy logged", transform=ax_acc.transAxes, ha="center", color="0.5")
    ax_gap.axhline(0.0, color="0.3", linewidth=1.0, zorder=1)
    if any(key in run.series for run in runs for key, _, _ in _GAP_KEYS):
        # Which side is which, in words: the sign conventions are easy to forget.
        ax_gap.text(0.01, 0.98, "hacking gap > 0: the verifier approves wrong answers\n"
                    "gap/verifier > 0: what it approves is more often right", transform=ax_gap.transAxes,
                    va="top", fontsize=9, color="0.4")
    else:
        ax_gap.text(0.5, 0.5, "no gap logged", transform=ax_gap.transAxes, ha="center", color="0.5")

    # One legend: colour = run, line style / marker = quantity.
    handles = [Line2D([], [], color=run.color, linewidth=2.5, label=run.label) for run in dict.fromkeys(used_runs)]
    handles += [Line2D([], [], color="0.35", linestyle=linestyle, linewidth=1.8 if marker is None else 1.0,
                       marker=marker, markerfacecolor=face or "0.35", label=label)
                for key, linestyle, marker, face, label in left_keys if key in used_keys]
    handles += [Line2D([], [], color="0.35", linestyle=linestyle, linewidth=1.8, label=label)
                for key, linestyle, label in _GAP_KEYS if key in used_keys]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False)
    fig.suptitle("Co-training" + _smoothing_note(windows))
    return fig


# (title, y label, [(key, line style, label)]) of each panel of labelfree.png; a run draws the keys it logged.
_LABELFREE_PANELS = [
    ("Solver accuracy (ground truth, never trained on)", "accuracy",
     [("gt/gen_acc", "-", "on its training questions (consistency)"),
      ("gt/solver_acc", "-", "on its training questions (triad)"),
      ("gt/strong_acc", "-", "strong candidates (reliability)"),
      ("gt/weak_acc", "--", "weak candidates (reliability)"),
      ("eval/test/pass@1", ":", "eval pass@1 (test)")]),
    ("Agreement with ground truth", "agreement",
     [("gt/agree", "-", "verifier verdict = truth (consistency)"),
      ("gt/judge_agree", "-", "judge verdict = truth (triad, reliability)"),
      ("gt/pseudo_label_acc", "--", "majority pseudo-label = truth (consistency)"),
      ("gt/pair_agree", ":", "pairwise judge prefers the right one (reliability)")]),
    ("Generation-verification gap (ground truth)", "gap",
     [("gap/verifier", "-", "verifier: acc. of approved - acc. of all"),
      ("gap/judge", "-", "judge: acc. of approved - acc. of all"),
      ("gap/majority", ":", "majority: maj@G - acc. of one sample")]),
    ("Reliability of the proposed questions", "signal",
     [("rel/cons", "-", "R_cons"), ("rel/sep", "--", "R_sep"), ("rel/stab", "-.", "R_stab"),
      ("rel/stab_pointwise", (0, (1, 1)), "R_stab read from pointwise scores (beside pairwise)"),
      ("rel/pass_share", ":", "share above the thresholds")]),
    ("Proposer validity", "share of proposals",
     [("prop/valid", "-", "valid"), ("prop/parsable", "--", "parsable"), ("prop/distinct", ":", "distinct valid")]),
    ("Difficulty of the proposed questions", "operations per question",
     [("prop/n_ops", "-", "operations"), ("gt/proposed_solver_acc", ":", "solver accuracy on them (right axis)")]),
    ("Safeguard: is the judge trusted? (label-free)", "signal",
     [("safe/sep_ema", "-", "judge separation strong - weak (smoothed)"), ("safe/scale", "--", "update scale"),
      ("safe/skipped_share", ":", "share of steps skipped"), ("safe/kl", "-.", "KL to the start (per token)")]),
]


def _labelfree_figure(runs: list[_Run], smooth: int) -> Figure:
    """labelfree.png: a label-free run's health at a glance, one panel per question.

    Solver accuracy against ground truth (training samples, strong and weak candidates, periodic eval
    pass@1 as circles), the judge's and the majority pseudo-labels' agreement with ground truth, the
    generation-verification gaps (what the verifier, judge or majority knows beyond one sample),
    the three reliability signals of the proposed questions with the share above the thresholds, the
    proposer's validity rate, the size of the proposed questions (operations per question, with the
    solver's accuracy on them on a right axis), and the safeguard's label-free view of the judge (its
    smoothed separation, the update scale, the share of steps skipped, the KL to the start). Colour =
    run, line style = quantity; a panel no run logged says so.
    """
    fig = Figure(figsize=(16.0, 12.6), layout="constrained")
    axes = fig.subplots(3, 3).ravel()
    for ax in axes[len(_LABELFREE_PANELS):]:
        ax.set_visible(False)
    windows: set[int] = set()
    used_runs: list[_Run] = []
    for ax, (title, ylabel, keys) in zip(axes, _LABELFREE_PANELS):
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("step")
        right = None
        drawn = []
        for run in runs:
            for key, linestyle, label in keys:
                if key not in run.series:
                    continue
                x, y = run.series[key]
                target = ax
                if key == "gt/proposed_solver_acc":
                    right = right or ax.twinx()
                    right.set_ylim(-0.03, 1.03)
                    right.set_ylabel("solver accuracy")
                    target = right
                if key.startswith("eval/"):
                    target.plot(x, y, color=run.color, linestyle=linestyle, marker="o", markersize=5, linewidth=1.0)
                else:
                    windows.add(_draw_curve(target, x, y, smooth, run.color, linestyle))
                drawn.append((linestyle, label, key.startswith("eval/")))
                used_runs.append(run)
        if ylabel in ("accuracy", "agreement", "share of proposals"):
            ax.set_ylim(-0.03, 1.03)
        if ylabel == "gap":
            ax.axhline(0.0, color="0.3", linewidth=1.0, zorder=1)
        if not drawn:
            ax.text(0.5, 0.5, "not logged by these runs", transform=ax.transAxes, ha="center", color="0.5")
            continue
        handles = [Line2D([], [], color="0.35", linestyle=ls, marker="o" if dot else None, label=label)
                   for ls, label, dot in dict.fromkeys(drawn)]
        ax.legend(handles=handles, fontsize=8, loc="best", frameon=False)
    runs_used = list(dict.fromkeys(used_runs))
    fig.legend(handles=[Line2D([], [], color=r.color, linewidth=2.5, label=r.label) for r in runs_used],
               loc="outside lower center", ncols=min(max(len(runs_used), 1), 5), frameon=False)
    fig.suptitle("Label-free co-evolution (ground truth shown, never trained on)" + _smoothing_note(windows))
    return fig


# --------------------------------------------------------------------------- the demo's figure


def demo_figure(rl_dirs: list[Path], out_path: Path, sft_dir: Path | None = None, split: str = "test",
                title: str = "cotrain demo: GRPO and RL Tango from the same start") -> Path:
    """`demo.png`: the RL stages on an axis of their own steps, so the part a user came to see is not a
    sliver at the end of a long SFT axis.

    Three panels: (1) with `sft_dir`, SFT's held-out greedy pass@1 per SFT step; without it, each co-trained
    verifier's balanced agreement with the ground truth on the generator's samples per RL step (the
    verifier a tango arm relies on); (2) each RL stage's greedy pass@1 on `split` per RL step, from its
    step-0 evaluation to its final one; (3) each RL stage's training reward per RL step.

    Args:
        rl_dirs: the RL stages' run directories (all from one start).
        out_path: the PNG to write.
        sft_dir: an SFT stage's run directory the RL stages started from, or None.
        split: the evaluation split of panel 2.
        title: the figure's title.

    Returns:
        out_path.
    """
    palette = matplotlib.colormaps["tab10"].colors
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(15, 4.6), layout="constrained")
        ax_first, ax_rl, ax_rew = (fig.add_subplot(1, 3, i + 1) for i in range(3))
        start = None
        if sft_dir is not None:
            sft = _series(load_metrics(sft_dir))
            start = load_eval(sft_dir).get((split, "pass@1"))
            ax_first.set_title("SFT: greedy pass@1 on held-out problems")
            for key, label, style in ((f"eval/{split}/pass@1", f"{split} split", "-"),
                                      ("eval/val/pass@1", "train-split hold-out (stopping rule)", "--")):
                if key in sft:
                    ax_first.plot(*sft[key], color="0.3", linestyle=style, marker="o", markersize=3, label=label)
            ax_first.set_xlabel("SFT step")
            ax_first.set_ylabel("greedy pass@1")
        else:
            ax_first.set_title("the verifier on the generator's samples")
            ax_first.set_xlabel("RL step (generator updates)")
            ax_first.set_ylabel("balanced agreement with the ground truth")
            ax_first.axhline(0.5, color="0.5", linestyle=":", linewidth=1.2)
            ax_first.annotate("chance", (0, 0.5), xytext=(2, 3), textcoords="offset points", fontsize=9, color="0.4")
        ax_first.set_ylim(-0.03, 1.03)

        ax_rl.set_title(f"RL: greedy pass@1 on {split}")
        ax_rew.set_title("RL: training reward (share correct)")
        if start is not None:
            ax_rl.plot([0], [start], marker="*", markersize=13, color="0.25", linestyle="none",
                       label=f"SFT start {start:.3f}")
        values = [start] if start is not None else []
        for i, run_dir in enumerate(rl_dirs):
            color, name = palette[i % len(palette)], Path(run_dir).name
            recipe = read_recipe(run_dir)
            label = f"{name} ({recipe})" if recipe and recipe != name else name
            series = _series(load_metrics(run_dir))
            final = load_eval(run_dir).get((split, "pass@1"))
            x, y = series.get(f"eval/{split}/pass@1", (np.array([]), np.array([])))
            if start is not None and not (len(x) and x[0] == 0):  # no step-0 evaluation: the SFT model's
                x, y = np.concatenate([[0.0], x]), np.concatenate([[start], y])
            values += [*y, *([final] if final is not None else [])]
            ax_rl.plot(x, y, color=color, marker="o", markersize=4, linewidth=1.8,
                       label=label + (f": {final:.3f} at the end" if final is not None else ""))
            if "gen/reward" in series:
                _draw_curve(ax_rew, *series["gen/reward"], 5, color, "-")
                ax_rew.plot([], [], color=color, label=label)
            if sft_dir is None and "cotrain/agree_balanced" in series:
                _draw_curve(ax_first, *series["cotrain/agree_balanced"], 5, color, "-")
                ax_first.plot([], [], color=color, label=label)
        for ax in (ax_rl, ax_rew) if sft_dir is not None else (ax_first, ax_rl, ax_rew):
            ax.set_xlabel("RL step (generator updates)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=9, loc="lower right")
        if sft_dir is not None:
            ax_first.legend(fontsize=9, loc="upper left")
        ax_rl.set_ylabel("greedy pass@1")
        ax_rew.set_ylabel("mean reward")
        if values:
            ax_rl.set_ylim(max(0.0, min(values) - 0.1), min(1.0, max(values) + 0.1))
        fig.suptitle(title)
        return _save(fig, Path(out_path))
