"""Generator-verifier co-training (RL Tango) as pure functions: rewards of both roles, process
advantages from the verifier's step verdicts, the mixing weight, and the verifier's class weights.

Shape letters: N = B*G generator samples (a prompt's G samples contiguous), T completion tokens,
K_i steps of sample i.
"""
from __future__ import annotations

import math

import torch


def step_rewards(verdicts: list[bool], n_steps: int) -> list[float] | None:
    """r_k = +1/K if step k is judged correct else -1/K; None unless exactly K = n_steps verdicts.

    Args:
        verdicts: the verifier's step verdicts of one solution.
        n_steps: K, the number of steps the solution has.
    """
    if n_steps == 0 or len(verdicts) != n_steps:
        return None
    return [(1.0 if v else -1.0) / n_steps for v in verdicts]


def step_token_ends(pieces: list[str], line_indices: list[int]) -> list[int]:
    """The token on which each step ends: the one holding the newline that closes the step's line.

    Args:
        pieces: the decoded text of each completion token, in order.
        line_indices: the (0-based) line of the completion each step occupies.

    Returns:
        One token index per step; a line that no newline closes ends on the last token.
    """
    last = max(len(pieces) - 1, 0)
    ends, newlines, t = [], 0, 0
    for line in sorted(line_indices):
        while t < len(pieces) and newlines + pieces[t].count("\n") <= line:
            newlines += pieces[t].count("\n")
            t += 1
        ends.append(min(t, last))
    order = sorted(range(len(line_indices)), key=lambda i: line_indices[i])
    out = [0] * len(line_indices)
    for rank, i in enumerate(order):
        out[i] = ends[rank]
    return out


def group_statistics(rewards: list[list[float] | None], group_size: int, eps: float = 1e-6
                     ) -> list[tuple[float, float] | None]:
    """Each group's (mean, scale) of the z-normalisation of `process_advantages`: over the step rewards of all
    its usable samples pooled, (mean, std + eps); (0, 1) for a single reward (kept as it is, as RL Tango's code
    does); None for a group with none."""
    out = []
    for start in range(0, len(rewards), group_size):
        pooled = torch.tensor([r for i in range(start, start + group_size) if rewards[i] is not None for r in rewards[i]])
        if pooled.numel() == 0:
            out.append(None)
        elif pooled.numel() == 1:  # nothing to normalise against: the reward as it is
            out.append((0.0, 1.0))
        else:
            out.append((pooled.mean(), pooled.std() + eps))
    return out


def on_own_tokens(values: list[float], ends: list[int], length: int) -> torch.Tensor:
    """Each item's value on its own tokens alone, [T]: after the end of the item before it, up to its own end
    (items closed by one token add up there), 0 after the last item. No sum over later items."""
    by_end: dict[int, float] = {}
    for value, end in zip(values, ends, strict=True):
        end = min(end, length - 1)
        by_end[end] = by_end.get(end, 0.0) + value
    out, previous = torch.zeros(length), -1                                          # [T]
    for end in sorted(by_end):
        out[previous + 1:end + 1] = by_end[end]
        previous = end
    return out


