"""Sweeps: a grid of run configs x seeds, each run a `cotrain run` subprocess, summarised as mean ± 95% CI.

A sweep file (YAML; relative paths are relative to the sweep file):

    base: ../sft.yaml                 # run config every cell starts from (optional: the defaults)
    overrides: {train.steps: 100}     # dotted overrides of every cell (optional)
    prepare:                          # optional: one run done first; every cell gets init=DIR/prepare
      config: ../sft.yaml             #   its config (optional) ...
      overrides: {train.steps: 50}    #   ... and overrides (optional)
    grid:                             # cartesian product: dotted key -> list of values
      train.lr: [1.0e-4, 3.0e-4]
    seeds: [0, 1, 2]                  # default [0]
    metrics: [generator/test/pass@1, last:sft/loss]   # default: every numeric leaf of eval.json but `n`

Instead of a grid, named arms (a study's table: each arm its own overrides, and its own seeds if given):

    arms:
      grpo: {overrides: {recipe: grpo}}
      tango_auto: {overrides: {cotraining.alpha: auto}, seeds: [0, 1, 2, 3, 4]}
      labelfree: {config: ../sparse/labelfree.yaml}     # its own base config (relative to the sweep file)

Each arm's runs go to DIR/<arm>/seed<S>/, the layout `cotrain study` reads.

Several preparation stages instead of one (a study's starts: SFT, then the verifier's warm-up): a list of
named stages, run one after the other into DIR/<name>/, each named by the runs that follow as
`{prepare.<name>}` in any string of their overrides (nothing is set for them: the cells say what they
start from):

    prepare:
      - {name: sft, config: ../sparse/sft.yaml}
      - {name: warm, config: ../sparse/tango.yaml, overrides: {train.steps: 0,
         init: "{prepare.sft}/checkpoints/step_1000/generator", verifier.init: "{prepare.sft}/checkpoints/step_2250/generator"}}
    overrides: {init: "{prepare.sft}/checkpoints/step_1000/generator", verifier.init: "{prepare.warm}/final/verifier"}

A cell's config is the base config, then the file's overrides, then the command line's overrides, then the
cell's grid values, then `init` (with a prepare run) and `seed`. The prepare run's config is its own config,
its overrides, then the command line's overrides. Every config is validated before anything runs.

The sweep directory:

    DIR/prepare/  prepare.yaml  prepare.log        the prepare run, its config and its output
    DIR/<cell>/seed<S>/  seed<S>.yaml  seed<S>.log  a run (e.g. DIR/train.lr=1.0e-4/seed0/)
    DIR/summary.csv  DIR/summary.md                 mean and 95% CI half-width over seeds, per cell

A run is finished when its eval.json exists and is then skipped; a run dir without one is resumed, so
running the same command again continues an interrupted sweep. A run dir whose config.yaml differs from
its cell's config stops the sweep before anything runs (its results would be mislabelled).
"""
from __future__ import annotations

import copy
import csv
import difflib
import hashlib
import io
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cotrain.config import apply_overrides, build_config, read_yaml_mapping, renamed_sections
from cotrain.errors import UserError
from cotrain.stats import mean_ci95

SWEEP_KEYS = ("base", "overrides", "prepare", "grid", "arms", "seeds", "metrics")
ARM_KEYS = ("config", "overrides", "seeds")
PREPARE_KEYS = ("config", "overrides")
LAST = "last:"          # a metric `last:<key>` is the mean of <key> over the last rows of metrics.jsonl
LAST_FRACTION = 0.1     # ... the last 10% of the rows that hold the key, at least one
FIRST = "first:"        # and `first:<key>` the mean over the first 10% (training dynamics: start vs end)
NAME = re.compile(r"[A-Za-z0-9._+@-]{1,100}")  # an arm's or a prepare stage's name: it names a directory

