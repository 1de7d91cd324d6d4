"""The co-training recipes (tango, frozen_verifier, GAR): the warm-up verifier's competence, smoke
runs of every variant, a fixed-seed regression and exact resume."""
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from cotrain.config import VerifierConfig, build_config
from cotrain.roles.verifier import parse
from cotrain.train import verifier as train_verifier
from tests.conftest import ASSETS, nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_recipes import _rows, run_killed_and_resumed

# A verifier warm-up long enough to learn the check format in the test world, short enough for CI.
WARMUP = {"warmup_sft_steps": 60, "warmup_batch_size": 32, "warmup_sft_lr": 2e-3, "warmup_samples": 256,
          "solutions": 8, "max_new_tokens": 40}


# The recipes' tests start the verifier from the stored warm verifier (tests/assets, built with WARMUP) and
# run a few more warm-up steps on top, so that the warm-up's code runs without its chaos (conftest.py).
WARM_START = {**WARMUP, "init": str(ASSETS / "nano_verifier"), "warmup_sft_steps": 5}


def tango_config(start: Path, recipe: str = "tango", **overrides) -> dict:
    raw = nano_config(recipe, init=str(start), verifier=dict(WARM_START), tango={"gen_steps": 2, "eval_n": 40},
                      eval={"every": 3, "n_during": 20})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


def _weights(model_dir: Path) -> dict:
    return load_file(str(model_dir / "model.safetensors"))