def process_advantages(rewards: list[list[float] | None], ends: list[list[int]], group_size: int,
                       length: int, eps: float = 1e-6, credit: str = "to_go",
                       stats: list[tuple[float, float] | None] | None = None) -> torch.Tensor:
    """Per-token process advantages from step rewards.

    Within each group, the step rewards of all its usable samples are z-normalised together,
    r~ = (r - mean) / (std + eps) (`group_statistics`); a group with a single step reward keeps it as it is
    (mean 0, std 1, as RL Tango's code does). Then, for the steps k of sample i that end at or after token t:

        to_go (RL Tango)   A_proc[i, t] = sum of their r~_k
        min   (PURE)       A_proc[i, t] = min of their r~_k
        step  (ours)       A_proc[i, t] = r~_k of the one step k whose tokens hold t (`on_own_tokens`)

    and 0 after the last step. Samples whose rewards are None get 0. Of the two credit properties (`PROPERTIES`):
    to_go pays for length and credits a wrong solution's right prefix only where the items ahead of it net
    positive (it holds neither); min holds no length bonus but never credits a right prefix; step holds both.
    The min-form is arXiv 2504.15275's
    definition (a token's return is the worst step still ahead of it, so a correct prefix is not blamed
    for every later mistake at once, and more steps do not add up to more reward); its code approximates
    it by a softmin-weighted sum over all steps (temperature 0.1), which we do not.

    Args:
        rewards: N entries, each K_i step rewards or None.
        ends: N entries, each the K_i end tokens (same order as the rewards).
        group_size: G.
        length: T.
        credit: "to_go", "min" or "step" (the `final` forms are these over rewards that end with
            `final_step_rewards`' item).
        stats: each group's (mean, scale) to normalise by instead of its own (`group_statistics`): the
            property tests hold them fixed while a sample grows.

    Returns:
        [N, T].
    """
    assert len(rewards) == len(ends) and len(rewards) % group_size == 0, "one entry per sample, whole groups"
    assert credit in ("to_go", "min", "step"), f"credit must be to_go, min or step, got {credit!r}"
    stats = group_statistics(rewards, group_size, eps) if stats is None else stats
    out = torch.zeros(len(rewards), length)                                        # [N, T]
    for group, start in enumerate(range(0, len(rewards), group_size)):
        if stats[group] is None:
            continue
        mean, scale = stats[group]
        for i in range(start, start + group_size):
            if rewards[i] is None:
                continue
            normalised = [float((r - mean) / scale) if scale > 0 else 0.0 for r in rewards[i]]  # equal rewards: all 0
            if credit == "step":
                out[i] = on_own_tokens(normalised, ends[i], length)
                continue
            if credit == "to_go":
                for r, end in zip(normalised, ends[i]):
                    out[i, :min(end, length - 1) + 1] += r                             # reaches every t <= end
                continue
            # min: steps in order of their end; the tokens (previous end, end] take the minimum of this step
            # and every later one
            ordered = sorted(zip(ends[i], normalised))
            suffix = [min(r for _, r in ordered[k:]) for k in range(len(ordered))]
            previous = -1
            for (end, _), worst in zip(ordered, suffix):
                end = min(end, length - 1)
                out[i, previous + 1:end + 1] = worst
                previous = max(previous, end)
    return out


def unscaled(rewards: list[list[float] | None]) -> list[list[float] | None]:
    """Step rewards as +-1, their 1/K scale dropped: what the min-form takes. Scaled by 1/K, the minimum pays
    for length (a false step of a 9-step solution costs -1/9, of a 3-step one -1/3): in the sparse world,
    the oracle's min-form at alpha 1 drove a generator to pad its solutions with steps until it solved
    nothing (docs/where_it_pays.md). PURE's step rewards are not divided by K either."""
    return [None if r is None else [1.0 if x > 0 else -1.0 for x in r] for r in rewards]


def final_step_rewards(verdicts: list[bool], n_steps: int, final: bool | None, complete: bool) -> list[float]:
    """Step rewards with the final verdict scored as one more step (`cotraining.credit: final`, ours).

    Each of the K step verdicts and the final one earns +-1/(K+1); the final item is +1/(K+1) only when the
    final verdict approves AND the solution is complete (it states an answer and has at least the steps its
    problem needs), so that stopping after a correct prefix, which RL Tango's construction pays as much as a
    whole correct solution, earns a rejection where the answer should be. Summed to go (`credit: final`) these
    items pay for length (each right item adds to every earlier token, and the 1/(K+1) scale moves with K) and
    credit a right prefix only where the items ahead net positive (`PROPERTIES`). When the step verdicts are not
    usable (not exactly K of them) the final item alone is scored, +-1.

    Args:
        verdicts: the step verdicts of one solution.
        n_steps: K, the number of steps it has.
        final: the final verdict (None: none was given, a rejection).
        complete: whether it states an answer and has as many steps as its problem needs.

    Returns:
        K+1 rewards (steps first, the final item last), or 1 when the step verdicts are not usable.
    """
    items = list(verdicts) if n_steps and len(verdicts) == n_steps else []
    items.append(final is True and complete)
    return [(1.0 if v else -1.0) / len(items) for v in items]


