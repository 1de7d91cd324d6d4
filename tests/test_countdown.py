"""Tests of the gap world (cotrain.tasks.countdown): the formats and rules worked out by hand, each
kind of fault, the verifier's rationales and reference verifications, injected errors of every kind,
the search, the splits, the knobs, and fuzzing that no string makes a parser or grader raise."""
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cotrain.errors import UserError
from cotrain.roles.verifier import parse, reference_verification
from cotrain.tasks import make_task
from cotrain.tasks.countdown import (
    CountdownTask,
    error_kind,
    extract_answer,
    final_rationale,
    parse_question,
    parse_step,
    parse_waypoints,
    solve,
    step_labels,
    step_rationales,
)

Q = "3,5,7:22"


def test_parse_question_and_step():
    assert parse_question(Q) == ([3, 5, 7], 22)
    assert parse_question("9,9:81") == ([9, 9], 81)
    for bad in ("3:4", "3,5:", ",3,5:2", "3,5,7:22\n", "3 5:8", "a,b:c", "3,,5:8", None, 7):
        assert parse_question(bad) is None, bad
    assert parse_step(" 3*5=15 ") == (3, "*", 5, 15)
    assert parse_step("5-7=-2") == (5, "-", 7, -2)
    assert parse_step("3*5=") is None and parse_step("3/5=1") is None and parse_step(None) is None
    assert extract_answer("3*5=15\n15+7=22\n#022") == "22"
    assert extract_answer("#22\n#x") is None and extract_answer("no answer") is None


@pytest.mark.parametrize("completion, kind", [
    ("3*5=15\n15+7=22\n#22", None),            # the reference
    ("7+3=10\n10*5=50\n#50", "target"),         # every step right, another target
    ("5*3=15\n7+15=22\n#22", None),             # operands in any order
    ("3*5=15\n15+7=23\n#23", "step"),           # a wrong result
    ("3-5=-2\n7*-2=-14\n#-14", "step"),         # a negative result, as in the game, is not allowed
    ("3*6=18\n18+4=22\n#22", "operand"),        # 6 and 4 are not given
    ("3*5=15\n15+5=20\n#20", "operand"),        # 5 used twice
    ("3*5=16\n16+6=22\n#22", "step"),           # the first fault decides: a wrong result before 6
    ("3*5=15\n#15", "target"),                  # 7 left unused
    ("3*5=15\n15+7=22\n#21", "target"),         # the final line says otherwise
    ("3*5=15\n15+7=22", "target"),              # no final line
    ("3*5=15\n15+7=22\n22+0=22\n#22", "operand"),  # a step too many: 0 is not available
    ("", "format"),
    ("#22", "format"),
    ("3*5=15\nso 22\n#22", "format"),
])
def test_error_kinds_worked_by_hand(completion, kind):
    assert error_kind(Q, completion) == kind
    task = CountdownTask()
    problem = task.problem_of(Q)
    assert task.grade(completion, problem) == float(kind is None)


def test_step_labels_judge_each_step_against_what_the_solution_made_available():
    # step 1's wrong result 16 is carried forward: step 2 uses it correctly and is right locally
    assert step_labels(Q, ["3*5=16", "16+7=23"]) == [False, True]
    assert step_labels(Q, ["3*5=15", "15+5=20"]) == [True, False]
    assert step_labels(Q, ["junk", "3*5=15", "15+7=22"]) == [False, True, True]
    assert step_labels("not a question", ["3*5=15"]) == [False]


def test_rationales_and_the_reference_verification():
    assert step_rationales(Q, ["3*5=15", "15+7=23"]) == ["3,5,7 3*5=15 15", "7,15 15+7=22 23"]
    assert step_rationales(Q, ["3*6=18", "x"]) == ["3,5,7 3*6=18 18", "5,7,18 ?"]
    assert final_rationale(Q, ["3*5=15", "15+7=23"]) == "23 22"
    assert final_rationale(Q, ["3*5=15"]) == "7,15 22"
    assert step_rationales("junk", ["1+1=2"]) == ["?"] and final_rationale("junk", []) == "?"
    task = CountdownTask()
    problem = task.problem_of(Q)
    right = reference_verification(task, problem, "3*5=15\n15+7=22\n#22")
    assert right == "3,5,7 3*5=15 15 ok\n7,15 15+7=22 22 ok\n#22 22 ok"
    wrong = reference_verification(task, problem, "3+5=8\n8+7=15\n#15")
    assert wrong == "3,5,7 3+5=8 8 ok\n7,8 8+7=15 15 ok\n#15 22 no"  # a search failure: steps right, end off
    v = parse(wrong, 2)
    assert (v.steps, v.final, v.format) == ([True, True], False, 1.0)
    chat = reference_verification(task, problem, "3*5=15\n15+7=22\n#22", chat=True)
    assert chat.endswith("Final: 22 22 CORRECT") and parse(chat, 2).final is True


