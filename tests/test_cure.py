"""Code co-training (CURE): the rewards by hand, the tester's notation, the execution matrix in the
sandbox on hand-written codes and tests, and runs of the recipe (smoke, the wall of its label-free
variant, a fixed-seed regression, SIGKILL and resume)."""
import json
import math

import pytest
import torch
import yaml

from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.eval.cure_metrics import matrix_metrics
from cotrain.recipes.cure import execution_matrices, require_unit_tests
from cotrain.rl.cure import best_of_n, case_rewards, code_rewards, normalise
from cotrain.roles import tester
from cotrain.tasks.arith import ArithTask
from cotrain.tasks.base import LabelLeak, blind
from cotrain.tasks.code import HumanEvalTask
from cotrain.tasks.codeworld import CodeWorldTask
from cotrain.tasks.mathdata import shipped_data_dir
from tests.conftest import nano_config, run_recipe
from tests.golden import assert_golden, golden_metrics, mismatch
from tests.test_recipes import _rows, run_killed_and_resumed

T, F = True, False
DATA = shipped_data_dir()  # HumanEval, shipped gzipped in the package

# ---------------------------------------------------------------------- rewards, by hand


def test_code_rewards_are_ground_truth_pass_rates():
    assert code_rewards([[T, T, T, T], [T, F, F, F], [F, F, F, F]]) == [1.0, 0.25, 0.0]


def test_normalise_is_a_population_z_score_and_drops_flat_groups():
    # [1, 0.25, 0]: mean 5/12, population std sqrt(((7/12)^2 + (1/6)^2 + (5/12)^2) / 3) = 0.4249
    z = normalise([1.0, 0.25, 0.0])
    assert z == pytest.approx([1.3728, -0.3922, -0.9806], abs=1e-4)
    assert normalise([0.5, 0.5]) is None and normalise([]) is None


def test_test_rewards_as_cure_defines_them():
    """Codes 0, 1 pass every ground-truth test (correct); 2, 3 do not (wrong). Tests:
    0 passed by both correct codes, rejects both wrong ones    -> +2/2 = +1
    1 passed by both correct codes, rejects one wrong one      -> +1/2
    2 failed by a correct code, lets one wrong one through     -> -1/2
    3 failed by a correct code, lets no wrong one through      -> -0
    4 does not parse                                          -> -1"""
    gt = [[T, T], [T, T], [T, F], [F, F]]
    gen = [[T, T, F, T, F],
           [T, T, T, F, F],
           [F, T, T, F, F],
           [F, F, F, F, F]]
    parsable = [T, T, T, T, F]
    assert case_rewards(gt, gen, parsable) == [1.0, 0.5, -0.5, -0.0, -1.0]
    # the later stage: a right test scores only when it rejects every wrong code; a wrong test loses 1 if any passes
    assert case_rewards(gt, gen, parsable, post_stage=True) == [1.0, 0.0, -1.0, -0.0, -1.0]


def test_test_rewards_without_wrong_codes_or_without_correct_ones():
    gt = [[T], [T]]
    assert case_rewards(gt, [[T, F], [T, T]], [T, T]) == [1.0, -1.0]  # signs alone when every code is correct
    assert case_rewards([[F], [F]], [[T], [T]], [T]) is None  # no correct code: nothing to judge a test by


def test_best_of_n_picks_the_code_passing_most_generated_tests():
    assert best_of_n([[T, F, F], [T, T, F], [T, T, F]]) == 1
    assert best_of_n([[F], [F]]) == 0


# ---------------------------------------------------------------------- the tester's notation


@pytest.mark.parametrize("text, read", [
    ("[1,2,3]>6\nmore", ((1, 2, 3), 6)),
    ("  `[4,5]>[8,10]`  ", ((4, 5), (8, 10))),
    ("[1,2]>x", None), ("[1,2]", None), ("1>2", None), ("[1,true]>3", None), ("[" * 600 + ">1", None),
    ("[1,2,3,4,5,6,7,8,9,10,11,12,13]>1", None), ("", None), (None, None),
])
def test_a_test_line_reads_as_input_and_output_or_not_at_all(text, read):
    parsed = CodeWorldTask().parse_test(tester.parse(text))
    if read is None:
        assert parsed is None
    else:
        x, y = parsed
        assert (tuple(x), tuple(y) if isinstance(y, list) else y) == read


