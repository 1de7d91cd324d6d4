"""Multi-Agent Evolve's signals as pure functions (`triad`; `reliability` shares the judge's): a
proposer, a solver and a judge rewarded without labels.

- The judge: its passes give a score (`judge_score`); judging may stop early once the first passes
  agree (`agreement_round`, `decided_scores`).
- Each role's reward: `mae_proposer_reward`, `mae_solver_reward`, or `learnability_reward` for the
  proposer; advantages are normalised per role (`role_advantages`).

Shape letters: N samples of several roles, P judging passes.
"""
from __future__ import annotations

import torch


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