def test_solve_and_check_question():
    steps = solve(Q)
    assert steps is not None and error_kind(Q, "\n".join([*steps, "#22"])) is None
    assert solve("1,1:5") is None and solve("junk") is None
    assert solve("2,3:6", ops="+") is None and solve("2,3:6", ops="*") == ("2*3=6",)
    task = CountdownTask()
    assert task.check_question(Q) == (True, True)
    assert task.check_question("1,1:5") == (True, False)             # no solution
    assert task.check_question("1,1:5", solvable=False) == (True, True)  # form and limits alone
    assert task.check_question("3,5,7,2,1:22") == (True, False)      # 5 numbers: more than the task's 4
    assert task.check_question("3,5,7,2,1:22", max_ops=4) == (True, True)
    assert task.check_question("3,15:18") == (True, False)           # 15 > max_number
    assert task.check_question("3,15:18", max_operand=20) == (True, True)
    assert task.check_question("3+5") == (False, False)
    assert task.size(Q) == {"n_ops": 2.0, "max_operand": 7.0} and task.size("x") == {}
    assert task.problem_of("1,1:5") is None


def test_corrupt_injects_every_kind_at_the_step_asked():
    task = CountdownTask()
    rng = random.Random(0)
    kinds = Counter()
    for p in task.problems("train", 300, seed=1):
        k = rng.randrange(len(p.steps))
        steps, solution = task.corrupt(p, k, rng)
        kind = error_kind(p.question, solution)
        kinds[kind] += 1
        assert kind is not None and task.grade(solution, p) == 0.0
        labels = step_labels(p.question, list(steps))
        assert labels[:k] == [True] * k  # the steps before k are untouched
        if kind in ("step", "operand"):
            assert labels[k] is False
        v = parse(reference_verification(task, p, solution), len(p.steps))
        assert v.final is False and v.format == 1.0
    assert set(kinds) == {"step", "operand", "target"} and min(kinds.values()) > 60, kinds
    with pytest.raises(ValueError):
        task.corrupt(task.problem_of(Q), 2, rng)


def test_problems_splits_determinism_and_bounds():
    task = CountdownTask()
    train = task.problems("train", 400, seed=0)
    assert [p.question for p in train[:50]] == [p.question for p in task.problems("train", 50, seed=0)]
    test = task.problems("test", 200, seed=0)
    assert not {p.question for p in train} & {p.question for p in test}
    for p in train + test:
        numbers, target = parse_question(p.question)
        assert 3 <= len(numbers) <= 4 and all(1 <= x <= 9 for x in numbers) and 10 <= target <= 99
        assert p.answer == str(target) and p.meta == {"n_ops": len(numbers) - 1}
        assert task.grade(p.solution, p) == 1.0 and len(p.steps) == len(numbers) - 1
    ood = [parse_question(p.question)[0] for p in task.problems("ood", 100)]
    assert max(max(numbers) for numbers in ood) == 14 and {len(numbers) for numbers in ood} == {3, 4}
    assert len({p.question for p in train}) == 400


@pytest.mark.parametrize("options, message", [
    ({"n_numbers": [1, 3]}, "n_numbers"),
    ({"n_numbers": [3, 9]}, "n_numbers"),
    ({"max_number": 0}, "max_number"),
    ({"ops": "/"}, "ops"),
    ({"min_target": 500}, "min_target"),
    ({"n_numbers": [2, 2], "max_number": 1, "min_target": 50}, "found only"),
])
def test_bad_knobs_are_user_errors(options, message):
    with pytest.raises(UserError, match=message):
        make_task("countdown", **options).problems("train", 10)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="0123456789+-*=#\n ,:x", max_size=80))
