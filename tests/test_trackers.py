"""Trackers: the W&B mirror's names (TRL's where TRL logs the same quantity), a smoke run writing an
offline W&B run with the completions table, the same W&B run continued on resume, and the stub a
disabled tracker leaves."""
import json
import math

from cotrain.config import build_config
from cotrain.runs.trackers import NoTracker, open_tracker, trl_mirror
from tests.conftest import nano_config, run_recipe


def test_trl_mirror_keeps_our_keys_and_adds_trl_s_names():
    row = trl_mirror({"gen/reward": 0.5, "gen/kl": 0.01, "ver/reward": 0.2, "gen/len_mean": 12.0,
                      "bad": math.nan, "text": "x", "flag": True})
    assert row == {"gen/reward": 0.5, "gen/kl": 0.01, "ver/reward": 0.2, "gen/len_mean": 12.0,
                   "train/reward": 0.5, "train/kl": 0.01, "train/completions/mean_length": 12.0}


def test_a_disabled_tracker_is_a_stub(tmp_path):
    tracker = open_tracker(tmp_path, {}, enabled=False, project="p", mode="offline", resume=False)
    assert isinstance(tracker, NoTracker)
    tracker.log(1, {"a": 1.0})
    tracker.table("t", ["a"], [[1]], 1)
    tracker.close()
    assert list(tmp_path.iterdir()) == []


def test_a_smoke_run_writes_an_offline_wandb_run_with_its_completions(sft_run, tmp_path):
    raw = nano_config("grpo", init=str(sft_run[0]), train={"steps": 2}, log={"wandb": True},
                      eval={"k": 0, "n": 10})
    run_recipe(build_config(raw), tmp_path / "run")
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
    run_id = (tmp_path / "run" / "wandb_id").read_text()
    assert runs[0].name.endswith(run_id)
    (table,) = runs[0].glob("files/media/table/completions_*.table.json")
    data = json.loads(table.read_text())
    assert data["columns"] == ["step", "prompt", "completion", "correct", "verdict"] and len(data["data"]) == 8
    assert (tmp_path / "run" / "samples.jsonl").read_text().count("\n") == 8


def test_a_resumed_run_continues_its_wandb_run(tmp_path):
    first = open_tracker(tmp_path, {"seed": 0}, enabled=True, project="p", mode="offline", resume=False)
    first.log(1, {"gen/reward": 0.1})
    first.close()
    run_id = (tmp_path / "wandb_id").read_text()
    second = open_tracker(tmp_path, {"seed": 0}, enabled=True, project="p", mode="offline", resume=True)
    second.log(2, {"gen/reward": 0.2})
    second.close()
    assert (tmp_path / "wandb_id").read_text() == run_id
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run_id in p.name for p in runs)  # two parts of one W&B run
