"""`cotrain report`: one self-contained HTML page of runs, sweeps and studies, to send to a colleague.

Nothing in the page reaches the network: every chart is a PNG inlined as a data URI, every table is
HTML. What it shows:
  a run     provenance (commit, command, machine, versions: env.json, COMMAND), the config's
            differences from the defaults, its curves on its own steps (curves.png, eval.png,
            cotrain.png, labelfree.png as `plot_runs` draws them), the alarms that fired and at which
            step, eval.json as tables, and the sampled completions with their verdicts (samples.jsonl).
  a study   (results/<study>: <arm>/seed<S> run records) the summary table with paired CIs, the plan's
            criteria read off it (`study_criteria`), each holding or not with its numbers, and the
            accuracy curves against steps and FLOPs with their CIs, and best-of-N against N where an
            arm measured it (V-STaR).
  a sweep   (a directory with summary.md) its summary table and every run's curves on one chart.
Several runs open the page with their comparison: each one's final pass@1 per split with its interval, and its
difference from the first (paired over the problems where both kept outcomes.json), and a demo's demo.png.
A directory of runs (the demo's) shows each run in turn.
Charts are `<figure class="chart" id="chart-...">`; each study's criteria are `<table class="criteria"
id="criteria-...">`.
"""
from __future__ import annotations

import base64
import datetime
import html
import json
import re
import tempfile
from pathlib import Path

import yaml

