"""The prime recipe (implicit process rewards): its smoke run, the frozen-PRM ablation, the filter's
refill, a fixed-seed golden with the mutations it must catch, and SIGKILL-then-resume."""
import math
from pathlib import Path

import pytest
import yaml

from cotrain.config import build_config
from tests.conftest import nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_recipes import _rows, run_killed_and_resumed
from tests.test_tango import _changed


def prime_config(start: Path, **overrides) -> dict:
    raw = nano_config("prime", init=str(start), prime={"lr": 1e-3, "oversample": 2.0}, train={"steps": 3},
                      eval={"every": 0, "k": 0, "n": 20})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


GOLDEN_KEYS = ["gen/reward", "gen/loss", "gen/grad_norm", "prime/prm_loss", "prime/prm_grad_norm",
               "prime/ranking_acc", "prime/process_return", "prime/passed_share"]


def test_a_frozen_prm_stays_at_its_start_and_takes_no_loss(sft_run, tmp_path):
    """prime.update: none, the ablation: the PRM's weights end as they began, no PRM loss is logged, and
    its FLOPs are forward passes alone."""
    start, _ = sft_run
    run_recipe(build_config(prime_config(start, prime={"update": "none"}, train={"steps": 2})), tmp_path)
    assert not _changed(start / "final" / "generator", tmp_path / "final" / "prm")
    rows = [r for r in _rows(tmp_path) if "gen/reward" in r]
    assert not any("prime/prm_loss" in r for r in rows)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator")


# Fixed-seed regression: what this code produced (seed 0, the float64 nano world of conftest.py); holds
# on any x86-64 CPU (tests/golden.py).
PRIME_GOLDEN = {
    "gen/reward": [0.4375, 0.375, 0.0, 0.0625],
    "gen/loss": [0.004137569689131135, -0.030201519532833926, -0.01338654656419945, 0.03365270982881392],
    "gen/grad_norm": [1.5832380382463658, 1.2511945543437575, 3.863220671173565, 8.699827533600338],
    "prime/prm_loss": [0.6931471805599453, 0.6983370922105292, 0.7665101630194541, 0.8608548123634804],
    "prime/prm_grad_norm": [0.5307503500541024, 0.41163287590282005, 0.8470995002061764, 1.858324699374864],
    "prime/ranking_acc": [1.0, 0.75, 0.5, 0.375],
    "prime/process_return": [-0.31228595279738713, -0.16320345876866954, -0.15151126220837813, 0.26844298008017414],
    "prime/passed_share": [0.5, 0.5, 0.0, 0.125],
}


def _golden_config(start: Path) -> dict:
    return prime_config(start, checkpoint={"every": 2, "keep_last": 1}, train={"steps": 4})


def test_prime_trains_the_generator_and_the_prm_and_holds_its_golden(sft_run, tmp_path):
    """The smoke run is the golden run: both models trained, every metric finite, the filter's refill
    as logged, the PRM's FLOPs counted; then the fixed-seed golden."""
    start, _ = sft_run
    results = run_recipe(build_config(_golden_config(start)), tmp_path)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator"), "generator not updated"
    assert _changed(start / "final" / "generator", tmp_path / "final" / "prm"), "PRM not updated"
    rows = [r for r in _rows(tmp_path) if "gen/reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in GOLDEN_KEYS + ["prime/ranking_acc_before", "flops/prm", "prime/kept_failing"]:
        assert all(math.isfinite(r[key]) for r in rows), key
    # 4 prompts kept of 8 drawn: where fewer than 4 pass, failing ones fill the batch
    assert all(r["prime/kept_failing"] == max(0, 4 - round(8 * r["prime/passed_share"])) for r in rows)
    assert results["compute"]["prm"]["flops"] > 0 and math.isfinite(results["generator"]["test"]["pass@1"])
    # the final PRM scored like a verifier on the final generator's samples (eval.n_sampled of them, k = 1)
    assert results["prm"]["test"]["n"] == 10 and "n_steps" in results["prm"]["test"]
    assert_golden(tmp_path, PRIME_GOLDEN)


def _wrong_label(original):
    return lambda q, mask, outcome, beta: original(q, mask, 1.0 - outcome, beta)


def _no_outcome(original):
    return lambda process, outcome, mask, n, prm_coef, gt_coef: original(process, outcome, mask, n, prm_coef, 0.0)


def _no_norm(original):
    return lambda r, mask, eps=1e-6: r


# Each mutation of the recipe's formulas must move the golden.
PRIME_MUTATIONS = {
    "the PRM trained toward the opposite label": ("prm_loss", _wrong_label),
    "the outcome's RLOO left out of the return": ("prime_advantages", _no_outcome),
    "process rewards not normalised": ("normalise_process_rewards", _no_norm),
}


@pytest.mark.parametrize("mutation", list(PRIME_MUTATIONS))
def test_prime_golden_catches_a_mutation(sft_run, tmp_path, monkeypatch, mutation):
    from cotrain.recipes import prime

    name, mutate = PRIME_MUTATIONS[mutation]
    monkeypatch.setattr(prime, name, mutate(getattr(prime, name)))
    raw = _golden_config(sft_run[0])
    raw["train"]["steps"] = 2  # the golden's first two steps are enough to tell
    run_recipe(build_config(raw), tmp_path)
    first_two = {k: v[:2] for k, v in PRIME_GOLDEN.items()}
    assert mismatch(golden_metrics(tmp_path, list(first_two)), first_two) is not None, mutation


@pytest.mark.heavy  # two processes, one killed: `make test-heavy`
def test_prime_sigkill_then_resume_equals_uninterrupted(sft_run, tmp_path):
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(_golden_config(sft_run[0])))
    run_killed_and_resumed(cfg_path, tmp_path, "step_2")
    assert_golden(tmp_path / "full", PRIME_GOLDEN)