@pytest.mark.parametrize("text, line", [
    ("```python\nassert add(2, 3) == 5\n```", "assert add(2, 3) == 5"),
    ("Here is a test:\n\n`assert add(2, 3) == 5`\nIt checks a sum.", "assert add(2, 3) == 5"),
    ("```\n[1,2]>3\n```", "[1,2]>3"), ("\n  [1,2]>3  \nassertion", "[1,2]>3"), ("```\n```", None),
])
def test_the_tester_line_is_the_first_assertion_else_the_first_line_outside_fences(text, line):
    assert tester.parse(text) == line


@pytest.mark.parametrize("line, read", [
    ("assert f(1, 2) == 3", ([1, 2], 3)),
    ("assert 3 == add([1], 'a')", ([[1], "a"], 3)),            # either side of the ==, any function name
    ("assert g((1, 2)) == [True, None]", ([(1, 2)], [True, None])),
    ("assert f(x=1) == 2", None), ("assert abs(f(1) - 2) < 1e-6", None), ("assert f(1) == 2; x = 1", None),
    ("assert f(*a) == 1", None), ("assert f(1) == {1, 2}", None), ("assert f(float('nan')) == 1", None),
    ("assert f(1) == f(2)", None), ("assert f(1) == 2 == 2", None), ("assert f(1)", None), ("f(1) == 2", None),
    ("assert f(" * 400 + ")", None), ("", None), (None, None),
])
def test_an_assertion_line_reads_as_arguments_and_expected_value_or_not_at_all(line, read):
    assert HumanEvalTask(DATA).parse_test(line) == read


def test_humaneval_literal_assertions_are_unit_tests_the_matrix_runs():
    """154 of the 164 problems have tests of the form `assert candidate(literals) == literal` (1,059 in all);
    the reference solution passes each in the execution matrix, `return None` passes none, and a test line
    the task writes reads back as the same test."""
    task = HumanEvalTask(DATA)
    problems = task.problems("test")
    counts = [len(task.tests_of(p)) for p in problems]
    assert (len(problems), sum(c > 0 for c in counts), sum(counts)) == (164, 154, 1059)
    chosen = [p for p, c in zip(problems, counts) if c][:40]
    for p in chosen:
        x, y = task.tests_of(p)[0]
        assert task.parse_test(task.test_line(x, y, p)) == (x, y)
    lines = [[task.test_line(*task.tests_of(p)[0], p), "assert nothing(1) == 2", "garbage"] for p in chosen]
    matrices = execution_matrices(task, chosen, [[p.solution, "    return None\n"] for p in chosen], lines,
                                  truth=chosen, use_gt=True)
    assert all(all(m.gt[0]) for m in matrices) and not any(all(m.gt[1]) for m in matrices)
    assert all(m.parsable == [T, T, F] and m.gen[0][0] and m.reference_gen[0] for m in matrices)


def test_cure_needs_a_task_with_unit_tests():
    with pytest.raises(UserError, match="recipe cure needs a code task with unit tests"):
        require_unit_tests(ArithTask())


# ---------------------------------------------------------------------- the execution matrix, in the sandbox