@dataclass
class Cell:
    """One point of the grid."""

    name: str                  # "cotraining.alpha=0.3,train.lr=1e-3": also its directory in the sweep dir
    values: dict[str, Any]     # grid key -> this cell's value
    configs: dict[int, dict]   # seed -> validated, resolved run config (without `init` from prepare)


@dataclass
class Sweep:
    path: Path
    grid: dict[str, list]
    seeds: list[int]
    cells: list[Cell]
    prepare: dict[str, dict] = field(default_factory=dict)  # stage name -> validated config, in order
    auto_init: bool = False               # one unnamed prepare run: every cell gets init=DIR/prepare
    metrics: list[str] | None = None      # None: every numeric leaf of eval.json but `n`


@dataclass
class Run:
    """One `cotrain run` of the sweep."""

    label: str                 # "cotraining.alpha=0.3 seed1", or a prepare stage's name
    config: dict
    run_dir: Path
    status: str = field(init=False, default="")

    @property
    def config_path(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".yaml")

    @property
    def log_path(self) -> Path:
        return self.run_dir.with_name(self.run_dir.name + ".log")

    @property
    def finished(self) -> bool:
        return (self.run_dir / "eval.json").is_file()


# ---------------------------------------------------------------- statistics


# ---------------------------------------------------------------- loading


def _read_yaml(path: Path, what: str) -> dict:
    return read_yaml_mapping(path, what)


def _check_known(raw: dict, known: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(known)})"
            raise UserError(f"unknown key '{key}' in {where}{hint}")


def _relative(sweep_path: Path, value, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise UserError(f"{where} must be a path to a run config (got {value!r})")
    return sweep_path.parent / value


def _as_overrides(mapping, where: str) -> list[str]:
    """{dotted key: value} -> ["key=value", ...] for `apply_overrides` (JSON text is YAML, so values round-trip)."""
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise UserError(f"{where} must be a mapping of dotted keys to values, e.g. {{train.steps: 100}}")
    return [f"{key}={json.dumps(value, default=str)}" for key, value in mapping.items()]


def _grid(raw) -> dict[str, list]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError("grid must be a mapping of dotted keys to lists of values, e.g. {train.lr: [1.0e-4, 3.0e-4]}")
    for key, values in raw.items():
        if not isinstance(values, list):
            raise UserError(f"grid key '{key}' needs a list of values (got {values!r}): write [{values!r}]")
        if not values:
            raise UserError(f"grid key '{key}' has an empty list of values")
    return {str(k): v for k, v in raw.items()}


def _seeds(raw) -> list[int]:
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        raise UserError(f"seeds must be a non-empty list of integers, e.g. [0, 1, 2] (got {raw!r})")
    if len(set(raw)) != len(raw):
        raise UserError(f"seeds has duplicates: {raw}")
    return raw


def _metrics(raw) -> list[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) and m for m in raw):
        raise UserError(f"metrics must be a non-empty list of names, e.g. [generator/test/pass@1] (got {raw!r})")
    return raw


def _check_ownership(grid: dict, sources: dict[str, list[str]], has_prepare: bool) -> None:
    """Keys the sweep sets itself may not be overridden; an override of a grid key would erase the grid."""
    owned = {"seed": "the sweep's seeds list sets it"}
    if has_prepare:
        owned["init"] = "every cell starts from the prepare run"
    for key in grid:
        if key in owned:
            raise UserError(f"'{key}' cannot be a grid key: {owned[key]}")
    for where, items in sources.items():
        for item in items:
            key = item.split("=", 1)[0].strip()
            if key in owned:
                raise UserError(f"'{key}' in the {where}: {owned[key]}")
            if key in grid:
                raise UserError(f"'{key}' is a grid key: an override in the {where} would give every cell the same value")


