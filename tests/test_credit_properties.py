"""Two properties of every `cotraining.credit` construction, each both ways: where rl/tango.py `PROPERTIES` says a
construction holds one, no generated group breaks it (hypothesis); where it says one fails, a hand-worked group
breaks it and a seeded search over random groups finds more.

- No length bonus: appending an item (a step, approved or rejected) to a sample never raises the process
  advantage of that sample's earlier tokens, the group's normalisation statistics held at their values before the
  append (the final verdict and completeness held too; `effect_through_statistics` reports the rest).
- Right-prefix credit: in a failed sample, the tokens of its approved steps before its first rejected step (all
  its steps when none is rejected: the answer is the error) get a process advantage > 0 wherever the group holds
  a rejected item.

The groups are laid out on a grid: step k of a sample holds tokens 3k..3k+2, its answer the two tokens after its
last step.
"""
import random
import typing

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cotrain.config import CoTrainingConfig
from cotrain.rl.tango import PROPERTIES, WITH_FINAL, credit_advantages, group_statistics, process_advantages

CREDITS = typing.get_args(CoTrainingConfig.model_fields["credit"].annotation)
TOL = 1e-5


def sample(verdicts, final, complete=True, computes=None):
    return {"verdicts": list(verdicts), "final": final, "complete": complete,
            "computes": list(computes) if computes is not None else [True] * len(verdicts)}


def ends_of(s: dict, with_final: bool) -> list[int]:
    k = len(s["verdicts"])
    return [3 * j + 2 for j in range(k)] + ([3 * k + 4] if with_final else [])


def construct(credit: str, group: list[dict], length: int, stats=None):
    with_final = credit in WITH_FINAL
    return credit_advantages(credit, [s["verdicts"] for s in group], [s["final"] for s in group],
                             [s["complete"] for s in group], [ends_of(s, with_final) for s in group], len(group), length,
                             [s["computes"] for s in group], stats=stats)


def length_of(group: list[dict]) -> int:
    return 3 * max(len(s["verdicts"]) for s in group) + 8


def length_bonus(credit: str, group: list[dict], i: int, verdict: bool, held: bool = True) -> float:
    """How much appending a computing step judged `verdict` to sample i raises its earlier tokens' process
    advantage at most (<= 0: no bonus), the group's statistics held fixed (`held`) or recomputed."""
    k = len(group[i]["verdicts"])
    if k == 0:
        return 0.0                                                  # no earlier step tokens
    grown = [dict(s) for s in group]
    grown[i] = sample(group[i]["verdicts"] + [verdict], group[i]["final"], group[i]["complete"],
                      group[i]["computes"] + [True])
    length = length_of(grown)
    rewards, before = construct(credit, group, length)
    _, after = construct(credit, grown, length, stats=group_statistics(rewards, len(group)) if held else None)
    earlier = slice(0, 3 * k)                                       # the tokens of its k steps
    return float((after[i, earlier] - before[i, earlier]).max())


def effect_through_statistics(credit: str, group: list[dict], i: int, verdict: bool) -> float:
    """The same append with the statistics recomputed: the part of the change that comes through them."""
    k = len(group[i]["verdicts"])
    if k == 0:
        return 0.0
    grown = [dict(s) for s in group]
    grown[i] = sample(group[i]["verdicts"] + [verdict], group[i]["final"], group[i]["complete"],
                      group[i]["computes"] + [True])
    length = length_of(grown)
    rewards, _ = construct(credit, group, length)
    _, fixed = construct(credit, grown, length, stats=group_statistics(rewards, len(group)))
    _, free = construct(credit, grown, length)
    return float((free[i, :3 * k] - fixed[i, :3 * k]).abs().max())


def prefix_violations(credit: str, group: list[dict]) -> list[tuple[int, int]]:
    """(sample, step) of each approved step before a failed sample's first rejected step whose tokens do not all
    get a process advantage > 0, in a group that holds a rejected item; [] when the property holds."""
    rewards, adv = construct(credit, group, length_of(group))
    if not any(r < 0 for items in rewards if items is not None for r in items):
        return []                                                   # no rejected item: nothing to hold
    bad = []
    for i, s in enumerate(group):
        if s["final"]:
            continue
        first = next((k for k, v in enumerate(s["verdicts"]) if not v), len(s["verdicts"]))
        bad += [(i, k) for k in range(first) if not bool((adv[i, 3 * k:3 * k + 3] > 0).all())]
    return bad


samples = st.builds(lambda v, f, c, comp: sample(v, f, c, comp[:len(v)] + [True] * (len(v) - len(comp))),
                    st.lists(st.booleans(), max_size=5), st.booleans(), st.booleans(), st.lists(st.booleans(), max_size=5))
groups = st.lists(samples, min_size=2, max_size=5)


def random_group(rng: random.Random) -> list[dict]:
    return [sample([rng.random() < 0.5 for _ in range(rng.randint(0, 5))], rng.random() < 0.4, rng.random() < 0.7,
                   [rng.random() < 0.7 for _ in range(5)]) for _ in range(rng.randint(2, 5))]


def _fix_computes(group):
    for s in group:
        s["computes"] = s["computes"][:len(s["verdicts"])] + [True] * (len(s["verdicts"]) - len(s["computes"]))
    return group


def test_every_credit_declares_its_properties():
    """A construction added to `cotraining.credit` must say which properties it holds (and the tests then check it)."""
    assert set(CREDITS) == set(PROPERTIES), f"declare the properties of {set(CREDITS) ^ set(PROPERTIES)} in PROPERTIES"


