"""Paired differences over seeds and the plan's criteria, against numbers worked out by hand."""
import math

import pytest

from cotrain.stats import (POINTS, Paired, ceiling_share, evaluation_sd, interval, paired_difference, paired_evaluation_sd,
                           plan_criteria, seeds_needed)


def test_paired_difference_by_hand():
    """Seeds 0, 1, 2 of both arms (seed 3 only in b, left out). Differences b - a in points:
    (0.70 - 0.60, 0.64 - 0.62, 0.66 - 0.61) x 100 = 10, 2, 5; mean 17/3 = 5.6667; sample sd =
    sqrt(((4.3333)^2 + (3.6667)^2 + (0.6667)^2) / 2) = sqrt(16.3333) = 4.0415; t(0.975, 2) = 4.303;
    half-width 4.303 x 4.0415 / sqrt(3) = 10.0403."""
    a = {0: 0.60, 1: 0.62, 2: 0.61}
    b = {0: 0.70, 1: 0.64, 2: 0.66, 3: 0.99}
    d = paired_difference(a, b, scale=POINTS)
    assert d.n == 3 and d.seeds == (0, 1, 2)
    assert d.mean == pytest.approx(5.666667, abs=1e-5)
    assert d.hi - d.mean == pytest.approx(10.0403, abs=1e-3)
    assert d.mean - d.lo == pytest.approx(10.0403, abs=1e-3)
    assert d.text() == "+5.7 [-4.4, +15.7] (n=3)"


def test_pairing_removes_the_noise_the_seeds_share():
    """Both arms move together across seeds (0.5, 0.7, 0.6 and each + 0.03): unpaired intervals would
    overlap widely, the paired difference is exactly 3 points with no spread."""
    a = {0: 0.5, 1: 0.7, 2: 0.6}
    d = paired_difference(a, {s: v + 0.03 for s, v in a.items()}, scale=POINTS)
    assert d.mean == pytest.approx(3.0) and d.lo == pytest.approx(3.0) and d.hi == pytest.approx(3.0)


def test_one_seed_has_no_interval_and_no_shared_seed_is_an_error():
    d = paired_difference({0: 0.5}, {0: 0.6, 1: 0.7})
    assert d.n == 1 and math.isnan(d.lo) and d.text() == "+0.1 (n=1)"
    with pytest.raises(ValueError, match="share no seed"):
        paired_difference({0: 0.5}, {1: 0.6})


def test_ceiling_share_by_hand():
    """Leads over the base in points, seeds 0-2 (seed 3 only in the arm, left out): the arm's a = 2, 1, 3,
    the ceiling's b = 4, 2, 3. Means 2 and 3: share 2/3. Sample (co)variances: s_aa = (0 + 1 + 1)/2 = 1,
    s_bb = (1 + 1 + 0)/2 = 1, s_ab = (0 + 1 + 0)/2 = 0.5, over n = 3: v_aa = v_bb = 1/3, v_ab = 1/6;
    t(0.975, 2)^2 = 4.303^2 = 18.5158. Fieller: A = 9 - 18.5158/3 = 2.82806, B = 6 - 18.5158/6 = 2.91403,
    C = 4 - 18.5158/3 = -2.17194; roots (B -+ sqrt(B^2 - A C)) / A = (2.91403 -+ 3.82544) / 2.82806 =
    -0.3223 and 2.3831."""
    base = {0: 0.10, 1: 0.20, 2: 0.30}
    arm = {0: 0.12, 1: 0.21, 2: 0.33, 3: 0.9}
    ceiling = {0: 0.14, 1: 0.22, 2: 0.33}
    s = ceiling_share(base, arm, ceiling)
    assert s.n == 3 and s.seeds == (0, 1, 2)
    assert s.mean == pytest.approx(2 / 3)
    assert s.lo == pytest.approx(-0.3223, abs=1e-4) and s.hi == pytest.approx(2.3831, abs=1e-4)
    assert s.text() == "0.67 [-0.32, 2.38] (n=3)"
    # the interval holds the share: an arm level with its ceiling on every seed captures all of it
    whole = ceiling_share(base, ceiling, ceiling)
    assert whole.mean == pytest.approx(1.0) and whole.lo <= 1.0 <= whole.hi