def _format_value(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "_".join(_format_value(v) for v in value)
    return json.dumps(value, default=str)  # true, null, 0.3


def cell_name(values: dict[str, Any]) -> str:
    """`key=value` joined by `,`, with characters awkward in a directory name replaced by `_`."""
    if not values:
        return "base"
    name = ",".join(f"{key}={_format_value(v)}" for key, v in values.items())
    name = re.sub(r"[^A-Za-z0-9._=+@,-]", "_", name)
    if len(name) > 200:  # file names stop at 255 bytes
        name = name[:190] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def _validated(raw: dict, where: str) -> dict:
    try:
        return build_config(raw).to_dict()
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> Sweep:
    """Read a sweep file and build and validate the config of every run (nothing runs).

    Args:
        overrides: dotted `key=value` overrides from the command line, applied to every cell and to prepare.
    """
    path = Path(path)
    spec = _read_yaml(path, "sweep file")
    _check_known(spec, SWEEP_KEYS, f"sweep file {path}")
    cli = list(overrides or [])
    file_overrides = _as_overrides(spec.get("overrides"), "overrides")
    grid = _grid(spec.get("grid"))
    seeds = _seeds(spec.get("seeds", [0]))
    metrics = _metrics(spec.get("metrics"))
    prepare_spec = spec.get("prepare")
    single = isinstance(prepare_spec, dict)
    _check_ownership(grid, {"sweep file's overrides": file_overrides, "command line": cli}, single)

    # ------------------------------------------------ prepare
    prepare = {}
    if prepare_spec is not None:
        if not isinstance(prepare_spec, (dict, list)) or not prepare_spec:
            raise UserError("prepare must be a mapping with 'config' and/or 'overrides', or a list of those, each "
                            "with a 'name'")
        if single:  # one unnamed run, checked before it is given its name
            _check_known(prepare_spec, PREPARE_KEYS, "prepare")
        for i, stage in enumerate([dict(prepare_spec, name="prepare")] if single else prepare_spec):
            where = "prepare" if single else f"prepare[{i}]"
            if not isinstance(stage, dict):
                raise UserError(f"{where} must be a mapping with 'name', 'config' and/or 'overrides'")
            _check_known(stage, ("name", *PREPARE_KEYS), where)
            name = stage.get("name")
            if not isinstance(name, str) or not NAME.fullmatch(name):
                raise UserError(f"{where}: its name {name!r} must be letters, digits and ._+@- (it names a directory)")
            if name in prepare:
                raise UserError(f"{where}: two prepare stages are named '{name}'")
            where = where if single else f"prepare stage '{name}'"
            raw = _read_yaml(_relative(path, stage["config"], f"{where}.config"), "prepare config") \
                if stage.get("config") is not None else {}
            raw = apply_overrides(raw, _as_overrides(stage.get("overrides"), f"{where}.overrides") + cli)
            prepare[name] = _validated(raw, where)

    # ------------------------------------------------ cells
    base = _read_yaml(_relative(path, spec["base"], "base"), "base config") if spec.get("base") is not None else {}
    if spec.get("arms") is not None:
        if grid:
            raise UserError("a sweep has either a grid or arms, not both")
        cells = _arm_cells(path, spec["arms"], base, file_overrides + cli, seeds)
        return _checked(Sweep(path, {"arm": [c.name for c in cells]}, seeds, cells, prepare, single, metrics))
    cells = []
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo))
        name = cell_name(values)
        raw = apply_overrides(copy.deepcopy(base), file_overrides + cli + _as_overrides(values, "grid"))
        cells.append(Cell(name, values, {seed: _validated({**raw, "seed": seed}, f"cell {name}") for seed in seeds}))
    names = [c.name for c in cells]
    for name in names:
        if names.count(name) > 1:
            raise UserError(f"two cells share the directory name '{name}': make the grid values distinct")
    return _checked(Sweep(path, grid, seeds, cells, prepare, single, metrics))


PLACEHOLDER = re.compile(r"\{prepare\.([^{}]*)\}")