def _changed(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return any(not torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def tango_run(sft_run, tmp_path_factory):
    start, _ = sft_run
    out = tmp_path_factory.mktemp("tango")
    results = run_recipe(build_config(tango_config(start, log={"plots": True})), out)
    return start, out, results


@pytest.fixture(scope="module")
def strong_start(tmp_path_factory):
    """A generator that can do the easy world's arithmetic (the tiny preset after 800 SFT steps): a
    verifier that judges steps by recomputing them is only as good as its arithmetic."""
    from cotrain.recipes import sft

    out = tmp_path_factory.mktemp("strong_sft")
    raw = nano_config("sft", model={"preset": "tiny"}, train={"steps": 800, "batch_size": 64, "lr": 3e-3,
                                                              "warmup_steps": 20}, checkpoint={"every": 0})
    results = sft.run(build_config(raw), out)
    return out, results["generator"]["test"]["pass@1"]


@pytest.mark.heavy  # ~7 minutes on 2 cores: `make test-heavy`
def test_warmup_verifier_beats_chance_on_held_out_injected_errors(strong_start, tmp_path):
    """Before any co-training claim: the SFT warm-up alone gives a verifier that tells correct solutions
    from ones with one injected wrong step (later steps carried forward) on held-out test problems, a
    balanced set where approving (or rejecting) everything scores 0.5. With n = 100, a balanced accuracy
    of 0.62 is 2.4 standard errors (0.05) above chance."""
    start, start_acc = strong_start
    assert start_acc >= 0.7, f"the SFT start is too weak to test the verifier on ({start_acc})"
    raw = nano_config("tango", init=str(start), train={"steps": 0}, tango={"eval_n": 100}, eval={"k": 0, "n": 10},
                      verifier={"warmup_sft_steps": 300, "warmup_batch_size": 32, "warmup_sft_lr": 2e-3,
                                "warmup_samples": 2048, "max_new_tokens": 40})
    results = run_recipe(build_config(raw), tmp_path)
    injected = results["verifier_warmup"]["test_injected"]
    assert injected["n"] == 100 and injected["parse_rate"] >= 0.8, injected
    assert injected["balanced_accuracy"] >= 0.62, injected
    assert injected["auroc"] >= 0.62, injected
    assert injected["acc_erroneous"] >= 0.3, injected  # it names the wrong step, not only the verdict
    warm_row = next(r for r in _rows(tmp_path) if r["step"] == 0)
    assert warm_row["eval/verifier/balanced_accuracy"] == pytest.approx(injected["balanced_accuracy"])


def test_tango_smoke_trains_both_roles_and_logs_health(tango_run):
    start, out, results = tango_run
    assert _changed(start / "final" / "generator", out / "final" / "generator"), "generator not updated"
    assert _changed(out / "warmup" / "verifier", out / "final" / "verifier"), "verifier not updated after warm-up"
    rows = [r for r in _rows(out) if "gen/reward" in r]
    assert [r["step"] for r in rows] == list(range(1, 7))
    for key in ["gen/reward", "gen/loss", "gen/alpha", "gen/process_usable", "cotrain/agree", "cotrain/hack_gap",
                "cotrain/agree_balanced", "flops/gen", "flops/ver", "time/verify"]:
        assert all(r[key] is not None and math.isfinite(r[key]) for r in rows), key
    ver_rows = [r for r in rows if "ver/reward" in r]
    assert [r["step"] for r in ver_rows] == [2, 4, 6]  # Ng = 2, Nv = 1
    assert all(-1 <= r["cotrain/hack_gap"] <= 1 for r in rows)
    # the generation-verification gaps on the generator's samples, and on held-out samples at the end
    assert all(-1 <= r["gap/verifier"] <= 1 and -1 <= r["gap/majority"] <= 1 for r in rows)
    final = results["verifier"]["test"]
    assert final["gap/verifier"] == pytest.approx(final["precision"] - final["base_rate"] if final["approve_rate"]
                                                  else 0.0)
    flops = [r["flops/total"] for r in rows]
    assert flops == sorted(flops) and flops[0] > 0
    saved = json.loads((out / "eval.json").read_text())
    assert {"generator", "verifier", "verifier_warmup", "compute"} <= set(saved)
    assert saved["compute"]["ver"]["flops"] > 0 and saved["compute"]["gen"]["tokens_generated"] > 0
    assert {"accuracy", "f1", "auroc", "bon@4", "wvote@4"} <= set(saved["verifier"]["test"])
    assert (out / "cotrain.png").is_file()


def test_frozen_verifier_never_trains_the_verifier(sft_run, tmp_path, monkeypatch):
    import cotrain.train.verifier as tv
    judged = []  # the verifiers the final evaluation scores: a frozen one once, not twice under two names
    scorer = tv.evaluate_verifiers
    monkeypatch.setattr(tv, "evaluate_verifiers", lambda verifiers, *a, **k: judged.append(sorted(verifiers))
                        or scorer(verifiers, *a, **k))
    start, _ = sft_run
    raw = tango_config(start, "frozen_verifier", train={"steps": 4}, eval={"k": 0, "n": 10, "every": 0})
    run_recipe(build_config(raw), tmp_path)
    assert judged == [["verifier_warmup"]]
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["verifier"] == saved["verifier_warmup"] and "test_injected" in saved["verifier"]
    # what its figures were counted from, sample by sample, beside what it was taught to write
    with gzip.open(tmp_path / "verifications" / "verifier_warmup_test.jsonl.gz", "rt", encoding="utf-8") as f:
        kept = [json.loads(line) for line in f]
    m = saved["verifier"]["test"]
    assert len(kept) == m["n"] and sum(r["correct"] for r in kept) == pytest.approx(m["base_rate"] * m["n"])
    assert sum(r["final"] is True for r in kept) == pytest.approx(m["approve_rate"] * m["n"])
    assert all(parse(r["verification"]).final == r["final"] and r["reference"] for r in kept)
    assert not _changed(tmp_path / "warmup" / "verifier", tmp_path / "final" / "verifier")
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator")
    assert not any("ver/reward" in r for r in _rows(tmp_path))
    assert any(r.get("cotrain/hack_gap") is not None for r in _rows(tmp_path))


@pytest.mark.parametrize("overrides", [
    {"tango": {"adversarial": True, "gen_steps": 1, "alpha_schedule": "exp"}},              # GAR
    {"verifier": {"warmup_sft_steps": 0, "warmup_rl_steps": 2, "greedy_verdicts": False}},  # zero warm-up (3.2)
    {"verifier": {"model": {"preset": "nano"}, "warmup_sft_steps": 5}},                     # its own model (3.1)
])
def test_tango_variants_run(sft_run, tmp_path, overrides):
    start, _ = sft_run
    raw = tango_config(start, train={"steps": 2}, eval={"k": 0, "n": 10, "every": 0})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value}
    results = run_recipe(build_config(raw), tmp_path)
    assert math.isfinite(results["generator"]["test"]["pass@1"])
    assert all(math.isfinite(r.get("gen/loss", 0.0)) for r in _rows(tmp_path))


def test_a_pairwise_warm_up_mixes_pair_judgments_into_each_batch(sft_run, tmp_path, monkeypatch):
    """verifier.warmup_pair_frac 0.25 of batches of 8: each of its 3 steps holds 2 pairwise examples
    (prompts with the pair separator) beside 6 pointwise ones; 0 gives none."""
    from cotrain.roles.verifier import PAIR_SEPARATOR

    start, _ = sft_run
    seen = []
    encode = train_verifier.encode_pair_prompts

    def spy(tok, questions, firsts, seconds):
        ids = encode(tok, questions, firsts, seconds)
        seen.append([PAIR_SEPARATOR in tok.decode(x) for x in ids])
        return ids
    monkeypatch.setattr(train_verifier, "encode_pair_prompts", spy)
    for frac, expected in ((0.25, [[True, True]] * 3), (0.0, [])):
        seen.clear()
        raw = tango_config(start, train={"steps": 0}, eval={"k": 0, "n": 10, "every": 0})
        raw["verifier"] = {**raw["verifier"], "warmup_sft_steps": 3, "warmup_batch_size": 8, "warmup_samples": 16,
                           "warmup_pair_frac": frac}
        run_recipe(build_config(raw), tmp_path / str(frac))
        assert seen == expected


def _golden_config(start: Path) -> dict:
    return tango_config(start, train={"steps": 4}, checkpoint={"every": 2, "keep_last": 1},
                        eval={"k": 0, "n": 20, "every": 0})


def test_tango_fixed_seed_regression_and_resume(sft_run, tmp_path):
    """Same seed -> the golden metrics; a run killed after its step-2 checkpoint and resumed ends identical."""
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(_golden_config(sft_run[0])))
    run_killed_and_resumed(cfg_path, tmp_path, "step_2")
    assert_golden(tmp_path / "full", TANGO_GOLDEN)
    a = json.loads((tmp_path / "full" / "eval.json").read_text())
    assert a["verifier_warmup"]["test_injected"]["accuracy"] == pytest.approx(GOLDEN_WARMUP_ACC, abs=1e-9)


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_drafted_decoding_leaves_the_tango_run_unchanged(sft_run, tmp_path):
    """`rollout.draft_tokens` and `verifier.draft_tokens` only change how many forward passes sampling
    takes: the golden run with drafted rollouts, verifications and verifier RL rollouts gives the golden
    metrics."""
    raw = _golden_config(sft_run[0])
    raw["rollout"] = {"draft_tokens": 4}
    raw["verifier"]["draft_tokens"] = 3
    run_recipe(build_config(raw), tmp_path)
    assert_golden(tmp_path, TANGO_GOLDEN)


