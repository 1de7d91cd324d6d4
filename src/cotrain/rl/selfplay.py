"""Label-free self-play signals as pure functions, for the recipes that learn without ground truth.

- `consistency`: majority vote over a group's answers gives pseudo-labels (`majority_vote`,
  `pseudo_labels`) and the generator's reward (`consistency_rewards`).
- `triad`: a proposer, a solver and a judge (Multi-Agent Evolve): the judge's passes give a score
  (`judge_score`), each role has its reward (`mae_proposer_reward`, `mae_solver_reward`, or
  `learnability_reward` for the proposer) and advantages are normalised per role (`role_advantages`).
- `reliability`: the proposer is rewarded for questions whose answers the judge evaluates reliably:
  consistently across passes, separating strong from weak answers, and with stable pairwise
  preferences (`reliability_signals`, `reliability_reward`, `passes_thresholds`,
  `preference_stability`, `pairwise_from_pointwise`); the solver learns from judged preferences
  (`preference_pairs`, `dpo_loss`, `ranking_loss`).
- curriculum: `next_level` raises the difficulty of a fixed task source as accuracy rises.

Shape letters: C candidate answers, P judging passes, n pairs.
"""
from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- consistency: majority pseudo-labels

def majority_vote(answers: list[str | None], group_size: int) -> tuple[list[str | None], list[float]]:
    """The most common non-None answer of each contiguous group, and its share of the group.

    Ties go to the answer that appears first in the group; a group of only None answers has
    majority None and share 0.0.

    Args:
        answers: B*G parsed answers (None = unparsable), a group's G answers contiguous.
        group_size: G.

    Returns:
        (majorities, shares): one entry per group each, share = count / G.
    """
    if group_size <= 0 or len(answers) % group_size != 0:
        raise ValueError(f"len(answers) = {len(answers)} must be a multiple of group_size = {group_size}")
    majorities: list[str | None] = []
    shares: list[float] = []
    for start in range(0, len(answers), group_size):
        counts = Counter(a for a in answers[start:start + group_size] if a is not None)
        best, best_count = None, 0
        for answer, count in counts.items():                        # insertion order = first appearance
            if count > best_count:                                  # strict: an earlier answer wins a tie
                best, best_count = answer, count
        majorities.append(best)
        shares.append(best_count / group_size)
    return majorities, shares


