"""The Python API: the command line's `run`, `eval` and `check`, called from Python, and a finished run read back.

    import cotrain

    results = cotrain.run("configs/smoke.yaml", out="runs/smoke", overrides={"train.steps": 20})
    run = cotrain.load_run("runs/smoke")
    run.eval["generator"]["test"]["pass@1"], run.metrics[-1]["step"], run.models["generator"]
    cotrain.evaluate("runs/smoke", n=50)

A config is a YAML file or a dict of the same sections; overrides are `key.sub=value` strings or a dict of them.
A mistake in either raises `cotrain.UserError` with the one line `cotrain` would print. See docs/api.md.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cotrain.errors import UserError


def _overrides(overrides: dict | list[str] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        return [f"{key}={json.dumps(value) if not isinstance(value, str) else value}" for key, value in overrides.items()]
    return [str(o) for o in overrides]


def _config(config: str | Path | dict, overrides: dict | list[str] | None):
    """The validated config; a task or recipe registered from Python (`register_task`, `register_recipe`) recorded as
    its `task.module` or `recipe_module`."""
    from cotrain.config import build_config, load_config
    from cotrain.registry import USER_RECIPES
    from cotrain.tasks import USER_TASKS, module_of
    from cotrain.userfiles import file_of

    cfg = build_config(config, _overrides(overrides)) if isinstance(config, dict) else load_config(str(config), _overrides(overrides))
    if cfg.task.name in USER_TASKS and "module" not in cfg.task.options():
        cfg.task.__pydantic_extra__["module"] = module_of(USER_TASKS[cfg.task.name])
    if cfg.recipe in USER_RECIPES and cfg.recipe_module is None:
        cfg.recipe_module = file_of(USER_RECIPES[cfg.recipe], f"recipe {cfg.recipe}")
    return cfg


def register_task(name: str, cls: type) -> str:
    """Make a `cotrain.tasks.Task` subclass of one's own the task `name` for `cotrain.run` in this process; a run
    records where it lives as `task.module`, so later commands rebuild it. Returns that `task.module`."""
    from cotrain.tasks import register_task as register

    return register(name, cls)


def register_recipe(module) -> str:
    """Make the recipes of a file of one's own (a module, a file path or a module name holding `RECIPES`, `SECTIONS`
    where it has settings, and `run(cfg, run_dir, resume)`) known for `cotrain.run` in this process; a run records
    the file as its `recipe_module`, so later commands find it again. Returns that `recipe_module`."""
    from cotrain.registry import register

    return register(module)


def run(config: str | Path | dict, out: str | Path | None = None, overrides: dict | list[str] | None = None,
        resume: bool = False) -> dict:
    """Train the recipe `config` names into `out` (else the config's `out_dir`), as `cotrain run` does; returns
    what the run writes as eval.json. `resume=True` goes on from the last checkpoint."""
    from cotrain.cli import run_config

    return run_config(_config(config, overrides), out, resume)


@dataclass
class RunRecord:
    """A run directory read back: its config as written, its metrics rows, its eval.json (None until it has
    finished) and its final models' directories by role."""

    path: Path
    config: dict
    metrics: list[dict] = field(default_factory=list)
    eval: dict | None = None
    models: dict[str, Path] = field(default_factory=dict)


def load_run(path: str | Path) -> RunRecord:
    """The run in `path` (a run directory, or one archived under results/ with metrics.jsonl.gz)."""
    from cotrain.config import read_json_mapping, read_yaml_mapping
    from cotrain.runs.rundir import load_metrics

    path = Path(path)
    if not (path / "config.yaml").is_file():
        raise UserError(f"not a run directory (no config.yaml): {path.absolute()}")
    final = path / "final"
    models = {d.name: d for d in sorted(final.iterdir()) if (d / "config.json").is_file()} if final.is_dir() else {}
    return RunRecord(path, read_yaml_mapping(path / "config.yaml", "the run's config"), load_metrics(path),
                     read_json_mapping(path / "eval.json", "the run's eval.json") if (path / "eval.json").is_file() else None,
                     models)


def evaluate(checkpoint: str | Path, task: str | None = None, splits: list[str] | None = None, n: int | None = None,
             overrides: dict | list[str] | None = None) -> dict:
    """Greedy pass@1, pass@k and maj@k of a run, checkpoint or model directory, as `cotrain eval` computes them
    (a run's in its own task and evaluation settings, unless told otherwise)."""
    from cotrain.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "eval.json"
        argv = ["eval", str(checkpoint), "--out", str(out), *(["--task", task] if task else []),
                *(["--splits", ",".join(splits)] if splits else []), *(["--n", str(n)] if n is not None else []),
                *_overrides(overrides)]
        if main(argv) != 0:
            raise UserError(f"cotrain eval {checkpoint} failed: its one-line error is above")
        return json.loads(out.read_text(encoding="utf-8"))


def check(config: str | Path, overrides: dict | list[str] | None = None) -> bool:
    """`cotrain check CONFIG`: the config validated, its models built and its first rollout graded, without
    training; True where it passes (what it finds is printed as the command prints it)."""
    from cotrain.cli import main

    return main(["check", str(config), *_overrides(overrides)]) == 0
