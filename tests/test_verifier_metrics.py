"""Tests of cotrain.eval.verifier_metrics against numbers worked out by hand, edge cases, and fuzzing that
no input makes the metrics raise or leave [0, 1]."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cotrain.eval.metrics import majority_gap
from cotrain.eval.verifier_metrics import (
    best_of_n,
    earliest_error_metrics,
    first_error,
    step_verdict_metrics,
    verdict_metrics,
    verifier_gap,
    weighted_vote,
)

# ----------------------------------------------------------------------------- verdict_metrics


def test_verdict_metrics_by_hand():
    """8 solutions, 5 correct (0-4) and 3 wrong (5-7); verdicts T T T F None | T F None.
    Correct ones: TP = 3 (0, 1, 2), FN = 2 (3 rejected, 4 unparsed).  Wrong ones: FP = 1 (5), TN = 1 (6),
    7 unparsed (a reject for F1, wrong for accuracy).
    accuracy = (TP + TN) / 8 = 4/8;  TPR = 3/5, TNR = 1/3, balanced = (3/5 + 1/3) / 2 = 7/15;
    precision = 3/4, recall = 3/5, F1 = 2 * 3/4 * 3/5 / (3/4 + 3/5) = 0.9 / 1.35 = 2/3;
    approve_rate = 4/8, base_rate = 5/8, parse_rate = 6/8.
    AUROC: positive scores 0.9 0.6 0.5 0.5 0.2 against negative scores 0.6 0.1 0.5, 15 pairs:
    0.9 -> 1+1+1 = 3;  0.6 -> 1/2+1+1 = 2.5;  0.5 -> 0+1+1/2 = 1.5 (twice);  0.2 -> 0+1+0 = 1;
    total 9.5 / 15 = 19/30."""
    approved = [True, True, True, False, None, True, False, None]
    correct = [True, True, True, True, True, False, False, False]
    scores = [0.9, 0.6, 0.5, 0.5, 0.2, 0.6, 0.1, 0.5]
    m = verdict_metrics(approved, correct, scores)
    expected = {"n": 8, "accuracy": 0.5, "balanced_accuracy": 7 / 15, "f1": 2 / 3, "precision": 0.75, "recall": 0.6,
                "approve_rate": 0.5, "base_rate": 5 / 8, "parse_rate": 0.75, "auroc": 19 / 30}
    assert m.keys() == expected.keys()
    for key, value in expected.items():
        assert m[key] == pytest.approx(value), key
    assert "auroc" not in verdict_metrics(approved, correct)  # no scores, no AUROC


def test_verdict_metrics_one_class_only():
    """All correct, verdicts T F None: TPR = recall = 1/3 is the balanced accuracy (no negatives);
    precision = 1/1, F1 = 2 * 1 * 1/3 / (4/3) = 1/2; no AUROC with one class.
    All wrong, verdicts F T: TNR = 1/2 is the balanced accuracy; TP = 0 so precision = recall = F1 = 0."""
    m = verdict_metrics([True, False, None], [True, True, True], scores=[0.9, 0.1, 0.5])
    assert m["balanced_accuracy"] == pytest.approx(1 / 3)
    assert (m["precision"], m["recall"], m["f1"]) == pytest.approx((1.0, 1 / 3, 0.5))
    assert "auroc" not in m

    m = verdict_metrics([False, True], [False, False], scores=[0.0, 1.0])
    assert m["balanced_accuracy"] == 0.5 and m["accuracy"] == 0.5
    assert (m["precision"], m["recall"], m["f1"]) == (0.0, 0.0, 0.0)
    assert m["base_rate"] == 0.0 and "auroc" not in m


def test_verdict_metrics_nothing_parsed():
    """Two unparsed verdicts: nothing is right, nothing approved; a correct and a wrong solution, so TPR = TNR = 0."""
    m = verdict_metrics([None, None], [True, False])
    assert m["accuracy"] == m["balanced_accuracy"] == m["parse_rate"] == m["approve_rate"] == m["f1"] == 0.0
    assert m["base_rate"] == 0.5


@pytest.mark.parametrize("scores, auroc", [
    ([0.9, 0.8, 0.2, 0.1], 1.0),  # every correct solution above every wrong one
    ([0.1, 0.2, 0.8, 0.9], 0.0),  # exactly reversed
    ([0.5, 0.5, 0.5, 0.5], 0.5),  # all tied: each of the 4 pairs counts 1/2
    ([0.9, 0.2, 0.5, 0.1], 0.75),  # 0.9 beats both (2), 0.2 beats 0.1 only (1): 3 of 4 pairs
    ([3, -1, -1, -7], 0.875),  # any finite scale; -1 vs -1 tied (1/2), others won: (2 + 1.5) / 4
])
def test_verdict_metrics_auroc_table(scores, auroc):
    m = verdict_metrics([True, True, False, False], [True, True, False, False], scores)
    assert m["auroc"] == pytest.approx(auroc)


def test_verdict_metrics_edge_cases():
    assert verdict_metrics([], []) == {"n": 0}
    assert verdict_metrics([], [], scores=[]) == {"n": 0}
    # numpy bools and 0/1 ints are read as bools
    assert verdict_metrics(list(np.array([True, False])), [1, 0])["accuracy"] == 1.0
    with pytest.raises(ValueError, match="one entry per solution"):
        verdict_metrics([True], [True, False])
    with pytest.raises(ValueError, match="one entry per solution"):
        verdict_metrics([True], [True], scores=[0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        verdict_metrics([True, False], [True, False], scores=[float("nan"), 0.2])


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([True, False, None]), st.booleans(),
                               st.floats(allow_nan=False, allow_infinity=False)), max_size=30),
       with_scores=st.booleans())
def test_verdict_metrics_fuzz(rows, with_scores):
    approved = [r[0] for r in rows]
    correct = [r[1] for r in rows]
    m = verdict_metrics(approved, correct, [r[2] for r in rows] if with_scores else None)
    assert m["n"] == len(rows)
    for key, value in m.items():
        if key != "n":
            assert 0.0 <= value <= 1.0, (key, value)
    has_both = any(correct) and not all(correct)
    assert ("auroc" in m) == (with_scores and has_both)


# ----------------------------------------------------------------------------- earliest error


def test_earliest_error_metrics_by_hand():
    """true  2 2 1    0 | None None None      pred  2 1 None 0 | None None 3
    Erroneous (4): hits at 0 and 3, misses at 1 (wrong index) and 2 (error not found) -> 2/4.
    Error-free (3): None, None right, 3 is a false alarm -> 2/3.
    F1 = 2 * 1/2 * 2/3 / (1/2 + 2/3) = (2/3) / (7/6) = 4/7."""
    pred = [2, 1, None, 0, None, None, 3]
    true = [2, 2, 1, 0, None, None, None]
    m = earliest_error_metrics(pred, true)
    assert m == pytest.approx({"n_erroneous": 4, "n_correct": 3, "acc_erroneous": 0.5, "acc_correct": 2 / 3,
                               "f1": 4 / 7})


def test_earliest_error_metrics_edge_cases():
    # index 0 is a prediction, not "no error": a false alarm on a clean solution, a hit on a wrong one
    assert earliest_error_metrics([0, 0], [None, 0]) == {"n_erroneous": 1, "n_correct": 1, "acc_erroneous": 1.0,
                                                         "acc_correct": 0.0, "f1": 0.0}
    # one group empty: the other group's accuracy, no F1
    assert earliest_error_metrics([None, 1], [None, None]) == {"n_erroneous": 0, "n_correct": 2, "acc_correct": 0.5}
    assert earliest_error_metrics([1], [1]) == {"n_erroneous": 1, "n_correct": 0, "acc_erroneous": 1.0}
    assert earliest_error_metrics([], []) == {"n_erroneous": 0, "n_correct": 0}
    with pytest.raises(ValueError, match="differ in length"):
        earliest_error_metrics([None], [])


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.none() | st.integers(0, 5), st.none() | st.integers(0, 5)), max_size=30))
def test_earliest_error_metrics_fuzz(rows):
    m = earliest_error_metrics([r[0] for r in rows], [r[1] for r in rows])
    assert m["n_erroneous"] + m["n_correct"] == len(rows)
    for key, value in m.items():
        if not key.startswith("n_"):
            assert 0.0 <= value <= 1.0, (key, value)
    assert ("f1" in m) == (m["n_erroneous"] > 0 and m["n_correct"] > 0)


@pytest.mark.parametrize("verdicts, index", [
    ([True, True, False, False], 2),  # the first of two wrong steps
    ([False, True], 0),  # wrong from the first step
    ([True, True, True], None),  # all correct
    ([], None),  # no steps: nothing judged wrong
])
def test_first_error(verdicts, index):
    assert first_error(verdicts) == index


# ----------------------------------------------------------------------------- test-time selection


def test_best_of_n_by_hand():
    """Problem 1: scores 0.2 0.9 0.5 -> 0.9, correct (1).  Problem 2: 0.7 and 0.7 tie -> the first, wrong (0).
    Problem 3: one candidate, correct (1).  Problem 4: no candidates (0).  Mean = 2/4."""
    groups = [[(0.2, 0), (0.9, 1), (0.5, 0)], [(0.7, 0), (0.7, 1)], [(0.1, 1)], []]
    assert best_of_n(groups) == 0.5
    assert best_of_n([[(-3.0, 1.0), (-5.0, 0.0)]]) == 1.0  # negative scores (e.g. log-probs) work too
    with pytest.raises(ValueError, match="at least one problem"):
        best_of_n([])


def test_weighted_vote_by_hand():
    """Problem 1: "4" totals 0.2 + 0.3 = 0.5 < "5" at 0.9 -> "5", correct (1); a plain majority would pick "4";
    the unparsed candidate with score 5 never wins.
    Problem 2: "8" and "7" tie at 0.5 -> "8", seen first, wrong (0).
    Problem 3: no answer parsed (0).
    Problem 4: with numeric equality "0.5" + "1/2" = 0.8 > "2" at 0.6 -> correct (1);
               with string equality "2" wins at 0.6 -> wrong (0).
    Mean: (1 + 0 + 0 + 1) / 4 = 0.5 with equality, (1 + 0 + 0 + 0) / 4 = 0.25 without."""
    groups = [
        [("4", 0.2, 0), ("5", 0.9, 1), ("4", 0.3, 0), (None, 5.0, 0)],
        [("8", 0.5, 0), ("7", 0.5, 1)],
        [(None, 1.0, 0), (None, 0.3, 0)],
        [("0.5", 0.4, 1), ("1/2", 0.4, 1), ("2", 0.6, 0)],
    ]
    def numeric(a: str, b: str) -> bool:
        return Fraction(a) == Fraction(b)
    assert weighted_vote(groups, equal=numeric) == 0.5
    assert weighted_vote(groups) == 0.25


def test_weighted_vote_takes_correctness_of_first_carrier():
    """"1/2" (graded 0) and "0.5" (graded 1) are one class under numeric equality; the class is scored by
    its first candidate, "1/2" -> 0. A lone unparsed candidate scores 0; no problems is an error."""
    def numeric(a: str, b: str) -> bool:
        return Fraction(a) == Fraction(b)
    assert weighted_vote([[("1/2", 0.5, 0), ("0.5", 0.5, 1)]], equal=numeric) == 0.0
    assert weighted_vote([[(None, 1.0, 1)]]) == 0.0
    with pytest.raises(ValueError, match="at least one problem"):
        weighted_vote([])


# ---------------------------------------------------------------------- the generation-verification gap


def test_verifier_gap_is_accuracy_of_the_approved_minus_accuracy_of_all():
    # approved: samples 0, 1 (both correct) -> 1.0; all: 3 of 4 correct -> 0.75
    assert verifier_gap([True, True, False, False], [True, True, False, True]) == pytest.approx(0.25)
    # approves only the wrong one: 0/1 - 3/4; an unparsed verdict (None) approves nothing
    assert verifier_gap([True, None, False, False], [False, True, True, True]) == pytest.approx(-0.75)
    # a verifier that approves everything gains nothing; one that approves nothing neither
    assert verifier_gap([True] * 3, [True, False, False]) == pytest.approx(0.0)
    assert verifier_gap([False, None], [True, False]) == 0.0
    assert verifier_gap([], []) == 0.0
    with pytest.raises(ValueError):
        verifier_gap([True], [True, False])


def test_majority_gap_is_maj_at_g_minus_the_samples_accuracy():
    answers = ["5", "5", "3", "5",   # majority 5, correct
               "2", "7", "7", "2"]   # a 2-2 tie goes to the answer seen first: 2, wrong
    correct = [1, 1, 0, 1, 0, 1, 1, 0]
    # maj@4 = (1 + 0) / 2 = 0.5; sampled accuracy = 5/8
    assert majority_gap(answers, correct, 4) == pytest.approx(0.5 - 0.625)
    # a group without any answer votes wrong; answers equal by the task's rule vote together
    assert majority_gap([None, None, "0.5", "1/2"], [0, 0, 1, 1], 2,
                        equal=lambda a, b: Fraction(a) == Fraction(b)) == pytest.approx(0.5 - 0.5)
    assert majority_gap(["1", "1", "2"], [True, True, False], 3) == pytest.approx(1.0 - 2 / 3)
    with pytest.raises(ValueError):
        majority_gap(["1", "2", "3"], [1, 0, 0], 2)


def test_expected_best_of_n_by_hand():
    """k = 4 samples scored 3, 2, 2, 1, correct 0, 1, 0, 1.
    n = 1: a random pick, mean correctness 2/4 = 0.5.
    n = 2: C(4, 2) = 6 subsets; the top sample (wrong) is picked in the 3 that hold it; the tied block
    (ranks 2-3, mean 0.5) in C(3, 2) − C(1, 2) = 3 − 0 = 3 subsets of the rest: 3/6 · 0 + 3/6 · 0.5 =
    0.25; the bottom never.
    n = 4: always the top sample: 0. A verifier that ranks the right ones first: 1 from n = 2 on."""
    from cotrain.eval.verifier_metrics import best_of_n_curve, expected_best_of_n

    scores, correct = [3.0, 2.0, 2.0, 1.0], [0, 1, 0, 1]
    assert expected_best_of_n(scores, correct, 1) == pytest.approx(0.5)
    assert expected_best_of_n(scores, correct, 2) == pytest.approx(0.25)
    assert expected_best_of_n(scores, correct, 4) == pytest.approx(0.0)
    good = [1.0, 0.0, 1.0, 0.0]
    assert [expected_best_of_n(good, [1, 0, 1, 0], n) for n in (1, 2, 3)] == pytest.approx([0.5, 5 / 6, 1.0])
    # n = 2 with the good verifier: 6 subsets, only {the two wrong} (1 of 6) picks wrong -> 5/6
    # all scores equal: a random pick at every n
    assert expected_best_of_n([0.0] * 4, [1, 0, 0, 0], 3) == pytest.approx(0.25)
    assert best_of_n_curve([(scores, correct), ([1.0], [1])], [1, 2]) == {1: pytest.approx(0.75), 2: pytest.approx(0.25)}


# ----------------------------------------------------------------------------- step_verdict_metrics


def test_step_verdict_metrics_by_hand():
    """Three solutions; the third's verdicts are missing (left out: usable 2/3).
    Right steps: s0 step 0 and s1 step 0, both approved: approve_right 2/2.
    False steps: s0 step 1 ("step", rejected), s0 step 2 ("operand", approved), s1 step 1 ("operand", approved):
    catch_false 1/3, catch/step 1/1, catch/operand 0/2.
    First false step: s0's is 1, the verifier's first rejection 1 (agree); s1's is 1, the verifier rejects
    none (disagree): first_false_agree 1/2."""
    verdicts = [[True, False, True], [True, True], None]
    labels = [[True, False, False], [True, False], [True]]
    kinds = [[None, "step", "operand"], [None, "operand"], [None]]
    assert step_verdict_metrics(verdicts, labels, kinds) == pytest.approx(
        {"usable": 2 / 3, "approve_right": 1.0, "catch_false": 1 / 3, "catch/operand": 0.0, "catch/step": 1.0,
         "first_false_agree": 0.5})
    # without kinds every false step is a "step" fault; a count mismatch is not usable; no false step, no rates
    assert step_verdict_metrics([[True, False]], [[True, False]]) == pytest.approx(
        {"usable": 1.0, "approve_right": 1.0, "catch_false": 1.0, "catch/step": 1.0, "first_false_agree": 1.0})
    assert step_verdict_metrics([[True]], [[True, True]]) == {"usable": 0.0}
    assert step_verdict_metrics([], []) == {}
    with pytest.raises(ValueError):
        step_verdict_metrics([[True]], [])


def test_strict_verdict_worked_by_hand():
    """Four verifications of two correct and two wrong solutions. Final verdicts: approve, approve,
    approve, reject: TPR 2/2, TNR 1/2, balanced accuracy 0.75. Strict (a rejected step overrules): the
    second correct one has a rejected step (rejected), the first wrong one too (rejected): TPR 1/2,
    TNR 2/2, balanced accuracy 0.75, approve rate 1/4. An unparsed final verdict stays unparsed."""
    from cotrain.eval.verifier_eval import strict_metrics, strict_verdict
    from cotrain.roles.verifier import Verification

    parsed = [Verification(steps=[True, True], final=True), Verification(steps=[True, False], final=True),
              Verification(steps=[False], final=True), Verification(steps=[True], final=False)]
    assert [strict_verdict(v) for v in parsed] == [True, False, False, False]
    assert strict_verdict(Verification(steps=[True], final=None)) is None
    assert strict_verdict(Verification(steps=[], final=True)) is True
    assert strict_metrics(parsed, [True, True, False, False]) == {"strict/balanced_accuracy": 0.75,
                                                                  "strict/approve_rate": 0.25}


def test_whole_verdict_errors_by_hand():
    """Six verified samples and one the oracle judged: right ones rejected with the taught line (a step
    rejected too, the task's false step under it: a right answer reached through a false step), a line that says fewer steps shown, no final line, a line that stops short; a wrong one
    approved with another answer copied; one wrong sample rejected and the oracle's record are no errors
    counted. The final line's parts are named by their first word; a part that starts with a number takes
    the name before it."""
    from cotrain.eval.verifier_metrics import final_note_parts, sound_balanced_accuracy, whole_verdict_errors

    assert final_note_parts("Step 1: CORRECT\nFinal: needs 2, shows 2; story 7 + 5 is 12, 12 - 4 is 8; answer 8 CORRECT") == [
        ("needs", "needs 2"), ("shows", "shows 2"), ("story", "story 7 + 5 is 12"), ("story", "12 - 4 is 8"),
        ("answer", "answer 8")]
    assert final_note_parts("#12 ok") == [("note", "12")] and final_note_parts("Step 1: ok") is None
    taught = "Final: needs 2, shows 2; story 7 + 5 is 12, 12 - 4 is 8; answer 8 CORRECT"
    records = [
        {"correct": True, "final": False, "steps": [True, False], "reference": taught, "faults": [None, "operand"],
         "verification": taught.replace("CORRECT", "INCORRECT")},
        {"correct": True, "final": False, "steps": [True, True], "reference": taught, "faults": [None, None],
         "verification": "Final: needs 2, shows 1; story 7 + 5 is 12, 12 - 4 is 8; answer 8 INCORRECT"},
        {"correct": True, "final": None, "steps": [True], "reference": taught, "verification": "Step 1: CORRECT"},
        {"correct": True, "final": False, "steps": [True, True], "reference": taught,
         "verification": "Final: needs 2, shows 2; story 7 + 5 is 12 INCORRECT"},
        {"correct": False, "final": True, "steps": [True, True], "reference": taught.replace("8 CORRECT", "9 INCORRECT"),
         "verification": taught},
        {"correct": False, "final": False, "steps": [True, False], "reference": taught, "verification": taught},
        {"correct": True, "final": False, "steps": [], "reference": taught, "verification": None},
    ]
    assert whole_verdict_errors(records) == {
        "right_rejected": {"n": 4, "a step rejected": 1, "through a false step": 1, "line as taught": 1,
                           "differs at shows": 1, "no verdict": 1, "differs at length": 1},
        "wrong_approved": {"n": 1, "differs at answer": 1}, "right": {"n": 4, "through a false step": 1}}
    # counted sound: the right answers without a false step (2nd-4th), none approved; of the others (1st, 5th,
    # 6th) two rejected: (0 + 2/3) / 2
    assert sound_balanced_accuracy(records) == pytest.approx(1 / 3)
    assert sound_balanced_accuracy(records[4:]) is None  # no sound answer among them
