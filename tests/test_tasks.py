"""Tests of cotrain.tasks: the arith formats worked out by hand, split disjointness, determinism,
corrupted chains and their step labels, answer extraction tables, the file tasks on the data shipped
in the package (and on a `datasets` data set, when `datasets` is installed),
the time-bounded math-verify grader, reasoning-gym, and fuzzing that no string makes a grader raise."""
import json
import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cotrain.errors import UserError
from cotrain.roles.verifier import reference_verification
from cotrain.tasks import Problem, grading, make_task
from cotrain.tasks.arith import (
    ArithTask,
    corrupt_solution,
    extract_answer,
    is_test_question,
    parse_question,
    parse_step,
    parse_steps,
    solve,
    step_labels,
)
from cotrain.tasks.countdown import CountdownTask
from cotrain.tasks.grading import math_equal, plain_number
from cotrain.tasks.mathdata import (
    Gsm8kTask,
    JsonlTask,
    Math500Task,
    extract_gsm8k_answer,
    extract_math_answer,
    last_boxed,
    normalise_answer,
)

# ----------------------------------------------------------------------------- arith: formats


@pytest.mark.parametrize("question, solution", [
    ("12+34-5", "12+34=46\n46-5=41\n#41"),  # the format's reference example
    ("5-12+3", "5-12=-7\n-7+3=-4\n#-4"),  # a negative result becomes the next left operand
    ("2+3*4", "2+3=5\n5*4=20\n#20"),  # left to right: (2+3)*4, no precedence
    ("7-7", "7-7=0\n#0"),  # one operation, zero result
    ("3-10*2", "3-10=-7\n-7*2=-14\n#-14"),  # negative times positive
    ("9*0+1", "9*0=0\n0+1=1\n#1"),  # multiplication by zero
])
def test_arith_solution_format(question, solution):
    steps, answer = solve(question)
    assert "\n".join([*steps, f"#{answer}"]) == solution
    assert extract_answer(solution) == answer


def test_arith_generated_problem_is_pinned():
    # Golden: the first train problem of seed 0 with default knobs; 7+20=27, 27-78=-51 by hand.
    problem = ArithTask().problems("train", 1, seed=0)[0]
    assert problem == Problem(question="7+20-78", answer="-51", steps=("7+20=27", "27-78=-51"),
                              solution="7+20=27\n27-78=-51\n#-51")
    assert problem.meta == {"n_ops": 2}


def test_arith_knobs_bound_the_draw():
    task = ArithTask(n_ops=(1, 3), max_operand=20, ops="+-*", max_mul_operand=4, ood_n_ops=(5, 6), ood_max_operand=50)
    for split, (lo, hi), max_operand in [("train", (1, 3), 20), ("test", (1, 3), 20), ("ood", (5, 6), 50)]:
        for problem in task.problems(split, 300, seed=1):
            first, operations = parse_question(problem.question)
            assert 1 <= first <= max_operand
            assert lo <= len(operations) <= hi and len(problem.steps) == len(operations)
            for op, right in operations:
                assert 0 <= right <= (4 if op == "*" else max_operand), problem.question
            assert problem.solution == "\n".join(problem.steps) + f"\n#{problem.answer}"
            assert all(step_labels(problem.question, problem.steps))


# ----------------------------------------------------------------------------- arith: splits, determinism


def test_arith_train_and_test_are_disjoint():
    task = ArithTask()
    train = {p.question for p in task.problems("train", 5000, seed=0)}
    test = {p.question for p in task.problems("test", 2000, seed=0)}
    assert len(train) == 5000 and len(test) == 2000  # distinct within a list
    assert not train & test
    assert all(is_test_question(q) for q in test) and not any(is_test_question(q) for q in train)


def test_arith_is_deterministic_with_the_prefix_property():
    task = ArithTask()
    for split in task.splits:
        long = task.problems(split, 300, seed=7)
        assert long == ArithTask().problems(split, 300, seed=7)
        assert task.problems(split, 120, seed=7) == long[:120]
        assert task.problems(split, 300, seed=8) != long


def test_arith_generation_is_fast():
    start = time.perf_counter()
    problems = ArithTask().problems("train", 10_000, seed=0)
    assert time.perf_counter() - start < 1.0
    assert len({p.question for p in problems}) == 10_000


def test_arith_ood_uses_the_ood_knobs():
    # default ood: the same number of operations, operands up to ceil(1.5 * 99) = 149
    default = ArithTask().problems("ood", 300)
    assert {len(p.steps) for p in default} == {2, 3}
    assert max(int(x) for p in default for x in re.findall(r"\d+", p.question)) > 99
    assert {len(p.steps) for p in ArithTask(ood_n_ops=(4, 4)).problems("ood", 200)} == {4}


@pytest.mark.parametrize("options", [
    {"n_ops": (3, 2)},  # empty range
    {"n_ops": (0, 2)},  # zero operations
    {"n_ops": 3},  # not a pair
    {"max_operand": 0},  # no operand to draw
    {"ops": "+/"},  # unknown operation
    {"ops": ""},  # no operation
    {"ops": "++"},  # repeated operation
    {"ops": "*", "max_mul_operand": 99, "n_ops": (9, 9)},  # results beyond 12 digits
    {"max_mul_operand": -1},  # negative bound
])
def test_arith_rejects_bad_knobs(options):
    with pytest.raises(UserError):
        ArithTask(**options)


def test_arith_problems_errors():
    with pytest.raises(UserError, match="split"):
        ArithTask().problems("validation", 5)
    with pytest.raises(UserError, match="procedural"):
        ArithTask().problems("train")
    with pytest.raises(UserError, match="distinct"):
        ArithTask(n_ops=(1, 1), max_operand=2).problems("train", 100)  # only 2*3*2 = 12 questions exist
    assert [p.question for p in ArithTask(n_ops=[1, 1]).problems("train", 2)]  # lists from config files work


# ----------------------------------------------------------------------------- arith: extraction, grading


@pytest.mark.parametrize("completion, expected", [
    ("12+34=46\n46-5=41\n#41", "41"),  # a reference solution
    ("5-12=-7\n#-7", "-7"),  # negative answer
    ("#41\n", "41"),  # trailing newline
    ("  #41  ", "41"),  # whitespace around the line
    ("# 41", "41"),  # whitespace after '#'
    ("#41\n#42", "42"),  # the last '#' line wins
    ("#41\n#x", None),  # the last '#' line is malformed: no fallback to the earlier one
    ("#41\nmore text", "41"),  # lines without '#' after it do not matter
    ("#007", "7"),  # canonical form
    ("#-0", "0"),  # canonical zero
    ("#123456789012", "123456789012"),  # 12 digits: the maximum
    ("#1234567890123", None),  # 13 digits
    ("", None),  # empty
    ("41", None),  # no '#' line
    ("#", None),  # nothing after '#'
    ("#4 1", None),  # space inside the number
    ("#+5", None),  # explicit plus sign
    ("##41", None),  # two '#'
    ("#41.0", None),  # not an integer
    ("#\u0664\u0661", None),  # Arabic-Indic digits are not ASCII digits
    ("the answer is #41", None),  # '#' not at the start of the line
    ("#--4", None),  # double minus
])
def test_arith_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.parametrize("completion, score", [
    ("12+34=46\n46-5=41\n#41", 1.0),  # the reference solution
    ("#41", 1.0),  # the answer alone
    ("#041", 1.0),  # integers compare exactly, not strings
    ("12+34=46\n46-5=42\n#42", 0.0),  # wrong answer
    ("12+34=46\n46-5=41", 0.0),  # no answer line
])
def test_arith_grade(completion, score):
    problem = Problem(question="12+34-5", answer="41", steps=("12+34=46", "46-5=41"))
    assert ArithTask().grade(completion, problem) == score


