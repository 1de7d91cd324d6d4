"""The label-free recipes (consistency, triad, reliability): the wall between training and ground
truth, smoke runs of every variant, fixed-seed regressions and exact resume."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from cotrain.config import build_config
from cotrain.recipes import consistency, reliability, triad
from cotrain.roles import proposer
from cotrain.tasks import TASKS, make_task
from cotrain.tasks.arith import ArithTask
from cotrain.tasks.base import HIDDEN, PUBLIC_META, LabelLeak, Problem, blind
from cotrain.tasks.code import CodeJsonlTask, HumanEvalTask
from cotrain.tasks.codeworld import CodeWorldTask
from cotrain.tasks.countdown import CountdownTask
from cotrain.tasks.mathdata import Gsm8kTask, JsonlTask, Math500Task
from cotrain.tasks.wordproblems import WordProblemsTask
from tests.conftest import nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_recipes import _rows, run_killed_and_resumed
from tests.test_tango import _changed, _weights

SELFPLAY = {"shared_model": False, "proposals": 8, "proposer_warmup_steps": 40, "judge_passes": 2,
            "seed_questions": 200}


def labelfree_config(recipe: str, start: Path, verifier: Path, **overrides) -> dict:
    raw = nano_config(recipe, init=str(start), verifier={"init": str(verifier), "solutions": 8, "max_new_tokens": 40},
                      tango={"gen_steps": 2, "eval_n": 20}, selfplay=dict(SELFPLAY),
                      reliability={"n_strong": 2, "n_weak": 1, "n_old": 1, "thresholds": {"cons": 0.0}},
                      eval={"every": 3, "n_during": 20, "k": 0, "n": 20})
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


def _run(recipe: str, raw: dict, out: Path) -> dict:
    return run_recipe(build_config(raw), out)


def _training_rows(out: Path) -> list[dict]:
    """Every metric a run logged, except ground-truth monitors (gt/, gap/), evaluations and timings."""
    skip = ("gt/", "gap/", "eval/", "time", "throughput/")
    return [{k: v for k, v in r.items() if not k.startswith(skip)} for r in _rows(out)]


# ---------------------------------------------------------------------- the wall


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# How the wall test builds each registered task offline, with the answer also where a careless source
# would carry it: in a field of the row (jsonl's unmapped fields), in the generator's entry (rg).
WALL_TASKS = {
    "arith": lambda d: ArithTask(),
    "countdown": lambda d: CountdownTask(),
    "codeworld": lambda d: CodeWorldTask(),
    "wordproblems": lambda d: WordProblemsTask(),
    "gsm8k": lambda d: Gsm8kTask(data_dir=_write_jsonl(d / "gsm8k_train.jsonl", [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"}]).parent),
    "math500": lambda d: Math500Task(data_dir=_write_jsonl(d / "math500_test.jsonl", [
        {"problem": "What is $3+4$?", "answer": "7", "solution": "$3+4=\\boxed{7}$", "subject": "Algebra",
         "level": 1, "unique_id": "test/algebra/1.json"}]).parent),
    "jsonl": lambda d: JsonlTask(path=_write_jsonl(d / "words.jsonl", [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "7", "equation": "3+4=7",
         "rationale": "he has 7"}])),
    "rg:leg_counting": lambda d: make_task("rg:leg_counting"),
    "humaneval": lambda d: HumanEvalTask(data_dir=_write_gz(d / "humaneval.jsonl.gz", [
        {"task_id": "HumanEval/0", "prompt": "def add(x, y):\n    \"\"\"x plus y\"\"\"\n",
         "canonical_solution": "    return x + y\n", "entry_point": "add",
         "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}]).parent),
    "code_jsonl": lambda d: CodeJsonlTask(path=_write_jsonl(d / "mbpp.jsonl", [  # MBPP's fields
        {"task_id": 2, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
         "test_list": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}]),
        prompt_field="text", tests_field="test_list", entry_point_field=None, solution_field="code",
        prompt_is_code=False),
}


def _write_gz(path: Path, rows: list[dict]) -> Path:
    import gzip

    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def test_the_wall_test_covers_every_registered_task():
    assert set(TASKS) | {"rg:leg_counting"} == set(WALL_TASKS), "a new task must join WALL_TASKS"


@pytest.mark.parametrize("name", list(WALL_TASKS))
def test_blind_strips_every_answer_bearing_field_and_grading_it_raises(name, tmp_path):
    task = WALL_TASKS[name](tmp_path)
    split = "test" if name in ("math500", "humaneval") else "train"
    problem = task.problems(split, 1, seed=0)[0]
    right = problem.solution or f"#### {problem.answer}"
    assert task.grade(right, problem) == 1.0  # the graders work on labelled problems
    (b,) = blind([problem])
    assert b.answer is HIDDEN and b.steps == () and b.solution is None
    assert set(b.meta) <= set(PUBLIC_META), b.meta
    described = {k: v for k, v in b.meta.items() if k not in ("line", "index")}  # positions, not content
    assert str(problem.answer) not in json.dumps(described, default=str), b.meta
    with pytest.raises(LabelLeak):
        task.grade(right, b)
    if hasattr(task, "score"):
        with pytest.raises(LabelLeak):
            task.score(right, b)


def test_blind_hides_answers_and_any_use_of_them_raises():
    p = Problem("1+2", "3", ("1+2=3",), "1+2=3\n#3", meta={"n_ops": 1})
    (b,) = blind([p])
    assert b.question == "1+2" and b.answer is HIDDEN and b.steps == () and b.solution is None and b.meta == p.meta
    (b,) = blind([dataclasses.replace(p, meta={"n_ops": 1, "answer": "3", "entry": {"answer": "3"}})])
    assert b.meta == {"n_ops": 1}  # only public fields cross the wall
    for use in (str, int, float, lambda a: a == "3", lambda a: f"{a}", lambda a: "3" in a, bool):
        with pytest.raises(LabelLeak):
            use(b.answer)
    with pytest.raises(LabelLeak):
        ArithTask().grade("1+2=3\n#3", b)  # the grader cannot be used on a blinded problem either
    assert repr(b.answer) == "<hidden answer>" and hash(b) == hash(blind([p])[0])


def _poisoned(monkeypatch):
    """Every problem the task hands out has a wrong answer, wrong steps, a wrong solution and a wrong
    answer in its metadata."""
    real = ArithTask.problems

    def problems(self, split, n=None, seed=0):
        return [dataclasses.replace(p, answer=str(int(p.answer) + 7), steps=("0+0=0",), solution="0+0=0\n#0",
                                    meta={**p.meta, "answer": str(int(p.answer) + 7)})
                for p in real(self, split, n, seed)]

    monkeypatch.setattr(ArithTask, "problems", problems)


@pytest.mark.parametrize("recipe", ["consistency", "triad", "reliability"])
def test_label_free_training_is_blind_to_the_answers(sft_run, warm_verifier, tmp_path, monkeypatch, recipe):
    """With every answer the task hands out poisoned, a label-free run logs the same training metrics
    and ends with the same weights: nothing on its training path depends on ground truth (only the gt/
    and gap/ monitors and the evaluations change)."""
    start, _ = sft_run
    raw = labelfree_config(recipe, start, warm_verifier, train={"steps": 3})
    _run(recipe, raw, tmp_path / "clean")
    with monkeypatch.context() as m:
        _poisoned(m)
        _run(recipe, raw, tmp_path / "poisoned")
    clean, poisoned = _training_rows(tmp_path / "clean"), _training_rows(tmp_path / "poisoned")
    assert len(clean) >= 3 and clean == poisoned
    for role in ("generator", "verifier") if recipe == "consistency" else ("generator", "proposer", "judge"):
        a, b = _weights(tmp_path / "clean" / "final" / role), _weights(tmp_path / "poisoned" / "final" / role)
        assert all(torch.equal(a[k], b[k]) for k in a), role
    monitors = [[{k: v for k, v in r.items() if k.startswith(("gt/", "gap/", "eval/"))} for r in _rows(tmp_path / d)]
                for d in ("clean", "poisoned")]
    assert monitors[0] != monitors[1], "the poison did not reach ground truth at all: the test proves nothing"


def test_the_wall_test_catches_a_recipe_that_reads_labels(sft_run, warm_verifier, tmp_path, monkeypatch):
    """The same comparison on tango, which trains on ground truth, tells the runs apart."""
    start, _ = sft_run
    raw = labelfree_config("tango", start, warm_verifier, train={"steps": 3})
    raw["verifier"]["warmup_sft_steps"] = 0
    run_recipe(build_config(raw), tmp_path / "clean")
    with monkeypatch.context() as m:
        _poisoned(m)
        run_recipe(build_config(raw), tmp_path / "poisoned")
    assert _training_rows(tmp_path / "clean") != _training_rows(tmp_path / "poisoned")


# ---------------------------------------------------------------------- smoke runs


def test_consistency_smoke_trains_both_roles_on_pseudo_labels(sft_run, warm_verifier, tmp_path):
    start, _ = sft_run
    raw = labelfree_config("consistency", start, warm_verifier, log={"plots": True})
    results = run_recipe(build_config(raw), tmp_path)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator")
    assert _changed(tmp_path / "warmup" / "verifier", tmp_path / "final" / "verifier")
    rows = [r for r in _rows(tmp_path) if "gen/reward" in r]
    assert [r["step"] for r in rows] == list(range(1, 7))
    for key in ["gen/reward", "gt/gen_acc", "gt/pseudo_label_acc", "gt/agree", "gt/hack_gap", "cotrain/labelled",
                "cotrain/agree_pseudo", "gap/verifier", "gap/majority"]:
        assert all(math.isfinite(r[key]) for r in rows), key
    assert all(0 <= r["gt/pseudo_label_acc"] <= 1 for r in rows)
    assert any(r["cotrain/labelled"] > 0 for r in rows)
    assert not any(k in r for r in rows for k in ("gen/acc", "cotrain/agree")), "ground truth outside gt/"
    assert [r["step"] for r in rows if "ver/reward" in r] == [2, 4, 6]
    assert math.isfinite(results["generator"]["test"]["pass@1"]) and "verifier" in results
    assert (tmp_path / "labelfree.png").is_file()


def test_consistency_honours_the_credit_and_the_groups_the_process_term_trains(sft_run, warm_verifier, tmp_path):
    """`cotraining.credit` and `process_groups` reach consistency's generator update as tango's: with the
    verifier frozen the runs share their rollouts at step 1 (the same weights sample them) and part at the
    update; in mixed groups a group whose rewards are all equal gets no process advantage, so the process term
    shrinks at a step with such a group and equals to_go's where there is none. A label-free run cannot judge
    only some groups."""
    start, _ = sft_run
    rows = {}
    for name, extra in (("to_go", {}), ("final", {"credit": "final"}), ("mixed", {"process_groups": "mixed"})):
        raw = labelfree_config("consistency", start, warm_verifier, train={"steps": 2},
                               tango={"gen_steps": 2, "eval_n": 20, "ver_steps": 0, "alpha": 0.3,
                                      "alpha_schedule": "constant", **extra}, eval={"every": 0, "n": 20})
        run_recipe(build_config(raw), tmp_path / name)
        rows[name] = [r for r in _rows(tmp_path / name) if "gen/reward" in r]
    first = {name: r[0] for name, r in rows.items()}
    assert first["final"]["gen/reward"] == first["to_go"]["gen/reward"], "step 1 samples and judges the same solutions"
    assert first["to_go"]["gen/adv_process_abs"] > 0, "the test needs a process term"
    assert first["final"]["gen/adv_process_abs"] != first["to_go"]["gen/adv_process_abs"]
    # mixed: the same update as to_go while every group's rewards differ, so the same rollouts next step too
    unmixed = 0
    for a, m in zip(rows["to_go"], rows["mixed"], strict=True):
        assert m["gen/reward"] == a["gen/reward"] and m["gen/frac_reward_zero_std"] == a["gen/frac_reward_zero_std"]
        if m["gen/frac_reward_zero_std"] == 0:
            assert m["gen/adv_process_abs"] == a["gen/adv_process_abs"]
        else:
            unmixed += 1
            assert m["gen/adv_process_abs"] < a["gen/adv_process_abs"]
            break  # the updates now differ, and so will the next rollouts
    assert unmixed, "the test needs a step with a group whose rewards are all equal"
    with pytest.raises(Exception, match="verify_groups: all"):
        build_config(labelfree_config("consistency", start, warm_verifier,
                                      tango={"process_groups": "mixed", "verify_groups": "trained"}))


@pytest.mark.parametrize("recipe,overrides", [
    ("triad", {}),
    ("triad", {"selfplay": {"shared_model": True, "proposer_reward": "learnability", "solver_norm": "group",
                            "judge_early_stop": True, "judge_passes": 3}, "grpo": {"beta": 0.1}}),
    ("reliability", {}),
    ("reliability", {"reliability": {"solver_loss": "pg", "filter": False, "n_best_of": 1, "best_of": 3},
                     "selfplay": {"judge_early_stop": True, "judge_passes": 3}}),
    ("reliability", {"reliability": {"solver_loss": "rank", "n_old": 0}, "selfplay": {"shared_model": True}}),
    ("reliability", {"reliability": {"pairwise": True, "pairs_per_question": 2}}),
])
def test_selfplay_smoke(sft_run, warm_verifier, tmp_path, recipe, overrides):
    start, _ = sft_run
    raw = labelfree_config(recipe, start, warm_verifier, train={"steps": 3}, **overrides)
    results = run_recipe(build_config(raw), tmp_path)
    assert _changed(start / "final" / "generator", tmp_path / "final" / "generator"), "solver not updated"
    rows = [r for r in _rows(tmp_path) if "prop/reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    keys = ["prop/valid", "prop/parsable", "prop/reward", "gen/judge_score", "gt/judge_agree"]
    keys += ["rel/pass_share_all", "gt/strong_acc"] if recipe == "reliability" else ["gen/reward", "gt/solver_acc"]
    for key in keys:
        assert all(math.isfinite(r[key]) for r in rows), key
    assert all(0 <= r["prop/valid"] <= r["prop/parsable"] <= 1 for r in rows)
    if raw["reliability"].get("pairwise"):  # R_stab from the judge's pairwise prompt, the pointwise reading beside it
        assert all(0 <= r["judge/pair_stated"] <= 1 and 0 <= r["rel/stab_pointwise"] <= 1 for r in rows)
        assert all(r["time/prefer"] > 0 for r in rows)
    # the judge's and the majority's gaps over the answers whose truth is known (seed questions always are)
    assert all(-1 <= r["gap/judge"] <= 1 and -1 <= r["gap/majority"] <= 1 for r in rows)
    assert any(r["prop/valid"] > 0 for r in rows), "the proposer warm-up taught no valid question"
    assert math.isfinite(results["generator"]["test"]["pass@1"])
    if raw["grpo"].get("beta"):  # the KL is to the solver as RL starts, after the shared proposer warm-up
        assert rows[0]["gen/kl"] == pytest.approx(0.0, abs=1e-6) and rows[-1]["gen/kl"] > 0
    if not raw["selfplay"]["shared_model"]:
        assert (tmp_path / "final" / "proposer").is_dir() and (tmp_path / "final" / "judge").is_dir()
    # passes drawn / passes scored: 1 without early stopping; with it, from 2 of 3 to all 3
    drawn = [r["judge/drawn"] for r in rows]
    if raw["selfplay"].get("judge_early_stop"):
        assert all(2 / 3 <= d <= 1 for d in drawn) and min(drawn) < 1
    else:
        assert drawn == [1.0] * len(rows)


def test_the_judge_samples_each_distinct_answer_once_and_copies_share_its_passes(sft_run, warm_verifier):
    """selfplay.judge_distinct: a repeated (question, answer) pair is judged once, its copies get its P
    verdicts; off, every answer gets its own passes. The same question with another answer, or another
    question with the same answer, is a pair of its own."""
    from cotrain.models.build import load_model
    from cotrain.train.compute import Compute
    from cotrain.train.selfplay import judge

    start, _ = sft_run
    model = load_model(warm_verifier)  # (model, tokenizer), as the recipes hold a role
    questions = ["3+4", "3+4", "3+4", "5+1", "3+4"]
    answers = ["Step 1: 3+4=7\nFinal: 7", "Step 1: 3+4=8\nFinal: 8", "Step 1: 3+4=7\nFinal: 7",
               "Step 1: 3+4=7\nFinal: 7", "Step 1: 3+4=7\nFinal: 7"]
    for distinct, rows in ((True, 3), (False, 5)):
        cfg = build_config(labelfree_config("triad", start, warm_verifier, selfplay={"judge_distinct": distinct}))
        out = judge(cfg.selfplay, cfg.verifier, model, questions, answers, Compute({"judge": 1}), step=1, timer=None,
                    seed=cfg.seed, bf16=cfg.train.bf16)
        P = cfg.selfplay.judge_passes
        assert out.rollout.completion_ids.shape[0] == len(out.sampled) == rows * P
        assert len(out.parsed) == len(answers) * P and out.scores.shape == (len(answers), P)
        assert out.distinct == pytest.approx(rows / len(answers))
        passes = [[id(x) for x in out.parsed[i * P:(i + 1) * P]] for i in range(len(answers))]
        sampled = [[id(x) for x in out.sampled[r * P:(r + 1) * P]] for r in range(rows)]
        if distinct:  # answers 0, 2 and 4 are one pair: the first set of passes; 1 and 3 the next two
            assert passes == [sampled[0], sampled[1], sampled[0], sampled[2], sampled[0]]
            assert torch.equal(out.scores[0], out.scores[2]) and torch.equal(out.scores[0], out.scores[4])
        else:
            assert passes == sampled


def test_judging_stopped_early_draws_the_rest_only_where_the_first_passes_disagree(sft_run, warm_verifier):
    """selfplay.judge_early_stop, P=3: every distinct pair gets 2 passes, a third only where they
    disagree; an agreed pair's scores are its verdict 3 times, an open pair's its 3 drawn passes."""
    from cotrain.models.build import load_model
    from cotrain.rl.mae import judge_score
    from cotrain.train.compute import Compute
    from cotrain.train.selfplay import judge

    start, _ = sft_run
    model = load_model(warm_verifier)
    questions = [f"{a}+{b}" for a in range(2, 7) for b in range(1, 5)]
    answers = [f"Step 1: {q}={eval(q) + (i % 2)}\nFinal: {eval(q) + (i % 2)}" for i, q in enumerate(questions)]
    cfg = build_config(labelfree_config("triad", start, warm_verifier, selfplay={"judge_early_stop": True,
                                                                               "judge_passes": 3}))
    cfg.verifier.temperature = 2.0  # a hot judge, so that some first rounds disagree
    out = judge(cfg.selfplay, cfg.verifier, model, questions, answers, Compute({"judge": 1}), step=1, timer=None,
                seed=cfg.seed, bf16=cfg.train.bf16)
    n = len(answers)
    first = [[judge_score([x.final]) for x in out.sampled[2 * i:2 * i + 2]] for i in range(n)]
    open_ = [i for i in range(n) if first[i][0] != first[i][1]]
    assert 0 < len(open_) < n, "the test needs agreeing and disagreeing first rounds"
    assert out.rollout.completion_ids.shape[0] == len(out.sampled) == 2 * n + len(open_)
    third = {i: judge_score([out.sampled[2 * n + j].final]) for j, i in enumerate(open_)}
    for i in range(n):
        expected = first[i] + [third[i]] if i in third else first[i] + first[i][:1]
        assert out.scores[i].tolist() == expected
        assert [judge_score([x.final]) for x in out.parsed[3 * i:3 * i + 3]] == expected


def test_curriculum_raises_the_level_as_accuracy_rises(sft_run, tmp_path):
    """grpo with three levels and a bar every step clears: level 0, 1, 2, then it stays at the top;
    a bar no step clears keeps level 0."""
    from cotrain.recipes import grpo

    start, _ = sft_run
    levels = [{"n_ops": [1, 1], "max_operand": 6}, {"n_ops": [1, 1], "max_operand": 9}, {}]
    raw = nano_config("grpo", init=str(start), train={"steps": 4, "n_problems": 50, "batch_size": 32},
                      eval={"every": 0, "k": 0, "n": 10},
                      curriculum={"levels": levels, "raise_at": 1e-6, "window": 1})
    grpo.run(build_config(raw), tmp_path / "easy")
    rows = [r for r in _rows(tmp_path / "easy") if "curriculum/level" in r]
    assert all(r["gen/acc"] > 0 for r in rows), "a step with no correct sample cannot raise the level"
    assert [r["curriculum/level"] for r in rows] == [0, 1, 2, 2]
    raw["curriculum"] = {"levels": levels, "raise_at": 1.0, "window": 2}
    grpo.run(build_config(raw), tmp_path / "hard")
    assert [r["curriculum/level"] for r in _rows(tmp_path / "hard") if "curriculum/level" in r] == [0, 0, 0, 0]


# ---------------------------------------------------------------------- regression and resume


def _golden_config(recipe: str, start: Path, verifier: Path) -> dict:
    return labelfree_config(recipe, start, verifier, train={"steps": 4}, checkpoint={"every": 2, "keep_last": 1},
                            eval={"every": 0})


@pytest.mark.parametrize("recipe", ["consistency", "triad", "reliability"])
def test_label_free_fixed_seed_regression(sft_run, warm_verifier, tmp_path, recipe):
    """Same seed -> the golden metrics."""
    run_recipe(build_config(_golden_config(recipe, sft_run[0], warm_verifier)), tmp_path)
    assert_golden(tmp_path, GOLDEN[recipe])
    assert json.loads((tmp_path / "eval.json").read_text())["generator"]["test"]["n"] == 20


@pytest.mark.heavy  # two processes, one killed: `make test-heavy`
@pytest.mark.parametrize("recipe", ["consistency", "triad", "reliability"])
def test_label_free_sigkill_then_resume_equals_uninterrupted(sft_run, warm_verifier, tmp_path, recipe):
    """Killed after step 2 and resumed -> the same run as the uninterrupted one, which holds the golden."""
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(_golden_config(recipe, sft_run[0], warm_verifier)))
    run_killed_and_resumed(cfg_path, tmp_path, "step_2")
    assert_golden(tmp_path / "full", GOLDEN[recipe])


# What this code produced (seed 0, the float64 nano world of conftest.py); holds on any x86-64 CPU
# (tests/golden.py).
GOLDEN = {
    "consistency": {"gen/reward": [0.28125, 0.1875, 0.1875, 0.25],  # with RL Tango's defaults, as tango's
                    "gen/loss": [0.0006543661742, 0.002324327617, 0.0008487592643, -8.086250587e-06],
                    "gen/grad_norm": [1.090106156, 1.947868399, 1.789304128, 1.262383924],
                    "ver/reward": [0.6749999523, 0.3375000060],
                    "ver/grad_norm": [1.084176708, 0.9081248183]},
    "triad": {"gen/reward": [0.53125, 0.584821403, 0.5703125, 0.462500006],
              "gen/grad_norm": [1.060544162, 0.89214453, 2.404226987, 4.999424394],
              "prop/reward": [0.9375, 0.9427083135, 0.2369791567, 0.6927083135],
              "prop/grad_norm": [2.481757563, 2.230805669, 6.777994647, 2.62322543]},
    "reliability": {"prop/reward": [1.688151002, 1.759114504, 1.579427004, 1.62109375],
                    "prop/grad_norm": [2.735828894, 2.755407202, 1.79851722, 2.145850292],
                    "gen/loss": [0.6931471806, 0.3560723549, 0.5519070411, 2.105660782],
                    "gen/grad_norm": [3.59927061, 5.123581048, 4.630327401, 11.73644864]}}


def _flip_sep(f):
    def mutated(*args, **kwargs):
        signals = f(*args, **kwargs)
        return {**signals, "sep": -signals["sep"]}
    return mutated


MUTATIONS = {
    "consistency": ("pseudo-labels inverted", consistency, "pseudo_labels",
                    lambda f: lambda *a, **k: [None if x is None else not x for x in f(*a, **k)]),
    "triad": ("solver reward blind to the judge", triad, "mae_solver_reward", lambda f: lambda judge, fmt: f(0.5, fmt)),
    "reliability": ("R_sep sign flipped", reliability, "reliability_signals", _flip_sep),
}


@pytest.mark.parametrize("recipe", list(MUTATIONS))
def test_label_free_golden_catches_a_mutation(sft_run, warm_verifier, tmp_path, monkeypatch, recipe):
    mutation, module, name, mutate = MUTATIONS[recipe]
    monkeypatch.setattr(module, name, mutate(getattr(module, name)))
    _run(recipe, _golden_config(recipe, sft_run[0], warm_verifier), tmp_path)
    assert mismatch(golden_metrics(tmp_path, list(GOLDEN[recipe])), GOLDEN[recipe]) is not None, f"{mutation}: golden still holds"


# ---------------------------------------------------------------------- the proposer's format


@pytest.mark.parametrize("text,chat,expected", [
    ("12+34-5\n", False, "12+34-5"),
    ("\n  7*3 \nmore", False, "7*3"),
    ("", False, None),
    ("   \n ", False, None),
    ("Problem: What is 2+2?", True, "What is 2+2?"),
    ("x" * 1001, False, None),
    (None, False, None),
])
def test_proposer_parse(text, chat, expected):
    assert proposer.parse(text, chat=chat) == expected


def test_arith_checks_proposed_questions():
    task = ArithTask(n_ops=(2, 3), max_operand=99, ops="+-")
    assert task.check_question("12+34-5") == (True, True)
    assert task.check_question("12+34") == (True, True)                    # fewer operations are fine
    assert task.check_question("1+2+3+4+5") == (True, False)               # more than 3 operations
    assert task.check_question("100+1") == (True, False)                   # operand above 99
    assert task.check_question("3*4") == (True, False)                     # an op the task does not use
    assert task.check_question("1+2+3+4+5", max_ops=4) == (True, True)
    assert task.check_question("12 + 3") == (False, False)
    assert task.size("12+34-5") == {"n_ops": 2.0, "max_operand": 34.0} and task.size("?") == {}
    p = task.problem_of("12+34-5")
    assert p.answer == "41" and task.grade(p.solution, p) == 1.0 and task.problem_of("x") is None