def test_ceiling_share_unbounded_where_the_ceiling_leads_by_nothing_sure():
    """Ceiling leads 1, -1, 3 points: mean 1, s_bb = (0 + 4 + 4)/2 = 4, t^2 v_bb = 18.5158 x 4/3 = 24.7 > 1:
    the ceiling's lead is not told from zero and the interval is unbounded; one seed has none; no shared seed
    is an error."""
    base = {0: 0.10, 1: 0.20, 2: 0.30}
    s = ceiling_share(base, {0: 0.11, 1: 0.21, 2: 0.31}, {0: 0.11, 1: 0.19, 2: 0.33})
    assert s.mean == pytest.approx(1.0) and math.isinf(s.lo) and math.isinf(s.hi)
    assert "unbounded" in s.text()
    one = ceiling_share({0: 0.1}, {0: 0.2}, {0: 0.3})
    assert one.mean == pytest.approx(0.5) and math.isnan(one.lo) and one.text() == "0.50 (n=1)"
    with pytest.raises(ValueError, match="share no seed"):
        ceiling_share({0: 0.1}, {1: 0.2}, {0: 0.3})


def test_the_seeds_an_interval_needs_by_hand():
    """Differences that spread by sd 5: t(n - 1) x 5 / sqrt(n) is 12.706 x 5 / 1.414 = 44.92 on 2 seeds,
    4.303 x 5 / 1.732 = 12.42 on 3, 2.571 x 5 / 2.449 = 5.25 on 6 and 2.447 x 5 / 2.646 = 4.62 on 7, so ±5
    needs 7 seeds; ±2 needs the n where 5 t / sqrt(n) first reaches 2: 2.064 x 5 / 5 = 2.064 on 25, 2.060 x 5 /
    5.099 = 2.020 on 26, 2.056 x 5 / 5.196 = 1.978 on 27. Past 31 seeds t is the normal's 1.96: sd 20 and ±2
    need 1.96 x 20 / sqrt(n) <= 2, n >= 384.2, so 385. No spread needs two seeds; unknown spread, no answer."""
    assert interval(5, 2) == pytest.approx(44.92, abs=0.01) and interval(5, 3) == pytest.approx(12.42, abs=0.01)
    assert seeds_needed(5, 5) == 7 and seeds_needed(5, 2) == 27
    assert seeds_needed(20, 2) == 385 and seeds_needed(20, 2, most=384) is None
    assert seeds_needed(0, 2) == 2 and seeds_needed(math.nan, 2) is None
    with pytest.raises(ValueError, match="positive"):
        seeds_needed(5, 0)


def test_the_evaluations_own_spread_by_hand():
    """Two models near 0.2 on the same 200 problems, their errors unrelated: sqrt(2 x 0.2 x 0.8 / 200) =
    sqrt(0.0016) = 0.04, four points; no problems, no figure."""
    assert evaluation_sd(0.2, 200) == pytest.approx(0.04) and math.isnan(evaluation_sd(0.2, 0))


def test_a_ceiling_below_the_base_has_no_share_to_give():
    """The arm 18.5 points behind the base, its ceiling 9.5 behind: the ratio 18.5 / 9.5 = 1.95 would read as
    more than the whole ceiling; the text says the ceiling trails instead, with one seed or several (leads
    -10, -9 and -20, -17: b̄ = -9.5)."""
    one = ceiling_share({0: 0.325}, {0: 0.140}, {0: 0.230})
    assert one.mean == pytest.approx(18.5 / 9.5) and one.ceiling_lead == pytest.approx(-0.095)
    assert one.text() == "– (the ceiling trails the base: no lead to share) (n=1)"
    two = ceiling_share({0: 0.3, 1: 0.3}, {0: 0.1, 1: 0.13}, {0: 0.2, 1: 0.21})
    assert two.ceiling_lead == pytest.approx(-0.095) and two.text().startswith("– (the ceiling trails")


