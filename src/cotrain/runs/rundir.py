"""The run directory: config.yaml, metrics.jsonl, eval.json, checkpoints/step_N/<role>/.

`metrics.jsonl` is the source of truth; TensorBoard is an optional mirror behind a no-op stub.
Checkpoints are written to a temporary directory and renamed into place, so a run killed at any
moment leaves only complete checkpoints behind.
"""
from __future__ import annotations

import gzip
import json
import logging
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from cotrain.errors import UserError
from cotrain.models import gguf_source

log = logging.getLogger(__name__)


def prepare_run_dir(path: str | Path, resume: bool = False) -> Path:
    """Create (or reopen, for resume) a run directory, failing with a clear message if unwritable."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UserError(f"cannot write to run directory {path}: {err.strerror or err}") from None
    if not resume:
        refuse_a_run_there(path)
    return path


def refuse_a_run_there(path: str | Path) -> None:
    """One line, before anything loads, where a fresh run would write over another run's directory."""
    path = Path(path)
    if (path / "metrics.jsonl").exists() and (path / "checkpoints").exists():
        raise UserError(f"run directory {path} already holds a run: pass --resume to continue it, or choose another --out")


def write_json_atomic(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def write_jsonl_gz_atomic(path: Path, rows: list[dict]) -> None:
    """`rows` as gzipped JSON lines at `path` (its folder created), written whole or not at all; no name or
    time in the gzip header, so the same rows give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        for row in rows:
            out.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
    os.replace(tmp, path)


def write_config(run_dir: Path, cfg_dict: dict) -> None:
    tmp = run_dir / "config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    os.replace(tmp, run_dir / "config.yaml")


# ---------------------------------------------------------------- metrics


class _NoTensorBoard:
    def add_scalar(self, *args, **kwargs):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def _tensorboard(run_dir: Path, enabled: bool):
    if not enabled:
        return _NoTensorBoard()
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard not installed: metrics.jsonl stays the record
        return _NoTensorBoard()
    return SummaryWriter(log_dir=str(run_dir / "tb"))


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Appends one JSON object per step to metrics.jsonl and mirrors it to TensorBoard (and `tracker`)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_step: int | None = None, tracker=None):
        self.path = run_dir / "metrics.jsonl"
        self.tracker = tracker  # another mirror (runs/trackers.py), or None
        if resume_step is not None:
            self._truncate_after(resume_step)
        elif self.path.exists():
            self.path.unlink()
        self.tb = _tensorboard(run_dir, tensorboard)
        self.start = time.time()

    def _truncate_after(self, step: int) -> None:
        """Keep only the lines of steps <= step (those a resumed run does not redo)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            evaluation_only = all(k.startswith("eval/") for k in row if k not in ("step", "time"))
            if row.get("step", 0) < step or (row.get("step") == step and not evaluation_only):
                kept.append(line)  # the final evaluation's row is redone by the resumed run
        tmp = self.path.with_name("metrics.jsonl.tmp")
        tmp.write_text("".join(k + "\n" for k in kept))
        os.replace(tmp, self.path)

    def log(self, step: int, metrics: dict) -> None:
        row = {"step": step, "time": round(time.time() - self.start, 3)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self.tb.add_scalar(k, v, step)
        if self.tracker is not None:
            self.tracker.log(step, metrics)

    def close(self) -> None:
        self.tb.flush()
        self.tb.close()
        if self.tracker is not None:
            self.tracker.close()


class NullLogger:
    """The logger of a torchrun process other than rank 0: rank 0 alone writes metrics."""

    def log(self, step: int, metrics: dict) -> None:
        pass

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- checkpoints


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, roles: dict, extra: dict, keep_last: int) -> Path:
    """Write checkpoints/step_N/ atomically: each role's weights, tokenizer and optimizer, plus state.

    Args:
        roles: {role: Policy} (runs/policy.py).
        extra: JSON-able or torch-saveable run state (step, RNG, ...).

    Raises:
        UserError: the checkpoint could not be written (a full disk: torch's writer says only "unexpected
            pos"), with the free space; the partial one is removed and the checkpoints before it are kept
            (the CLI says a run can go on from them with --resume).
    """
    from cotrain.models.build import save_model

    root = run_dir / "checkpoints"
    root.mkdir(exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    for stale in root.glob(".tmp_step_*"):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    try:
        for role, p in roles.items():
            save_model(p.model, p.tokenizer, tmp / role)
            torch.save({"optimizer": p.optimizer.state_dict(), "scheduler": p.scheduler.state_dict()},
                       tmp / role / "optim.pt")
        torch.save({"step": step, "rng": rng_state(), **extra}, tmp / "state.pt")
    except (OSError, RuntimeError) as err:
        if isinstance(err, RuntimeError) and not any(w in str(err) for w in ("inline_container", "PytorchStreamWriter")):
            raise  # not torch's file writer failing: a bug, with its traceback
        shutil.rmtree(tmp, ignore_errors=True)
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"could not write checkpoint step_{step} in {root} ({free_space(root)} free on its disk: "
                        f"a full disk?): {reason}") from None
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def free_space(path: Path) -> str:
    """The free space on `path`'s disk, "1.2 GiB", or "unknown"."""
    try:
        return f"{shutil.disk_usage(path).free / 2 ** 30:.1f} GiB"
    except OSError:
        return "unknown"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    steps = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / "state.pt").is_file()]
    return sorted(steps, key=lambda p: int(p.name.split("_")[1]))