def _placeholders(config) -> set[str]:
    """The stage names a config refers to as `{prepare.<stage>}`."""
    if isinstance(config, dict):
        return set().union(*map(_placeholders, config.values())) if config else set()
    if isinstance(config, list):
        return set().union(*map(_placeholders, config)) if config else set()
    return set(PLACEHOLDER.findall(config)) if isinstance(config, str) else set()


def _substitute(config, dirs: dict[str, str]):
    """The config with every `{prepare.<stage>}` replaced by that stage's run directory."""
    if isinstance(config, dict):
        return {k: _substitute(v, dirs) for k, v in config.items()}
    if isinstance(config, list):
        return [_substitute(v, dirs) for v in config]
    return PLACEHOLDER.sub(lambda m: dirs[m.group(1)], config) if isinstance(config, str) else config


def _checked(sweep: Sweep) -> Sweep:
    """Every `{prepare.<stage>}` names a stage that runs before it; no stage shares a cell's directory."""
    stages = list(sweep.prepare)
    for i, (name, config) in enumerate(sweep.prepare.items()):
        for ref in sorted(_placeholders(config) - set(stages[:i])):
            raise UserError(f"prepare stage '{name}' refers to {{prepare.{ref}}}: "
                            + (f"a stage runs only after the stages before it ({', '.join(stages[:i]) or 'none'})"
                               if ref in stages else f"no such stage (stages: {', '.join(stages) or 'none'})"))
    for cell in sweep.cells:
        for ref in sorted(set().union(*map(_placeholders, cell.configs.values())) - set(stages)):
            raise UserError(f"{cell.name} refers to {{prepare.{ref}}}: no such prepare stage "
                            f"(stages: {', '.join(stages) or 'none'})")
        if cell.name in sweep.prepare:
            raise UserError(f"'{cell.name}' names both a prepare stage and a cell: rename one (both are directories)")
    return sweep


def _arm_cells(path: Path, arms, base: dict, overrides: list[str], seeds: list[int]) -> list[Cell]:
    if not isinstance(arms, dict) or not arms:
        raise UserError("arms must be a mapping of arm names to {config, overrides, seeds}, e.g. {grpo: {overrides: {recipe: grpo}}}")
    cells = []
    for name, arm in arms.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise UserError(f"arm name {name!r}: use letters, digits and ._+@- (it names a directory)")
        arm = arm or {}
        if not isinstance(arm, dict):
            raise UserError(f"arm '{name}' must be a mapping with config, overrides and/or seeds")
        _check_known(arm, ARM_KEYS, f"arm '{name}'")
        raw = _read_yaml(_relative(path, arm["config"], f"arms.{name}.config"), f"arm '{name}' config") \
            if arm.get("config") is not None else copy.deepcopy(base)
        own = _as_overrides(arm.get("overrides"), f"arms.{name}.overrides")
        if any(item.split("=", 1)[0].strip() == "seed" for item in own):
            raise UserError(f"'seed' in arm '{name}': the arm's seeds list sets it")
        raw = apply_overrides(raw, overrides + own)
        arm_seeds = _seeds(arm["seeds"]) if "seeds" in arm else seeds
        cells.append(Cell(name, {"arm": name}, {s: _validated({**raw, "seed": s}, f"arm {name}") for s in arm_seeds}))
    return cells


# ---------------------------------------------------------------- running


def plan(sweep: Sweep, out_dir: str | Path) -> list[Run]:
    """Every run of the sweep in order (prepare first), with its run dir under `out_dir`."""
    out_dir = Path(out_dir)
    dirs = {name: str(out_dir / name) for name in sweep.prepare}
    runs = [Run(name, _substitute(config, dirs), out_dir / name) for name, config in sweep.prepare.items()]
    init = {"init": dirs["prepare"]} if sweep.auto_init else {}
    for cell in sweep.cells:
        for seed, config in cell.configs.items():
            runs.append(Run(f"{cell.name} seed{seed}", {**_substitute(config, dirs), **init},
                            out_dir / cell.name / f"seed{seed}"))
    for run in runs:
        run.status = "finished" if run.finished else "resume" if run.run_dir.exists() else "new"
    return runs


