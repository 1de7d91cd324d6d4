"""The self_rewarding recipe (Self-Rewarding LMs): a run from the stored nano verifier (a model that
judges; its warm-up, rehearsing the generator, runs first), which is also its fixed-seed golden; a mutation the golden catches; the label-free wall of
its training path (every answer poisoned, the same run); SIGKILL-then-resume within an iteration."""
import math

import pytest
import torch
import yaml

from cotrain.config import build_config
from tests.conftest import nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_labelfree import _poisoned, _training_rows, _weights
from tests.test_recipes import _rows, run_killed_and_resumed
from tests.test_tango import _changed


def sr_config(start, **overrides) -> dict:
    raw = nano_config("self_rewarding", init=str(start), train={"steps": 4, "batch_size": 32}, grpo={"group_size": 8},
                      verifier={"warmup_sft_steps": 20, "warmup_batch_size": 16, "warmup_samples": 128, "max_new_tokens": 40},
                      self_rewarding={"iteration_steps": 2}, checkpoint={"every": 3, "keep_last": 1},
                      eval={"every": 0, "k": 0, "n": 20, "n_sampled": 10})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


# Fixed-seed regression: what this code produced (seed 0, the float64 nano world of conftest.py).
# Steps without a pair log no DPO metrics.
SR_GOLDEN = {
    "sr/pairs": [1.0, 1.0, 1.0, 0.0],
    "sr/dpo_loss": [0.6931471805599453, 0.32181060156314323, 0.6931471805599453],
    "sr/margin": [0.0, 0.9685754315269911, 0.0],
    "gen/grad_norm": [5.1625791986286105, 6.6484048594536835, 6.5351234748716855, 0.0],
    "judge/score": [0.0078125, 0.0234375, 0.015625, 0.0],
    "judge/parsed": [1.0, 0.71875, 0.53125, 0.59375],
}
SR_KEYS = ["sr/pairs", "sr/dpo_loss", "sr/margin", "gen/grad_norm", "judge/score", "judge/parsed"]


def test_self_rewarding_judges_itself_and_holds_its_golden(warm_verifier, tmp_path):
    results = run_recipe(build_config(sr_config(warm_verifier)), tmp_path)
    assert _changed(warm_verifier, tmp_path / "final" / "generator")
    rows = [r for r in _rows(tmp_path) if "sr/pairs" in r]
    assert len(rows) == 4 and any(r["sr/pairs"] > 0 for r in rows)
    assert [r["sr/iteration"] for r in rows] == [0, 0, 1, 1]
    # at an iteration's first step the model is its reference M_t: every margin 0, DPO's loss ln 2
    for r in (rows[0], rows[2]):
        if r["sr/pairs"]:
            assert r["sr/dpo_loss"] == pytest.approx(math.log(2)) and r["sr/margin"] == pytest.approx(0.0, abs=1e-12)
    assert "ver/warmup_loss" in _rows(tmp_path)[0]
    assert 0 <= results["judge"]["test"]["balanced_accuracy"] <= 1
    assert sorted(p.name for p in (tmp_path / "self_rewarding").iterdir()) == ["reference_0", "reference_1"]
    assert_golden(tmp_path, SR_GOLDEN)


def test_self_rewarding_golden_catches_best_and_worst_swapped(warm_verifier, tmp_path, monkeypatch):
    from cotrain.recipes import self_rewarding

    original = self_rewarding.preference_pairs
    monkeypatch.setattr(self_rewarding, "preference_pairs", lambda *a: [(j, i) for i, j in original(*a)])
    run_recipe(build_config(sr_config(warm_verifier)), tmp_path)
    assert mismatch(golden_metrics(tmp_path, list(SR_GOLDEN)), SR_GOLDEN) is not None


@pytest.fixture(scope="module")
def judging_start(warm_verifier, tmp_path_factory):
    """The golden's start after its judge warm-up alone (train.steps 0): a model that judges and still
    solves a few problems."""
    out = tmp_path_factory.mktemp("sr_start")
    run_recipe(build_config(sr_config(warm_verifier, train={"steps": 0})), out)
    return out


def test_self_rewarding_training_is_blind_to_the_answers(judging_start, tmp_path, monkeypatch):
    """From a start that judges, no warm-up (it reads labels): with every answer poisoned the run logs the
    same training metrics and ends with the same weights; the gt/ and eval/ monitors see the poison."""
    raw = sr_config(judging_start, train={"steps": 3}, verifier={"warmup_sft_steps": 0})
    run_recipe(build_config(raw), tmp_path / "clean")
    with monkeypatch.context() as m:
        _poisoned(m)
        run_recipe(build_config(raw), tmp_path / "poisoned")
    clean, poisoned = _training_rows(tmp_path / "clean"), _training_rows(tmp_path / "poisoned")
    assert len(clean) >= 3 and clean == poisoned
    assert any(r.get("sr/pairs", 0) > 0 for r in clean), "no update at all: the test proves nothing"
    a, b = _weights(tmp_path / "clean" / "final" / "generator"), _weights(tmp_path / "poisoned" / "final" / "generator")
    assert all(torch.equal(a[k], b[k]) for k in a)
    gt = [[{k: v for k, v in r.items() if k.startswith(("gt/", "eval/"))} for r in _rows(tmp_path / d)]
          for d in ("clean", "poisoned")]
    assert gt[0] != gt[1], "the poison did not reach ground truth at all"


@pytest.mark.heavy  # two processes, one killed: `make test-heavy`
def test_self_rewarding_sigkill_then_resume_equals_uninterrupted(warm_verifier, tmp_path):
    """Killed after its step-3 checkpoint, in the second iteration: the resumed run reads that
    iteration's M_t back and ends as the uninterrupted one."""
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(sr_config(warm_verifier)))
    run_killed_and_resumed(cfg_path, tmp_path, "step_3")
    assert_golden(tmp_path / "full", SR_GOLDEN)
