"""Verifier quality as pure functions: verdicts against ground truth, the generation-verification gap,
ProcessBench-style earliest-error accuracy, and the two ways a verifier is used at test time (best-of-N
and verifier-weighted voting).

Conventions: a solution is "positive" when it is correct; a verifier "approves" it when its final verdict
says CORRECT. An unparsed verdict is None: wrong for accuracy, a reject for precision/recall/F1.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np


def verdict_metrics(approved: list[bool | None], correct: list[bool], scores: list[float] | None = None) -> dict:
    """Final verdicts of a generative verifier against the ground-truth correctness of the solutions.

    Args:
        approved: per solution, True (verdict CORRECT), False (INCORRECT) or None (verdict unparsed).
        correct: per solution, its ground-truth correctness.
        scores: optional per-solution confidence that the solution is correct (higher = more likely),
            e.g. the fraction of sampled verifications that approve it. Must be finite.

    Returns:
        A dict with
        - `n`: number of solutions;
        - `accuracy`: fraction with a parsed verdict equal to the truth;
        - `balanced_accuracy`: mean of TPR (correct solutions approved) and TNR (incorrect solutions
          rejected by a parsed verdict); when one class is absent, the rate of the class present;
        - `precision`, `recall`, `f1`: positive class = correct solution approved; each is 0 when its
          denominator is 0 (sklearn's `zero_division=0`);
        - `approve_rate`: fraction approved, `base_rate`: fraction correct, `parse_rate`: fraction parsed;
        - `auroc` (only with `scores`, and only when both classes are present): the Mann–Whitney
          probability that a random correct solution scores above a random incorrect one, ties 1/2.
        For n = 0 only `{"n": 0}`. No value is ever NaN.

    Raises:
        ValueError: the lists differ in length, or a score is not finite.
    """
    n = len(approved)
    if len(correct) != n or (scores is not None and len(scores) != n):
        raise ValueError(f"approved, correct and scores must have one entry per solution; got lengths "
                         f"{n}, {len(correct)}, {'-' if scores is None else len(scores)}")
    if n == 0:
        return {"n": 0}
    approved = [None if a is None else bool(a) for a in approved]  # numpy bools would fail `is True`
    correct = [bool(c) for c in correct]
    tp = sum(a is True and c for a, c in zip(approved, correct))
    fp = sum(a is True and not c for a, c in zip(approved, correct))
    tn = sum(a is False and not c for a, c in zip(approved, correct))
    n_pos = sum(correct)
    n_neg = n - n_pos
    n_parsed = sum(a is not None for a in approved)

    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / n_pos if n_pos else 0.0
    # TNR counts only parsed rejections: an unparsed verdict on a wrong solution caught nothing.
    rates = ([recall] if n_pos else []) + ([tn / n_neg] if n_neg else [])
    out = {
        "n": n,
        "accuracy": (tp + tn) / n,
        "balanced_accuracy": sum(rates) / len(rates),
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "precision": precision,
        "recall": recall,
        "approve_rate": (tp + fp) / n,
        "base_rate": n_pos / n,
        "parse_rate": n_parsed / n,
    }
    if scores is not None:
        s = np.asarray(scores, dtype=float)  # [n]
        if not np.all(np.isfinite(s)):
            raise ValueError("verdict_metrics: every score must be finite (map an unparsed verdict to a number)")
        if n_pos and n_neg:
            out["auroc"] = mann_whitney_auroc(s, np.array(correct))
    return out


def verifier_gap(approved: list[bool | None], correct: list[bool]) -> float:
    """`gap/verifier`: the accuracy of the samples the verifier approves minus the accuracy of all samples
    (its precision minus the base rate). Positive when keeping what it approves beats keeping
    everything: the generation-verification gap a learned verifier's reward can exploit. 0 when it
    approves none (keeping nothing gains nothing) or there are no samples.

    Raises:
        ValueError: the lists differ in length.
    """
    if len(approved) != len(correct):
        raise ValueError(f"verifier_gap: {len(approved)} verdicts for {len(correct)} samples")
    kept = [bool(c) for a, c in zip(approved, correct) if a is True]
    if not kept:
        return 0.0
    return sum(kept) / len(kept) - sum(bool(c) for c in correct) / len(correct)


def mann_whitney_auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """AUROC = (R_pos − P(P+1)/2) / (P·N) with R_pos the sum of the positives' 1-based ranks, tied scores
    taking their average rank (which is what counts a tied positive/negative pair as 1/2)."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2  # [n_unique] mean 1-based rank of each tie group
    ranks = avg_rank[inverse]  # [n]
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def earliest_error_metrics(pred_first_error: list[int | None], true_first_error: list[int | None]) -> dict:
    """ProcessBench-style scoring of where a verifier says a solution first goes wrong.

    Args:
        pred_first_error: per solution, the predicted index of the first wrong step; None = "all correct".
        true_first_error: per solution, the true index of the first wrong step; None = "all correct".

    Returns:
        A dict with `n_erroneous` and `n_correct` (solutions with and without a true error), and
        - `acc_erroneous`: on solutions with an error, the fraction whose index is predicted exactly;
        - `acc_correct`: on solutions without an error, the fraction predicted None;
        - `f1`: harmonic mean of the two (0 when either is 0).
        An accuracy whose group is empty is left out, and then so is `f1`.

    Raises:
        ValueError: the lists differ in length.
    """
    if len(pred_first_error) != len(true_first_error):
        raise ValueError(f"pred_first_error and true_first_error differ in length: "
                         f"{len(pred_first_error)} vs {len(true_first_error)}")
    pairs = list(zip(pred_first_error, true_first_error))
    erroneous = [pred == true for pred, true in pairs if true is not None]
    no_error = [pred is None for pred, true in pairs if true is None]
    out: dict = {"n_erroneous": len(erroneous), "n_correct": len(no_error)}
    if erroneous:
        out["acc_erroneous"] = sum(erroneous) / len(erroneous)
    if no_error:
        out["acc_correct"] = sum(no_error) / len(no_error)
    if erroneous and no_error:
        a, b = out["acc_erroneous"], out["acc_correct"]
        out["f1"] = 2 * a * b / (a + b) if a and b else 0.0
    return out


def first_error(step_verdicts: list[bool]) -> int | None:
    """Index of the first step judged wrong (the first False); None when every step is judged correct.

    Args:
        step_verdicts: per step, True when judged correct.

    Returns:
        The 0-based index of the first False, or None (also for no steps at all).
    """
    return next((k for k, ok in enumerate(step_verdicts) if not ok), None)


def step_verdict_metrics(verdicts: list[list[bool] | None], labels: list[list[bool]],
                         kinds: list[list[str | None]] | None = None) -> dict[str, float]:
    """A verifier's step verdicts against the task's process labels, over the solutions whose verdicts are
    usable (exactly one per step; None or another count: left out).

    Args:
        verdicts: per solution, its step verdicts (True = judged right), or None.
        labels: per solution, whether each step is right (the task's process labels).
        kinds: per solution, each step's fault (None for a right step), when the task names them.

    Returns:
        `usable` (share of solutions counted); `approve_right`: share of right steps approved;
        `catch_false`: share of false steps rejected; `catch/<kind>`: the same per fault;
        `first_false_agree`: among counted solutions with a false step, the share whose first rejected step
        is the first false step. A rate whose denominator is 0 is left out.

    Raises:
        ValueError: the lists differ in length.
    """
    if len(verdicts) != len(labels) or (kinds is not None and len(kinds) != len(labels)):
        raise ValueError(f"step_verdict_metrics: {len(verdicts)} verdict lists for {len(labels)} label lists")
    right = [0, 0]                      # approved, all
    false: dict[str, list[int]] = {}    # kind -> [rejected, all]
    first = [0, 0]                      # agreeing, solutions with a false step
    used = 0
    for i, (v, lab) in enumerate(zip(verdicts, labels)):
        if v is None or len(v) != len(lab):
            continue
        used += 1
        for k, (ok, truth) in enumerate(zip(v, lab)):
            if truth:
                right[0] += bool(ok)
                right[1] += 1
            else:
                kind = (kinds[i][k] if kinds is not None else None) or "step"
                for key in ("all", kind):
                    false.setdefault(key, [0, 0])
                    false[key][0] += not ok
                    false[key][1] += 1
        if not all(lab):
            first[0] += first_error(list(v)) == first_error(list(lab))
            first[1] += 1
    out = {"usable": used / len(labels)} if labels else {}
    if right[1]:
        out["approve_right"] = right[0] / right[1]
    if "all" in false:
        out["catch_false"] = false["all"][0] / false["all"][1]
    out.update({f"catch/{kind}": c / n for kind, (c, n) in sorted(false.items()) if kind != "all"})
    if first[1]:
        out["first_false_agree"] = first[0] / first[1]
    return out


def best_of_n(groups: list[list[tuple[float, float]]]) -> float:
    """Best-of-N selection with a verifier: per problem, keep the candidate the verifier scores highest.

    Args:
        groups: one list per problem of its candidates as (verifier score, ground-truth correctness 0/1).
            Scores must be comparable (no NaN). A problem with no candidates counts as wrong.

    Returns:
        The mean correctness of the picked candidates; ties in score go to the first candidate.

    Raises:
        ValueError: no problems.
    """
    if not groups:
        raise ValueError("best_of_n needs at least one problem")
    # max() keeps the first of equal keys, which is the tie rule.
    return sum(max(group, key=lambda c: c[0])[1] if group else 0.0 for group in groups) / len(groups)


def weighted_vote(groups: list[list[tuple[str | None, float, float]]],
                  equal: Callable[[str, str], bool] | None = None) -> float:
    """Verifier-weighted majority vote: per problem, the answer with the largest total verifier score wins.

    Args:
        groups: one list per problem of its candidates as (extracted answer or None, verifier score,
            ground-truth correctness 0/1). Candidates without an answer never win.
        equal: answer equivalence (e.g. "1/2" and "0.5"); an answer joins the first answer class it is
            equal to. Default: string equality.

    Returns:
        The mean over problems of the correctness of the winning answer, taken from the first candidate
        that carries it; a problem whose answers are all None scores 0. Ties in total go to the answer
        seen first.

    Raises:
        ValueError: no problems.
    """
    if not groups:
        raise ValueError("weighted_vote needs at least one problem")
    total = 0.0
    for group in groups:
        classes: dict[str, list[float]] = {}  # first answer of the class -> [summed score, its correctness]
        for answer, score, correctness in group:
            if answer is None:
                continue
            rep = answer if equal is None else next((r for r in classes if equal(r, answer)), answer)
            classes.setdefault(rep, [0.0, correctness])[0] += score
        if classes:
            total += max(classes.values(), key=lambda c: c[0])[1]  # dicts keep insertion order: ties -> first
    return total / len(groups)



def expected_best_of_n(scores: list[float], correct: list[bool | float], n: int) -> float:
    """The expected accuracy of best-of-n on one problem when the n candidates are a uniformly random
    subset of its k samples, exactly: the candidate the verifier scores highest is picked, ties at the top
    broken uniformly.

    Sorted by score, the samples form blocks of equal score; the pick falls in block B (ranks a..b,
    1-based from the top) when the subset has none above it and at least one in it, with probability
    (C(k − a + 1, n) − C(k − b, n)) / C(k, n), and is then any of B's members alike: its expected
    correctness is B's mean. Sums over blocks.

    Args:
        scores, correct: the k samples' verifier scores and correctness (0/1).
        n: 1 ≤ n ≤ k.
    """
    from math import comb

    k = len(scores)
    assert 1 <= n <= k and len(correct) == k, f"need 1 <= n <= k = {k} and one correctness per score"
    order = sorted(range(k), key=lambda i: -scores[i])
    total, a = 0.0, 1
    while a <= k:
        b = a
        while b < k and scores[order[b]] == scores[order[a - 1]]:
            b += 1
        block = [float(correct[order[i]]) for i in range(a - 1, b)]
        total += (comb(k - a + 1, n) - comb(k - b, n)) / comb(k, n) * sum(block) / len(block)
        a = b + 1
    return total


def best_of_n_curve(groups: list[tuple[list[float], list[bool]]], ns: list[int]) -> dict[int, float]:
    """{n: the mean over problems of `expected_best_of_n`} for each n (problems with fewer than n
    samples are left out of that n)."""
    out = {}
    for n in ns:
        values = [expected_best_of_n(s, c, n) for s, c in groups if len(s) >= n]
        if values:
            out[n] = sum(values) / len(values)
    return out


def final_note_parts(verification: str) -> list[tuple[str, str]] | None:
    """The parts of a verification's final line before its verdict word, each named by its first word:
    "Final: needs 2, shows 2; story 7 + 5 is 12, 12 - 4 is 8; answer 8 CORRECT" gives [("needs", "needs
    2"), ("shows", "shows 2"), ("story", "story 7 + 5 is 12"), ("story", "12 - 4 is 8"), ("answer", "answer
    8")] (a part that does not start with a word takes the name before it). None without a final line
    (one that starts with `Final` or `#`, as `roles.verifier.parse` reads it). Never raises."""
    if not isinstance(verification, str):
        return None
    for line in verification.split("\n"):
        line = line.strip()
        low = line.lower()
        if not (low.startswith("final") or line.startswith("#")):
            continue
        body = line[len("final"):].lstrip(":") if low.startswith("final") else line[1:]
        words = body.split()
        body = " ".join(words[:-1])  # the verdict word goes
        parts, name = [], "note"
        for part in (x.strip() for chunk in body.split(";") for x in chunk.split(",")):
            if not part:
                continue
            first = part.split()[0]
            name = first.lower() if first[0].isalpha() else name
            parts.append((name, part))
        return parts
    return None


def whole_verdict_errors(records: list[dict]) -> dict[str, dict[str, int]]:
    """Where a verifier's whole verdicts go wrong, counted over `verification_records` that hold its
    text: for the right samples it rejects (`right_rejected`) and the wrong ones it approves
    (`wrong_approved`; a sample without a final verdict counts on its side, as `verdict_metrics` counts
    it), how many have no final verdict (`no verdict`), how many wrote the final line it
    was taught word for word and still gave the other verdict (`line as taught`), and else the first part
    of the line that differs from the taught one (`differs at <part>`: e.g. `needs`, `shows`, `story`,
    `answer`; `differs at length` when one line is a prefix of the other); with `a step rejected` beside
    them, the right samples it rejects that it also rejects a step of, and `through a false step`, those
    whose steps the task marks false (a right answer reached by luck). `n` is each side's total; `right`
    counts the right samples judged (`n`) and those with a false step (`through a false step`)."""
    out: dict[str, dict[str, int]] = {"right_rejected": {"n": 0}, "wrong_approved": {"n": 0}, "right": {"n": 0}}
    for r in records:
        if r.get("verification") is None:
            continue
        lucky = any(f is not None for f in r.get("faults") or [])
        if r.get("correct"):
            out["right"]["n"] += 1
            if lucky:
                out["right"]["through a false step"] = out["right"].get("through a false step", 0) + 1
        if r.get("final") is bool(r.get("correct")):
            continue
        side = out["right_rejected" if r.get("correct") else "wrong_approved"]
        side["n"] += 1
        if r.get("correct") and any(v is False for v in r.get("steps") or []):
            side["a step rejected"] = side.get("a step rejected", 0) + 1
        if r.get("correct") and lucky:
            side["through a false step"] = side.get("through a false step", 0) + 1
        mine, taught = final_note_parts(r["verification"]), final_note_parts(r.get("reference"))
        if r.get("final") is None or mine is None:
            cause = "no verdict"
        elif mine == taught:
            cause = "line as taught"
        else:
            taught = taught or []
            at = next((i for i, (a, b) in enumerate(zip(mine, taught)) if a != b), None)
            cause = "differs at " + (taught[at][0] if at is not None else "length")
        side[cause] = side.get(cause, 0) + 1
    return out


def sound_balanced_accuracy(records: list[dict]) -> float | None:
    """Balanced accuracy of the final verdicts of `verification_records` that hold a verifier's text, with
    a right answer reached through a step the task marks false counted as wrong (`verdict_metrics` on
    "right and every step right"): what a process verifier's whole verdicts aim at. None without records
    of both kinds."""
    kept = [r for r in records if r.get("verification") is not None]
    sound = [bool(r.get("correct")) and not any(f is not None for f in r.get("faults") or []) for r in kept]
    if not kept or all(sound) or not any(sound):
        return None
    return verdict_metrics([r.get("final") for r in kept], sound)["balanced_accuracy"]