def test_the_execution_matrix_on_hand_written_codes_and_tests():
    """The reference solution passes every hidden test, a wrong code fails some, hostile code fails
    all without harm; generated tests are judged by what each code returns, compared in the parent."""
    task = CodeWorldTask(n_ops=(1, 1))
    problem = next(p for p in task.problems("train", 50, seed=0) if p.solution.startswith("return [v+"))
    k = int(problem.solution.split("+")[1].split(" ")[0])            # "return [v+K for v in x]"
    codes = [problem.solution, "return [v+100 for v in x]",
             "return __import__('os').system('echo PASSED')", "return x"]
    tests = [f"[1,2]>[{1 + k},{2 + k}]", "[1,2]>[101,102]", "not a test", "[0]>[0]"]
    [m] = execution_matrices(task, [problem], [codes], [tests], truth=[problem], use_gt=True)
    assert all(m.gt[0]) and not any(m.gt[1]) and not any(m.gt[2]) and len(m.gt[0]) == 8
    assert m.parsable == [T, T, F, T]
    assert m.gen == [[T, F, F, False], [F, T, F, F], [F, F, F, F], [F, F, F, T]]
    assert m.reference_gen == [T, F, F, F]
    # rewards: code 0 alone is correct; test 0 passed by it and rejects all three wrong codes (+1); test 1 fails
    # it and lets code 1 through (-1/3); test 2 does not parse (-1); test 3 fails it and lets code 3 through (-1/3)
    assert case_rewards(m.gt, m.gen, m.parsable) == pytest.approx([1.0, -1 / 3, -1.0, -1 / 3])
    metrics = matrix_metrics([m])
    assert metrics["code_acc"] == 0.25 and metrics["bon_acc"] == 1.0 and metrics["test_accuracy"] == pytest.approx(1 / 3)
    assert metrics["test_discrimination"] == 1.0 and metrics["test_parsable"] == 0.75


def test_a_blinded_code_problem_hides_its_tests():
    task = CodeWorldTask(n_ops=(1, 1))
    [problem] = blind(task.problems("train", 1, seed=0))
    with pytest.raises(LabelLeak):
        task.tests_of(problem)


# ---------------------------------------------------------------------- runs


def cure_config(recipe: str = "cure", **overrides) -> dict:
    raw = nano_config(recipe, train={"steps": 3, "batch_size": 16, "n_problems": 100},
                      grpo={"group_size": 4, "max_new_tokens": 24},
                      cure={"n_tests": 4, "test_max_new_tokens": 16, "tester_warmup_steps": 5, "eval_problems": 2,
                            "eval_codes": 2, "eval_tests": 2},
                      eval={"splits": ["test"], "n": 2, "k": 0, "every": 0},
                      checkpoint={"every": 2, "keep_last": 1})
    raw["task"] = {"name": "codeworld", "n_ops": [1, 1]}
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


def test_cure_label_free_training_is_blind_to_the_answers(tmp_path, monkeypatch):
    """With every hidden test poisoned, cure_label_free logs the same training metrics (gt/ aside): nothing
    on its training path reads a ground-truth test; the same poison changes cure's."""
    import cotrain.tasks.codeworld as codeworld

    calls = []

    def poisoned(self, problem):
        calls.append(problem.question)
        return [([9, 9], 12345)] * 8

    raw = cure_config("cure_label_free", train={"steps": 2}, cure={"tester_warmup_steps": 0})

    def training(out):
        return [{k: v for k, v in r.items() if not k.startswith(("gt/", "eval/", "time", "throughput/"))}
                for r in _rows(out)]
    run_recipe(build_config(raw), tmp_path / "clean")
    with monkeypatch.context() as m:
        m.setattr(codeworld.CodeWorldTask, "tests_of", poisoned)
        run_recipe(build_config(raw), tmp_path / "poisoned")
    assert training(tmp_path / "clean") == training(tmp_path / "poisoned")
    assert calls, "the poison never reached ground truth (the gt/ monitors read it): the test proves nothing"


@pytest.mark.heavy  # two processes, one killed: `make test-heavy`
def test_cure_sigkill_then_resume_equals_uninterrupted(tmp_path):
    """Killed after step 2 and resumed -> the same run as the uninterrupted one, which holds the golden."""
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cure_config()))
    run_killed_and_resumed(cfg_path, tmp_path, "step_2")
    assert_golden(tmp_path / "full", GOLDEN)


