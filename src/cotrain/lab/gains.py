"""Gains over a setting's values (`cotrain gains SPEC`): each point's measured gain, its table and its figure."""
from __future__ import annotations

import json
import math
from pathlib import Path

from cotrain.config import read_yaml_mapping
from cotrain.errors import UserError
from cotrain.lab.runs import BASELINE, LABELFREE, SCHEDULE, build_start, cell, load_study
from cotrain.stats import POINTS, paired_difference


def _lookup(data, key: str):
    """The value at a slash-separated key; metric names hold slashes themselves (`gap/verifier`), so at
    each level the whole rest of the key is tried before its first part."""
    parts = key.split("/")
    while parts:
        if not isinstance(data, dict):
            return None
        if "/".join(parts) in data:
            return data["/".join(parts)]
        data, parts = data.get(parts[0]), parts[1:]
    return data


def _measured(spec_dir: Path, setting: dict, x: dict) -> float:
    path = spec_dir / str(setting.get("measured", ""))
    if not path.is_file():
        raise UserError(f"setting {setting.get('name')!r}: its measurement {path} is not a file")
    try:
        value = _lookup(json.loads(path.read_text(encoding="utf-8")), str(x.get("key", "")))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"setting {setting.get('name')!r}: {path} is no JSON ({err})") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UserError(f"setting {setting.get('name')!r}: {path} has no number at {x.get('key')!r}")
    return 1.0 - float(value) if x.get("one_minus") else float(value)


def gains_table(spec_path: str | Path) -> tuple[str, list[dict]]:
    """Co-training's gain over GRPO in each of several settings, against a measured property of each.

    The spec (YAML) names the property and the settings; paths are relative to the spec's directory:

        x: {label: all-wrong groups of 8 at the start, key: generator/test/pass@8, one_minus: true}
        arm: tango                  # the arm paired with grpo (default tango)
        settings:
          - {name: SFT step 500, runs: step_500, measured: step_500.json}

    `runs` is a study directory (`<arm>/seed<S>/`, as `cotrain study` reads); `measured` a JSON file
    whose number at `key` (slash-separated; metric names may hold slashes) is the setting's x, or 1 − it.
    The label-free gain is the `labelfree` arm's final test pass@1 against the study's start
    (`starts/sft/eval.json`), where both are there.

    Returns:
        (markdown table, one dict per setting: name, x, gain (Paired or None), labelfree (Paired or None)).
    """
    spec_path = Path(spec_path)
    spec = read_yaml_mapping(spec_path, "the gains spec")
    x, arm, settings = spec.get("x"), str(spec.get("arm", SCHEDULE)), spec.get("settings")
    if not isinstance(x, dict) or "key" not in x:
        raise UserError(f"{spec_path}: `x` must be a mapping with a `key` (and a `label`)")
    if not isinstance(settings, list) or not settings or not all(isinstance(s, dict) for s in settings):
        raise UserError(f"{spec_path}: `settings` must be a non-empty list of mappings")
    label = str(x.get("label", x["key"]))
    lines = [f"| setting | {label} | seeds | grpo test pass@1 | {arm} test pass@1 | {arm} − grpo (points) | "
             "label-free gain over the start (points) | CPU |", "|---|---:|---|---|---|---|---|---|"]
    points = []
    for setting in settings:
        name = str(setting.get("name", setting.get("runs")))
        value = _measured(spec_path.parent, setting, x)
        arms = load_study(spec_path.parent / str(setting.get("runs", "")))
        finals = {a: {s: r.final("test") for s, r in runs.items() if r.final("test") is not None}
                  for a, runs in arms.items()}
        base, co = finals.get(BASELINE, {}), finals.get(arm, {})
        gain = paired_difference(base, co, POINTS) if set(base) & set(co) else None
        lf = None
        if finals.get(LABELFREE):
            start = build_start(spec_path.parent / str(setting.get("runs", "")))
            if start is not None:
                lf = paired_difference({s: start for s in finals[LABELFREE]}, finals[LABELFREE], POINTS)
        seeds = sorted(gain.seeds) if gain else []
        cpus = ", ".join(sorted({r.cpu for runs in arms.values() for r in runs.values()}))
        lines.append(f"| {name} | {value:.3f} | {','.join(map(str, seeds)) or '–'} | "
                     f"{cell([base[s] for s in seeds])} | {cell([co[s] for s in seeds])} | "
                     f"{gain.text() if gain else '–'} | {lf.text() if lf else '–'} | {cpus} |")
        points.append({"name": name, "x": value, "gain": gain, "labelfree": lf})
    return "\n".join(lines), points


def plot_gains(points: list[dict], path: str | Path, xlabel: str, arm: str = SCHEDULE) -> None:
    """Each setting's paired gain over GRPO (and the label-free gain, where there is one) against its x,
    with 95% CIs as error bars and the settings named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, marker in (("gain", f"{arm} − grpo", "o"), ("labelfree", "label-free − start", "s")):
        shown = [p for p in points if p[key] is not None]
        if not shown:
            continue
        xs, ys = [p["x"] for p in shown], [p[key].mean for p in shown]
        err = [[0.0 if math.isnan(p[key].lo) else p[key].mean - p[key].lo for p in shown],
               [0.0 if math.isnan(p[key].hi) else p[key].hi - p[key].mean for p in shown]]
        ax.errorbar(xs, ys, yerr=err, fmt=marker, capsize=4, label=label)
        for p in shown:
            ax.annotate(p["name"], (p["x"], p[key].mean), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("gain, points of greedy pass@1 (test; 95% CI)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def build_gains(spec_path: str | Path) -> str:
    """The table (printed, and written beside the spec as <spec>.md) and figure (<spec>.png) of a gains spec."""
    spec_path = Path(spec_path)
    text, points = gains_table(spec_path)
    spec = read_yaml_mapping(spec_path, "the gains spec")
    x = spec["x"]
    spec_path.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    plot_gains(points, spec_path.with_suffix(".png"), str(x.get("label", x["key"])), str(spec.get("arm", SCHEDULE)))
    return text
