"""Optional mirrors of a run's metrics in the trackers people already use. `metrics.jsonl` stays the
record; a mirror only copies it, and a missing tracker package leaves a stub that does nothing (as
nanochat's DummyWandb), so recipes never branch on it.

Weights & Biases (`log.wandb: true`; `pip install wandb`): each logged row goes to wandb at its step,
under the run's own keys and, where TRL logs the same quantity, also under TRL's name (`train/reward`,
`train/kl`, ...), so dashboards built for TRL runs read ours; the sampled completions (`samples.jsonl`)
go as a table, as TRL's `log_completions` does. Offline by default (`log.wandb_mode`): the run is
written under RUN_DIR/wandb and `wandb sync` uploads it later; a resumed run continues the same wandb
run (its id is kept in RUN_DIR/wandb_id).
"""
from __future__ import annotations

import math
import os
import uuid
from pathlib import Path

TRL_NAMES = {
    "gen/reward": "train/reward",
    "gen/reward_std": "train/reward_std",
    "gen/kl": "train/kl",
    "gen/entropy": "train/entropy",
    "gen/clip_ratio": "train/clip_ratio/region_mean",
    "gen/len_mean": "train/completions/mean_length",
    "gen/len_clipped_ratio": "train/completions/clipped_ratio",
    "gen/frac_groups_trained": "train/frac_reward_zero_std_complement",
    "gen/lr": "train/learning_rate",
    "gen/grad_norm": "train/grad_norm",
    "gen/loss": "train/loss",
}
"""Our generator keys -> the names TRL's GRPOTrainer logs the same quantity under (in its W&B runs).
`frac_groups_trained` is 1 − TRL's `frac_reward_zero_std`, hence its own name."""


def trl_mirror(metrics: dict) -> dict:
    """The finite numbers of `metrics` under their own keys, plus TRL's name for those TRL logs."""
    out = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    out.update({TRL_NAMES[k]: v for k, v in list(out.items()) if k in TRL_NAMES})
    return out


class NoTracker:
    """The stub a disabled or missing tracker leaves: every call does nothing."""

    def log(self, step: int, metrics: dict) -> None:
        pass

    def table(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class WandbTracker:
    """A W&B run mirroring this one (see the module docstring)."""

    def __init__(self, run_dir: Path, config: dict, project: str, mode: str, resume: bool):
        import wandb

        id_file = Path(run_dir) / "wandb_id"
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(dir=str(run_dir), project=project, mode=mode, id=run_id, resume="allow",
                              name=Path(run_dir).name, config=config)
        self._wandb = wandb

    def log(self, step: int, metrics: dict) -> None:
        row = trl_mirror(metrics)
        if row:
            self.run.log(row, step=step)

    def table(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        self.run.log({name: self._wandb.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_tracker(run_dir: Path, config: dict, *, enabled: bool, project: str, mode: str, resume: bool):
    """A `WandbTracker` when asked for and `wandb` is installed; else `NoTracker` (with one line saying
    why when it was asked for)."""
    if not enabled:
        return NoTracker()
    try:
        return WandbTracker(run_dir, config, project, mode, resume)
    except ImportError:
        print("cotrain: log.wandb is on but wandb is not installed (pip install wandb); metrics.jsonl and "
              "TensorBoard only")
        return NoTracker()