def test_fuzz_parsers_and_grader_never_raise(text):
    task = CountdownTask()
    problem = task.problem_of(Q)
    assert task.grade(text, problem) in (0.0, 1.0)
    answer = task.extract_answer(text)
    assert answer is None or answer.lstrip("-").isdigit()
    lines = text.split("\n")
    assert all(isinstance(x, bool) for x in step_labels(Q, lines))
    assert len(step_rationales(Q, lines)) == len(lines) and isinstance(final_rationale(Q, lines), str)
    assert error_kind(text, text) in (None, "step", "operand", "target", "format")


@settings(max_examples=200, deadline=None)
@given(numbers=st.lists(st.integers(1, 12), min_size=2, max_size=5), target=st.integers(0, 200))
def test_fuzz_every_solution_found_is_graded_correct(numbers, target):
    question = ",".join(map(str, numbers)) + f":{target}"
    steps = solve(question)
    if steps is not None:
        assert error_kind(question, "\n".join([*steps, f"#{target}"])) is None


# ----------------------------------------------------------------------------- in the recipes


def test_warmup_mix_of_injected_clean_and_sampled_examples():
    """warmup_samples 40: 10 references with an injected error, 10 clean references, 20 samples."""
    from cotrain.config import build_config
    from cotrain.models.build import build_model
    from cotrain.train.compute import Compute
    from cotrain.train.verifier import warmup_examples
    from tests.conftest import nano_config

    raw = nano_config("tango", verifier={"warmup_samples": 40, "warmup_corrupt_frac": 0.25, "warmup_clean_frac": 0.25})
    raw["task"] = {"name": "countdown"}
    cfg = build_config(raw)
    task = CountdownTask()
    pool = task.problems("train", 100, seed=0)
    model, tokenizer = build_model(cfg.model, seed=0)
    pairs = warmup_examples(cfg.verifier, task, pool, model, tokenizer, Compute({"gen": 1, "ver": 1}), seed=cfg.seed,
                            bf16=False, progress=False, batch_size=cfg.eval.batch_size, max_new_tokens=cfg.grpo.max_new_tokens)
    assert len(pairs) == 40
    assert all(error_kind(p.question, s) is not None for p, s in pairs[:10])       # injected
    assert all(s == p.solution for p, s in pairs[10:20])                            # clean
    assert all(s != p.solution for p, s in pairs[20:])                              # an untrained model's samples
    with pytest.raises(UserError, match="at most 1"):
        build_config(nano_config("tango", verifier={"warmup_corrupt_frac": 0.6, "warmup_clean_frac": 0.5}))


def test_tango_runs_on_countdown_and_reports_what_its_verifier_catches(sft_run, tmp_path):
    """The arith-trained nano start on Countdown: the run completes, and eval.json holds the verifier's
    caught/<kind> next to the gap metrics."""
    from cotrain.config import build_config
    from tests.conftest import run_recipe
    from tests.test_tango import tango_config

    start, _ = sft_run
    raw = tango_config(start, train={"steps": 2},
                       verifier={"warmup_clean_frac": 0.25, "warmup_corrupt_frac": 0.25, "max_new_tokens": 48})
    raw["task"] = {"name": "countdown", "n_numbers": [3, 3]}
    results = run_recipe(build_config(raw), tmp_path)
    held = results["verifier"]["test"]
    kinds = {k[2:] for k in held if k.startswith("n/")}
    assert "gap/verifier" in held and kinds and kinds <= {"correct", "step", "operand", "target", "format"}, held
    assert sum(held[f"n/{k}"] for k in kinds) == 10 * 4  # eval.n_sampled problems x eval.k samples, one kind each
    assert all(0 <= held[f"caught/{k}"] <= 1 for k in kinds)


# ----------------------------------------------------------------------------- waypoints (the sparse world)

W = "3,5,7,2:15,22,44"   # 3*5=15, 15+7=22, 22*2=44


def test_waypoint_questions_parse_and_name_every_step():
    assert parse_question(W) == ([3, 5, 7, 2], 44)
    assert parse_waypoints(W) == [15, 22, 44]
    assert parse_waypoints(Q) is None                      # one target: no waypoints
    assert parse_question("3,5,7,2:15,22") is None         # two waypoints for three steps
    assert parse_question("3,5:8,8") is None               # two for one step