def pseudo_labels(answers: list[str | None], group_size: int, min_share: float = 0.0) -> list[bool | None]:
    """Whether each answer agrees with its group's majority; None where the majority is not trusted.

    Args:
        answers: B*G parsed answers (None = unparsable), a group's G answers contiguous.
        group_size: G.
        min_share: a group whose majority share is below this gets no labels.

    Returns:
        B*G labels: None when the group's majority is None or its share < min_share, else
        answer == majority (an unparsable answer is False).
    """
    majorities, shares = majority_vote(answers, group_size)
    labels: list[bool | None] = []
    for i, answer in enumerate(answers):
        majority, share = majorities[i // group_size], shares[i // group_size]
        if majority is None or share < min_share:
            labels.append(None)
        else:
            labels.append(answer is not None and answer == majority)
    return labels


# ---------------------------------------------------------------- triad: proposer / solver / judge rewards

def consistency_rewards(labels: list[bool | None], approved: list[bool | None], w_verdict: float) -> torch.Tensor:
    """The generator's reward in `consistency`: w * 1[the verifier approved] + (1 - w) * 1[the answer
    agrees with its group's majority] (a sample without a pseudo-label earns no agreement term).

    Args:
        labels: [N] pseudo-labels (`pseudo_labels`).
        approved: [N] the verifier's final verdicts (None = unparsable, not approved).
        w_verdict: w in [0, 1].

    Returns:
        [N] float rewards.
    """
    return torch.tensor([w_verdict * (a is True) + (1 - w_verdict) * (lab is True)
                         for lab, a in zip(labels, approved, strict=True)], dtype=torch.float32)


def judge_score(verdicts: list[bool | None]) -> float:
    """The mean verdict over judging passes: approve 1.0, reject 0.0, unparsable (None) 0.5.

    Args:
        verdicts: one verdict per judging pass.

    Returns:
        The score in [0, 1]; 0.5 when there is no verdict at all.
    """
    if not verdicts:
        return 0.5
    return sum(0.5 if v is None else float(v) for v in verdicts) / len(verdicts)


def mae_proposer_reward(quality: float, solver_score: float, fmt: float, min_quality: float = 0.7) -> float:
    """Proposer reward (Q + (1 - S) + F) / 3: a good question the solver finds hard, well formatted.

    A question judged below min_quality gets no difficulty term, (Q + F) / 3, so that posing broken
    questions the solver cannot answer does not pay.

    Args:
        quality: Q, the judge's score of the question, in [0, 1].
        solver_score: S, the judge's score of the solver's answers, in [0, 1].
        fmt: F, the format reward, in [0, 1].
        min_quality: the quality below which difficulty is not rewarded.

    Returns:
        The reward in [0, 1].
    """
    difficulty = (1.0 - solver_score) if quality >= min_quality else 0.0
    return (quality + difficulty + fmt) / 3


def mae_solver_reward(judge: float, fmt: float) -> float:
    """Solver reward 0.5 * judge + 0.5 * fmt.

    Args:
        judge: the judge's score of the answer, in [0, 1].
        fmt: the format reward, in [0, 1].

    Returns:
        The reward in [0, 1].
    """
    return 0.5 * judge + 0.5 * fmt


def agreement_round(passes: int) -> int:
    """Passes drawn first when judging stops early by agreement: the fewest that, all agreeing, are a
    majority of `passes` whatever the others would say (P // 2 + 1: 2 of 3, 3 of 4 or 5).

    Args:
        passes: judging passes per answer, P >= 1.

    Returns:
        The first round's passes, in [1, P]; P itself when P <= 2 (nothing to stop).
    """
    assert passes >= 1, "at least one judging pass"
    return passes // 2 + 1


def decided_scores(first: list[float], passes: int) -> list[float] | None:
    """The P pass scores of an answer whose first round agrees (every missing pass counted as the
    agreed verdict), or None when the round disagrees and the rest must be drawn.

    Args:
        first: the scores (1, 0 or 0.5) of the first `agreement_round(passes)` passes.
        passes: judging passes per answer, P.

    Returns:
        P scores, or None.
    """
    assert len(first) == agreement_round(passes), "one score per pass of the first round"
    if len(set(first)) != 1:
        return None
    return first + [first[0]] * (passes - len(first))


def role_advantages(rewards: torch.Tensor, roles: list[str], eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i - mean of its role) / (population std of its role + eps); a role of one sample gets 0.

    Args:
        rewards: [N] rewards of samples from several roles.
        roles: N role names, one per sample.
        eps: added to the std.

    Returns:
        advantages [N].
    """
    assert rewards.ndim == 1 and rewards.numel() == len(roles), "one role per reward"
    out = torch.zeros_like(rewards, dtype=torch.float32)                           # [N]
    for role in dict.fromkeys(roles):
        idx = torch.tensor([i for i, r in enumerate(roles) if r == role])
        if idx.numel() < 2:
            continue                                                               # no baseline to compare with
        group = rewards[idx].float()
        out[idx] = (group - group.mean()) / (group.std(unbiased=False) + eps)
    return out


def learnability_reward(parsable: bool, valid: bool, pass_rate: float | None) -> float:
    """Reward for a proposed task by how much the solver can still learn from it.

    Args:
        parsable: the proposal could be parsed.
        valid: the parsed task is well formed (e.g. it runs, has an answer).
        pass_rate: the solver's pass rate on it, None when unknown.

    Returns:
        -1.0 unparsable; -0.5 invalid; 1 - pass_rate when 0 < pass_rate < 1; else 0.0
        (always or never solved: nothing to learn).
    """
    if not parsable:
        return -1.0
    if not valid:
        return -0.5
    if pass_rate is not None and 0.0 < pass_rate < 1.0:
        return 1.0 - pass_rate
    return 0.0


# ---------------------------------------------------------------- reliability: label-free judge signals

def preference_stability(prefs: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of the fraction of passes that agree with the pair's modal preference.

    Args:
        prefs: [n, P] preferences in {-1, 0, 1} (j preferred / tie / i preferred), P >= 1; any other
            value (a judgment that stated none) is counted in P but never forms the mode.

    Returns:
        A 0-dim tensor in [1/3, 1]; 1.0 when there are no pairs.
    """
    assert prefs.ndim == 2, "prefs must be [n_pairs, n_passes]"
    if prefs.shape[0] == 0:
        return torch.tensor(1.0)
    assert prefs.shape[1] > 0, "every pair needs at least one pass"
    counts = torch.stack([(prefs == v).sum(dim=1) for v in (-1, 0, 1)], dim=1)     # [n, 3]
    return (counts.max(dim=1).values.float() / prefs.shape[1]).mean()


def pairwise_from_pointwise(scores: torch.Tensor) -> torch.Tensor:
    """Per-pass preferences sign(s_i - s_j) of every pair i < j, in order (0,1), (0,2), ..., (1,2), ...

    Args:
        scores: [C, P] pointwise scores.

    Returns:
        [C*(C-1)/2, P] float tensor of -1 / 0 / 1.
    """
    assert scores.ndim == 2, "scores must be [n_candidates, n_passes]"
    i, j = torch.triu_indices(scores.shape[0], scores.shape[0], offset=1)          # row-major: (0,1), (0,2), ...
    return torch.sign(scores[i] - scores[j]).float()                               # [n, P]


def reliability_signals(scores: torch.Tensor, strong: torch.Tensor, prefs: torch.Tensor | None = None
                        ) -> dict[str, float]:
    """Label-free reliability of a judge from its scores of candidate answers over several passes.

    Args:
        scores: [C, P] judge scores in [0, 1].
        strong: [C] bool, the candidate comes from the strong sampling regime.
        prefs: [n, P] pairwise preferences; by default derived from the scores.

    Returns:
        {"cons": 1 - mean over candidates of the population variance over passes,
         "sep": mean score of strong candidates - mean score of weak ones (0.0 if either is empty),
         "stab": preference_stability(prefs)}, as Python floats.
    """
    assert scores.ndim == 2 and strong.shape == (scores.shape[0],), "scores [C, P], strong [C]"
    scores = scores.float()
    strong = strong.bool()
    cons = 1.0 - scores.var(dim=1, unbiased=False).mean().item() if scores.shape[0] else 1.0
    if strong.any() and (~strong).any():
        sep = (scores[strong].mean() - scores[~strong].mean()).item()
    else:
        sep = 0.0
    stab = preference_stability(prefs if prefs is not None else pairwise_from_pointwise(scores)).item()
    return {"cons": cons, "sep": sep, "stab": stab}


def reliability_reward(signals: dict[str, float], weights: dict[str, float]) -> float:
    """sum_k weights[k] * signals[k] over the keys of weights.

    Args:
        signals: e.g. the output of reliability_signals.
        weights: a weight per signal used; a key missing from signals raises KeyError.

    Returns:
        The weighted sum.
    """
    return sum(w * signals[k] for k, w in weights.items())


def passes_thresholds(signals: dict[str, float], thresholds: dict[str, float]) -> bool:
    """Whether signals[k] >= thresholds[k] for every key of thresholds.

    Args:
        signals: e.g. the output of reliability_signals.
        thresholds: a minimum per signal checked; a key missing from signals raises KeyError.

    Returns:
        True when every threshold is met (also when there are none).
    """
    return all(signals[k] >= t for k, t in thresholds.items())


# ---------------------------------------------------------------- preference training

def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO: mean over pairs of -log sigmoid(beta * ((pc - rc) - (pr - rr))).

    Args:
        policy_chosen, policy_rejected: [n] sequence log-probs under the policy.
        ref_chosen, ref_rejected: [n] sequence log-probs under the reference.
        beta: the inverse temperature.

    Returns:
        The 0-dim loss, differentiable in the policy log-probs.
    """
    logits = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)      # [n]
    return -F.logsigmoid(beta * logits).mean()


def ranking_loss(logps: torch.Tensor, scores: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
    """RRHF-style ranking loss: mean of relu(margin + logp_j - logp_i) over ordered pairs with s_i > s_j.

    Args:
        logps: [C] sequence log-probs (or length-normalised log-probs) of the candidates.
        scores: [C] their scores.
        margin: how far above a worse candidate a better one must be.

    Returns:
        The 0-dim loss; 0 (still attached to logps' graph) when no pair has different scores.
    """
    assert logps.shape == scores.shape and logps.ndim == 1, "logps and scores must both be [C]"
    better = scores[:, None] > scores[None, :]                                     # [C, C]: s_i > s_j
    violation = F.relu(margin + logps[None, :] - logps[:, None])                   # [C, C]: logp_j - logp_i
    if not better.any():
        return (logps * 0).sum()
    return violation[better].mean()


def preference_pairs(scores: list[float], min_gap: float) -> list[tuple[int, int]]:
    """The (best, worst) pair of one question's candidates, if their scores differ enough.

    Args:
        scores: one score per candidate.
        min_gap: the least score gap kept (a gap of 0 is never kept).

    Returns:
        [(i_best, i_worst)] with i_best the first highest and i_worst the last lowest score, when
        scores[i_best] - scores[i_worst] >= max(min_gap, 1e-12); else [].
    """
    if not scores:
        return []
    i_best = max(range(len(scores)), key=lambda i: (scores[i], -i))               # first of the highest
    i_worst = min(range(len(scores)), key=lambda i: (scores[i], -i))              # last of the lowest
    if scores[i_best] - scores[i_worst] >= max(min_gap, 1e-12):
        return [(i_best, i_worst)]
    return []


def correct_incorrect_pairs(correct: list[bool], group_size: int, per_problem: int) -> list[tuple[int, int]]:
    """V-STaR's verifier pairs: within each problem's samples, (correct, incorrect) index pairs, up to
    `per_problem` of them, pairing the m-th correct with the m-th incorrect sample cyclically (m = 0, 1,
    ...), so that every sample takes part before any repeats; a problem whose samples are all right or
    all wrong gives none.

    Args:
        correct: [B*G] each sample's correctness, a problem's G samples contiguous.
        group_size: G.
        per_problem: the most pairs a problem gives (at most #correct x #incorrect).

    Returns:
        [(i_correct, i_incorrect)] global indices, problem by problem.
    """
    assert len(correct) % group_size == 0, "correct must hold whole groups"
    pairs = []
    for start in range(0, len(correct), group_size):
        right = [i for i in range(start, start + group_size) if correct[i]]
        wrong = [i for i in range(start, start + group_size) if not correct[i]]
        if not right or not wrong:
            continue
        # m-th pair: (right[m mod r], wrong[(m + t) mod w]) in block t = m // lcm(r, w): the pairs of a block
        # are distinct (they differ mod r or mod w), and block t holds those with j − i ≡ t (mod gcd(r, w))
        lcm = math.lcm(len(right), len(wrong))
        pairs += [(right[m % len(right)], wrong[(m + m // lcm) % len(wrong)])
                  for m in range(min(per_problem, len(right) * len(wrong)))]
    return pairs


def next_level(level: int, accuracy: float, raise_at: float, max_level: int) -> int:
    """Curriculum step: level + 1 when accuracy >= raise_at and level < max_level, else level.

    Args:
        level: the current difficulty level.
        accuracy: the solver's accuracy at it.
        raise_at: the accuracy that moves to the next level.
        max_level: the highest level.

    Returns:
        The next level.
    """
    return level + 1 if accuracy >= raise_at and level < max_level else level


def spin_loss(policy_real: torch.Tensor, policy_synthetic: torch.Tensor, opponent_real: torch.Tensor,
              opponent_synthetic: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SPIN's logistic loss (Chen et al. 2024): the reference solution y (real) against the opponent's
    own sample y' (synthetic) of the same prompt, the opponent being the previous iterate, frozen:
    mean of −log σ(β [(log πθ(y) − log π_old(y)) − (log πθ(y') − log π_old(y'))]), DPO with the opponent
    as its reference.

    Args:
        policy_real, policy_synthetic: [n] sequence log-probs under the model being trained.
        opponent_real, opponent_synthetic: [n] the same under the opponent.
        beta: β (SPIN: 0.1).

    Returns:
        (the 0-dim loss, the [n] margins β[...] before the sigmoid, detached).
    """
    margins = beta * ((policy_real - opponent_real) - (policy_synthetic - opponent_synthetic))      # [n]
    return -F.logsigmoid(margins).mean(), margins.detach()
