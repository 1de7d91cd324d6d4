"""Intervals over seeds, paired differences between arms, and the experiment plan's success criteria read off them.

Two arms run with the same seeds share everything a seed decides (prompt order, sampling seeds) and
start from the same checkpoint, so their difference is read seed by seed: the paired difference's
confidence interval is narrower than the two arms' intervals side by side whenever the seeds' noise is
shared. Every study of the lab compares arms with `paired_difference` and states the plan's criteria
with `plan_criteria` (docs/design.md, "Success criteria").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# Two-sided 95% intervals: the 97.5% quantile of Student's t for df = 1..30; beyond 30, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


Z975 = 1.959964
"""The normal's 97.5% quantile: a two-sided 95% interval over the problems of one evaluation."""


def _t975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (df ≥ 1)."""
    return T975[df - 1] if df <= len(T975) else 1.96


def interval(sd: float, n: int) -> float:
    """The half-width of a paired 95% interval over n ≥ 2 seeds whose differences spread by sd: t(n − 1) · sd / √n."""
    return _t975(n - 1) * sd / math.sqrt(n)


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its two-sided 95% confidence interval (Student's t, sample std).

    Returns (nan, nan) for no values and (mean, nan) for one: a single seed says nothing about spread.
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, interval(sd, n)


POINTS = 100.0
"""Criteria are stated in points of pass@1 (0.01 of accuracy)."""


@dataclass(frozen=True)
class Paired:
    """The mean of b's runs minus a's, seed by seed, with its two-sided 95% interval (Student's t over
    the seeds' differences); `lo`/`hi` are nan with fewer than two seeds."""

    mean: float
    lo: float
    hi: float
    n: int
    seeds: tuple[int, ...]

    def text(self, digits: int = 1) -> str:
        """"+3.1 [+0.4, +5.8] (n=3)"; the interval is left out when it is unknown."""
        ci = "" if math.isnan(self.lo) else f" [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]"
        return f"{self.mean:+.{digits}f}{ci} (n={self.n})"


def paired_difference(a: dict[int, float], b: dict[int, float], scale: float = 1.0) -> Paired:
    """b − a over the seeds both arms ran, times `scale` (POINTS for points of accuracy).

    Args:
        a, b: {seed: value} of the two arms (e.g. final greedy pass@1); seeds only one arm ran are left out.
        scale: multiplies every difference.

    Raises:
        ValueError: the arms share no seed.
    """
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError(f"the two arms share no seed (a: {sorted(a)}, b: {sorted(b)})")
    diffs = [scale * (b[s] - a[s]) for s in seeds]
    mean, half = mean_ci95(diffs)
    return Paired(mean, mean - half, mean + half, len(seeds), seeds)


@dataclass(frozen=True)
class Share(Paired):
    """The share of its ceiling an arm captures, (arm − base) / (ceiling − base) over paired seeds, with its
    two-sided 95% interval by Fieller's method (a `Paired`'s fields, read as a ratio); `lo`/`hi` are
    −inf/+inf where the ceiling's lead over the base cannot be told from zero at that level (the interval is
    then unbounded), nan with fewer than two seeds; `mean` is nan where the ceiling's mean lead is exactly zero.
    `ceiling_lead` is that mean lead (b̄ below): where it is negative the ceiling trails the base and the ratio
    is no share of anything (an arm further behind than its ceiling would read as more than all of it)."""

    ceiling_lead: float = math.nan

    def text(self, digits: int = 2) -> str:
        """"0.67 [-0.32, 2.38] (n=3)", or "... unbounded" where the ceiling's lead is not told from zero; "–"
        with the reason where the ceiling's mean lead is zero or negative."""
        if math.isnan(self.mean):
            return f"– (the ceiling's mean lead is 0) (n={self.n})"
        if self.ceiling_lead < 0:
            return f"– (the ceiling trails the base: no lead to share) (n={self.n})"
        ci = ("" if math.isnan(self.lo) else " [unbounded: the ceiling's lead is not told from 0]"
              if math.isinf(self.lo) else f" [{self.lo:.{digits}f}, {self.hi:.{digits}f}]")
        return f"{self.mean:.{digits}f}{ci} (n={self.n})"


def ceiling_share(base: dict[int, float], arm: dict[int, float], ceiling: dict[int, float]) -> Share:
    """(arm − base) / (ceiling − base), the ratio of the two paired mean leads over the seeds all three ran,
    with Fieller's 95% interval for a ratio of correlated means: the θ where the mean of a − θ·b is within
    Student's t of zero, a_i = arm_i − base_i and b_i = ceiling_i − base_i. With v the covariances of the
    means (sample covariances / n) and t the 97.5% quantile of t with n − 1 df, those θ solve
    (b̄² − t²v_bb) θ² − 2 (ā b̄ − t²v_ab) θ + (ā² − t²v_aa) ≤ 0: an interval when b̄² > t²v_bb (the
    ceiling's lead differs from zero at 95%), unbounded otherwise.

    Raises:
        ValueError: the three arms share no seed.
    """
    seeds = tuple(sorted(set(base) & set(arm) & set(ceiling)))
    if not seeds:
        raise ValueError(f"the three arms share no seed (base: {sorted(base)}, arm: {sorted(arm)}, "
                         f"ceiling: {sorted(ceiling)})")
    n = len(seeds)
    a = [arm[s] - base[s] for s in seeds]
    b = [ceiling[s] - base[s] for s in seeds]
    a_bar, b_bar = sum(a) / n, sum(b) / n
    mean = a_bar / b_bar if b_bar != 0 else math.nan
    if n < 2:
        return Share(mean, math.nan, math.nan, n, seeds, b_bar)
    t2 = _t975(n - 1) ** 2
    v_aa = sum((x - a_bar) ** 2 for x in a) / (n - 1) / n
    v_bb = sum((y - b_bar) ** 2 for y in b) / (n - 1) / n
    v_ab = sum((x - a_bar) * (y - b_bar) for x, y in zip(a, b)) / (n - 1) / n
    quad, half_lin, const = b_bar ** 2 - t2 * v_bb, a_bar * b_bar - t2 * v_ab, a_bar ** 2 - t2 * v_aa
    if quad <= 0:
        return Share(mean, -math.inf, math.inf, n, seeds, b_bar)
    root = math.sqrt(max(half_lin ** 2 - quad * const, 0.0))  # >= 0: the quadratic is <= 0 at θ = ā / b̄
    return Share(mean, (half_lin - root) / quad, (half_lin + root) / quad, n, seeds, b_bar)


@dataclass(frozen=True)
class Criterion:
    """One criterion of the plan: whether it holds (None: too few seeds to say) and the figures behind it."""

    name: str
    holds: bool | None
    rule: str
    figures: str


def seeds_needed(sd: float, half_width: float, most: int = 10_000) -> int | None:
    """The fewest seeds n (≥ 2) whose paired 95% interval, t(n − 1) · sd / √n, is at most `half_width`, for
    seed-by-seed differences that spread by `sd`; None if more than `most` would be needed or sd is unknown.

    Raises:
        ValueError: half_width is not positive.
    """
    if not half_width > 0:
        raise ValueError(f"an interval's half-width must be positive, not {half_width}")
    if math.isnan(sd):
        return None
    return next((n for n in range(2, most + 1) if interval(sd, n) <= half_width), None)


def evaluation_sd(p: float, n: int) -> float:
    """The standard deviation of the difference of two accuracies near p measured on the same n problems when
    the two models' errors on a problem are unrelated, sqrt(2 p (1 − p) / n): how far the evaluation's own draw
    of problems moves a seed's paired difference. Models that fail the same problems move it less, so it is
    an upper bound on that part. nan for n ≤ 0."""
    return math.sqrt(2 * p * (1 - p) / n) if n > 0 else math.nan


def paired_evaluation_sd(a: str, b: str) -> float:
    """The standard deviation of the difference of two runs' accuracies that the draw of problems makes, read
    problem by problem from their outcomes on the same problems in the same order ("1" right, "0" not): the
    sample sd of the per-problem differences over √n. Where both runs fail and pass the same problems it is
    below `evaluation_sd`'s bound. nan for fewer than two problems.

    Raises:
        ValueError: the two hold different numbers of problems.
    """
    if len(a) != len(b):
        raise ValueError(f"outcomes of {len(a)} and {len(b)} problems cannot be paired problem by problem")
    n = len(a)
    if n < 2:
        return math.nan
    d = [int(y) - int(x) for x, y in zip(a, b)]
    mean = sum(d) / n
    return math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1) / n)