@pytest.mark.parametrize("completion, kind, labels", [
    ("3*5=15\n15+7=22\n22*2=44\n#44", None, [True, True, True]),
    ("5*3=15\n7+15=22\n2*22=44\n#44", None, [True, True, True]),       # operands in any order
    # the waypoint written as the result of an operation that misses it, then right from there
    ("3+5=15\n15+7=22\n22*2=44\n#44", "step", [False, True, True]),
    # a right step that misses its waypoint; later steps miss theirs
    ("3+5=8\n8+7=15\n15*2=30\n#30", "target", [False, False, False]),
    # right until the last step, which misses the target
    ("3*5=15\n15+7=22\n22+2=24\n#24", "target", [True, True, False]),
    ("3*5=15\n15+7=22\n22*3=66\n#66", "operand", [True, True, False]),  # 3 already used
    # a step too many is a fault of its own
    ("3*5=15\n15+7=22\n22*2=44\n44-0=44\n#44", "operand", [True, True, True, False]),
])
def test_waypoint_error_kinds_and_labels_worked_by_hand(completion, kind, labels):
    assert error_kind(W, completion) == kind
    steps = [line for line in completion.split("\n") if not line.startswith("#")]
    assert step_labels(W, steps) == labels


def test_waypoint_rationales_end_with_the_steps_waypoint():
    assert step_rationales(W, ["3*5=15", "15+7=23", "23*2=46", "1+1=2"]) == [
        "3,5,7,2 3*5=15 15 15", "7,2,15 15+7=22 23 22", "2,23 23*2=46 46 44", "46 1+1=2 2 ?"]
    assert final_rationale(W, ["3*5=15", "15+7=22", "22*2=44"]) == "44 44"


def test_waypoint_problems_search_and_injected_errors():
    task = CountdownTask(n_numbers=(4, 5), max_number=15, max_value=150, waypoints=True)
    problems = task.problems("train", 40, seed=1)
    rng = random.Random(0)
    fabricated = 0
    for p in problems:
        numbers, waypoints = parse_question(p.question)[0], parse_waypoints(p.question)
        assert len(waypoints) == len(numbers) - 1 == len(p.steps) and task.grade(p.solution, p) == 1.0
        found = solve(p.question)
        assert found is not None and task.grade("\n".join([*found, f"#{waypoints[-1]}"]), p) == 1.0
        assert task.check_question(p.question) == (True, True)
        for k in range(len(p.steps)):
            steps, solution = task.corrupt(p, k, rng)
            labels = step_labels(p.question, list(steps))
            assert labels[:k] == [True] * k and labels[k] is False, (p.question, steps)
            # a fabricated waypoint: the step states its waypoint, and the reference's later steps follow
            if parse_step(steps[k])[3] == waypoints[k] and list(steps[k + 1:]) == list(p.steps[k + 1:]):
                fabricated += 1
    assert fabricated >= 10


def test_process_localisation_worked_by_hand():
    """Four samples of W: one right (skipped), one whose first false step is the first (of 3) and whose
    verification rejects that step first, one that goes wrong at its last step and whose verification
    rejects step 2 first, and one with a verification of the wrong length. Wrong samples with a false
    step: 3; first false step not the last: 2 of 3; first rejected step = first false step: 1 of 3. Steps
    after a first false step: the second sample's two (right: it goes on from the waypoint), the fourth's
    two (false: each misses its waypoint): 2 of 4 false."""
    from cotrain.eval.verifier_eval import process_localisation
    from cotrain.roles.verifier import Verification
    from cotrain.tasks.base import Problem

    task = CountdownTask(waypoints=True)
    p = Problem(question=W, answer="44")
    texts = ["3*5=15\n15+7=22\n22*2=44\n#44", "3+5=15\n15+7=22\n22*2=44\n#44",
             "3*5=15\n15+7=22\n22+2=24\n#24", "3+5=8\n8+7=15\n15*2=30\n#30"]
    parsed = [Verification([True] * 3, True), Verification([False, True, True], False),
              Verification([True, False, False], False), Verification([False, False], False)]
    got = process_localisation(task, [p] * 4, texts, parsed, [True, False, False, False])
    assert got == {"process/n_failed": 3.0, "process/n_failed_clean": 0.0,
                   "process/first_false_not_last": pytest.approx(2 / 3), "process/first_rejected_match": pytest.approx(1 / 3),
                   "process/after_first_false_false": pytest.approx(0.5)}