def computing_items(verdicts: list[bool], ends: list[int], computes: list[bool]) -> tuple[list[bool], list[int]]:
    """The items of `cotraining.credit: final_compute` (ours): the verdicts and end tokens of the steps that
    compute (state an equation) alone, the answer's end token kept last for the final item. A line that
    computes nothing (a fact of the story restated, prose) is no item: it earns nothing and costs nothing, so
    that padding a solution with restated facts, which `final`'s +-1/(K+1) items pay as right steps, gains
    nothing, while each equation earns its step reward as before.

    Args:
        verdicts: the step verdicts of one solution (usable only when one per step).
        ends: its K step-end tokens, then its answer's (K+1).
        computes: per step, whether it computes.

    Returns:
        (the kept verdicts, their ends with the answer's last); ([], [the answer's end]) when the verdicts are
        not one per step (`final_step_rewards` then scores the final item alone).
    """
    assert len(ends) == len(computes) + 1, "one end per step, then the answer's"
    if len(verdicts) != len(computes):
        return [], ends[-1:]
    kept = [k for k, c in enumerate(computes) if c]
    return [verdicts[k] for k in kept], [ends[k] for k in kept] + ends[-1:]


def first_error_advantages(rewards: list[list[float] | None], ends: list[list[int]], length: int) -> torch.Tensor:
    """Per-token process advantages that blame each solution's first rejected item alone
    (`cotraining.credit: first_error`, ours): -1 on the tokens of that item (after the previous item's end,
    up to its own), 0 everywhere else; 0 throughout a solution with no rejected item or no usable rewards.

    The items are `final_step_rewards`' (the steps, then the final verdict on the answer's tokens, rejected
    for an incomplete solution), only their signs read. What the other constructions pay for, this does
    not: a right step earns nothing, so restating the story's facts as extra steps gains nothing (RL Tango's
    +-1/K sums pay for it); a wrong solution's right prefix, its cascade of later errors and its end are
    left alone, so the whole of every wrong solution is not pushed down alike (the min-form with a final
    item gives every token of a wrong solution the same negative value: an outcome term that, unlike
    GRPO's, is not centred in a group whose samples are all wrong). No group normalisation: the value is
    the same -1 in every group. It holds no length bonus but credits no right prefix (`PROPERTIES`).

    Args:
        rewards: N entries, each the items' rewards (their signs: approved > 0) or None.
        ends: N entries, each the items' end tokens, in the order of the items.
        length: T.

    Returns:
        [N, T].
    """
    assert len(rewards) == len(ends), "one entry per sample"
    out = torch.zeros(len(rewards), length)                                          # [N, T]
    for i, (items, item_ends) in enumerate(zip(rewards, ends)):
        if items is None:
            continue
        ordered = sorted((min(end, length - 1), r) for r, end in zip(items, item_ends))  # in the order they end
        for k, (end, r) in enumerate(ordered):
            if r < 0:  # its tokens: after the last item that ended before it (items closed by one token share it)
                start = max((e for e, _ in ordered[:k] if e < end), default=-1) + 1
                out[i, start:end + 1] = -1.0
                break
    return out


WITH_FINAL = ("final", "min_final", "first_error", "final_compute", "step")
"""The constructions that score the final verdict as one more item, on the answer's tokens (`final_step_rewards`)."""