@pytest.mark.parametrize("text, expected", [
    ("12+34=46\n46-5=41\n#41", [("12+34=46", 46), ("46-5=41", 41)]),  # a reference solution
    ("12+34=46\n\n  46-5=41  \n", [("12+34=46", 46), ("46-5=41", 41)]),  # blank lines, spaces, no answer line
    ("12+34=46\nnoise\n#41\n1+1=2", [("12+34=46", 46), ("noise", None)]),  # stops at the first '#' line
    ("#41", []),  # no steps
    ("1+=2", [("1+=2", None)]),  # malformed step keeps its text
    ("-7+3=-4", [("-7+3=-4", -4)]),  # negative left operand and result
])
def test_arith_parse_steps(text, expected):
    assert parse_steps(text) == expected


# ----------------------------------------------------------------------------- arith: process labels


@pytest.mark.parametrize("steps, labels", [
    (("12+34=46", "46-5=41", "41+2=43"), [True, True, True]),  # the reference solution
    (("12+34=47", "47-5=42", "42+2=44"), [False, True, True]),  # wrong at step 0, carried forward
    (("12+34=46", "46-5=40", "40+2=42"), [True, False, True]),  # wrong at step 1, carried forward
    (("12+34=46", "46-5=41", "41+2=44"), [True, True, False]),  # wrong at the last step
    (("12+34=46", "45-5=40", "40+2=42"), [True, False, True]),  # left operand is not the previous result
    (("12+34=46", "46-6=40", "40+2=42"), [True, False, True]),  # right operand differs from the question
    (("12+34=46", "46+5=51", "51+2=53"), [True, False, True]),  # operation differs from the question
    (("13+34=47", "47-5=42", "42+2=44"), [False, True, True]),  # first left operand is not the question's
    (("12+34=46", "garbage", "41+2=43"), [True, False, False]),  # after an unparsable step nothing can be checked
    (("12+34=46", "46-5=41", "41+2=43", "43+0=43"), [True, True, True, False]),  # a step beyond the question
    (("12 + 34 = 46",), [False]),  # spaces are not the format
    ((), []),  # no steps
])
def test_arith_step_labels(steps, labels):
    assert step_labels("12+34-5+2", steps) == labels


@pytest.mark.parametrize("ops", ["+-", "+-*"])
def test_arith_corrupt_carries_one_error_forward(ops):
    task = ArithTask(n_ops=(1, 4), ops=ops)
    rng = random.Random(0)
    for problem in task.problems("train", 200, seed=3):
        k = rng.randrange(len(problem.steps))
        steps, solution = task.corrupt(problem, k, rng)
        labels = task.step_labels(problem, steps)
        assert labels == [i != k for i in range(len(steps))], (problem.question, k, steps)
        assert steps[:k] == problem.steps[:k]
        assert parse_steps(solution) == [(s, int(s.rsplit("=", 1)[1])) for s in steps]
        assert extract_answer(solution) == steps[-1].rsplit("=", 1)[1]  # '#' line is the last (wrong) result
        if "*" not in ops:  # only a later *0 can erase the error
            assert task.grade(solution, problem) == 0.0


def test_arith_corrupt_rejects_bad_step_index():
    with pytest.raises(ValueError):
        corrupt_solution("12+34-5", 2, random.Random(0))


# ----------------------------------------------------------------------------- math extraction


@pytest.mark.parametrize("text, expected", [
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),  # nested braces
    ("\\boxed{1} then \\boxed{2}", "2"),  # the last one
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped set braces do not count
    ("\\boxed{1} then \\boxed{2", "1"),  # the last is unclosed: the last balanced one
    ("\\fbox{7}", "7"),  # fbox
    ("\\boxed {x}", "x"),  # space before the brace
    ("boxed{3}", None),  # no backslash
    ("", None),  # empty
    ("\\boxed{" * 3000, None),  # many unclosed: linear time, None
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("48/2 = 24 clips\n#### 72", "72"),  # the GSM8K format
    ("#### 1,600", "1600"),  # thousands separator
    ("#### -3 apples", "-3"),  # negative, trailing words
    ("#### 3.5\n#### 4", "4"),  # the last '####'
    ("The answer is \\boxed{18}.", "18"),  # boxed
    ("12 - 5 = 7 cookies", "7"),  # the last number
    ("12-5", "5"),  # a minus after a digit is subtraction
    ("it is -5.", "-5"),  # a standalone minus is a sign
    ("####\nthe answer is 9", "9"),  # nothing after '####': later rules
    ("no numbers here", None),  # nothing
])
def test_extract_gsm8k_answer(text, expected):
    assert extract_gsm8k_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("Thus $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$.", "\\left( 3, \\frac{\\pi}{2} \\right)"),  # MATH style
    ("Final answer: $x^2$.", "x^2"),  # 'answer:' marker, '$' and period removed
    ("work\n#### 12\nbye", "12"),  # '####' marker, rest of the line only
    ("ANSWER: 5", "5"),  # any case
    ("answer:", None),  # empty after the marker
    ("42", None),  # bare numbers are not MATH answers
])
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


# ----------------------------------------------------------------------------- math_equal


@pytest.mark.parametrize("pred, gold, equal", [
    ("72", "72", True),  # plain numbers: exact, no math-verify
    ("1,000", "1000", True),  # thousands separator
    ("$18", "18", True),  # currency
    ("0.50", "0.5", True),  # decimals compare as exact values
    ("72", "73", False),  # different numbers
    ("10,\\!080", "10080", True),  # LaTeX thin space in a number
    ("\\frac{1}{2}", "0.5", True),  # math-verify: fraction vs decimal
    ("\\dfrac{14}{3}", "\\frac{14}{3}", True),  # dfrac
    ("x^2+1", "1+x^2", True),  # symbolic
    ("(3,\\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", True),  # tuples
    ("\\frac{1}{3}", "0.5", False),  # different values
    ("", "1", False),  # empty prediction
    # where math-verify 0.9 says equal and our guard does not (docs/math_verify_report.md)
    ("4210_{6}", "4210_{5}", False),  # another base
    ("29_{2}", "29_{10}", False),  # digits the base does not have
    ("10101_2", "21_{10}", True),  # the same number in two bases
    ("4210_5", "4210_{5}", True),
    ("a_1", "a_1", True),  # an index, not a base
    ("12\\mbox{ inches}^3", "12\\mbox{ inches}^2", False),  # another power of the unit
    ("12\\text{ cm}", "12\\text{ m}", False),  # another unit
    ("12\\mbox{ inch}^2", "12\\mbox{ inches}^2", True),  # singular and plural alike
    ("13\\text{ cm}", "12\\text{ cm}", False),  # the same unit: math-verify compares the numbers
    # words are compared as text, not as math-verify's products of letters (c*l*a*r*a)
    ("Clara1", "Clara", False),  # a digit after the name
    ("Carla", "Clara", False),  # the same letters in another order
    ("\\text{Clara}", "clara", True),  # \text{} and case aside
    ("infinity", "\\infty", True),  # against a LaTeX constant, math-verify still decides
    # a gold answer of prose with numbers is compared as text: math-verify reads a number out of it
    ("1February 3rd", "February 3rd", False),  # a number glued before it
    ("1Vendor 2", "Vendor 2", False),
    ("2014", "11:55 p.m. on 24 December 2014.", False),  # its year alone
    ("february 3rd.", "February 3rd", True),  # case and surrounding punctuation aside
    ("12", "12\\text{ inches}", True),  # words in a text wrapper: a unit, math-verify decides
])
def test_math_equal(pred, gold, equal):
    assert math_equal(pred, gold) is equal