def select(sweep: Sweep, runs: list[Run], only: list[str] | None) -> list[Run]:
    """The runs `only` names, each item a cell (an arm) or one of its seeds as "<cell>/seed<S>" (the run
    dirs' layout); the prepare stages are kept, the cells start from them. None or [] keeps every run.

    Raises:
        UserError: an item names no cell or seed of the sweep.
    """
    if not only:
        return runs
    cells = {c.name: [f"{c.name}/seed{s}" for s in c.configs] for c in sweep.cells}
    wanted = set()
    for item in only:
        item = item.strip().rstrip("/")
        if item in cells:
            wanted.update(cells[item])
        elif any(item in seeds for seeds in cells.values()):
            wanted.add(item)
        else:
            cell = item.rsplit("/seed", 1)[0]
            known = (f"its seeds: {', '.join(s.rsplit('/', 1)[1] for s in cells[cell])}" if cell in cells
                     else f"its cells: {', '.join(cells)}")
            raise UserError(f"--only {item}: no such run in {sweep.path.name} ({known})")
    n_prepare = len(sweep.prepare)
    return runs[:n_prepare] + [r for r in runs[n_prepare:] if f"{r.run_dir.parent.name}/{r.run_dir.name}" in wanted]


def _first_difference(old, new, prefix: str = "") -> str | None:
    """The first key whose value differs, as "key: old -> new". Keys on one side only are fields added to
    or removed from the config since the run was made, not a different experiment: they are ignored."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [k for k in old if k in new]:
            diff = _first_difference(old[key], new[key], f"{prefix}{key}.")
            if diff:
                return diff
        return None
    return None if old == new else f"{prefix.rstrip('.')}: {old!r} -> {new!r}"


def _check_same_config(run: Run) -> None:
    """A run dir made from another config (an edited sweep file) would be skipped or resumed under the wrong label."""
    saved = run.run_dir / "config.yaml"
    if not saved.is_file():
        return
    ignored = ("out_dir", "init")  # where the sweep dir lives is not part of the experiment
    old = {k: v for k, v in renamed_sections(yaml.safe_load(saved.read_text()) or {}).items() if k not in ignored}
    new = {k: v for k, v in run.config.items() if k not in ignored}
    diff = _first_difference(old, new)
    if diff:
        raise UserError(f"{run.run_dir} holds a run of another config ({diff}): remove it or choose another --out")


def child_env(jobs: int) -> dict:
    """The environment of each run: CPU threads shared between the `jobs` runs at once, unless set already."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    return env


def launch(run: Run, resume: bool, env: dict) -> subprocess.Popen:
    """Start `python -m cotrain run` on the run's config; its stdout and stderr are appended to the run's log."""
    cmd = [sys.executable, "-m", "cotrain", "run", str(run.config_path), "--out", str(run.run_dir)]
    if resume:
        cmd.append("--resume")
    with run.log_path.open("a") as log:
        log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')}  {shlex.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _execute(runs: list[Run], first: int, total: int, jobs: int, env: dict) -> list[tuple[Run, str]]:
    """Run the unfinished runs, at most `jobs` at once, printing a line per start and end.

    Returns:
        The failed runs with the reason.
    """
    pending = list(enumerate(runs, first))
    running: dict = {}  # process -> (tag, run, start time)
    failures = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                number, run = pending.pop(0)
                tag = f"[{number}/{total}] {run.label}"
                if run.finished:
                    print(f"{tag} already finished", flush=True)
                    continue
                resume = run.run_dir.exists()
                run.run_dir.parent.mkdir(parents=True, exist_ok=True)
                _write_text_atomic(run.config_path, yaml.safe_dump(run.config, sort_keys=False))
                running[launch(run, resume, env)] = (tag, run, time.time())
                print(f"{tag} {'resumed' if resume else 'started'}", flush=True)
            ended = [p for p in running if p.poll() is not None]
            for proc in ended:
                tag, run, start = running.pop(proc)
                took = _duration(time.time() - start)
                if proc.returncode == 0 and run.finished:
                    print(f"{tag} done in {took}", flush=True)
                    continue
                reason = f"exit {proc.returncode}" if proc.returncode else "exit 0 without eval.json"
                failures.append((run, reason))
                print(f"{tag} FAILED ({reason}) after {took}: see {run.log_path}", flush=True)
            if running and not ended:
                time.sleep(0.2)
    finally:  # interrupted: stop the runs still going (their checkpoints are complete; rerunning resumes)
        for proc in running:
            proc.terminate()
        for proc in running:
            proc.wait()
    return failures