def test_verifying_a_share_verifies_the_least_sure_distinct_samples_alone(sft_run, warm_verifier):
    """verifier.verify_share 0.5: of 7 distinct (question, sample) pairs (8 samples, the last a repeat
    of the first, sharing its verdicts) the 4 of highest mean token entropy are verified, with the
    verdicts full verification gives them; the other 3 have no verdict and no step verdicts."""
    from cotrain.models.build import load_model
    from cotrain.models.generate import Rollout
    from cotrain.train.verifier import verify_samples

    verifier, vtok = load_model(warm_verifier)
    questions = ["3+4", "3+4", "5+1", "5+1", "2+2", "6-1", "7+0", "3+4"]
    texts = ["Step 1: 3+4=7\nFinal: 7", "Step 1: 3+4=8\nFinal: 8", "Step 1: 5+1=6\nFinal: 6", "Step 1: 5+1=7\nFinal: 7",
             "Step 1: 2+2=4\nFinal: 4", "Step 1: 6-1=5\nFinal: 5", "Step 1: 7+0=7\nFinal: 7", "Step 1: 3+4=7\nFinal: 7"]
    entropy = torch.tensor([[0.1, 0.3], [2.0, 2.0], [0.5, 0.5], [1.0, 3.0], [0.0, 0.2], [1.2, 1.2], [0.4, 0.0], [9.0, 9.0]])
    mask = torch.tensor([[1, 1]] * 6 + [[1, 0], [1, 1]])  # sample 6: one token, mean 0.4; 7 repeats 0 (its first)
    ro = Rollout(*(torch.zeros(8, 2, dtype=torch.long),) * 4, torch.zeros(8, 2), entropy, torch.zeros(8, dtype=torch.bool))
    ro.completion_mask = mask
    v = build_config({"verifier": {"max_new_tokens": 40}}).verifier
    _, full, share_all = verify_samples(verifier, vtok, questions, texts, v, seed=0, bf16=False, rollout=ro)
    assert share_all == pytest.approx(7 / 8)  # 7 distinct pairs of 8 samples
    v.verify_share = 0.5
    _, part, share = verify_samples(verifier, vtok, questions, texts, v, seed=0, bf16=False, rollout=ro)
    # mean entropies of the distinct pairs 0..6: 0.2, 2.0, 0.5, 2.0, 0.1, 1.2, 0.4 -> ceil(3.5) = 4 kept: 1, 3, 5, 2
    verified = {1, 2, 3, 5}
    assert share == pytest.approx(4 / 8)
    for i in range(8):
        d = i if i < 7 else 0
        if d in verified:
            assert part[i] == full[i]
        else:
            assert part[i].final is None and part[i].steps == [] and part[i].format == 0.0