@pytest.mark.parametrize("pred", [
    "\\frac{1}{" * 1000 + "2" + "}" * 1000,  # 10,001 characters of nested fractions: ~6 s in math-verify
    "9^{" * 20 + "9" + "}" * 20,  # a power tower: sympy does not finish
])
def test_math_equal_is_bounded_in_time(pred):
    math_equal("\\frac{1}{2}", "0.5")  # a running worker, so the timing below excludes its start
    start = time.perf_counter()
    assert math_equal(pred, "1", timeout=1.0) is False
    assert time.perf_counter() - start < 3.0
    assert math_equal("\\frac{1}{2}", "0.5")  # the next call gets a fresh worker


def test_no_answer_takes_longer_than_its_limit_and_huge_ones_take_no_time():
    """A short tower that sympy cannot finish stops at the limit, including the restart of the worker
    the timeout before it killed; an answer of 3,000 characters or nested 13 deep is wrong at once."""
    math_equal("9^{9^{9^{9}}}", "3", timeout=1.0)  # kills the worker: the next call restarts it
    start = time.perf_counter()
    assert math_equal("10^{10^{10}}", "3", timeout=1.0) is False
    assert time.perf_counter() - start < 1.3
    for pred in ["1" + "0" * 2999, "{" * 13 + "1" + "}" * 13]:
        start = time.perf_counter()
        assert math_equal(pred, "1") is False and time.perf_counter() - start < 0.01
    assert math_equal("  \\text{(C)} ", "\\text{(C)}")  # the same text is equal without parsing it


def test_a_killed_workers_replacement_starts_at_once_and_a_short_limit_does_not_kill_it():
    """Right after a timeout, a call with a limit shorter than the replacement's start returns within
    that limit (unequal, its answer unknown) and leaves the replacement starting: the call after answers."""
    math_equal("9^{9^{9^{9}}}", "3", timeout=1.0)
    replacement = grading._worker.pid
    start = time.perf_counter()
    math_equal("\\frac{1}{2}", "0.5", timeout=0.1)
    assert time.perf_counter() - start < 0.4
    assert math_equal("\\frac{1}{2}", "0.5", timeout=60.0) and grading._worker.pid == replacement


def test_plain_number():
    assert plain_number("-0.50") == plain_number("-.5")
    assert plain_number("1/2") is None and plain_number("9" * 5000) is None


# ----------------------------------------------------------------------------- gsm8k, math500 files


def test_gsm8k_known_row_and_reference_solutions():
    task = Gsm8kTask()
    rows = sorted(task.problems("train"), key=lambda p: p.meta["line"])
    assert len(rows) == 7473
    first = rows[0]
    assert first.question.startswith("Natalia sold clips to 48 of her friends")
    assert first.answer == "72"
    assert first.steps == ("Natalia sold 48/2 = 24 clips in May.",
                           "Natalia sold 48+24 = 72 clips altogether in April and May.")
    assert first.solution == "\n".join(first.steps) + "\n#### 72"
    for problem in rows[:20]:
        assert task.grade(problem.solution, problem) == 1.0, problem.solution
        assert "<<" not in problem.solution


def test_gsm8k_test_split_is_deterministic_with_the_prefix_property():
    task = Gsm8kTask()
    long = task.problems("test", 50, seed=1)
    assert len(task.problems("test")) == 1319
    assert long == Gsm8kTask().problems("test", 50, seed=1) and task.problems("test", 10, seed=1) == long[:10]
    assert task.problems("test", 50, seed=2) != long
    assert all(task.grade(p.solution, p) == 1.0 for p in long[:20])