def _print_plan(sweep: Sweep, runs: list[Run], out_dir: Path) -> None:
    extra = f", plus {len(sweep.prepare)} prepare" if sweep.prepare else ""
    seeds = {len(c.configs) for c in sweep.cells}
    shape = f"{len(sweep.cells)} cells x {seeds.pop()} seeds" if len(seeds) == 1 else f"{len(sweep.cells)} arms"
    total = len(sweep.prepare) + sum(len(c.configs) for c in sweep.cells)
    count = f"{len(runs)} runs" if len(runs) == total else f"{len(runs)} of its {total} runs (--only)"
    print(f"sweep {sweep.path}: {shape}, {count}{extra} -> {out_dir}")
    width = max(len(r.label) for r in runs)
    for number, run in enumerate(runs, 1):
        print(f"  [{number}/{len(runs)}] {run.label:<{width}}  {run.status:<8}  {run.run_dir}")


def run_sweep(sweep: Sweep, out_dir: str | Path, jobs: int = 1, dry_run: bool = False,
              only: list[str] | None = None) -> int:
    """Run every unfinished run (prepare first), or those `only` names (`select`), write and print the
    summary (of every finished run in `out_dir`).

    Returns:
        0 when every run finished, 1 when some failed (the others still ran and were summarised).
    """
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1 (got {jobs})")
    out_dir = Path(out_dir)
    runs = select(sweep, plan(sweep, out_dir), only)
    for run in runs:
        _check_same_config(run)
    if dry_run:
        _print_plan(sweep, runs, out_dir)
        return 0
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot write to sweep directory {out_dir}: {err.strerror or err}") from None

    env = child_env(jobs)
    n_prepare, failures = len(sweep.prepare), []
    for i in range(n_prepare):  # one stage at a time: each may start from the ones before it
        failures = _execute(runs[i:i + 1], 1 + i, len(runs), 1, env)
        if failures:
            print(f"the prepare run '{runs[i].label}' failed: no later run was started", flush=True)
            break
    else:
        failures = _execute(runs[n_prepare:], 1 + n_prepare, len(runs), jobs, env)

    summarize(sweep, out_dir)
    print()
    print((out_dir / "summary.md").read_text(), end="")
    print(f"\nsummary: {out_dir / 'summary.csv'}  {out_dir / 'summary.md'}")
    if failures:
        print(f"\n{len(failures)} of {len(runs)} runs failed:")
        for run, reason in failures:
            print(f"  {run.label}: {reason}, log {run.log_path}")
        return 1
    return 0


# ---------------------------------------------------------------- summary