def test_the_samples_needed_alone_are_verified(sft_run, warm_verifier):
    """`needed`: only the distinct pairs with a flagged copy are verified, with the verdicts full verification
    gives them (pair 0's copy, sample 3, is flagged: pair 0 is verified for sample 0 too); the rest have no
    verdict; none flagged, no verification at all."""
    from cotrain.models.build import load_model
    from cotrain.train.verifier import mixed_groups, verify_samples

    verifier, vtok = load_model(warm_verifier)
    questions = ["3+4", "5+1", "2+2", "3+4"]
    texts = ["Step 1: 3+4=7\nFinal: 7", "Step 1: 5+1=7\nFinal: 7", "Step 1: 2+2=4\nFinal: 4", "Step 1: 3+4=7\nFinal: 7"]
    v = build_config({"verifier": {"max_new_tokens": 40}}).verifier
    _, full, _ = verify_samples(verifier, vtok, questions, texts, v, seed=0, bf16=False)
    _, part, share = verify_samples(verifier, vtok, questions, texts, v, seed=0, bf16=False,
                                    needed=[False, True, False, True])
    assert share == pytest.approx(2 / 4) and [part[i] == full[i] for i in (0, 1, 3)] == [True] * 3
    assert part[2].final is None and part[2].steps == [] and part[2].format == 0.0
    vro, none, share = verify_samples(verifier, vtok, questions, texts, v, seed=0, bf16=False, needed=[False] * 4)
    assert vro is None and share == 0.0 and all(x.final is None for x in none)
    assert mixed_groups([True, False, False, False, False, False, True, True, True], 3) == [True] * 3 + [False] * 6


