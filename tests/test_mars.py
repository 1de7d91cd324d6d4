"""The mars recipe (multi-agent GRPO): its advantages and balanced sampling against numbers worked out by
hand, the planner's and worker's string functions on tables of valid and invalid text (and fuzzed), a
smoke run that is also its fixed-seed golden, a mutation the golden catches, the empty-plan and
two-model variants, and SIGKILL-then-resume."""
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cotrain.config import build_config
from cotrain.rl.multi_agent import balanced_indices, grouped_advantages
from cotrain.roles import planner, worker
from tests.conftest import nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_recipes import _rows, run_killed_and_resumed
from tests.test_tango import _changed

# ----------------------------------------------------------------------------- pure functions


def test_grouped_advantages_by_hand():
    """Group a = rewards (1, 0): mean 0.5, unbiased std √0.5 = 0.707107, A = ±0.5 / (0.707107 + 1e-4) =
    ±0.707007. Group b = (1, 1): all equal, A = 0. Group c = (1,) alone: nothing to compare, A = 0. The
    groups need not be contiguous."""
    adv = grouped_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]), ["a", "b", "a", "b", "c"])
    assert adv.tolist() == pytest.approx([0.707007, 0.0, -0.707007, 0.0, 0.0], abs=1e-6)


def test_grouped_advantages_equal_grpo_s_on_contiguous_groups():
    from cotrain.rl.losses import group_advantages

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    assert torch.allclose(grouped_advantages(r, [i // 4 for i in range(8)]), group_advantages(r, 4))


def test_balanced_indices_sample_down_to_the_informative_samples_first():
    """Advantages (0, 2, 0, −1, 0), target 2: only samples 1 and 3 have weight, so both are drawn
    whatever the seed; target 3: those two, then the first zero-advantage sample (index 0)."""
    adv = torch.tensor([0.0, 2.0, 0.0, -1.0, 0.0])
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        assert balanced_indices(adv, 2, g).tolist() == [1, 3]
        assert balanced_indices(adv, 3, g).tolist() == [0, 1, 3]


def test_balanced_indices_draw_in_proportion_to_the_advantage():
    """|A| = (3, 1), target 1: sample 0 is drawn with probability 3/4 (2,000 draws: within 0.03)."""
    g = torch.Generator().manual_seed(0)
    hits = sum(balanced_indices(torch.tensor([3.0, -1.0]), 1, g).item() == 0 for _ in range(2000))
    assert abs(hits / 2000 - 0.75) < 0.03


def test_balanced_indices_sample_up_keeping_every_sample_once():
    """Two samples to four: both kept, two more drawn ∝ |A| (here only sample 1 has weight)."""
    g = torch.Generator().manual_seed(0)
    assert balanced_indices(torch.tensor([0.0, -0.5]), 4, g).tolist() == [0, 1, 1, 1]
    assert balanced_indices(torch.zeros(3), 2, g).tolist() == [0, 1]     # no weight at all: the first ones
    assert balanced_indices(torch.zeros(0), 2, g).tolist() == []


# ----------------------------------------------------------------------------- the roles' strings


@pytest.mark.parametrize("text, plan", [
    ("3*5\n15+7", ["3*5", "15+7"]),            # two operations
    ("3*5=15\n15+7=22\n#22", ["3*5", "15+7"]),  # results written anyway: the operations kept, the answer line ends it
    ("  3*5  \n\n15+7\n", ["3*5", "15+7"]),     # blank lines and spaces
    ("", None),                                 # nothing planned
    ("#22", None),                              # an answer, no plan
    ("=15", None),                              # a line with no operation
    ("\n".join(["1+1"] * 17), None),            # more than MAX_STEPS operations
    ("x" * 201, None),                          # a runaway line
])
def test_planner_parse(text, plan):
    assert planner.parse(text) == plan


@pytest.mark.parametrize("text, step", [
    ("3*5=15", "3*5=15"),          # one step
    ("\n 3*5=15 \nmore", "3*5=15"),  # the first non-empty line only
    ("", ""),                      # nothing: an empty step, the solution then wrong
    ("9" * 201, ""),               # a runaway line
])
def test_worker_parse(text, step):
    assert worker.parse(text) == step


def test_a_plan_round_trips_and_steps_assemble_into_the_task_s_solution():
    steps = ["3*5=15", "15+7=22"]
    assert planner.parse(planner.render(planner.plan_of(steps))) == ["3*5", "15+7"]
    assert worker.assemble(steps) == "3*5=15\n15+7=22\n#22"
    assert worker.assemble(["3*5=15", ""]) == "3*5=15\n#15"   # an empty step is left out
    assert worker.assemble(["oops"]) == "oops\n#"             # no result: no answer
    assert worker.plain_prompt("3,5,7:22", ["3*5=15"], "15+7") == "3,5,7:22\n3*5=15\n@do 15+7\n"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_role_parsers_never_raise(text):
    plan = planner.parse(text)
    assert plan is None or (0 < len(plan) <= planner.MAX_STEPS)
    assert isinstance(worker.parse(text), str)
    assert worker.assemble([worker.parse(text)]).count("\n#") + worker.assemble([worker.parse(text)]).startswith("#") >= 1


# ----------------------------------------------------------------------------- the recipe


def mars_config(start: Path, **overrides) -> dict:
    raw = nano_config("mars", init=str(start), train={"steps": 4},
                      mars={"warmup_steps": 60, "warmup_batch_size": 32, "warmup_lr": 3e-3, "worker_max_new_tokens": 12},
                      checkpoint={"every": 3, "keep_last": 1}, eval={"every": 2, "n_during": 10, "k": 2, "n": 20})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


# Fixed-seed regression: what this code produced (seed 0, the float64 nano world of conftest.py).
MARS_GOLDEN = {
    "gen/reward": [0.0625, 0.125, 0.0625, 0.0],
    "gen/grad_norm": [1.516376994912203, 2.061377070107148, 1.005126781918083, 0.0],
    "work/calls_before": [24.0, 30.0, 31.0, 28.0],
    "plan/n_ops": [1.5, 1.875, 1.9375, 1.75],
    "plan/entropy": [0.4423795753065338, 0.4784184052371985, 0.48849691112075, 0.6012692426890809],
    "work/entropy": [0.6150036463861812, 0.6483981604620511, 0.5452272293493742, 0.6460424200380501],
    "work/followed": [0.2916666666666667, 0.4, 0.3548387096774194, 0.32142857142857145],
}
# (The losses are left out: with rho = 1 and normalised advantages they are 0 up to float32 rounding.)
MARS_KEYS = ["gen/reward", "gen/grad_norm", "work/calls_before", "plan/n_ops", "plan/entropy", "work/entropy",
             "work/followed"]


def test_mars_trains_both_roles_and_holds_its_golden(sft_run, tmp_path):
    start, _ = sft_run
    results = run_recipe(build_config(mars_config(start)), tmp_path)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator")
    rows = [r for r in _rows(tmp_path) if "work/calls_after" in r]
    assert len(rows) == 4
    for r in rows:
        # balanced: the worker's calls drawn to the trajectories' count (16), from about one call per operation
        assert r["work/calls_after"] == 16 and r["work/calls_before"] >= 1
        assert all(math.isfinite(r[k]) for k in ("plan/loss", "work/loss", "gen/grad_norm", "plan/entropy"))
    assert "mars/warmup_loss" in _rows(tmp_path)[0]
    pair = results["generator"]["test"]
    assert 0 <= pair["pass@1"] <= 1 and pair["n"] == 20 and 0 <= pair["plan_format"] <= 1 and "pass@2" in pair
    assert_golden(tmp_path, MARS_GOLDEN)


def test_mars_golden_catches_the_planner_s_advantage_flipped(sft_run, tmp_path, monkeypatch):
    from cotrain.recipes import mars

    original = mars.group_advantages
    monkeypatch.setattr(mars, "group_advantages", lambda r, gs, *a, **k: -original(r, gs, *a, **k))
    run_recipe(build_config(mars_config(sft_run[0])), tmp_path)
    assert mismatch(golden_metrics(tmp_path, list(MARS_GOLDEN)), MARS_GOLDEN) is not None


def test_mars_without_a_plan_and_with_two_models(sft_run, tmp_path):
    """The empty-plan ablation calls the worker once per reference step and logs no planner; two models
    warm up and train a planner of their own, saved beside the worker."""
    start, _ = sft_run
    quick = {"warmup_steps": 0}
    run_recipe(build_config(mars_config(start, train={"steps": 2}, mars={**quick, "plan": False},
                                        eval={"every": 0, "k": 0})), tmp_path / "noplan")
    rows = [r for r in _rows(tmp_path / "noplan") if "work/calls_before" in r]
    assert rows and not any(k.startswith("plan/") for r in rows for k in r)
    assert all(r["work/calls_before"] >= 16 for r in rows)  # every easy-world problem has 1 or 2 steps
    run_recipe(build_config(mars_config(start, train={"steps": 2}, mars={"warmup_steps": 4, "two_models": True},
                                        eval={"every": 0, "k": 0})), tmp_path / "two")
    assert _changed(start / "final" / "generator", tmp_path / "two" / "final" / "planner")
    assert _changed(start / "final" / "generator", tmp_path / "two" / "final" / "generator")


@pytest.mark.heavy  # two processes, one killed: `make test-heavy`
def test_mars_sigkill_then_resume_equals_uninterrupted(sft_run, tmp_path):
    """Killed after its step-3 checkpoint (the warm-up behind it, in the step-0 checkpoint): the resumed
    run skips the warm-up and ends as the uninterrupted one."""
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(mars_config(sft_run[0])))
    run_killed_and_resumed(cfg_path, tmp_path, "step_3")
    assert_golden(tmp_path / "full", MARS_GOLDEN)


def test_check_counts_no_larger_evaluation_for_mars():
    """mars evaluates its planner and worker together and writes no larger/: `cotrain check`'s cost leaves
    eval.larger_n's 600 x 2 splits out for it, and keeps them for a recipe on the common path."""
    from cotrain.preflight import evaluation_counts
    from cotrain.config import EvalConfig

    held, ev = {"test": 600, "ood": 600}, EvalConfig(n=40, k=0, larger_n=600)
    mars, plain = (evaluation_counts(recipe, ev, 10, held) for recipe in ("mars", "tango"))
    assert mars == {"during": 0, "final": 80, "larger": 0} and plain == {**mars, "larger": 1200}