def flatten_metrics(obj, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of eval.json as {"generator/test/pass@1": value}, without the problem counts `n`."""
    flat = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            flat.update(flatten_metrics(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "n":
            flat[f"{prefix}{key}"] = value
    return flat


def last_value(metrics_path: Path, key: str, fraction: float = LAST_FRACTION, first: bool = False) -> float | None:
    """Mean of `key` over the last (or, with `first`, the first) `fraction` of the metrics.jsonl rows
    that hold it (at least one row); rows of step 0 (a warm-up before training) are left out.

    Lines that do not parse (the last one of a killed run) and rows without the key are skipped.
    """
    if not metrics_path.is_file():
        return None
    values = []
    for line in metrics_path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        value = row.get(key) if isinstance(row, dict) and row.get("step") != 0 else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values.append(value)
    if not values:
        return None
    n = max(1, int(len(values) * fraction))
    tail = values[:n] if first else values[-n:]
    return sum(tail) / len(tail)


def _run_metrics(run_dir: Path, metrics: list[str] | None) -> dict[str, float]:
    flat = flatten_metrics(json.loads((run_dir / "eval.json").read_text()))
    if metrics is None:
        return flat
    got = {}
    for m in metrics:
        if m.startswith(LAST):
            value = last_value(run_dir / "metrics.jsonl", m[len(LAST):])
        elif m.startswith(FIRST):
            value = last_value(run_dir / "metrics.jsonl", m[len(FIRST):], first=True)
        else:
            value = flat.get(m)
        if value is not None:
            got[m] = value
    return got


def _number(x: float) -> str:
    if math.isnan(x):
        return "–"
    return f"{x:.3f}" if x == 0 or 1e-3 <= abs(x) < 1e4 else f"{x:.3g}"


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def summarize(sweep: Sweep, out_dir: str | Path) -> list[dict]:
    """Mean and 95% CI half-width over the finished seeds of each cell; writes summary.csv and summary.md.

    Returns:
        One row per cell: {"cell", <grid key>..., "n_seeds", "<metric>_mean", "<metric>_ci95"...}.
    """
    out_dir = Path(out_dir)
    per_cell = {}  # cell name -> [metrics of each finished seed]
    for cell in sweep.cells:
        dirs = [out_dir / cell.name / f"seed{seed}" for seed in cell.configs]
        per_cell[cell.name] = [_run_metrics(d, sweep.metrics) for d in dirs if (d / "eval.json").is_file()]
    metrics = sweep.metrics or list(dict.fromkeys(k for runs in per_cell.values() for r in runs for k in r))

    rows = []
    for cell in sweep.cells:
        found = per_cell[cell.name]
        row = {"cell": cell.name, **cell.values, "n_seeds": len(found)}
        for m in metrics:
            row[f"{m}_mean"], row[f"{m}_ci95"] = mean_ci95([r[m] for r in found if m in r])
        rows.append(row)

    # ------------------------------------------------ summary.csv: full precision, empty when undefined
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["cell", *sweep.grid, "n_seeds", *(f"{m}_{s}" for m in metrics for s in ("mean", "ci95"))])
    for row in rows:
        stats = [row[f"{m}_{s}"] for m in metrics for s in ("mean", "ci95")]
        writer.writerow([row["cell"], *(_shown(row[k]) for k in sweep.grid), row["n_seeds"],
                         *("" if math.isnan(x) else repr(x) for x in stats)])
    _write_text_atomic(out_dir / "summary.csv", text.getvalue())

    # ------------------------------------------------ summary.md
    keys = list(sweep.grid) or ["cell"]
    lines = ["| " + " | ".join([*keys, "n", *metrics]) + " |",
             "|" + "---|" * len(keys) + "---:|" + "---:|" * len(metrics)]
    for row in rows:
        shown = [_shown(row[k]) for k in keys] + [str(row["n_seeds"])]
        for m in metrics:
            mean, half = row[f"{m}_mean"], row[f"{m}_ci95"]
            shown.append("–" if math.isnan(mean) else f"{_number(mean)} ± {_number(half)}")
        lines.append("| " + " | ".join(s.replace("|", "\\|") for s in shown) + " |")
    lines.append("")
    lines.append("mean ± half-width of the 95% confidence interval over n seeds (Student's t); – : undefined (n < 2)")
    _write_text_atomic(out_dir / "summary.md", "\n".join(lines) + "\n")
    return rows