def test_verifying_the_trained_groups_alone_leaves_the_update_unchanged(sft_run, tmp_path, monkeypatch):
    """`cotraining.verify_groups: trained` with `process_groups: mixed`: the verdicts on the groups the process term
    does not train are read by no update, so, with verdicts that depend on the sample alone, the generator ends
    bit for bit where judging every sample leaves it, for fewer verifications; the verifier's monitors read the
    mixed groups alone. Refused where an update reads every verdict."""
    import cotrain.recipes.tango as tango
    import cotrain.train.verifier as tv
    from cotrain.roles.verifier import Verification, split_steps

    judged = {}

    def verdicts(verifier, vtok, questions, texts, **kw):  # the real verifier's rollout, verdicts from the text alone
        judged.setdefault(run, []).append(len(texts))
        vro, raw, _ = real(verifier, vtok, questions, texts, **kw)
        fixed = [Verification(steps=[(len(t) + k) % 3 > 0 for k in range(len(split_steps(t)))], final=len(t) % 2 == 0,
                              format=1.0) for t in texts]
        return vro, raw, fixed

    real = tv.verify
    monkeypatch.setattr(tv, "verify", verdicts)
    monkeypatch.setattr(tango, "warm_up", lambda *a, **k: None)  # the stored verifier as it is, and no final
    monkeypatch.setattr(tango, "final_verifier_results", lambda *a, **k: {})  # evaluation: the steps alone
    rows = {}
    for run in ("all", "trained"):
        raw = tango_config(sft_run[0], recipe="frozen_verifier", train={"steps": 2}, eval={"k": 0, "n": 4, "every": 0},
                           checkpoint={"every": 0},
                           tango={"eval_n": 8, "alpha": 0.5, "alpha_schedule": "constant", "credit": "final",
                                  "process_groups": "mixed", "verify_groups": run})
        run_recipe(build_config(raw), tmp_path / run)
        rows[run] = [r for r in _rows(tmp_path / run) if "gen/alpha" in r]
    assert not _changed(tmp_path / "all" / "final" / "generator", tmp_path / "trained" / "final" / "generator")
    assert _changed(sft_run[0] / "final" / "generator", tmp_path / "trained" / "final" / "generator")
    assert sum(judged["trained"]) < sum(judged["all"]), judged
    assert any(r["gen/adv_process_abs"] > 0 for r in rows["trained"]), "the test needs a process term that trains"
    for a, t in zip(rows["all"], rows["trained"], strict=True):
        assert t["gen/loss"] == a["gen/loss"] and t["gen/acc"] == a["gen/acc"]
        assert t["cotrain/distinct_verified"] <= a["cotrain/distinct_verified"]
        assert ("cotrain/agree" in t) == (t["gen/frac_reward_zero_std"] < 1)  # judged where a group is mixed
    for bad, why in (({"process_groups": "all"}, "not mixed"), ({"process_groups": "mixed", "adversarial": True}, "adversarial"),
                     ({"process_groups": "mixed", "alpha": "auto"}, "auto")):
        with pytest.raises(Exception, match=f"verify_groups trained: .*{why}"):
            build_config(nano_config("tango", cotraining={**bad, "verify_groups": "trained"}))


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_compiled_decoding_leaves_the_tango_run_unchanged(sft_run, tmp_path, monkeypatch):
    """`rollout.compile` and `verifier.compile` change only how sampling runs: the golden run with
    compiled rollouts, verifications and verifier RL rollouts gives the golden metrics (the "eager"
    backend: dynamo's tracing and the static-cache loop without code generation)."""
    import cotrain.models.generate as gen

    monkeypatch.setattr(gen, "COMPILE_BACKEND", "eager")
    raw = _golden_config(sft_run[0])
    raw["rollout"] = {"compile": True}
    raw["verifier"]["compile"] = True
    run_recipe(build_config(raw), tmp_path)
    assert_golden(tmp_path, TANGO_GOLDEN)