def test_cure_smoke_fixed_seed_regression(tmp_path):
    """Every step logs both roles and the ground-truth monitors, eval.json has the CURE evaluation; same
    seed -> the golden metrics."""
    run_recipe(build_config(cure_config()), tmp_path / "full")
    assert_golden(tmp_path / "full", GOLDEN)
    rows = [r for r in _rows(tmp_path / "full") if "gen/reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ["gen/reward", "test/reward", "test/parsable", "gt/code_acc", "gt/bon_acc", "gt/test_accuracy",
                "gt/test_discrimination", "gen/len_mean", "test/len_mean", "time/execute"]:
        assert all(math.isfinite(r[key]) for r in rows), key
    assert all(0 <= r["test/parsable"] <= 1 and 0 <= r["gt/code_acc"] <= 1 for r in rows)
    assert "test/warmup_loss" in _rows(tmp_path / "full")[0]
    cure = json.loads((tmp_path / "full" / "eval.json").read_text())["cure"]["test"]
    assert cure["n"] == 2 and set(cure) >= {"code_acc", "bon_acc", "test_accuracy", "test_discrimination"}


# What this code produced (seed 0, the float64 nano model from scratch on the tiny code world); holds on
# any x86-64 CPU (tests/golden.py). A nano model from scratch writes no correct code and no parsable test,
# so every reward is 0: the golden pins the tester's warm-up and the two roles' sampling (prompts, lengths,
# entropies), not the rewards, which the hand-worked tests above cover.
# Re-recorded when the tester's warm-up began to rehearse the coder on half of each batch.
GOLDEN = {"test/warmup_loss": [4.4161424114622605],
          "gen/len_mean": [24.0, 22.6875, 21.0],
          "test/len_mean": [14.4375, 14.4375, 11.5625],
          "test/entropy": [4.582424096994076, 4.58250866184095, 4.583102528083928]}


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_cure_golden_catches_a_changed_tester_prompt(tmp_path, monkeypatch):
    monkeypatch.setattr(tester, "PLAIN_MARK", "@tests")
    run_recipe(build_config(cure_config(checkpoint={"every": 0})), tmp_path)
    assert mismatch(golden_metrics(tmp_path, list(GOLDEN)), GOLDEN) is not None, "the golden still holds"


def _weights(path) -> dict:
    from cotrain.models.build import load_model

    model, _ = load_model(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_cure_two_models_keep_each_role_on_its_own_model(tmp_path):
    """cure.two_models: the tester's warm-up and updates touch the tester alone. With no RL steps, one shared
    model leaves the warm-up changed, while with two the coder ends exactly as it started and the tester,
    saved beside it, changed; a tester that is not trained (train_tester false) ends as it was built."""
    from cotrain.train.setup import initial_model, initial_verifier

    raw = cure_config(train={"steps": 0}, checkpoint={"every": 0})
    one = build_config(raw)
    start = initial_model(one.model, one.init, one.seed, False)[0].state_dict()
    run_recipe(build_config(raw), tmp_path / "shared")
    assert not _same(_weights(tmp_path / "shared" / "final" / "generator"), start), "the warm-up changed nothing"

    two = build_config(cure_config(train={"steps": 0}, cure={"two_models": True}, checkpoint={"every": 0}))
    run_recipe(two, tmp_path / "two")
    assert _same(_weights(tmp_path / "two" / "final" / "generator"), start)
    assert not _same(_weights(tmp_path / "two" / "final" / "tester"),
                     initial_verifier(two.verifier, two.model, two.init, two.seed, False)[0].state_dict())

    frozen = build_config(cure_config(train={"steps": 2}, checkpoint={"every": 1, "keep_last": 1},
                                      cure={"two_models": True, "train_tester": False, "tester_warmup_steps": 0}))
    run_recipe(frozen, tmp_path / "frozen")
    assert _same(_weights(tmp_path / "frozen" / "final" / "tester"),
                 initial_verifier(frozen.verifier, frozen.model, frozen.init, frozen.seed, False)[0].state_dict())
    assert (tmp_path / "frozen" / "checkpoints" / "step_2" / "tester").is_dir()
    rows = [r for r in _rows(tmp_path / "frozen") if "gen/reward" in r]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["test/reward"]) for r in rows)


# ----------------------------------------------------------------------------- a user's code file (code_jsonl)


