"""The verifier role's strings: prompts, targets and the parser (a table, then fuzzing)."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cotrain.roles.verifier import (
    PLAIN_MARK,
    chat_messages,
    flip_equation,
    parse,
    plain_prompt,
    reference_verification,
    render,
    split_steps,
)
from cotrain.tasks.arith import ArithTask, step_rationales

PARSE_TABLE = [
    # text, n_steps, steps, final, format
    ("12+34=46 46 ok\n46-5=41 42 no\n#no", 2, [True, False], False, 1.0),        # the tiny format
    ("Step 1: fine. CORRECT\nStep 2: 46-5 is 41. INCORRECT\nFinal: INCORRECT", 2, [True, False], False, 1.0),  # chat
    ("Step 1: **Correct**\nFinal verdict: correct.", 1, [True], True, 1.0),      # case and punctuation ignored
    ("12+34=46 46 ok\n#ok", 2, [True], True, 0.5),                               # one step verdict missing
    ("12+34=46 46 ok\n46-5=41 41 ok", 2, [True, True], None, 0.5),               # no final verdict
    ("#ok\n12+34=46 46 no", 1, [], True, 0.5),                                   # reading stops at the final verdict
    ("46-5=41 41\nnothing here\n", 1, [], None, 0.0),                            # no verdict word at all
    ("", 0, [], None, 0.5),                                                      # zero steps expected, zero found
    ("ok\nno\nok\n#ok", None, [True, False, True], True, 1.0),                   # n_steps unknown: any step verdict
    ("okay\nnot\n#yes", 1, [], None, 0.0),                                       # near-miss words are not verdicts
]


@pytest.mark.parametrize("text,n_steps,steps,final,fmt", PARSE_TABLE)
def test_parse_table(text, n_steps, steps, final, fmt):
    v = parse(text, n_steps)
    assert (v.steps, v.final, v.format) == (steps, final, fmt)


@given(st.text(max_size=300), st.one_of(st.none(), st.integers(0, 5)))
@settings(max_examples=300, deadline=None)
def test_parse_never_raises(text, n_steps):
    v = parse(text, n_steps)
    assert 0.0 <= v.format <= 1.0 and v.final in (True, False, None)


def test_parse_non_string():
    assert parse(None).final is None  # type: ignore[arg-type]


def test_render_round_trips_through_parse():
    for chat in (False, True):
        text = render(["a=1 1", "b=2 3"], [True, False], False, chat=chat)
        v = parse(text, 2)
        assert (v.steps, v.final, v.format) == ([True, False], False, 1.0)


def test_split_steps_and_prompts():
    completion = "12+34=46\n\n46-5=41\n#41\ntrailing"
    assert split_steps(completion) == [(0, "12+34=46"), (2, "46-5=41")]
    shown = "46=12+34\n\n41=46-5\n#41\ntrailing"  # equations flipped: the claimed result comes first
    assert plain_prompt("12+34-5", completion + "\n") == f"12+34-5\n{shown}\n{PLAIN_MARK}\n"
    assert flip_equation("a=b=c") == "a=b=c" and flip_equation("#41") == "#41"
    content = chat_messages("12+34-5", completion)[0]["content"]
    assert "Step 1: 12+34=46\nStep 2: 46-5=41\nAnswer: #41" in content


def test_step_rationales():
    """Each step recomputed from the previous *claimed* result, then (recomputed - claimed)."""
    assert step_rationales("12+34-5", ["12+34=47", "47-5=42"]) == ["12+34=46 46-47=-1", "47-5=42 42-42=0"]
    assert step_rationales("12+34-5", ["junk", "46-5=41", "1+1=2"]) == ["12+34=46 ?", "46-5=41 41-41=0", "?"]
    assert step_rationales("3-49+5", ["3-49=-46", "-46+5=-40"]) == ["3-49=-46 -46+46=0", "-46+5=-41 -41+40=-1"]
    assert step_rationales("not a question", ["1+1=2"]) == ["?"]


def test_reference_verification_labels_injected_errors():
    task = ArithTask()
    rng = random.Random(0)
    for p in task.problems("train", 50, seed=3):
        k = rng.randrange(len(p.steps))
        _, wrong = task.corrupt(p, k, rng)
        v = parse(reference_verification(task, p, wrong), len(p.steps))
        assert v.final is False and v.steps.index(False) == k and v.format == 1.0
        v = parse(reference_verification(task, p, p.solution), len(p.steps))
        assert v.final is True and all(v.steps)


def test_corrupt_several_steps():
    """Steps 0 and 2 wrong, each computed from the previous stated result; step 1 right from step 0's claim."""
    task = ArithTask()
    rng = random.Random(1)
    for p in task.problems("train", 30, seed=5):
        if len(p.steps) < 3:
            continue
        steps, _ = task.corrupt(p, [0, 2], rng)
        assert task.step_labels(p, steps)[:3] == [False, True, False]
    with pytest.raises(ValueError):
        task.corrupt(p, [], rng)


# ----------------------------------------------------------------------------- pairwise judgments

@pytest.mark.parametrize("text,preference", [
    ("12+34=46 46 ok\n#ok\n12+34=46 47 no\n#no\n>a", 1),
    ("#no\n#ok\n>b", -1),
    ("#ok\n#ok\n>=", 0),
    ("Solution A:\nFinal: CORRECT\nSolution B:\nFinal: INCORRECT\nPreferred: A", 1),
    ("Preferred: **B**.", -1),
    ("Preferred: same", 0),
    ("#ok\n#no", None),          # no preference line
    (">c", None),                # a line that names neither
    ("", None),
])
def test_parse_preference_table(text, preference):
    from cotrain.roles.verifier import parse_preference

    assert parse_preference(text) == preference


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_parse_preference_never_raises(text):
    from cotrain.roles.verifier import parse_preference

    assert parse_preference(text) in (1, -1, 0, None)


def test_pair_prompt_and_reference_pair_by_hand():
    """Problem 12+34-5 (46, then 41); the reference and a copy whose second step claims 42 (wrong). The
    pair prompt shows both with equations flipped around the separator; the target checks each, then
    prefers the right one: 'a' when it is first, 'b' when second, '=' for two right ones."""
    from cotrain.roles.verifier import PAIR_MARK, PAIR_SEPARATOR, pair_plain_prompt, parse_preference, reference_pair

    task = ArithTask()
    from cotrain.tasks.base import Problem

    p = Problem(question="12+34-5", answer="41", steps=("12+34=46", "46-5=41"), solution="12+34=46\n46-5=41\n#41")
    wrong = "12+34=46\n46-5=42\n#42"
    assert pair_plain_prompt(p.question, p.solution, wrong) == \
        f"12+34-5\n46=12+34\n41=46-5\n#41\n{PAIR_SEPARATOR}\n46=12+34\n42=46-5\n#42\n{PAIR_MARK}\n"
    first = reference_pair(task, p, p.solution, wrong)
    assert first == (reference_verification(task, p, p.solution) + "\n" + reference_verification(task, p, wrong)
                     + "\n>a")
    assert parse_preference(first) == 1
    assert parse_preference(reference_pair(task, p, wrong, p.solution)) == -1
    assert parse_preference(reference_pair(task, p, p.solution, p.solution)) == 0
    chat = reference_pair(task, p, wrong, p.solution, chat=True)
    assert chat.startswith("Solution A:\nStep 1:") and chat.endswith("Preferred: B") and parse_preference(chat) == -1