# Fixed-seed regression: what this code produced (seed 0, the float64 nano world of conftest.py); holds
# on any x86-64 CPU (tests/golden.py).
# recorded with RL Tango's defaults (alpha 0.1 decaying, w_format 0.8, unclamped class weights, a lone
# step reward kept, no reward without a final verdict)
TANGO_GOLDEN = {"gen/reward": [0.3125, 0.1875, 0.1875, 0.0],
                "gen/loss": [0.002584586994, 0.002341824207, -1.862645149e-09, -2.762102195e-05],
                "gen/grad_norm": [0.8214206348, 1.261494530, 0.4231485640, 0.005474541951],
                "ver/reward": [0.6999999881, 0.8499999642],
                "ver/grad_norm": [0.9570587340, 0.6200594252]}
GOLDEN_WARMUP_ACC = 0.375

G_VER = VerifierConfig().group_size  # verifications per solution in the golden config
TANGO_MUTATIONS = {
    # each verdict scored against the correctness of the next solution (a solution's G verifications
    # are contiguous, so the labels move by one solution: G places)
    "verifier reward off by one": (train_verifier, "verifier_rewards",
                                   lambda f: lambda final, correct, *a, **k: f(final, correct[G_VER:] + correct[:G_VER], *a, **k)),
    "process advantage sign flipped": (train_verifier, "credit_advantages",
                                       lambda f: lambda *a, **k: (lambda rewards, adv: (rewards, -adv))(*f(*a, **k))),
}


@pytest.mark.parametrize("mutation", list(TANGO_MUTATIONS))
def test_tango_golden_catches_a_mutation(sft_run, tmp_path, monkeypatch, mutation):
    module, name, mutate = TANGO_MUTATIONS[mutation]
    monkeypatch.setattr(module, name, mutate(getattr(module, name)))
    run_recipe(build_config(_golden_config(sft_run[0])), tmp_path)
    assert mismatch(golden_metrics(tmp_path, list(TANGO_GOLDEN)), TANGO_GOLDEN) is not None, f"{mutation}: golden still holds"


def test_alpha_auto_with_a_verifier_that_approves_everything_is_grpo_bit_for_bit(sft_run, tmp_path, monkeypatch):
    """`cotraining.alpha: auto` weighs the process advantage by the verifier's measured reliability: a verifier
    that approves every sample is at chance (balanced accuracy 0.5), so alpha is 0 at every step and the
    generator's update is GRPO's, bit for bit (same samples, losses, gradient norms and final weights)."""
    from cotrain.roles.verifier import Verification

    real = train_verifier.verify_samples

    def approve_all(*args, **kwargs):
        vro, parsed, distinct = real(*args, **kwargs)
        return vro, [Verification(steps=[True] * len(x.steps), final=True, format=x.format) for x in parsed], distinct

    monkeypatch.setattr(train_verifier, "verify_samples", approve_all)
    start = sft_run[0]
    common = {"train": {"steps": 3}, "eval": {"k": 0, "n": 10, "every": 0}, "checkpoint": {"every": 0}}
    run_recipe(build_config(tango_config(start, "frozen_verifier", tango={"alpha": "auto", "gen_steps": 2},
                                         **common)), tmp_path / "auto")
    run_recipe(build_config(nano_config("grpo", init=str(start), **common)), tmp_path / "grpo")
    auto = [r for r in _rows(tmp_path / "auto") if "gen/alpha" in r]  # the warm-up's rows are step 0
    grpo = [r for r in _rows(tmp_path / "grpo") if "gen/reward" in r]
    assert len(auto) == len(grpo) == 3
    assert [r["gen/alpha"] for r in auto] == [0.0, 0.0, 0.0]
    assert [r["gen/alpha_trust"] for r in auto] == [0.0, 0.0, 0.0]
    for key in ("gen/reward", "gen/loss", "gen/grad_norm", "gen/len_mean"):
        assert [r[key] for r in auto] == [r[key] for r in grpo], key
    assert not _changed(tmp_path / "auto" / "final" / "generator", tmp_path / "grpo" / "final" / "generator")