@pytest.mark.parametrize("credit", [c for c in CREDITS if PROPERTIES[c][0]])
@settings(max_examples=150, deadline=None)
@given(group=groups, data=st.data())
def test_no_length_bonus_holds(credit, group, data):
    i = data.draw(st.integers(0, len(group) - 1))
    for verdict in (True, False):
        assert length_bonus(credit, group, i, verdict) <= TOL, (credit, group, i, verdict)


@pytest.mark.parametrize("credit", [c for c in CREDITS if PROPERTIES[c][1]])
@settings(max_examples=150, deadline=None)
@given(group=groups)
def test_right_prefix_credit_holds(credit, group):
    assert prefix_violations(credit, group) == [], (credit, group)


@pytest.mark.parametrize("credit", [c for c in CREDITS if not PROPERTIES[c][0]])
def test_a_random_search_finds_the_length_bonus_declared(credit):
    rng = random.Random(0)
    for _ in range(400):
        group = _fix_computes(random_group(rng))
        i = rng.randrange(len(group))
        if max(length_bonus(credit, group, i, v) for v in (True, False)) > TOL:
            return
    pytest.fail(f"{credit}: declared to pay for length, but 400 random groups show no bonus")


@pytest.mark.parametrize("credit", [c for c in CREDITS if not PROPERTIES[c][1]])
def test_a_random_search_finds_the_missing_right_prefix_credit_declared(credit):
    rng = random.Random(0)
    for _ in range(400):
        if prefix_violations(credit, _fix_computes(random_group(rng))):
            return
    pytest.fail(f"{credit}: declared to miss right-prefix credit, but 400 random groups credit every right prefix")


def test_to_go_pays_a_longer_all_false_sample_by_hand():
    """Four all-false samples, one of 5 steps and three of 3: items -1/5 (x5) and -1/3 (x9), 14 in all.
    mean = (-1 - 3)/14 = -0.285714; deviations +0.085714 (x5), -0.047619 (x9); sum of squares 0.036735 + 0.020408
    = 0.057143, /13 -> sd 0.066299. z(-1/5) = 1.29284, z(-1/3) = -0.71824. The first token of the long sample
    sums its 5 items: +6.464; of a short one, 3 items: -2.155. The longer wrong solution scores higher."""
    group = [sample([False] * 5, False)] + [sample([False] * 3, False) for _ in range(3)]
    _, adv = construct("to_go", group, 24)
    assert adv[0, 0].item() == pytest.approx(6.4642, abs=1e-3)
    assert adv[1, 0].item() == pytest.approx(-2.1547, abs=1e-3)
    # and under step no sample gains by its length: every item is -1, so all are 0 after the z-score
    _, step = construct("step", group, 24)
    assert torch.equal(step, torch.zeros_like(step))


def test_step_credit_by_hand():
    """Two samples. A: steps [ok, no], final rejected -> items [+1, -1, -1], ending on tokens 2, 5, 7.
    B: step [ok], final approved -> items [+1, +1], ending on tokens 3, 6. Pooled items [1, -1, -1, 1, 1]:
    mean 0.2, deviations 0.8 (x3) and -1.2 (x2), sum of squares 1.92 + 2.88 = 4.8, /4 = 1.2, sd 1.095445.
    z(+1) = 0.8/1.095445 = 0.730297, z(-1) = -1.2/1.095445 = -1.095445. Each item's z on its own tokens:
    A: 0-2 +0.7303 (its right prefix, credited), 3-5 -1.0954, 6-7 -1.0954, 8-9 0; B: 0-3 +0.7303, 4-6 +0.7303, 7-9 0."""
    rewards = [[1.0, -1.0, -1.0], [1.0, 1.0]]
    got = process_advantages(rewards, [[2, 5, 7], [3, 6]], group_size=2, length=10, credit="step")
    up, down = 0.730297, -1.095445
    want = torch.tensor([[up] * 3 + [down] * 3 + [down] * 2 + [0.0] * 2,
                         [up] * 4 + [up] * 3 + [0.0] * 3])
    assert torch.allclose(got, want, atol=1e-5)
    # from the verdicts, through credit_advantages: the same (the answer's end is the last item's)
    items, adv = credit_advantages("step", [[True, False], [True]], [False, True], [True, True], [[2, 5, 7], [3, 6]], 2, 10)
    assert items == rewards and torch.allclose(adv, want, atol=1e-5)


def test_step_credit_edge_cases_by_hand():
    """Items closed by one token add up there; an item past the length is clipped to the last token; a sample
    with no usable items gets nothing; a group with one item keeps it as it is (+1)."""
    got = process_advantages([[1.0, -1.0], [1.0, 1.0]], [[1, 1], [0, 3]], group_size=2, length=4, credit="step")
    # pooled [1, -1, 1, 1]: mean 0.5, sd sqrt((0.25 * 3 + 2.25) / 3) = 1.0; z(+1) = 0.5, z(-1) = -1.5
    assert torch.allclose(got[0], torch.tensor([-1.0, -1.0, 0.0, 0.0]), atol=1e-5)    # 0.5 - 1.5 on tokens 0-1
    assert torch.allclose(got[1], torch.tensor([0.5, 0.5, 0.5, 0.5]), atol=1e-5)
    assert torch.equal(process_advantages([[1.0], None], [[9], []], 2, 3, credit="step"), torch.tensor([[1.0] * 3, [0.0] * 3]))


def test_the_statistics_are_reported_apart_from_the_held_effect():
    """Under step, a growing sample's earlier tokens move only through the group's statistics: an approved step
    appended to [ok, no] (final rejected) beside [ok] (final approved) shifts the mean of the pooled items, which
    changes the earlier tokens, while with the statistics held their values are exactly as before."""
    group = [sample([True, False], False), sample([True], True)]
    assert length_bonus("step", group, 0, True) == 0.0
    assert effect_through_statistics("step", group, 0, True) > 0.01