def test_held_out_step_verdicts_by_fault_by_hand():
    """`step_verdicts`: the first sample's false step (a wrong result) caught and a right step rejected, the
    second's (an unavailable operand) missed, the third's verdicts of another count left out: 3 of 4 right
    steps approved, 1 of 2 false steps caught (the wrong result 1/1, the operand 0/1), the first false step
    found in 1 of 2."""
    from cotrain.eval.verifier_eval import step_verdicts
    from cotrain.roles.verifier import Verification
    from cotrain.tasks.base import Problem

    task = CountdownTask(n_numbers=(4, 4), max_number=15, max_value=150, waypoints=True)
    problem = Problem(question=W, answer="44", steps=("3*5=15", "15+7=22", "22*2=44"))
    texts = ["3+5=15\n15+7=22\n22*2=44\n#44", "3*5=15\n15+7=22\n22*3=66\n#66", "3*5=15\n#15"]
    parsed = [Verification([False, True, False], False), Verification([True] * 3, True), Verification([True, False], True)]
    assert step_verdicts(task, [problem] * 3, texts, parsed) == {
        "usable": pytest.approx(2 / 3), "approve_right": 0.75, "catch_false": 0.5, "catch/step": 1.0,
        "catch/operand": 0.0, "first_false_agree": 0.5, "n_false/step": 1.0, "n_false/operand": 1.0}


def test_oracle_verdicts_are_the_process_labels_and_noise_flips_them():
    """`verifier.source: oracle` gives each step the task's label and the final verdict the ground truth;
    `noisy` with rates 1 and 1 flips every one of them; the faults are named per step."""
    from cotrain.config import VerifierConfig
    from cotrain.tasks.base import Problem
    from cotrain.train.verifier import oracle_verifications

    task = CountdownTask(n_numbers=(4, 4), max_number=15, max_value=150, waypoints=True)
    problem = Problem(question=W, answer="44", steps=("3*5=15", "15+7=22", "22*2=44"))
    texts = ["3+5=15\n15+7=22\n22*2=44\n#44", "3*5=15\n15+7=22\n22*3=66\n#66", "3*5=15\n#15"]
    assert task.step_kinds(problem, ["3+5=15", "15+7=22", "22*3=66", "x"]) == ["step", None, "operand", "format"]
    oracle = oracle_verifications(task, [problem] * 3, texts, [False, False, False], VerifierConfig(source="oracle"), 0)
    assert [x.steps for x in oracle] == [[False, True, True], [True, True, False], [True]]
    assert [x.final for x in oracle] == [False, False, False] and all(x.format == 1.0 for x in oracle)
    flipped = oracle_verifications(task, [problem] * 3, texts, [False, False, False],
                                   VerifierConfig(source="noisy", noise_fp=1.0, noise_fn=1.0), 0)
    assert [x.steps for x in flipped] == [[True, False, False], [False, False, True], [False]]
    assert [x.final for x in flipped] == [True, True, True]
    # the final verdicts at their own rates; the steps and the draws unchanged
    final_only = oracle_verifications(task, [problem] * 3, texts, [True, False, False],
                                      VerifierConfig(source="noisy", noise_fp=1.0, noise_fn=1.0, noise_final_fp=0.0,
                                                     noise_final_fn=1.0), 0)
    assert [x.steps for x in final_only] == [x.steps for x in flipped]
    assert [x.final for x in final_only] == [False, False, False]
    # strict: every sample graded right here, those with a false step (the first two) are rejected, the third
    # approved; after noise, by the flipped step verdicts
    strict = oracle_verifications(task, [problem] * 3, texts, [True, True, True], VerifierConfig(source="oracle", final_strict=True), 0)
    assert [x.final for x in strict] == [False, False, True] and [x.steps for x in strict] == [x.steps for x in oracle]
    noisy_strict = oracle_verifications(task, [problem] * 3, texts, [True, False, False], VerifierConfig(
        source="noisy", noise_fp=1.0, noise_fn=1.0, noise_final_fp=1.0, noise_final_fn=0.0, final_strict=True), 0)
    assert [x.final for x in noisy_strict] == [False, False, False]
    same = VerifierConfig(source="noisy", noise_fp=0.3, noise_fn=0.2, noise_final_fp=0.3, noise_final_fn=0.2)
    assert oracle_verifications(task, [problem] * 3, texts, [True, False, False], same, 5) == oracle_verifications(
        task, [problem] * 3, texts, [True, False, False], VerifierConfig(source="noisy", noise_fp=0.3, noise_fn=0.2), 5)