def test_code_jsonl_reads_mbpp_and_humaneval_shaped_files(tmp_path):
    """MBPP's shape (a description, a list of assertions, no entry point: the function the tests call)
    and HumanEval's (a signature to continue, `check(candidate)`, a named entry point), each graded in
    the sandbox: a right program passes, a wrong one or a faked pass fails."""
    import json

    from cotrain.tasks import make_task
    from cotrain.tasks.code import as_check, entry_from_tests

    assert entry_from_tests("assert len(rev([1, 2])) == 2\nassert rev([]) == []") == "rev"  # len is a builtin
    assert entry_from_tests("x = (") is None and entry_from_tests("assert 1 == 1") is None
    assert as_check(["assert f(1) == 2"]) == "def check(candidate):\n    assert f(1) == 2\n"
    assert as_check("def check(candidate):\n    pass\n") == "def check(candidate):\n    pass\n"

    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text(json.dumps({"task_id": 7, "text": "Reverse a list.", "code": "def rev(x):\n    return x[::-1]",
                                "test_list": ["assert rev([1, 2]) == [2, 1]", "assert rev([]) == []"]}) + "\n")
    task = make_task("code_jsonl", path=str(mbpp), prompt_field="text", tests_field="test_list",
                     entry_point_field=None, solution_field="code", prompt_is_code=False)
    (p,) = task.problems("train")
    assert p.question == "Reverse a list." and p.meta["entry_point"] == "rev" and p.meta["task_id"] == 7
    assert task.grade(p.solution, p) == 1.0
    assert task.grade("```python\ndef rev(x):\n    return list(reversed(x))\n```", p) == 1.0
    assert task.grade("def rev(x):\n    return x\n", p) == 0.0
    assert task.grade("import sys\nprint('PASSED')\nsys.exit(0)\n", p) == 0.0
    assert task.grade("", p) == 0.0 and task.grade(None, p) == 0.0
    # its unit tests (the cure recipe): the literal assertions, called by name; the program is the code alone
    assert task.tests_of(p) == [([[1, 2]], [2, 1]), ([[]], [])]
    assert task.test_line([[1, 2]], [2, 1], p) == "assert rev([1, 2]) == [2, 1]"
    [m] = execution_matrices(task, [p], [["def rev(x):\n    return x[::-1]", "def rev(x):\n    return x"]],
                             [["assert rev([3, 4]) == [4, 3]"]], truth=[p], use_gt=True)
    assert m.gt == [[T, T], [F, T]] and m.gen == [[T], [F]] and m.reference_gen == [T]

    he = tmp_path / "he.jsonl"
    he.write_text(json.dumps({"prompt": "def add(x, y):\n    \"\"\"x plus y\"\"\"\n", "entry_point": "add",
                              "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}) + "\n")
    task = make_task("code_jsonl", splits={"test": str(he)})
    (p,) = task.problems("test")
    assert task.grade("    return x + y\n", p) == 1.0 and task.grade("    return x - y\n", p) == 0.0


def test_code_jsonl_bad_files_and_options_are_one_line_errors(tmp_path):
    import json

    from cotrain.errors import UserError
    from cotrain.tasks import make_task

    f = tmp_path / "rows.jsonl"
    f.write_text(json.dumps({"text": "Add.", "tests": ["assert 1 == 1"]}) + "\n")
    with pytest.raises(UserError, match=r"missing field 'prompt' \(the row has: text, tests"):
        make_task("code_jsonl", path=str(f)).problems("train")
    with pytest.raises(UserError, match="call no function to test"):
        make_task("code_jsonl", path=str(f), prompt_field="text", tests_field="tests",
                  entry_point_field=None).problems("train")
    f.write_text(json.dumps({"prompt": "Add.", "test": 5, "entry_point": "f"}) + "\n")
    with pytest.raises(UserError, match="must be test code or a list of assertions, got int"):
        make_task("code_jsonl", path=str(f)).problems("train")
    with pytest.raises(UserError, match="exactly one of task.path"):
        make_task("code_jsonl")
    with pytest.raises(UserError, match="wall_s must be"):
        make_task("code_jsonl", path=str(f), wall_s=-1)
    with pytest.raises(UserError, match="prompt_is_code must be true or false"):
        make_task("code_jsonl", path=str(f), prompt_is_code="no")