def _p(mean, lo, hi, n=3):
    return Paired(mean, lo, hi, n, tuple(range(n)))


@pytest.mark.parametrize("test, ood, gain, vs_tango, expected", [
    # matches GRPO within 2 points, no more: minimum only
    (_p(0.5, -1.9, 2.9), _p(0.2, -1.0, 1.4), None, None, [True, False, False, None]),
    # lower bound below -2: not even minimum
    (_p(0.5, -2.1, 3.1), None, None, None, [False, False, None, None]),
    # +6 with lower bound 1: good; ood lower bound 0.0 is not > 0: not great
    (_p(6.0, 1.0, 11.0), _p(1.0, 0.0, 2.0), None, None, [True, True, False, None]),
    # +5 exactly with lower bound 0.0: good needs lower bound > 0
    (_p(5.0, 0.0, 10.0), _p(1.0, 0.1, 2.0), None, None, [True, False, True, None]),
    # label-free gain [1, 5] excludes 0 and is 2.5 below tango at worst: excellent
    (_p(6.0, 1.0, 11.0), _p(1.0, 0.1, 2.0), _p(3.0, 1.0, 5.0), _p(-1.0, -2.5, 0.5), [True, True, True, True]),
    # the gain's interval holds 0: not excellent
    (_p(6.0, 1.0, 11.0), None, _p(3.0, -1.0, 7.0), _p(-1.0, -2.5, 0.5), [True, True, None, False]),
    # far below tango: not excellent
    (_p(6.0, 1.0, 11.0), None, _p(3.0, 1.0, 5.0), _p(-5.0, -8.0, -2.0), [True, True, None, False]),
    # one seed: nothing can be said
    (_p(6.0, math.nan, math.nan, 1), _p(1.0, math.nan, math.nan, 1), None, None, [None, None, None, None]),
])
def test_plan_criteria(test, ood, gain, vs_tango, expected):
    got = plan_criteria(test, ood, gain, vs_tango)
    assert [c.name for c in got] == ["minimum", "good", "great", "excellent"]
    assert [c.holds for c in got] == expected


def test_the_difference_of_two_accuracies_on_the_same_problems_by_hand():
    """0.15 and 0.17 over 500 problems: +0.02, half-width 1.96 x sqrt((0.15 x 0.85 + 0.17 x 0.83) / 500)
    = 1.96 x sqrt(0.2686 / 500) = 1.96 x 0.023178 = 0.04543; no problems, no interval."""
    from cotrain.stats import difference_ci95

    d, lo, hi = difference_ci95(0.15, 0.17, 500)
    assert d == pytest.approx(0.02) and lo == pytest.approx(0.02 - 0.045429, abs=1e-5)
    assert hi == pytest.approx(0.02 + 0.045429, abs=1e-5)
    assert math.isnan(difference_ci95(0.1, 0.2, 0)[1])


def test_the_evaluations_spread_read_problem_by_problem_by_hand():
    """Two runs right on 1100 and 1010: per-problem differences 0, -1, +1, 0, mean 0, sample variance 2/3, over
    4 problems sqrt(2/3 / 4) = 0.4082 (above the bound sqrt(2 x 0.25 / 4) = 0.3536 for unrelated errors: these
    two fail opposite problems). 1110 and 1111: differences 0, 0, 0, 1, mean 0.25, sample variance (3 x 0.0625 +
    0.5625) / 3 = 0.25, sqrt(0.25 / 4) = 0.25. Identical outcomes: 0."""
    assert paired_evaluation_sd("1100", "1010") == pytest.approx(0.408248, abs=1e-6)
    assert evaluation_sd(0.5, 4) == pytest.approx(0.353553, abs=1e-6)
    assert paired_evaluation_sd("1110", "1111") == pytest.approx(0.25)
    assert paired_evaluation_sd("0110", "0110") == 0.0
    assert math.isnan(paired_evaluation_sd("1", "0"))  # one problem says nothing of a spread
    with pytest.raises(ValueError, match="3 and 4 problems"):
        paired_evaluation_sd("110", "1100")