def test_the_oracle_at_alpha_0_is_grpo_bit_for_bit(sft_run, tmp_path):
    """`verifier.source: oracle` builds no verifier and samples none; at α 0 the process advantage weighs
    nothing, so the generator's update is GRPO's, bit for bit (same samples, losses, gradient norms, final
    weights), and the oracle's verdicts on the samples agree with the truth by construction."""
    start = sft_run[0]
    common = {"train": {"steps": 3}, "eval": {"k": 0, "n": 10, "every": 0}, "checkpoint": {"every": 0}}
    run_recipe(build_config(tango_config(start, tango={"alpha": 0.0, "alpha_schedule": "constant", "gen_steps": 2},
                                         verifier={"source": "oracle"}, **common)), tmp_path / "oracle")
    run_recipe(build_config(nano_config("grpo", init=str(start), **common)), tmp_path / "grpo")
    oracle, grpo = _rows(tmp_path / "oracle"), _rows(tmp_path / "grpo")
    assert [r["step"] for r in oracle] == [r["step"] for r in grpo] == [1, 2, 3, 3]  # no warm-up row
    for key in ("gen/reward", "gen/loss", "gen/grad_norm", "gen/len_mean", "gen/early_stop"):
        assert [r.get(key) for r in oracle] == [r.get(key) for r in grpo], key
    assert all(r["cotrain/agree"] == 1.0 and r["cotrain/step_catch"] in (1.0, None) for r in oracle[:3]
               if "cotrain/step_catch" in r)
    assert not _changed(tmp_path / "oracle" / "final" / "generator", tmp_path / "grpo" / "final" / "generator")
    assert not (tmp_path / "oracle" / "final" / "verifier").exists() and not (tmp_path / "oracle" / "warmup").exists()
    assert "verifier" not in json.loads((tmp_path / "oracle" / "eval.json").read_text())


@pytest.mark.parametrize("credit", ["min", "final", "min_final", "first_error", "final_compute"])
def test_a_noisy_oracle_trains_the_generator_under_each_construction(sft_run, tmp_path, credit):
    """The noisy oracle's verdicts reach the update under each construction: the process advantage is
    non-zero, the weights move, and the step metrics show the noise (false steps approved, right ones
    rejected: at rates 0.3 the chance that none of a step's 16 samples' steps is flipped is tiny, and it
    is a fixed seed)."""
    start = sft_run[0]
    raw = tango_config(start, tango={"alpha": 0.5, "alpha_schedule": "constant", "credit": credit},
                       verifier={"source": "noisy", "noise_fp": 0.3, "noise_fn": 0.3},
                       train={"steps": 2}, eval={"k": 0, "n": 10, "every": 0}, checkpoint={"every": 0})
    run_recipe(build_config(raw), tmp_path)
    rows = [r for r in _rows(tmp_path) if "gen/alpha" in r]
    assert len(rows) == 2 and all(r["gen/adv_process_abs"] > 0 for r in rows)
    assert all(math.isfinite(r["gen/loss"]) and 0 <= r["gen/early_stop"] <= 1 for r in rows)
    assert all(r.get("cotrain/step_approve_right", 1) < 1 or r["cotrain/step_catch"] < 1 for r in rows)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator")


def test_process_advantages_only_in_mixed_groups_train_what_grpo_trains(sft_run, tmp_path):
    """`cotraining.process_groups: mixed`: a group whose samples are all right or all wrong gets no process
    advantage, so it trains not at all, as under GRPO: the share of groups trained is the share with a
    reward spread, every step; with `all` (RL Tango) every group with a usable verdict trains."""
    start = sft_run[0]
    base = {"alpha": 0.5, "alpha_schedule": "constant", "credit": "first_error"}
    rows = {}
    for groups in ("mixed", "all"):
        raw = tango_config(start, tango={**base, "process_groups": groups}, verifier={"source": "oracle"},
                           train={"steps": 2}, eval={"k": 0, "n": 10, "every": 0}, checkpoint={"every": 0})
        run_recipe(build_config(raw), tmp_path / groups)
        rows[groups] = [r for r in _rows(tmp_path / groups) if "gen/alpha" in r]
    assert len(rows["mixed"]) == 2
    assert all(r["gen/frac_groups_trained"] == pytest.approx(1 - r["gen/frac_reward_zero_std"]) for r in rows["mixed"])
    assert any(r["gen/frac_reward_zero_std"] > 0 for r in rows["mixed"]), "the test needs a group without a spread"
    assert all(r["gen/frac_groups_trained"] > 1 - r["gen/frac_reward_zero_std"] for r in rows["all"])