PROPERTIES = {  # credit -> (no length bonus, right-prefix credit): tests/test_credit_properties.py checks each both ways
    "to_go": (False, False),
    "min": (True, False),
    "final": (False, False),
    "min_final": (True, False),
    "first_error": (True, False),
    "final_compute": (False, False),
    "step": (True, True),
}
"""Which of two properties each `cotraining.credit` holds (docs/design.md, "Two properties of a credit construction").
No length bonus: appending an item to a sample, approved or rejected, never raises the process advantage of its
earlier tokens, the group's normalisation statistics held fixed. Right-prefix credit: in a failed sample, the
tokens of the approved steps before its first rejected step get a process advantage > 0 wherever the group
holds a rejected item."""


def credit_advantages(credit: str, verdicts: list[list[bool]], finals: list[bool | None], complete: list[bool] | None,
                      ends: list[list[int]], group_size: int, length: int, computes: list[list[bool]] | None = None,
                      stats: list[tuple[float, float] | None] | None = None
                      ) -> tuple[list[list[float] | None], torch.Tensor]:
    """Each sample's item rewards and the process advantages [N, T] they give under `cotraining.credit`.

    to_go, min: the K step verdicts as +-1/K (`step_rewards`; None unless exactly K), summed from each token to the
    end (RL Tango) or minimised there over +-1 (PURE's min-form, `unscaled`). final, min_final, first_error, step:
    `final_step_rewards`' items (the steps, then the final verdict on the answer's tokens, rejected for a sample
    that is not `complete`), summed to go, minimised over +-1, the first rejected item's tokens alone at -1
    (`first_error_advantages`), or each item's +-1 z-scored over the group's items on its own tokens alone
    (`step`: no sum over later items, no 1/K). final_compute: final over the steps that compute alone
    (`computing_items`). `PROPERTIES` says which of the two credit properties each holds.

    Args:
        verdicts: N entries, each the step verdicts of one sample.
        finals: N final verdicts (None: none given).
        complete: N flags, whether each sample states an answer and has the steps its problem needs (read by the
            constructions with a final item).
        ends: N entries, each K_i step-end tokens, then (constructions with a final item) the answer's.
        group_size: G.
        length: T.
        computes: final_compute: N entries, per step whether it computes.
        stats: each group's normalisation to use instead of its own (`process_advantages`).

    Returns:
        (N item-reward lists or None, [N, T]).
    """
    with_final = credit in WITH_FINAL
    n_steps = [len(e) - with_final for e in ends]
    if credit == "final_compute":
        assert computes is not None and len(computes) == len(ends), "credit final_compute needs the lines that compute"
        items = [computing_items(v, e, c) for v, e, c in zip(verdicts, ends, computes)]
        verdicts, ends = [kept for kept, _ in items], [e for _, e in items]
        n_steps = [len(kept) for kept in verdicts]
    if with_final:
        assert complete is not None and len(complete) == len(ends), "credit final needs each sample's completeness"
        s_rewards = [final_step_rewards(v, k, f, c) for v, k, f, c in zip(verdicts, n_steps, finals, complete)]
        ends = [e if len(r) == len(e) else e[-1:] for r, e in zip(s_rewards, ends)]  # the final item alone
    else:
        s_rewards = [step_rewards(v, k) for v, k in zip(verdicts, n_steps)]
    if credit == "first_error":  # the first rejected item's tokens alone, -1
        return s_rewards, first_error_advantages(s_rewards, ends, length)
    if credit in ("min", "min_final", "step"):  # +-1: scaled by 1/K the minimum pays for length, and step needs no K
        s_rewards = unscaled(s_rewards)
    form = {"min": "min", "min_final": "min", "step": "step"}.get(credit, "to_go")
    return s_rewards, process_advantages(s_rewards, ends, group_size, length, credit=form, stats=stats)