def difference_ci95(p_a: float, p_b: float, n: int) -> tuple[float, float, float]:
    """p_b − p_a of two accuracies over the same n problems, with a two-sided 95% interval that treats the
    two as independent (normal approximation: sqrt(p_a(1-p_a)/n + p_b(1-p_b)/n) x 1.96), which is wider
    than the paired one the per-problem outcomes would give. One seed's interval: it says nothing of how
    another seed would land. Returns (difference, lo, hi); nan bounds for n = 0."""
    d = p_b - p_a
    if n <= 0:
        return d, math.nan, math.nan
    half = Z975 * math.sqrt((p_a * (1 - p_a) + p_b * (1 - p_b)) / n)
    return d, d - half, d + half


def _holds(*conditions: float) -> bool | None:
    # conditions are the interval bounds a rule reads; a nan bound means fewer than two seeds
    return None if any(math.isnan(c) for c in conditions) else True


def plan_criteria(test: Paired, ood: Paired | None = None, labelfree_gain: Paired | None = None,
                  labelfree_vs_tango: Paired | None = None, arm: str = "the arm") -> list[Criterion]:
    """The plan's four criteria (docs/experiment_plan.md), in points of greedy pass@1:

    minimum    the paired (tango − grpo) `test` lower bound is ≥ −2;
    good       its mean is ≥ +5 and its lower bound > 0;
    great      the paired (tango − grpo) `ood` lower bound is > 0;
    excellent  the label-free gain over the start has an interval that excludes 0, and the paired
               (label-free − tango) lower bound is ≥ −3.

    Args:
        test: paired (tango − grpo) on `test`, in points.
        ood: the same on `ood`.
        labelfree_gain: paired (label-free − start), in points (the start as an arm of equal values).
        labelfree_vs_tango: paired (label-free − tango), in points.
        arm: the co-training arm the figures read, as the excellent criterion names it (the plan reads tango).

    Returns:
        The four criteria in order; a criterion whose figures are missing or rest on one seed has holds=None.
    """
    out = []
    known = _holds(test.lo)
    out.append(Criterion("minimum", known and test.lo >= -2, "paired test lower bound >= -2", test.text()))
    out.append(Criterion("good", known and test.mean >= 5 and test.lo > 0,
                         "paired test mean >= +5 and lower bound > 0", test.text()))
    if ood is None:
        out.append(Criterion("great", None, "paired ood lower bound > 0", "not run"))
    else:
        known = _holds(ood.lo)
        out.append(Criterion("great", known and ood.lo > 0, "paired ood lower bound > 0", ood.text()))
    if labelfree_gain is None or labelfree_vs_tango is None:
        why = "not run" if labelfree_gain is None else f"gain {labelfree_gain.text()}, no seed of both on one machine kind"
        out.append(Criterion("excellent", None, f"label-free gain excludes 0 and paired (label-free - {arm}) "
                             "lower bound >= -3", why))
    else:
        known = _holds(labelfree_gain.lo, labelfree_vs_tango.lo)
        excludes = labelfree_gain.lo > 0 or labelfree_gain.hi < 0
        out.append(Criterion("excellent", known and excludes and labelfree_vs_tango.lo >= -3,
                             f"label-free gain excludes 0 and paired (label-free - {arm}) lower bound >= -3",
                             f"gain {labelfree_gain.text()}, vs {arm} {labelfree_vs_tango.text()}"))
    return out


def auto_criteria(test: Paired, alpha_auto: float | None, alpha_schedule: float | None) -> list[Criterion]:
    """`cotraining.alpha: auto`'s two rules, in points of greedy pass@1:

    safe    the paired (auto − grpo) `test` lower bound is ≥ −2, over at least 3 seeds;
    useful  auto's mean α over the run is at least half the paper's schedule's (the `tango` arm's).

    Returns:
        The two criteria; holds=None where there are fewer than 3 seeds or no schedule arm to read.
    """
    safe = None if test.n < 3 or math.isnan(test.lo) else test.lo >= -2
    useful = None if alpha_auto is None or not alpha_schedule else alpha_auto >= 0.5 * alpha_schedule
    figures = "no schedule arm" if useful is None else f"mean α {alpha_auto:.4f} against the schedule's {alpha_schedule:.4f}"
    return [Criterion("auto safe", safe, "paired (auto - grpo) test lower bound >= -2 over >= 3 seeds", test.text()),
            Criterion("auto useful", useful, "mean α at least half the schedule's", figures)]