def test_math500_known_row_and_reference_solutions():
    task = Math500Task()
    assert task.splits == ("test",)
    rows = sorted(task.problems("test"), key=lambda p: p.meta["line"])
    assert len(rows) == 500
    assert rows[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert rows[0].meta["subject"] == "Precalculus" and rows[0].meta["level"] == 2
    for problem in rows[:20]:  # proves the grader: every reference solution grades as correct
        assert task.grade(problem.solution, problem) == 1.0, (problem.answer, task.extract_answer(problem.solution))
    assert task.grade("so $\\boxed{3}$", rows[0]) == 0.0
    with pytest.raises(UserError, match="split"):
        task.problems("train")


@pytest.mark.parametrize("make", [
    lambda d: Gsm8kTask(data_dir=d).problems("train"),  # data_dir argument
    lambda d: Math500Task(data_dir=d).problems("test"),  # same for math500
])
def test_missing_data_file_is_a_user_error(make, tmp_path):
    with pytest.raises(UserError, match="data file not found"):
        make(tmp_path)


def test_a_missing_train_file_is_named_by_its_split_and_absolute_path(tmp_path, monkeypatch):
    """A test split reads the train split too (its overlap with it): the message names the train split's file,
    absolute, whatever directory the run started from; not the eval split being checked."""
    from cotrain.eval.evaluate import require_eval_splits
    from cotrain.tasks.mathdata import JsonlTask

    (tmp_path / "test.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    monkeypatch.chdir(tmp_path)
    task = JsonlTask(splits={"train": "trian.jsonl", "test": "test.jsonl"})
    with pytest.raises(UserError) as err:
        require_eval_splits(task, "jsonl", ["test"], 10)
    assert str(err.value) == (f"jsonl (train split): data file not found: {tmp_path / 'trian.jsonl'} "
                              "(set task.path or task.splits)")


def test_data_dir_from_environment(tmp_path, monkeypatch):
    row = {"question": "What is 2+2?", "answer": "2+2 = <<2+2=4>>4\n#### 4"}
    (tmp_path / "gsm8k_test.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.setenv("COTRAIN_DATA_DIR", str(tmp_path))
    [problem] = make_task("gsm8k").problems("test")
    assert problem == Problem(question="What is 2+2?", answer="4", steps=("2+2 = 4",), solution="2+2 = 4\n#### 4")


# ----------------------------------------------------------------------------- jsonl


def test_jsonl_task(tmp_path):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text('{"q": "1/2 as a decimal?", "a": "0.5", "src": "x"}\n\n{"q": "2+2?", "a": "4", "src": "y"}\n')
    test.write_text('{"q": "3+3?", "a": "6"}\n')
    task = JsonlTask(splits={"train": train, "test": test}, question_field="q", answer_field="a")
    assert task.splits == ("train", "test")
    problems = sorted(task.problems("train"), key=lambda p: p.meta["line"])
    assert [(p.question, p.answer, p.meta) for p in problems] == [
        ("1/2 as a decimal?", "0.5", {"src": "x", "line": 1}), ("2+2?", "4", {"src": "y", "line": 3})]
    assert task.grade("it is \\boxed{\\frac{1}{2}}", problems[0]) == 1.0
    assert task.grade("so 4", problems[1]) == 1.0  # falls back to the last number
    assert JsonlTask(path=train, question_field="q", answer_field="a").splits == ("train",)


@pytest.mark.parametrize("content, message", [
    ('{"question": "q"}\n', ":1: missing field 'answer'"),  # missing answer
    ('{"question": "q", "answer": "1"}\n{"answer": "2"}\n', ":2: missing field 'question'"),  # line number
    ('{"question": "q", "answer": "1"}\nnot json\n', ":2: not valid JSON"),  # bad JSON
    ('[1, 2]\n', ":1: expected a JSON object"),  # not an object
])
def test_jsonl_bad_rows(tmp_path, content, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        JsonlTask(path=path).problems("train")


def test_jsonl_question_over_two_fields_and_errors_that_list_the_fields(tmp_path):
    """A word-problem file as published: the question split into a body and a question sentence."""
    path = tmp_path / "words.jsonl"
    path.write_text('{"Body": "Tom has 3 apples and buys 4.", "Question": "How many now?", "Answer": 7.0, "id": 9}\n')
    task = JsonlTask(path=path, question_field="{Body} {Question}", answer_field="Answer")
    (p,) = task.problems("train")
    assert p.question == "Tom has 3 apples and buys 4. How many now?" and p.answer == "7.0"
    assert p.meta == {"id": 9, "line": 1}  # the fields the template used are not metadata
    assert task.grade("#### 7", p) == 1.0
    for question_field, missing in [("{Body} {Query}", "'Query'"), ("question", "'question'")]:
        with pytest.raises(UserError, match=f"missing field {missing} \\(the row has: Body, Question, Answer, id;"):
            JsonlTask(path=path, question_field=question_field, answer_field="Answer").problems("train")
    with pytest.raises(UserError, match="bad field template"):
        JsonlTask(path=path, question_field="{Body", answer_field="Answer").problems("train")
    with pytest.raises(UserError, match="set task.path or task.splits"):  # not task.data_dir, which jsonl rejects
        JsonlTask(path=tmp_path / "absent.jsonl").problems("train")


def test_a_test_only_file_cannot_train_and_says_so(tmp_path):
    from cotrain.config import build_config
    from cotrain.train.setup import training_pool

    path = tmp_path / "test.jsonl"
    path.write_text('{"question": "2+2?", "answer": "4"}\n')
    task = JsonlTask(splits={"test": path})
    assert len(task.problems("test")) == 1  # evaluation reads it
    cfg = build_config({"task": {"name": "jsonl", "splits": {"test": str(path)}}})
    with pytest.raises(UserError, match="has no train split \\(its splits: test\\)"):
        training_pool(task, cfg.seed, 10)


@pytest.mark.parametrize("completion, read, gold, right", [
    ("Answer: 2 bananas", "2", "2", True),                       # a unit after the number
    ("#### 2 bananas", "2", "2", True),
    ("The answer is 5/2", "5/2", "2.5", True),                   # a fraction, not its last number
    ("The answer is 12. Check: 12 * 2 = 24.", "12", "12", True),  # the answer, not the check's 24
    ("the final answer is $1,200 dollars", "1200", "1200", True),
    ("#### 2x+1", "2x+1", "2x+1", True),                        # an expression is read whole
    ("Answer: 11:45 p.m.", "11:45 p.m", "11:45 P.M.", True),     # not a number: compared as text
    ("The answer is Alice.", "Alice", "alice", True),
    ("The answer is Bob", "Bob", "Alice", False),
    ("so \\boxed{7}", "7", "7", True),
    ("no mark, so the last number: 42", "42", "42", True),
    ("#### 3", "3", "4", False),
])
def test_jsonl_reads_answers_as_people_write_them(completion, read, gold, right):
    task = JsonlTask(path="unused.jsonl")
    assert task.extract_answer(completion) == read
    assert task.grade(completion, Problem("q", gold)) == float(right)


@pytest.mark.parametrize("written, how, read", [
    ("9 (apples)", "number", "9"),
    ("$1,200 a month", "number", "1200"),
    ("5/2 cups", "number", "5/2"),
    ("-3 degrees", "number", "-3"),
    ("eleven", "number", None),                       # no leading number: graded as written
    ("9 (apples)", "none", "9 (apples)"),
    ("Final: 42 units", r"regex:Final:\s*(\d+)", "42"),
    ("x=7", r"regex:\d+", "7"),                        # no group: the whole match
    ("no digits", r"regex:(\d+)", None),
])
def test_normalise_answer(written, how, read):
    assert normalise_answer(written, how) == read


def test_a_unit_laden_two_field_file_as_published(tmp_path, capfd):
    """Gold answers with units: the load report says how few the grader reads and which normalisation
    would read them; with it, every one is read and a bare number grades right."""
    path = tmp_path / "words.jsonl"
    rows = [{"Body": f"Tom has {a} apples and buys 2.", "Question": "How many?", "Answer": f"{a + 2} (apples)"}
            for a in range(1, 11)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = JsonlTask(path=path, question_field="{Body} {Question}", answer_field="Answer")
    task.problems("train")
    err = capfd.readouterr().err
    assert "warning: jsonl: train: 10 problems" in err and "gold answers the grader reads: 0.0% (all 10 checked)" in err
    assert "line 1: '3 (apples)'; line 2: '4 (apples)'; line 3: '5 (apples)'" in err
    assert "with task.answer_normalise: number it would read 100.0%" in err
    task = JsonlTask(path=path, question_field="{Body} {Question}", answer_field="Answer", answer_normalise="number")
    problems = sorted(task.problems("train"), key=lambda p: p.meta["line"])
    assert "gold answers the grader reads: 100.0% (all 10 checked)" in capfd.readouterr().err
    assert problems[0].answer == "3" and task.grade("Answer: 3 apples", problems[0]) == 1.0


def test_jsonl_per_split_mappings_and_the_overlap_warning(tmp_path, capfd):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text('{"q": "2+2?", "a": "4"}\n{"q": "3+3?", "a": "6"}\n')
    test.write_text('{"problem": "2 + 2?", "solution": "so #### 4"}\n{"problem": "5+5?", "solution": "#### 10"}\n')
    task = JsonlTask(splits={"train": train, "test": {"path": test, "question_field": "problem",
                                                       "answer_field": "solution", "answer_normalise": "regex:####\\s*(\\S+)"}},
                     question_field="q", answer_field="a")
    assert sorted(p.answer for p in task.problems("test")) == ["10", "4"]
    assert sorted(p.answer for p in task.problems("train")) == ["4", "6"]
    assert "warning: jsonl: 1 of the 2 test questions also appear in the train split" not in capfd.readouterr().err
    test.write_text('{"problem": "2+2?", "solution": "#### 4"}\n')
    task = JsonlTask(splits={"train": train, "test": {"path": test, "question_field": "problem",
                                                       "answer_field": "solution", "answer_normalise": "number"}},
                     question_field="q", answer_field="a")
    task.problems("test")
    assert "warning: jsonl: 1 of the 1 test questions also appear in the train split" in capfd.readouterr().err
    for splits, message in [({"test": {"question_field": "q"}}, "task.splits.test: give the split's file as path"),
                            ({"test": {"path": test, "answer": "a"}}, "unknown key 'answer'"),
                            ({"test": 3}, "expected a file path, got int")]:
        with pytest.raises(UserError, match=message):
            JsonlTask(splits=splits)
    with pytest.raises(UserError, match="task.answer_normalise: 'digits' is not a normalisation"):
        JsonlTask(path=train, answer_normalise="digits")
    with pytest.raises(UserError, match="task.splits.test.answer_normalise: bad regular expression"):
        JsonlTask(splits={"test": {"path": test, "answer_normalise": "regex:(unclosed"}})


def test_a_run_records_the_hash_of_every_data_file_it_read(tmp_path):
    import hashlib

    from cotrain.runs.session import record_data_files

    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "2+2?", "answer": "4"}\n')
    JsonlTask(path=path).problems("train")
    (tmp_path / "run0").mkdir()
    record_data_files(tmp_path / "run0")
    files = json.loads((tmp_path / "run0" / "data.json").read_text())["files"]
    assert files[str(path.resolve())] == [hashlib.sha256(path.read_bytes()).hexdigest()]


def text_graders(gold: str) -> dict:
    """The tasks that compare text answers, each with a problem whose gold answer is `gold`."""
    problem = Problem("q", gold)
    return {"math500": (Math500Task(data_dir="/nowhere"), problem),
            "gsm8k ood": (Gsm8kTask(data_dir="/nowhere", ood="math500"), Problem("q", gold, meta={"source": "math500"})),
            "jsonl": (JsonlTask(path="unused.jsonl"), problem)}


@pytest.mark.parametrize("completion, gold, right", [
    ("The answer is Clara.", "Clara", True),                   # the name
    ("The answer is Clara1.", "Clara", False),                 # a digit after it: another answer
    ("\\boxed{Clara1}", "Clara", False),                       # the same in a box
    ("\\boxed{1Clara}", "Clara", False),                       # a digit before it
    ("\\boxed{Clara_1}", "Clara", False),                      # a subscript
    ("\\boxed{Clara\\,1}", "Clara", False),                    # a digit behind LaTeX spacing
    ("\\boxed{Carla}", "Clara", False),                        # an anagram: the same product of letters
    ("\\boxed{Clara Jones}", "Clara", False),                  # more words
    ("\\boxed{Clar}", "Clara", False),                         # fewer letters
    ("\\boxed{x+1}", "Clara", False),                          # an expression against a name
    ("The answer is clara", "Clara", True),                    # case aside
    ("The answer is **Clara**!", "Clara", True),               # surrounding punctuation aside
    ("\\boxed{\\text{Clara}}", "Clara", True),                   # \text{} aside
    ("\\boxed{Evelyn}", "\\text{Evelyn}", True),                # a MATH-500 gold answer in \text{}
    ("\\boxed{\\text{Evelyn}2}", "\\text{Evelyn}", False),        # a digit after the \text{}
    ("\\boxed{\\textbf{East}}", "\\text{east}", True),            # bold, capitalised
    ("\\boxed{\\text{east}, 1}", "\\text{east}", False),          # more after a comma
    ("\\boxed{west}", "\\text{east}", False),                   # another word
    ("\\boxed{odd}", "\\text{even}", False),                    # the other parity
    ("\\boxed{\\infty}", "infinity", True),                     # a LaTeX constant: math-verify decides
    ("\\boxed{12}", "Clara", False),                           # a number against a name
    ("\\boxed{Clara}", "12", False),                           # a name against a number
    ("\\boxed{\\frac{1}{2}}", "0.5", True),                     # numbers and LaTeX as before: math-verify
    ("\\boxed{2x+1}", "1+2x", True),                          # an expression, reordered
    ("\\boxed{5.4\\text{ cents}}", "5.4 \\text{ cents}", True),   # a unit is no word answer
])
def test_text_answers_are_graded_exactly(completion, gold, right):
    """A text gold answer is right only for the same words (case, surrounding punctuation, \\text{} aside),
    in every task that compares text; numbers and expressions keep math-verify's equivalence."""
    graded = {name: task.grade(completion, problem) for name, (task, problem) in text_graders(gold).items()}
    assert graded == {name: float(right) for name in graded}
    math500 = Math500Task(data_dir="/nowhere")
    assert math500.answers_equal(math500.extract_answer(completion), gold) is right  # majority votes alike


# Each form a model writes its final answer in, read by each word-problem task: (completion, gsm8k, math500, jsonl).
ANSWER_FORMS = [
    ("Answer: 2 bananas", "2", "2", "2"),
    ("#### 2 bananas", "2", "2", "2"),
    ("The answer is 5/2", "5/2", "5/2", "5/2"),
    ("The answer is 12. Check: 12 * 2 = 24.", "12", "12", "12"),
    ("the final answer is $1,200 dollars", "1200", "1200", "1200"),
    ("The answer is $\\frac{1}{2}$.", "2", "\\frac{1}{2}", "\\frac{1}{2}"),  # GSM8K answers are integers
    ("Answer: 11:45 p.m.", "45", "11:45 p.m", "11:45 p.m"),
    ("The answer is Alice.", None, "Alice", "Alice"),
    ("so \\boxed{7}", "7", "7", "7"),
    ("no mark, so the last number: 42", "42", None, "42"),
]


@pytest.mark.parametrize("completion, gsm8k, math500, jsonl", ANSWER_FORMS)
def test_every_word_problem_task_reads_answers_as_people_write_them(completion, gsm8k, math500, jsonl):
    tasks = {"gsm8k": Gsm8kTask(data_dir="/nowhere"), "math500": Math500Task(data_dir="/nowhere"),
             "jsonl": JsonlTask(path="unused.jsonl")}
    assert {name: task.extract_answer(completion) for name, task in tasks.items()} == {
        "gsm8k": gsm8k, "math500": math500, "jsonl": jsonl}


def test_jsonl_needs_one_source():
    with pytest.raises(UserError):
        JsonlTask()


# ----------------------------------------------------------------------------- make_task


@pytest.mark.parametrize("name, options, cls", [
    ("arith", {}, ArithTask),  # defaults
    ("arith", {"n_ops": (1, 2), "ops": "+-*"}, ArithTask),  # knobs
    ("gsm8k", {"data_dir": "/nowhere"}, Gsm8kTask),  # files are read lazily
    ("math500", {}, Math500Task),  # default data dir
    ("jsonl", {"path": "rows.jsonl"}, JsonlTask),  # one file
])
def test_make_task(name, options, cls):
    assert isinstance(make_task(name, **options), cls)


@pytest.mark.parametrize("name, options, message", [
    ("gsm9k", {}, "did you mean 'gsm8k'"),  # typo in the name
    ("arithmetic", {}, "did you mean 'arith'"),  # longer name
    ("arith", {"nops": 2}, "did you mean 'n_ops'"),  # typo in an option
    ("math500", {"path": "x"}, "unknown option 'path'"),  # option of another task
    ("rg:leg_count", {}, "did you mean 'rg:leg_counting'"),  # unknown generator
    ("rg:leg_counting", {"max_animal": 3}, "max_animals"),  # unknown generator option lists the valid ones
])
def test_make_task_errors(name, options, message):
    with pytest.raises(UserError, match=message):
        make_task(name, **options)


# ----------------------------------------------------------------------------- reasoning-gym


def test_reasoning_gym_task():
    task = make_task("rg:leg_counting", size=8)
    assert task.name == "rg:leg_counting" and task.splits == ("train", "test")
    train = task.problems("train", seed=0)
    assert len(train) == 8
    assert task.problems("train", 3, seed=0) == train[:3]  # prefix property
    assert {p.question for p in task.problems("test", 8, seed=0)} != {p.question for p in train}
    for problem in train:
        assert task.grade(f"thinking\n#{problem.answer}", problem) == 1.0
        assert task.grade(f"<answer>{problem.answer}</answer>", problem) == 1.0
        assert task.grade("#-1", problem) == 0.0


@pytest.mark.parametrize("completion, expected", [
    ("<answer> 12 </answer> trailing", "12"),  # answer tag wins
    ("x\n# 12\nnotes", "12"),  # last '#' line
    ("#### 12", "12"),  # several '#'
    ("first\nlast line  \n\n", "last line"),  # last non-empty line
    ("<answer></answer>", None),  # empty tag
    ("   \n", None),  # nothing
])
def test_reasoning_gym_extract_answer(completion, expected):
    from cotrain.tasks.rg import extract_answer as rg_extract

    assert rg_extract(completion) == expected


# ----------------------------------------------------------------------------- fuzzing: no string raises

ARITH_TEXT = st.text(alphabet="0123456789+-*=#\n ", max_size=80)
MATH_TEXT = st.lists(st.sampled_from(["\\boxed{", "{", "}", "\\frac", "####", "answer:", "#", "1", "-", ".", ",",
                                      "x", "^", "$", "\\", "\n", " ", "(", ")", "<answer>", "</answer>"]),
                     max_size=30).map("".join)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def graded_tasks():
    """Each task with a problem it can grade (no data files needed)."""
    rg = make_task("rg:leg_counting", size=1)
    return [
        (ArithTask(), ArithTask().problems("train", 1)[0]),
        (CountdownTask(), CountdownTask().problems("train", 1)[0]),
        (Gsm8kTask(), Problem(question="q", answer="72")),
        (Math500Task(), Problem(question="q", answer="\\frac{1}{2}")),
        (JsonlTask(path="unused.jsonl"), Problem(question="q", answer="0.5")),
        (rg, rg.problems("train", 1)[0]),
    ]


def _check_never_raises(tasks, text):
    for task, problem in tasks:
        answer = task.extract_answer(text)
        assert answer is None or isinstance(answer, str)
        assert task.grade(text, problem) in (0.0, 1.0)


@FUZZ
@given(text=st.text(max_size=200))
def test_fuzz_arbitrary_text(graded_tasks, text):
    _check_never_raises(graded_tasks, text)


@FUZZ
@given(text=ARITH_TEXT)
def test_fuzz_arith_alphabet(graded_tasks, text):
    _check_never_raises(graded_tasks, text)
    labels = step_labels("12+34-5", [line for line, _ in parse_steps(text)])
    assert all(isinstance(label, bool) for label in labels)


@FUZZ
@given(text=MATH_TEXT)
def test_fuzz_math_fragments(graded_tasks, text):
    _check_never_raises(graded_tasks, text)


@settings(max_examples=200, deadline=None)
@given(question=st.text(alphabet="0123456789+-*", min_size=1, max_size=20))
def test_fuzz_arith_parsers(question):
    parsed = parse_question(question)
    if parsed is not None:  # anything that parses solves, and labels its own steps correct within 12 digits
        steps, _ = solve(question)
        assert step_labels(question, steps) == [parse_step(step) is not None for step in steps]


# ---------------------------------------------------------------------- wordproblems


def test_wordproblems_reference_solutions_are_right_and_graded_right():
    """Every reference step is true arithmetic chained from the story's numbers, the last result is
    the answer, the reference grades 1, and a wrong final line grades 0."""
    from cotrain.tasks.wordproblems import WordProblemsTask

    task = WordProblemsTask(n_steps=(1, 3), max_number=20)
    for problem in task.problems("train", 300) + task.problems("ood", 100):
        value = None
        for step in problem.steps:
            left, op, right, _, result = step.split()
            assert value is None or int(left) == value, problem
            assert {"+": int(left) + int(right), "-": int(left) - int(right), "*": int(left) * int(right)}[op] == int(result)
            assert int(result) >= 0 and (value is not None or left in problem.question), problem
            value = int(result)
        assert str(value) == problem.answer and problem.solution.endswith(f"#### {value}")
        assert task.grade(problem.solution, problem) == 1.0
        assert task.grade(problem.solution.replace(f"#### {value}", f"#### {value + 1}"), problem) == 0.0
        assert len(problem.steps) == problem.meta["n_ops"]


def test_wordproblems_splits():
    """train and test never share a question; ood has one more step and larger numbers; lists are
    deterministic, prefixes of longer ones, and distinct."""
    from cotrain.tasks.wordproblems import WordProblemsTask

    task = WordProblemsTask(n_steps=(1, 1), max_number=10)
    train, test, ood = task.problems("train", 2000), task.problems("test", 300), task.problems("ood", 300)
    assert not {p.question for p in train} & {p.question for p in test}
    assert len({p.question for p in test}) == 300 and task.problems("test", 100) == test[:100]
    assert task.problems("test", 300, seed=1) != test
    assert all(p.meta["n_ops"] == 1 for p in train + test) and all(p.meta["n_ops"] == 2 for p in ood)
    assert max(int(p.answer) for p in ood) > 100 >= max(int(p.answer) for p in test)


def test_wordproblems_steps_are_judged_against_their_story():
    """Worked by hand on "Mia has 7 pencils. She gets 5 more pencils. She gives away 4 pencils." (reference
    7 + 5 = 12, 12 - 4 = 8): an equation that holds on numbers the story never gave is an "operand" fault,
    one that adds what she loses an "operation" fault, a false one an "arithmetic" fault; an error carried
    forward is one wrong step; prose is right; the equation check alone passes every true equation."""
    from cotrain.tasks.base import Problem
    from cotrain.tasks.wordproblems import WordProblemsTask, equation_labels, story_summary

    task = WordProblemsTask()
    problem = Problem(question="Mia has 7 pencils. She gets 5 more pencils. She gives away 4 pencils. How many "
                      "pencils does Mia have now?", answer="8", steps=("7 + 5 = 12", "12 - 4 = 8"))
    rows = [  # steps, faults
        (["7 + 5 = 12", "12 - 4 = 8"], [None, None]),
        (["7 + 6 = 13", "13 - 4 = 9"], ["operand", None]),        # 6 is nowhere in the story; 13 then is
        (["7 + 5 = 12", "12 + 4 = 16"], [None, "operation"]),     # she gives 4 away, not gets
        (["7 + 5 = 13", "13 - 4 = 9"], ["arithmetic", None]),     # carried forward: one wrong step
        (["7 * 5 = 35"], ["operation"]),                          # no product in this story
        (["She starts with 7.", "7 + 5 = 12 and 12 - 4 = 8"], [None, None]),
        (["12 - 4 = 8"], ["operand"]),                            # 12 before it was stated
    ]
    for steps, faults in rows:
        assert task.step_kinds(problem, steps) == faults, steps
        assert task.step_labels(problem, steps) == [f is None for f in faults], steps
    assert equation_labels(["7 + 6 = 13", "12 + 4 = 16"]) == [True, True]
    # a verifier's rationale: the story first, then each check after what it checks (operands, operation,
    # result), so that a "not" or a recomputed result unlike the written one carries the verdict
    assert task.step_rationales(problem, ["7 + 6 = 13", "13 - 4 = 8"]) == [
        "story 7, +5, -4; 7 given, 6 not given, +6 not in the story; 7 + 6 is 13, written 13",
        "13 from before, 4 given, -4 in the story; 13 - 4 is 9, written 8"]
    assert task.step_rationales(problem, ["7 + 5 = 13", "She has 9.", "7 * 5 = 35 and 12 + 4 = 16"]) == [
        "story 7, +5, -4; 7 given, 5 given, +5 in the story; 7 + 5 is 12, written 13", "",
        "7 given, 5 given, 7 * 5 not in the story; 7 * 5 is 35, written 35; "
        "12 not given, 4 given, +4 not in the story; 12 + 4 is 16, written 16"]   # 12 was never written
    assert task.step_rationales(problem, ["She starts with 7."]) == ["story 7, +5, -4"]
    assert task.step_rationales(problem, []) == []
    # the final line: the steps the story needs against those shown (lines or equations, the more), then the
    # count the story makes, worked an operation at a time, then the answer the verdict compares with it
    assert task.final_rationale(problem, ["12 - 4 = 8"], "8") == "needs 2, shows 1; story 7 + 5 is 12, 12 - 4 is 8; answer 8"
    assert task.final_rationale(problem, ["7 + 5 = 12 and 12 - 4 = 8"], " 9 ") == (
        "needs 2, shows 2; story 7 + 5 is 12, 12 - 4 is 8; answer 9")
    assert task.final_rationale(problem, []) == "needs 2, shows 0; story 7 + 5 is 12, 12 - 4 is 8; answer none"
    assert task.final_rationale(problem, ["x"], "1" * 100).endswith("answer " + "1" * 40)
    assert reference_verification(task, problem, "7 + 5 = 12\n12 - 4 = 9\n#### 9", chat=True).split("\n")[-1] == (
        "Final: needs 2, shows 2; story 7 + 5 is 12, 12 - 4 is 8; answer 9 INCORRECT")
    prose_first = Problem(question=problem.question, answer="8", steps=("Start.", "7 + 5 = 12", "12 - 4 = 8"))
    assert story_summary(prose_first) == "7, +5, -4"          # the first count comes from the first equation
    product = Problem(question="Mia buys 3 boxes with 4 pencils in each box. She gives away 5 pencils. How many "
                      "pencils does Mia have now?", answer="7", steps=("3 * 4 = 12", "12 - 5 = 7"),
                      solution="3 * 4 = 12\n12 - 5 = 7\n#### 7")
    assert story_summary(product) == "3 * 4, -5"
    assert task.step_rationales(product, ["4 boxes x 3 pencils = 12", "12 + 5 = 17"]) == [
        "story 3 * 4, -5; 4 given, 3 given, 4 * 3 in the story; 4 * 3 is 12, written 12",
        "12 from before, 5 given, +5 not in the story; 12 + 5 is 17, written 17"]   # she gives 5 away
    # a chain states its end alone: its middle value is recomputed, never "written"
    assert task.step_rationales(problem, ["7 + 5 - 4 = 9"]) == [
        "story 7, +5, -4; 7 given, 5 given, +5 in the story; 7 + 5 is 12; "
        "12 from before, 4 given, -4 in the story; 12 - 4 is 8, written 9"]


def test_wordproblems_reads_equations_as_a_model_writes_them_and_counts_its_steps():
    """Worked by hand: `x` and a unit word after a number are read ("5 sheets x 9 stickers = 45"), a chain is
    its steps left to right with the true value between them (7 + 5 - 3 = 9: 7 + 5 = 12, 12 - 3 = 9), a
    decimal or a number glued to a word is not an operand; a false chain is an arithmetic fault at its end
    only; completeness counts lines or equations, whichever is more (two equations on a line: two steps;
    a line in words: one), so that only a solution that stops early falls short."""
    import time

    from cotrain.tasks.base import Problem
    from cotrain.tasks.wordproblems import WordProblemsTask, stated_equations
    from cotrain.train.rollout import complete_solutions, computing_lines, step_shape_metrics

    assert stated_equations("So 5 sheets x 9 stickers = 45, then 45 + 5 = 50.") == [(5, "*", 9, 45), (45, "+", 5, 50)]
    assert stated_equations("7 boxes * 3 pencils = 21 pencils") == [(7, "*", 3, 21)]
    assert stated_equations("7 \u00d7 3 = 21") == [(7, "*", 3, 21)]
    assert stated_equations("7 + 5 - 3 = 9") == [(7, "+", 5, 12), (12, "-", 3, 9)]
    assert stated_equations("7 + 5 - 3 = 10") == [(7, "+", 5, 12), (12, "-", 3, 10)]
    assert stated_equations("1.5 + 2 = 3.5") == [] and stated_equations("a2 + 2 = 4") == []
    assert stated_equations(None) == [] and stated_equations("7 + = 3") == []
    t0 = time.perf_counter()
    assert stated_equations("1 + " * 400) == [] and stated_equations("9" * 5000 + " + 1 = 2") == []
    assert time.perf_counter() - t0 < 1.0  # no runaway backtracking on what a model may write
    task = WordProblemsTask()
    problem = Problem(question="Mia has 5 pencils. She gets 3 more pencils. She gives away 1 pencil. How many "
                      "pencils does Mia have now?", answer="7", steps=("5 + 3 = 8", "8 - 1 = 7"))
    assert task.step_kinds(problem, ["5 + 3 - 1 = 7"]) == [None]
    assert task.step_kinds(problem, ["5 + 3 - 1 = 6"]) == ["arithmetic"]
    assert task.step_kinds(problem, ["5 pencils x 3 = 15"]) == ["operation"]
    texts = ["Mia has 5 + 3 = 8 pencils. She gives away 1, so 8 - 1 = 7.\n#### 7",  # one line, two equations
             "She has 5 + 3 - 1 = 7 pencils.\n#### 7",                              # a chain: two steps
             "Mia has 5 + 3 = 8 pencils.\nShe then gives one away: 7.\n#### 7",     # two lines, one in words
             "5 + 3 = 8\n8 - 1 = 7",                                                # no ####: the last number
             "Mia has 5 + 3 = 8 pencils.\n#### 8",                                  # stops after one step
             "Mia has 5 + 3 = 8 pencils.\nShe is happy."]                           # no number after: answer 8
    assert task.count_steps(["Mia has 5 + 3 = 8 pencils. So 8 - 1 = 7.", "Then she smiles."]) == 2
    assert complete_solutions(task, [problem] * 6, texts) == [True, True, True, True, False, True]
    assert complete_solutions(task, [problem], ["Mia is happy."]) == [False]  # no answer at all
    # 1 + 1 + 2 + 2 + 1 + 2 = 9 lines before the answers, 2 of them computing nothing ("She then gives one
    # away: 7." and "She is happy.")
    assert step_shape_metrics(task, texts) == {"gen/step_lines": 9 / 6, "gen/steps_without_work": 2 / 9}
    # the steps that compute (`cotraining.credit: final_compute`): a line in words does not; a task that
    # does not count steps of work has every step compute
    assert computing_lines(task, texts[2:3] + texts[5:]) == [[True, False], [True, False]]
    assert computing_lines(object(), ["a\nb\n#1", ""]) == [[True, True], []]


def test_wordproblems_corrupt_injects_a_wrong_result_at_the_step_asked_and_labels_find_it():
    """A corrupted reference states a wrong result (1 to 3 off) at step k alone, later steps compute
    from it, its final answer grades 0; step labels mark exactly the corrupted steps; references are
    all right; a model's prose line is judged by its equations alone; bad indices raise."""
    import random

    from cotrain.tasks.wordproblems import WordProblemsTask, step_labels

    task = WordProblemsTask(n_steps=(1, 3), max_number=20)
    rng = random.Random(0)
    for problem in task.problems("train", 200):
        assert task.step_labels(problem, problem.steps) == [True] * len(problem.steps)
        wrong = sorted(rng.sample(range(len(problem.steps)), rng.randint(1, len(problem.steps))))
        steps, solution = task.corrupt(problem, wrong, rng)
        assert task.step_labels(problem, steps) == [i not in wrong for i in range(len(steps))]
        assert solution == "\n".join(steps) + f"\n#### {steps[-1].split()[-1]}"
        assert task.grade(solution, problem) == 0.0
        first = wrong[0]
        true = int(problem.steps[first].split()[-1]) if first == 0 or steps[first - 1] == problem.steps[first - 1] else None
        if true is not None:
            assert 1 <= abs(int(steps[first].split()[-1]) - true) <= 3
        assert steps[:first] == problem.steps[:first]
    assert step_labels(["Tom has 5 apples.", "He buys 3 more: 5 + 3 = 9.", "Then 9-2=7 and 2*3=6.", "x = 1"]) == [
        True, False, True, True]
    problem = task.problems("test", 1)[0]
    for bad in (len(problem.steps), -1, []):
        with pytest.raises(ValueError):
            task.corrupt(problem, bad, rng)


def test_wordproblems_corrupt_injects_each_kind_of_false_step_and_labels_name_it():
    """With `corrupt_kinds`, each false step is of a kind drawn from them, and the story's labels name
    that kind at that step alone; the answer grades 0. Worked by hand on "7, +5, -4": the operation
    kind takes 5 away at step 1 ("7 - 5 = 2": the story loses only 4), the operand kind adds an amount
    near 5 that the story never states (2, 3, 6 or 8; 4 and 7 are stated), every later step computed from
    it; a story that also loses 5 cannot have its + step's operation wrong, so it goes wrong in its
    arithmetic; unknown kinds are refused."""
    import random

    from cotrain.tasks.wordproblems import WordProblemsTask, corrupt_solution, story_step_faults

    task = WordProblemsTask(n_steps=(1, 3), max_number=10, corrupt_kinds=["arithmetic", "operation", "operand"])
    rng, seen = random.Random(0), set()
    for problem in task.problems("train", 300):
        k = rng.randrange(len(problem.steps))
        steps, solution = task.corrupt(problem, k, rng)
        faults = story_step_faults(problem, steps)
        assert faults[:k] == [None] * k and faults[k + 1:] == [None] * (len(steps) - k - 1) and faults[k] is not None
        assert task.grade(solution, problem) == 0.0
        seen.add(faults[k])
    assert seen == {"arithmetic", "operation", "operand"}
    mia = Problem(question="Mia has 7 pencils. She gets 5 more pencils. She gives away 4 pencils. How many pencils "
                  "does Mia have now?", answer="8", steps=("7 + 5 = 12", "12 - 4 = 8"))
    assert corrupt_solution(mia, 0, random.Random(0), ("operation",)) == (
        ("7 - 5 = 2", "2 - 4 = -2"), "7 - 5 = 2\n2 - 4 = -2\n#### -2")
    steps, _ = corrupt_solution(mia, 0, random.Random(1), ("operand",))
    first = steps[0].split()
    assert first[:2] == ["7", "+"] and int(first[2]) in (2, 3, 6, 8) and int(first[4]) == 7 + int(first[2])
    assert steps[1] == f"{first[4]} - 4 = {int(first[4]) - 4}"
    both = Problem(question="Mia has 7 pencils. She gets 5 more pencils. She gives away 5 pencils. How many pencils "
                   "does Mia have now?", answer="7", steps=("7 + 5 = 12", "12 - 5 = 7"))
    steps, _ = corrupt_solution(both, 0, random.Random(0), ("operation",))
    assert story_step_faults(both, steps) == ["arithmetic", None]
    with pytest.raises(ValueError):
        corrupt_solution(mia, 0, random.Random(0), ("typo",))
    with pytest.raises(UserError):
        WordProblemsTask(corrupt_kinds=["typo"])


def test_wordproblems_reads_answers_as_a_model_writes_them():
    from cotrain.tasks.base import LabelLeak, blind
    from cotrain.tasks.wordproblems import WordProblemsTask

    task = WordProblemsTask()
    problem = task.problems("test", 1)[0]
    answer = int(problem.answer)
    rows = [
        (f"#### {answer}", 1.0),                                   # the asked-for format
        (f"So she has {answer} now.\nThe answer is {answer}.", 1.0),  # a sentence
        (f"\\boxed{{{answer}}}", 1.0),                              # LaTeX
        (f"#### {answer}.0", 1.0),                                  # a float that is the integer
        (f"#### {answer + 1}", 0.0),                                # wrong
        ("I cannot tell.", 0.0),                                    # no number
        ("", 0.0),
    ]
    for text, want in rows:
        assert task.grade(text, problem) == want, text
    assert task.answers_equal("1,200", "1200") and not task.answers_equal("x", "x")
    with pytest.raises(LabelLeak):
        task.grade(f"#### {answer}", blind([problem])[0])


@pytest.mark.parametrize("knobs", [{"n_steps": (2, 1)}, {"n_steps": 3}, {"n_steps": (0, 1)}, {"max_number": 1},
                                   {"max_number": 10**9}, {"ood_max_number": "x"}])
def test_wordproblems_bad_knobs_are_user_errors(knobs):
    from cotrain.tasks import make_task

    with pytest.raises(UserError, match="wordproblems"):
        make_task("wordproblems", **knobs)


def test_early_stop_metrics_by_hand():
    """5 samples: complete [T, F, F, T, F], right [T, T, F, F, F]: 3 of 5 stop early (0.6); of the 2 right
    ones, 1 stopped early (0.5); with no right sample the second metric is left out."""
    from cotrain.train.rollout import early_stop_metrics

    got = early_stop_metrics([True, False, False, True, False], [True, True, False, False, False])
    assert got == pytest.approx({"gen/early_stop": 0.6, "gen/early_stop_right": 0.5})
    assert early_stop_metrics([True, False], [False, False]) == {"gen/early_stop": 0.5}


def test_a_split_read_twice_in_one_process_reports_its_load_line_once(tmp_path, capfd):
    """The command line checks the evaluation splits with one instance of the task and the recipe reads them with
    another: the load line and the overlap warning print once; a file whose bytes changed prints again."""
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text('{"question": "2+2?", "answer": "4"}\n')
    test.write_text('{"question": "2+2?", "answer": "4"}\n')
    for _ in range(2):
        task = JsonlTask(splits={"train": train, "test": test})
        task.problems("test"), task.problems("train")
    err = capfd.readouterr().err
    assert err.count("jsonl: test: 1 problems") == 1 and err.count("jsonl: train: 1 problems") == 1, err
    assert err.count("also appear in the train split") == 1, err
    test.write_text('{"question": "3+3?", "answer": "6"}\n')
    JsonlTask(splits={"train": train, "test": test}).problems("test")
    assert capfd.readouterr().err.count("jsonl: test: 1 problems") == 1


def test_the_gold_answer_check_reads_a_user_s_own_grader(tmp_path, capfd):
    """A subclass's grader that wants the answer alone reads every gold answer (no false 0%); one that raises
    reads none, and the load still completes."""
    path = tmp_path / "exact.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i}?", "answer": str(i)}) + "\n" for i in range(5)))

    class Exact(JsonlTask):
        def grade(self, completion, problem):
            return float(completion.strip() == problem.answer)

    class Broken(JsonlTask):
        def grade(self, completion, problem):
            raise RuntimeError("no")

    Exact(path=path).problems("train")
    assert "gold answers the grader reads: 100.0% (all 5 checked)" in capfd.readouterr().err
    Broken(path=path, question_field="question").problems("train")
    assert "gold answers the grader reads: 0.0% (all 5 checked)" in capfd.readouterr().err