def only_mixed_groups(process: torch.Tensor, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The process advantages [N, T] with every group whose outcome rewards [N] are all equal set to 0
    (`cotraining.process_groups: mixed`): such a group then trains not at all, as under GRPO, and the process
    term only redistributes credit inside groups that hold both right and wrong samples."""
    return process * mixed_mask(rewards, group_size).to(process.dtype)[:, None]


def mixed_mask(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] bool: whether each sample's group of outcome rewards [N] holds two different values."""
    mixed = rewards.view(-1, group_size).float().std(dim=1, unbiased=False) > 0                  # [B]
    return mixed.repeat_interleave(group_size)


def flip_verdicts(labels: list[bool], fp: float, fn: float, rng) -> list[bool]:
    """A noisy oracle's verdicts: each False label approved with probability `fp`, each True label rejected
    with probability `fn` (one `rng.random()` draw per label, in order, whatever the rates).

    Args:
        labels: the true verdicts (True = right).
        rng: a `random.Random`.
    """
    out = []
    for label in labels:
        u = rng.random()
        out.append((u >= fn) if label else (u < fp))
    return out


def mix_advantages(outcome: torch.Tensor, process: torch.Tensor, alpha: float) -> torch.Tensor:
    """A_t = (1 - alpha) * A_out + alpha * A_proc,t.  outcome [N], process [N, T] -> [N, T]."""
    return (1 - alpha) * outcome[:, None] + alpha * process


def alpha_at(step: int, total: int, alpha0: float, schedule: str = "constant", final: float = 1e-3) -> float:
    """The process-advantage weight at generator step `step` (1-based) of `total`.

    constant: alpha0. exp (RL Tango's schedule, as its code computes it): max(final, alpha0 *
    exp(-k (step - 1))) with k = ln(alpha0 / final) / total: alpha0 at the first step, decaying
    exponentially to reach `final` one step after the last. auto: the exp schedule; the recipe then
    multiplies it by the verifier's measured trust (`verifier_trust`).
    """
    if schedule == "constant" or alpha0 <= 0:
        return alpha0
    if schedule not in ("exp", "auto"):
        raise ValueError(f"alpha schedule must be constant, exp or auto, got {schedule!r}")
    if alpha0 <= final:
        return alpha0
    k = math.log(alpha0 / final) / max(total, 1)
    return max(final, alpha0 * math.exp(-k * max(step - 1, 0)))


RELIABLE_BA = 0.9
"""The balanced accuracy at which `alpha: auto` gives the process advantage its whole scheduled weight."""


def verdict_counts(approved: list[bool], correct: list[bool]) -> tuple[int, int, int, int]:
    """(approved correct, correct, rejected incorrect, incorrect) counts of one step's verdicts."""
    n_pos = sum(bool(c) for c in correct)
    tp = sum(bool(a) and bool(c) for a, c in zip(approved, correct, strict=True))
    tn = sum(not a and not c for a, c in zip(approved, correct, strict=True))
    return tp, n_pos, tn, len(correct) - n_pos


def verifier_trust(window: list[tuple[int, int, int, int]], previous: float) -> tuple[float, float, float]:
    """The verifier's measured trust r in [0, 1] (`cotraining.alpha: auto`), with the balanced accuracy and dead
    zone behind it. ("reliability" names the label-free recipe alone.)

    Over the pooled counts of the window (`verdict_counts` of the last steps, the current one last):
    BA = (TPR + TNR) / 2, m = 2 standard errors of BA = sqrt(TPR(1-TPR)/n_pos + TNR(1-TNR)/n_neg), and
    r = clip((BA - 0.5 - m) / (RELIABLE_BA - 0.5 - m), 0, 1) (0 when m leaves no room). A verifier no
    better than chance, or not measurably better, gets r = 0; one at RELIABLE_BA or above with a tight
    interval gets 1. When the current step holds one class only, r stays `previous` (BA is then
    unknown, nan).

    This rule is ours: RL Tango weighs the process advantage by its schedule alone, whatever the
    verifier's accuracy (`cotraining.alpha: auto` turns it on; docs/design.md).

    Returns:
        (r, BA, m).
    """
    _, n_pos, _, n_neg = window[-1]
    if n_pos == 0 or n_neg == 0:
        return previous, math.nan, math.nan
    tp, n_pos, tn, n_neg = (sum(c[i] for c in window) for i in range(4))
    tpr, tnr = tp / n_pos, tn / n_neg
    ba = (tpr + tnr) / 2
    m = math.sqrt(tpr * (1 - tpr) / n_pos + tnr * (1 - tnr) / n_neg)       # 2 x 0.5 x sqrt(...)
    room = RELIABLE_BA - 0.5 - m
    r = 0.0 if room <= 0 else min(1.0, max(0.0, (ba - 0.5 - m) / room))
    return r, ba, m


def verifier_rewards(final: list[bool | None], correct: list[bool], fmt: list[float], w_format: float,
                     adversarial: bool = False, w_catch: float = 1.0) -> torch.Tensor:
    """r = 1[final verdict == ground-truth correctness] + w_format * format; 0 without a final verdict
    (RL Tango's code scores neither correctness nor format then).

    Adversarial (GAR): plus w_catch for rejecting a solution that is in fact incorrect.
    Returns [N].
    """
    out = []
    for v, c, f in zip(final, correct, fmt, strict=True):
        if v is None:
            out.append(0.0)
            continue
        r = float(v == c) + w_format * f
        if adversarial and v is False and not c:
            r += w_catch
        out.append(r)
    return torch.tensor(out)


def most_uncertain(uncertainty: list[float], share: float) -> list[int]:
    """The indices of the ceil(share * N) most uncertain items (highest first among equals: the earlier),
    in their original order; all N when share >= 1.

    Args:
        uncertainty: a score per item, higher = less sure (e.g. a sample's mean token entropy).
        share: in (0, 1].

    Returns:
        Sorted indices, at least one when there are items.
    """
    n = len(uncertainty)
    k = min(n, max(1, math.ceil(share * n))) if n else 0
    ranked = sorted(range(n), key=lambda i: (-uncertainty[i], i))
    return sorted(ranked[:k])


def generator_rewards(correct: list[bool], approved: list[bool | None], adversarial: bool = False,
                      w_approve: float = 0.5) -> torch.Tensor:
    """Outcome reward 1[correct]; adversarial (GAR) adds w_approve for correct solutions the verifier approves.
    Returns [N]."""
    return torch.tensor([float(c) + (w_approve if adversarial and c and a is True else 0.0)
                         for c, a in zip(correct, approved, strict=True)])


def class_weights(labels: list[bool], ema: tuple[float, float] | None, decay: float = 0.8
                  ) -> tuple[torch.Tensor, tuple[float, float]]:
    """Per-sample weights that rebalance the verifier's two classes (GT-correct / GT-incorrect).

    The running counts are EMAs of each class's count per batch, ema_c <- decay * ema_c + (1 - decay)
    * n_c (the first batch sets them to its counts); a class's coefficient is 1 / (sqrt(ema_c) + 1e-6)
    (RL Tango's `sqrt_inverse`: a class rarer than one per batch weighs more than one per batch), and
    the coefficients are rescaled so that the batch's samples have mean weight 1.

    Args:
        labels: ground-truth correctness of each sample's solution.
        ema: the running (correct, incorrect) counts, None at the first batch.
    Returns:
        (weights [N], updated ema).
    """
    n_pos = sum(bool(x) for x in labels)
    n_neg = len(labels) - n_pos
    if ema is None:
        ema = (float(n_pos), float(n_neg))
    else:
        ema = (decay * ema[0] + (1 - decay) * n_pos, decay * ema[1] + (1 - decay) * n_neg)
    coef = (1 / (math.sqrt(ema[0]) + 1e-6), 1 / (math.sqrt(ema[1]) + 1e-6))
    raw = torch.tensor([coef[0] if x else coef[1] for x in labels])
    return (raw / raw.mean() if len(labels) else raw), ema
