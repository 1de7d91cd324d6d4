"""The label-free recipes' safeguard: the gate's arithmetic by hand, the probe's KL and entropy on a
model whose distributions are known, and runs that skip, pass through and resume."""
import math
from types import SimpleNamespace

import pytest
import torch
import yaml

from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.models.generate import Rollout
from cotrain.rl.safeguard import kl_factor, separation_factor, smooth, trust_scale, why_held
from cotrain.train.safeguard import kl_and_entropy
from tests.test_labelfree import _run, _training_rows, labelfree_config
from tests.test_recipes import _rows, run_killed_and_resumed
from tests.test_tango import _changed

# ---------------------------------------------------------------------- the gate, by hand


def test_separation_factor_is_linear_between_the_thresholds():
    assert separation_factor(0.15, 0.1, 0.2) == pytest.approx(0.5)
    assert separation_factor(0.125, 0.1, 0.2) == pytest.approx(0.25)
    assert separation_factor(0.1, 0.1, 0.2) == 0.0 and separation_factor(-0.3, 0.1, 0.2) == 0.0
    assert separation_factor(0.2, 0.1, 0.2) == 1.0 and separation_factor(0.9, 0.1, 0.2) == 1.0


def test_kl_factor_holds_to_half_the_limit_then_falls_to_zero():
    assert kl_factor(0.0, 0.2) == 1.0 and kl_factor(0.1, 0.2) == 1.0
    assert kl_factor(0.15, 0.2) == pytest.approx(0.5)    # (0.2 - 0.15) / 0.1
    assert kl_factor(0.18, 0.2) == pytest.approx(0.2)    # (0.2 - 0.18) / 0.1
    assert kl_factor(0.2, 0.2) == 0.0 and kl_factor(3.0, 0.2) == 0.0


def test_trust_scale_is_the_smallest_factor():
    kw = {"min_separation": 0.1, "full_separation": 0.2, "kl_max": 0.2, "min_entropy_ratio": 0.5}
    scale, f = trust_scale(0.3, 0.05, 0.9, **kw)
    assert scale == 1.0 and f == {"sep": 1.0, "kl": 1.0, "entropy": 1.0}
    scale, f = trust_scale(0.175, 0.16, 0.9, **kw)       # sep 0.75, kl 0.4
    assert scale == pytest.approx(0.4) and f["sep"] == pytest.approx(0.75) and f["kl"] == pytest.approx(0.4)
    scale, f = trust_scale(0.3, 0.05, 0.49, **kw)        # entropy collapsed: skip
    assert scale == 0.0 and f["entropy"] == 0.0
    # signals not measured or switched off hold nothing back
    assert trust_scale(None, None, None, **kw) == (1.0, {"sep": 1.0, "kl": 1.0, "entropy": 1.0})
    off = {**kw, "kl_max": None, "min_entropy_ratio": None}
    assert trust_scale(0.3, 9.0, 0.01, **off)[0] == 1.0


def test_smooth_and_the_reason_line():
    assert smooth(None, 0.4, 0.5) == 0.4
    assert smooth(0.2, 0.4, 0.5) == pytest.approx(0.3)
    assert smooth(0.2, 0.4, 0.75) == pytest.approx(0.25)
    line = why_held({"sep": 0.0, "kl": 0.5, "entropy": 1.0}, 0.02, 0.15, 0.9, 0.1, 0.2, 0.5)
    assert "separates strong from weak answers by 0.020" in line and "KL to the start 0.1500" in line
    assert "entropy" not in line
    assert why_held({"sep": 1.0, "kl": 1.0, "entropy": 1.0}, 0.3, 0.0, 1.0, 0.1, 0.2, 0.5) == ""


# ---------------------------------------------------------------------- KL and entropy of known distributions