from cotrain.analysis.plot import load_metrics, plot_runs
from cotrain.lab.figures import plot_differences, plot_study
from cotrain.lab.judges import best_of_n_by_arm, bon_table, judge_table, plot_bon, plot_judge
from cotrain.lab.pairing import VERDICT
from cotrain.lab.runs import add_shared_warmups, build_start, load_study
from cotrain.lab.table import study_criteria, study_table
from cotrain.errors import UserError

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 24px 48px; color: #222; }
h1 { margin-top: 28px; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 40px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure.chart { margin: 12px 0; } figure.chart img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #666; font-size: 12px; } .holds { color: #0a6b2d; font-weight: 600; }
.fails { color: #a4161a; font-weight: 600; } .unknown { color: #666; }
pre { background: #f7f7f7; padding: 6px 8px; overflow-x: auto; margin: 0; font-size: 12px; }
nav a { margin-right: 12px; } .alarm { color: #a4161a; font-weight: 600; }
"""


def build_report(paths: list[str | Path], out: str | Path, summary: tuple[list[str], Path | None] | None = None) -> Path:
    """Write the report of `paths` (run, sweep or study directories, in that order on the page) to `out`;
    with `summary` (lines of what was found, a figure or None), that first, as the page's opening section.

    Raises:
        UserError: a path that is not a directory, or that holds no run, sweep or study.
    """
    sections, toc = [], []
    shown = _expand(paths)
    runs = [p for p in shown if kind_of(p) == "run"]
    if len(runs) >= 2:  # several runs: the page opens with how they compare
        sections.append(f'<section class="comparison" id="comparison"><h2>The runs compared</h2>'
                        f'{_comparison(runs, [Path(p) for p in paths])}</section>')
        toc.append('<a href="#comparison">comparison</a>')
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(shown):
            kind = kind_of(path)
            if kind is None:
                raise UserError(f"report: {path} holds no run (config.yaml and metrics.jsonl), sweep (summary.md) "
                                f"or study (<arm>/seed<S>/eval.json)")
            slug = f"{i}-{_slug(path.name)}"
            scratch = Path(tmp) / slug
            scratch.mkdir()
            body = {"run": _run_section, "study": _study_section, "sweep": _sweep_section}[kind](path, slug, scratch)
            sections.append(f'<section class="{kind}" id="{kind}-{slug}"><h2>{kind}: {_e(str(path))}</h2>{body}</section>')
            toc.append(f'<a href="#{kind}-{slug}">{_e(path.name)}</a>')
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>cotrain report</title>'
            f'<style>{STYLE}</style></head><body><h1>cotrain report</h1>'
            f'{_summary_section(*summary) if summary else ""}'
            f'<p>{_e(_page_provenance())}</p><nav>{"".join(toc)}</nav>{"".join(sections)}</body></html>')
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _summary_section(lines: list[str], figure: Path | None) -> str:
    """The page's opening: what was compared, what won, by how much, on which machine; then the figure."""
    items = "".join(f"<li>{_e(line)}</li>" for line in lines)
    shown = _figure("summary-figure", figure, figure.name) if figure is not None and figure.is_file() else ""
    return f'<section id="summary"><h2>What this found</h2><ul>{items}</ul>{shown}</section>'


def _expand(paths) -> list[Path]:
    """The directories to show, in order: each path itself, or, for a directory of runs (the demo's, a
    sweep's cell), the runs in it."""
    out = []
    for path in (Path(p) for p in paths):
        if not path.is_dir():
            raise UserError(f"report: {path} is not a directory (give run, sweep or study directories)")
        children = sorted(c for c in path.iterdir() if c.is_dir() and kind_of(c) == "run")
        out += [path] if kind_of(path) is not None or not children else children
    return out


def kind_of(path: Path) -> str | None:
    """"run", "study", "sweep" or None: what a directory holds."""
    if (path / "config.yaml").is_file() and any((path / f).is_file() for f in ("metrics.jsonl", "metrics.jsonl.gz")):
        return "run"
    if (path / "summary.md").is_file():
        return "sweep"
    if any(p.is_file() for p in path.glob("*/seed*/eval.json")):
        return "study"
    return None


# --------------------------------------------------------------------------- several runs


def _comparison(runs: list[Path], given: list[Path]) -> str:
    """Each run's final greedy pass@1 per split with its 95% interval, then each run's difference from the first
    with its interval: paired problem by problem where both kept their outcomes on the same problems
    (outcomes.json), else as two independent accuracies (wider). A demo's figure (demo.png) follows."""
    from cotrain.stats import Z975, difference_ci95, paired_evaluation_sd

    evals = {r: _read_json(r / "eval.json").get("generator", {}) for r in runs}
    splits = [s for s in dict.fromkeys(s for e in evals.values() for s in e) if all(s in e for e in evals.values())]
    if not splits:
        return "<p>no split that every run evaluated (eval.json)</p>"

    def recipe(run: Path) -> str:
        try:
            return str((yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8", errors="replace")) or {})
                       .get("recipe", "?"))
        except (OSError, yaml.YAMLError):
            return "?"

    def cell(m: dict) -> str:
        lo, hi = m.get("pass@1_ci95_lo"), m.get("pass@1_ci95_hi")
        band = f" [{lo:.3f}, {hi:.3f}]" if isinstance(lo, float) and isinstance(hi, float) else ""
        return f"{m.get('pass@1', float('nan')):.3f}{band} (n {m.get('n', '?')})"

    rows = [(r.name, recipe(r), *(cell(evals[r][s]) for s in splits)) for r in runs]
    parts = ["<h3>Final greedy pass@1, with its 95% interval</h3>",
             _table(["run", "recipe", *splits], rows, cls="comparison", ident="comparison-accuracy")]
    base, outcomes = runs[0], {r: _read_json(r / "outcomes.json") for r in runs}
    diffs = []
    for run in runs[1:]:
        cells = []
        for s in splits:
            a, b = evals[base][s], evals[run][s]
            oa, ob = outcomes[base].get(s, {}), outcomes[run].get(s, {})
            if oa.get("questions_sha256") and oa.get("questions_sha256") == ob.get("questions_sha256"):
                d = b["pass@1"] - a["pass@1"]
                half = Z975 * paired_evaluation_sd(oa["correct"], ob["correct"])
                cells.append(f"{100 * d:+.1f} [{100 * (d - half):+.1f}, {100 * (d + half):+.1f}] paired")
            else:
                d, lo, hi = difference_ci95(a["pass@1"], b["pass@1"], min(a.get("n", 0), b.get("n", 0)))
                cells.append(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] unpaired")
        diffs.append((f"{run.name} − {base.name}", *cells))
    if diffs:
        parts += [f"<h3>Differences from {_e(base.name)}, in points</h3><p>95% intervals over the problems; one seed "
                  "each, so they say nothing of another seed.</p>",
                  _table(["runs", *splits], diffs, cls="comparison", ident="comparison-differences")]
    for path in given:
        if (path / "demo.png").is_file():
            parts.append(_figure("chart-demo", path / "demo.png", f"demo.png of {path.name}"))
    return "".join(parts)


# --------------------------------------------------------------------------- a run


def _run_section(run_dir: Path, slug: str, scratch: Path) -> str:
    parts = [_provenance_table(run_dir), "<h3>Config: what differs from the defaults</h3>", _config_diff(run_dir)]
    try:
        pngs = plot_runs([run_dir], out_dir=scratch)
    except ValueError as err:
        pngs, parts = [], parts + [f"<p>no curves: {_e(str(err))}</p>"]
    if pngs:
        parts.append("<h3>Curves (x: this run's own steps)</h3>")
        parts += [_figure(f"chart-{slug}-{p.stem}", p, f"{p.name} of {run_dir.name}") for p in pngs]
    parts += ["<h3>Alarms</h3>", _alarms(run_dir), "<h3>Evaluation (eval.json)</h3>", _eval_tables(run_dir),
              "<h3>Sampled completions (samples.jsonl)</h3>", _samples(run_dir)]
    return "".join(parts)


def _provenance_table(run_dir: Path) -> str:
    env = _read_json(run_dir / "env.json")
    command = (run_dir / "COMMAND").read_text(encoding="utf-8", errors="replace").strip() if (run_dir / "COMMAND").is_file() \
        else env.get("command")
    commit = env.get("commit")
    rows = [("command", command), ("commit", f"{commit}{' (uncommitted changes)' if env.get('dirty') else ''}" if commit else None),
            ("machine", " ".join(str(x) for x in (env.get("cpu"), env.get("cpu_family_model"), env.get("cpu_capability")) if x)),
            ("GPUs", ", ".join(env.get("cuda") or []) or None),
            ("precision", (env.get("precision") or {}).get("reason")),
            ("versions", ", ".join(f"{k} {env[k]}" for k in ("cotrain", "torch", "transformers", "peft", "python") if env.get(k))),
            ("resumed from", "; ".join(str(e.get("cpu")) for e in env.get("earlier", [])) or None)]
    return _table(["provenance", "of this run"], [(k, v) for k, v in rows if v], cls="provenance")


def _config_diff(run_dir: Path) -> str:
    """The dotted keys of config.yaml whose values differ from `RunConfig`'s defaults for its recipe."""
    from cotrain.config import build_config

    try:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8", errors="replace"))
        defaults = build_config({k: raw[k] for k in ("recipe",) if k in raw}).to_dict()  # its recipe's
    except Exception as err:  # noqa: BLE001 (an unreadable config is shown as such, the page still builds)
        return f"<p>config.yaml could not be read: {_e(str(err))}</p>"
    ours, base = _flatten(raw), _flatten(defaults)
    rows = [(k, _short(v), _short(base.get(k, "(not a default key)"))) for k, v in sorted(ours.items())
            if base.get(k) != v and k not in ("out_dir",)]
    return _table(["key", "this run", "default"], rows, cls="config") if rows else "<p>all defaults</p>"


def _alarms(run_dir: Path) -> str:
    fired = [(r.get("step"), k.split("/", 1)[1]) for r in load_metrics(run_dir) for k in r if k.startswith("alarm/")]
    if not fired:
        return "<p>none fired</p>"
    return _table(["step", "alarm"], [(s, f'<span class="alarm">{_e(n)}</span>') for s, n in fired], cls="alarms",
                  raw=True)


def _eval_tables(run_dir: Path) -> str:
    data = _read_json(run_dir / "eval.json")
    if not data:
        return "<p>no eval.json</p>"
    out = []
    for section, value in data.items():
        if not isinstance(value, dict):
            continue
        rows = {split: m for split, m in value.items() if isinstance(m, dict)}
        flat = {split: {k: v for k, v in _flatten(m).items() if isinstance(v, (int, float))} for split, m in rows.items()}
        keys = list(dict.fromkeys(k for m in flat.values() for k in m))
        if keys:  # a metric a row, a split a column: a verifier's forty metrics stay within the page's width
            out.append(f"<h4>{_e(section)}</h4>" + _table(["metric", *flat], [(k, *(flat[s].get(k) for s in flat))
                                                                             for k in keys], cls="eval"))
    return "".join(out) or "<p>nothing numeric in eval.json</p>"


def _samples(run_dir: Path) -> str:
    path = run_dir / "samples.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict):
                verdict = {"correct": "approved", "wrong": "rejected", "none": "no verdict"}.get(r.get("verdict"), "–")
                rows.append((f"<pre>{_e(str(r.get('question', '')))}</pre>", f"<pre>{_e(str(r.get('completion', '')))}</pre>",
                             _e("right" if r.get("correct") else "wrong"), _e(verdict)))
    if not rows:
        return "<p>no samples.jsonl (runs record one since they began writing it)</p>"
    return _table(["question", "completion", "graded", "verifier's verdict"], rows, cls="samples", raw=True)


# --------------------------------------------------------------------------- a study, a sweep


def _study_section(study_dir: Path, slug: str, scratch: Path) -> str:
    arms = load_study(study_dir)
    add_shared_warmups(arms, study_dir)
    start = build_start(study_dir)
    parts = ["<h3>Summary (mean ± 95% CI; paired differences in points, seeds paired across arms)</h3>",
             _markdown(study_table(arms, start).split("\n\n- ")[0])]
    criteria = [(arm, c.name, c.rule, f'<span class="{_verdict_class(c.holds)}">{VERDICT[c.holds]}</span>', _e(c.figures))
                for arm, c in study_criteria(arms, start)]
    parts.append("<h3>The plan's criteria</h3>")
    parts.append(_table(["arm", "criterion", "rule", "verdict", "numbers"], criteria, cls="criteria",
                        ident=f"criteria-{slug}", raw=True) if criteria else
                 f'<table class="criteria" id="criteria-{slug}"><tr><td>no co-training arm beside grpo</td></tr></table>')
    png = scratch / "study.png"
    plot_study(arms, png, title=study_dir.name)
    parts.append(_figure(f"chart-{slug}-study", png, "greedy pass@1 in training: mean over seeds with its 95% CI, "
                                                       "against generator steps and against FLOPs"))
    if plot_differences(arms, scratch / "differences.png", title=study_dir.name):
        parts.append(_figure(f"chart-{slug}-differences", scratch / "differences.png", "each arm's final test "
                             "pass@1 minus grpo's, seeds paired: mean, 95% CI and each seed"))
    picks = best_of_n_by_arm(arms)
    if picks:
        parts += ["<h3>Best of N</h3>", _markdown(bon_table(picks))]
        plot_bon(picks, scratch / "bon.png", title=study_dir.name)
        parts.append(_figure(f"chart-{slug}-bon", scratch / "bon.png", "best-of-N accuracy against N: each "
                             "selector's pick among N of 64 samples, mean over seeds with its 95% CI"))
    judged = {arm: runs for arm, runs in arms.items() if all(r.agree for r in runs.values())}
    if judged:
        parts += ["<h3>The judge against the truth</h3>", _markdown(judge_table(judged))]
        plot_judge(judged, scratch / "judge.png", title=study_dir.name)
        parts.append(_figure(f"chart-{slug}-judge", scratch / "judge.png", "the judge's agreement with the "
                             "truth over training (read for display only): 10-step windows, mean over seeds, 95% CI"))
    cpus = sorted({r.cpu for runs in arms.values() for r in runs.values()})
    parts.append(f"<p>machines: {_e(', '.join(cpus))}; {sum(len(r) for r in arms.values())} runs in "
                 f"{len(arms)} arms</p>")
    return "".join(parts)


def _sweep_section(sweep_dir: Path, slug: str, scratch: Path) -> str:
    parts = [_markdown((sweep_dir / "summary.md").read_text(encoding="utf-8", errors="replace"))]
    runs = sorted(p.parent for p in sweep_dir.glob("**/config.yaml") if kind_of(p.parent) == "run")
    if runs:
        try:
            pngs = plot_runs(runs, out_dir=scratch)
            parts += [_figure(f"chart-{slug}-{p.stem}", p, f"{p.name}: every run of the sweep") for p in pngs]
        except ValueError as err:
            parts.append(f"<p>no curves: {_e(str(err))}</p>")
    return "".join(parts)


# --------------------------------------------------------------------------- HTML pieces


def _figure(ident: str, png: Path, caption: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure class="chart" id="{_e(ident)}"><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _table(header: list[str], rows: list, cls: str = "", ident: str = "", raw: bool = False) -> str:
    """An HTML table; numbers right-aligned and shown to 4 significant digits; cells escaped unless `raw`
    (the caller escaped them)."""
    def cell(v):
        if isinstance(v, bool) or v is None:
            return f"<td>{'–' if v is None else v}</td>"
        if isinstance(v, (int, float)):
            return f'<td class="num">{v:.4g}</td>'
        return f"<td>{v if raw else _e(str(v))}</td>"
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"{f" id={chr(34)}{ident}{chr(34)}" if ident else ""}><tr>{head}</tr>{body}</table>'


def _markdown(text: str) -> str:
    """The markdown the study and sweep tools write: pipe tables, `- ` bullets, paragraphs; **bold**."""
    out, table = [], []

    def flush():
        if table:
            rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table
                    if not re.fullmatch(r"\|?[\s|:-]+\|?", line.strip())]
            out.append(_table(rows[0], [[_inline(c) for c in r] for r in rows[1:]], raw=True))
            table.clear()
    for line in text.splitlines():
        if line.strip().startswith("|"):
            table.append(line)
            continue
        flush()
        if line.strip().startswith("- "):
            out.append(f"<li>{_inline(line.strip()[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline(line.strip())}</p>")
    flush()
    return "".join(out)


def _inline(text: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _e(text))


def _verdict_class(holds: bool | None) -> str:
    return {True: "holds", False: "fails", None: "unknown"}[holds]


def _page_provenance() -> str:
    from cotrain.precision import machine_line, provenance

    p = provenance()
    return (f"built {datetime.datetime.now().isoformat(timespec='seconds')} by cotrain {p['cotrain']}"
            f"{', commit ' + p['commit'][:12] if p['commit'] else ''} on {machine_line()}")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _short(v) -> str:
    text = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v
    return text if len(text) <= 120 else text[:117] + "..."


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "dir"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