def load_checkpoint_state(ckpt: Path, roles: dict) -> dict:
    """Restore optimizer and scheduler of each role (weights are loaded by the caller) and the RNG."""
    from cotrain import dist

    for role, p in roles.items():
        model, optimizer, scheduler = p.model, p.optimizer, p.scheduler
        if dist.is_sharded(model):  # saved whole, keyed by parameter name: each process takes its shard
            # onto the device this process holds the role's model on (never the device it was saved from:
            # under torchrun every rank's state would land on cuda:0)
            state = torch.load(ckpt / role / "optim.pt", weights_only=False, map_location=_device_of(model))
            if state["optimizer"]["state"]:  # else saved before the first step: the fresh optimizer is it
                dist.load_full_optimizer_state(model, optimizer, state["optimizer"])
        else:  # onto the host: torch moves each moment onto its parameter's device and keeps AdamW's step
            # counts on the host, as a fresh optimizer has them (a step count on the GPU costs a sync a step)
            state = torch.load(ckpt / role / "optim.pt", weights_only=False, map_location="cpu")
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    state = torch.load(ckpt / "state.pt", weights_only=False, map_location="cpu")  # RNG states live on the host
    set_rng_state(state["rng"])
    return state


def _device_of(model) -> torch.device:
    """The device of a model's first parameter (a sharded one's local shard), the CPU for a model without."""
    first = next(iter(model.parameters()), None)
    if first is None:
        return torch.device("cpu")
    local = getattr(first, "to_local", None)  # a DTensor of FSDP2: its shard's device
    return local().device if callable(local) else first.device


def resolve_model_dir(path: str | Path, role: str = "generator") -> Path:
    """A run dir, a checkpoint step dir, or a model dir -> the model dir of `role`.

    A run dir resolves to its final model (`final/<role>`) or else its last checkpoint; a GGUF source
    (`model.path` syntax: `smollm2`, `x.gguf`) to its converted directory.
    """
    if gguf_source.is_gguf_source(path):
        return Path(gguf_source.resolve(path))
    p = Path(path)
    candidates = [p, p / role, p / "final" / role]
    ckpts = list_checkpoints(p)
    if ckpts:
        candidates.append(ckpts[-1] / role)
    for c in candidates:
        if (c / "config.json").is_file():
            return c
    raise UserError(f"no model found at {path} (expected a model dir, a checkpoint dir or a run dir)")


# ---------------------------------------------------------------- progress


class Progress:
    """A live progress line on stderr, at most `WIDTH` columns: step, rate, ETA and chosen metrics. Silent when
    disabled."""

    WIDTH = 120

    def __init__(self, total: int, start: int = 0, enabled: bool = True, desc: str = "", unit: str = "step"):
        self.total, self.step, self.enabled, self.desc, self.unit = total, start, enabled, desc, unit
        self.t0, self.s0 = time.time(), start
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0
        self.shown: dict = {}  # last value of each metric, so an eval figure stays visible between evals

    def update(self, step: int, metrics: dict | None = None) -> None:
        self.step = step
        if not self.enabled:
            return
        now = time.time()
        done = step - self.s0
        rate = (now - self.t0) / max(done, 1)
        eta = rate * (self.total - step)
        self.shown.update({k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float))})
        shown = " ".join(f"{k}={v:.3g}" for k, v in self.shown.items())
        line = f"{self.desc} {step}/{self.total} [{_fmt(now - self.t0)}<{_fmt(eta)}, {rate:.2f}s/{self.unit}] {shown}"
        line = line[:self.WIDTH]
        if self.tty:
            sys.stderr.write("\r" + line.ljust(self.WIDTH))
            sys.stderr.flush()
        elif now - self.last_print > 10 or step == self.total:  # logs: a line every 10 s
            sys.stderr.write(line + "\n")
            self.last_print = now

    def advance(self, n: int) -> None:
        """`n` more done (a batch of an evaluation's completions)."""
        self.update(self.step + n)

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def load_metrics(run_dir: Path) -> list[dict]:
    """Read `run_dir/metrics.jsonl` (or the gzipped `metrics.jsonl.gz` of a run kept under `results/`),
    skipping every line that is not a JSON object.

    A run killed mid-write leaves a truncated last line; a crash can leave junk in the middle. Both are
    dropped rather than failing the whole read. Values are returned as written (None/NaN included).

    Args:
        run_dir: the run directory.

    Returns:
        One dict per good line, in file order; [] when the file is missing or empty.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file() and path.with_suffix(".jsonl.gz").is_file():
        path = path.with_suffix(".jsonl.gz")
    if not path.is_file():
        log.warning("no metrics.jsonl in %s", run_dir)
        return []
    rows, skipped = [], 0
    # errors="replace": a line cut inside a multi-byte character must not make the whole file unreadable.
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                skipped += 1
    if skipped:
        log.info("skipped %d unparseable line(s) in %s", skipped, path)
    return rows