class _Fixed(torch.nn.Module):
    """A 'model' whose next-token logits are the same at every position: [row logits] over a vocabulary of 2."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, 2))


def test_kl_and_entropy_match_the_hand_computation():
    """p = (1/2, 1/2) against q = (3/4, 1/4): KL = 1/2 ln(4/3) = 0.1438410, entropy = ln 2, over the 3
    completion tokens the mask keeps (padding excluded)."""
    ro = Rollout(prompt_ids=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.long),
                 completion_ids=torch.tensor([[1, 0], [0, 1]]), completion_mask=torch.tensor([[1, 1], [1, 0]]),
                 logp=torch.zeros(2, 2), entropy=torch.zeros(2, 2), truncated=torch.tensor([False, False]))
    kl, entropy = kl_and_entropy(_Fixed([0.0, 0.0]), _Fixed([math.log(3.0), 0.0]), ro, bf16=False)
    assert kl == pytest.approx(0.5 * math.log(4 / 3), abs=1e-12) and entropy == pytest.approx(math.log(2), abs=1e-12)
    kl, _ = kl_and_entropy(_Fixed([0.3, -1.0]), _Fixed([0.3, -1.0]), ro, bf16=False)
    assert kl == 0.0
    kl, entropy = kl_and_entropy(_Fixed([0.0, 0.0]), None, ro, bf16=False)  # no start: the entropy alone
    assert kl is None and entropy == pytest.approx(math.log(2), abs=1e-12)


# ---------------------------------------------------------------------- config


def test_the_safeguard_is_for_label_free_recipes_and_checks_its_thresholds(sft_run, warm_verifier):
    raw = labelfree_config("tango", sft_run[0], warm_verifier, safeguard={"enabled": True})
    raw["verifier"]["warmup_sft_steps"] = 0
    with pytest.raises(UserError, match="safeguard.enabled guards the label-free recipes"):
        build_config(raw)
    with pytest.raises(UserError, match="full_separation must be above"):
        build_config(labelfree_config("consistency", sft_run[0], warm_verifier,
                                      safeguard={"enabled": True, "min_separation": 0.3, "full_separation": 0.2}))


# ---------------------------------------------------------------------- runs

DISTRUST = {"enabled": True, "every": 2, "questions": 4, "min_separation": 0.99, "full_separation": 1.0}
TRUST = {"enabled": True, "every": 2, "questions": 4, "min_separation": -1.0, "full_separation": -0.99,
         "kl_max": None, "min_entropy_ratio": None}


@pytest.mark.parametrize("recipe", ["consistency", "triad", "reliability"])
def test_a_judge_never_trusted_leaves_the_solver_at_its_start(sft_run, warm_verifier, tmp_path, capfd, recipe):
    """A separation the judge cannot reach skips every solver update: its weights end where they began,
    every step counts as skipped, and the run says why once."""
    start, _ = sft_run
    raw = labelfree_config(recipe, start, warm_verifier, train={"steps": 3}, safeguard=DISTRUST)
    _run(recipe, raw, tmp_path)
    assert not _changed(start / "final" / "generator", tmp_path / "final" / "generator")
    rows = [r for r in _rows(tmp_path) if "safe/scale" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["safe/scale"] == 0 and r["safe/skipped_share"] == 1 and r["safe/factor/sep"] == 0 for r in rows)
    assert all(-1 <= r["safe/sep"] <= 1 and r["safe/kl"] >= 0 for r in rows)
    assert rows[0]["safe/kl"] == pytest.approx(0.0, abs=1e-9), "the first probe is at the start"
    err = capfd.readouterr().err
    assert err.count("safeguard: step 1: skips the solver's updates: the judge separates") == 1


@pytest.mark.parametrize("recipe", ["consistency", "triad"])
def test_a_judge_always_trusted_trains_as_without_the_safeguard(sft_run, warm_verifier, tmp_path, recipe):
    """At full trust the probe only watches: every training metric equals the unguarded run's (only the
    compute counts grow by the probe's)."""
    start, _ = sft_run
    plain = labelfree_config(recipe, start, warm_verifier, train={"steps": 3})
    _run(recipe, plain, tmp_path / "plain")
    _run(recipe, {**plain, "safeguard": TRUST}, tmp_path / "guarded")

    def training(out):
        probe = ("safe/", "compute/", "flops/", "tokens/")
        return [{k: v for k, v in r.items() if not k.startswith(probe)} for r in _training_rows(out)]

    assert training(tmp_path / "plain") == training(tmp_path / "guarded")
    assert all(r["safe/scale"] == 1 for r in _rows(tmp_path / "guarded") if "safe/scale" in r)
    assert _changed(start / "final" / "generator", tmp_path / "guarded" / "final" / "generator")


@pytest.mark.heavy  # about 9 s; the label-free recipes' own SIGKILL-then-resume runs are heavy too
def test_a_guarded_run_killed_and_resumed_equals_the_unbroken_one(sft_run, warm_verifier, tmp_path):
    """The gate's state (smoothed separation, start entropy, counts) survives SIGKILL: a probe after the
    resume sees what the unbroken run's saw. The KL limit is set where the start's solver stays whole
    and a moved one is scaled."""
    raw = labelfree_config("consistency", sft_run[0], warm_verifier, train={"steps": 4},
                           checkpoint={"every": 2, "keep_last": 1}, eval={"every": 0},
                           safeguard={"enabled": True, "every": 3, "questions": 4, "min_separation": -1.0,
                                      "full_separation": -0.5, "kl_max": 1e-4})
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    run_killed_and_resumed(cfg_path, tmp_path, "step_2")
    rows = [r for r in _rows(tmp_path / "full") if "safe/scale" in r]
    assert [r["safe/scale"] for r in rows[:3]] == [1.0, 1.0, 1.0] and rows[3]["safe/kl"] > 0
    assert rows[3]["safe/scale"] < 1, "the KL after three full steps passes 1e-4 per token: the update shrinks"