def test_the_cli_refuses_an_oracle_where_no_step_verdicts_are_read(tmp_path):
    """A label-free recipe, or one that reads no step verdicts, refuses `verifier.source: oracle` in one line
    with exit 2, before any model is built."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo / "src"))
    for config, named in (("consistency_smoke.yaml", "label-free"), ("smoke.yaml", "reads no step verdicts")):
        proc = subprocess.run([sys.executable, "-m", "cotrain", "check", str(repo / "configs" / config),
                               "verifier.source=oracle"], capture_output=True, text=True, env=env, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and named in lines[0], proc.stderr[-500:]
    with pytest.raises(Exception, match="set verifier.source: noisy"):
        build_config(nano_config("tango", verifier={"noise_fp": 0.1}))
    with pytest.raises(Exception, match="set verifier.source: noisy"):
        build_config(nano_config("tango", verifier={"source": "oracle", "noise_final_fn": 0.5}))
    with pytest.raises(Exception, match="set verifier.source: oracle or noisy"):
        build_config(nano_config("tango", verifier={"final_strict": True}))


def test_check_starts_the_sparse_world_with_the_oracle(capsys):
    """`cotrain check configs/sparse/tango.yaml verifier.source=oracle` passes: no verifier model is built, and
    the first sample is verified by the task's process labels."""
    from cotrain.cli import main

    repo = Path(__file__).resolve().parents[1]
    assert main(["check", str(repo / "configs" / "sparse" / "tango.yaml"), "verifier.source=oracle",
                 "--prompts", "1", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "verify    oracle (the task's process labels; no verifier model)" in out
    assert "\nverifier " not in out and out.rstrip().endswith("ok")


def test_an_oracle_run_without_steps_measures_its_world_for_the_worlds_table(sft_run, tmp_path):
    """`verifier.source: oracle` with `train.steps: 0` samples k of each evaluation problem and writes what
    its world looks like through the oracle (eval.json `oracle`): all-wrong groups, where failed samples
    first go wrong, the oracle's verdicts agreeing with the truth; `cotrain study --worlds` reads it."""
    from cotrain.lab.worlds import world_table

    raw = tango_config(sft_run[0], verifier={"source": "oracle"}, train={"steps": 0},
                       eval={"k": 4, "n_sampled": 12, "every": 0, "n": 10})
    run_recipe(build_config(raw), tmp_path / "worlds" / "nano")
    m = json.loads((tmp_path / "worlds" / "nano" / "eval.json").read_text())["oracle"]["test"]
    assert 0 <= m["all_wrong@4"] <= 1 and m["accuracy"] == 1.0 and m["n"] == 48
    if m.get("process/n_failed"):
        assert m["process/first_rejected_match"] == 1.0
    # one oracle verdict per step, each the label: every right step approved, every false one caught
    assert m["step/usable"] == 1.0 and m.get("step/approve_right", 1.0) == 1.0 == m.get("step/catch_false", 1.0)
    assert "| nano |" in world_table(tmp_path / "worlds")
    # eval.n_sampled 0: the run's end samples nothing more (a ceiling run of SmolLM2 had spent 1,600 samples here)
    raw["eval"]["n_sampled"] = 0
    run_recipe(build_config(raw), tmp_path / "none")
    assert "oracle" not in json.loads((tmp_path / "none" / "eval.json").read_text())
