"""Pure label-free self-play functions (consistency, triad, reliability) against numbers worked out by hand."""
import math

import pytest
import torch

from cotrain.rl.curriculum import next_level
from cotrain.rl.judge_reliability import (
    pairwise_from_pointwise,
    passes_thresholds,
    preference_stability,
    reliability_reward,
    reliability_signals,
)
from cotrain.rl.mae import (
    agreement_round,
    decided_scores,
    judge_score,
    learnability_reward,
    mae_proposer_reward,
    mae_solver_reward,
    role_advantages,
)
from cotrain.rl.majority import majority_vote, pseudo_labels
from cotrain.rl.preference import dpo_loss, preference_pairs, ranking_loss

# ---------------------------------------------------------------- consistency

# 2 groups of 3: group 0 has "4" twice; group 1 has "7" and "8" once each (a tie) and one unparsable answer.
ANSWERS = ["4", "5", "4", "7", "8", None]


def test_majority_vote_by_hand():
    """Group 0: "4" x2 of 3 -> ("4", 2/3). Group 1: "7" and "8" tie at 1, "7" comes first -> ("7", 1/3)
    (the None still counts in the denominator G = 3)."""
    majorities, shares = majority_vote(ANSWERS, 3)
    assert majorities == ["4", "7"]
    assert shares == pytest.approx([2 / 3, 1 / 3])


def test_majority_vote_edge_cases():
    """All None -> (None, 0.0); a 2-2 tie goes to the answer seen first even if its second copy comes last."""
    assert majority_vote([None, None, None], 3) == ([None], [0.0])
    assert majority_vote(["b", "a", "a", "b"], 4) == (["b"], [0.5])
    assert majority_vote([], 3) == ([], [])


def test_majority_vote_rejects_partial_groups():
    with pytest.raises(ValueError, match="multiple of group_size"):
        majority_vote(["1", "2", "3", "4", "5"], 3)          # 5 answers are not whole groups of 3


def test_pseudo_labels_by_hand():
    """Majorities "4" (share 2/3) and "7" (share 1/3).
    min_share 0: group 0 ["4","5","4"] -> [T, F, T]; group 1 ["7","8",None] -> [T, F, F] (None is False).
    min_share 0.5: group 1's share 1/3 < 0.5 -> [None] * 3; group 0 unchanged."""
    assert pseudo_labels(ANSWERS, 3) == [True, False, True, True, False, False]
    assert pseudo_labels(ANSWERS, 3, min_share=0.5) == [True, False, True, None, None, None]
    assert pseudo_labels(ANSWERS, 3, min_share=2 / 3) == [True, False, True, None, None, None]  # share == min kept
    assert pseudo_labels([None, None, None], 3) == [None, None, None]        # no majority at all


# ---------------------------------------------------------------- triad

def test_judge_score():
    """[approve, reject, unparsable, approve] -> (1 + 0 + 0.5 + 1) / 4 = 0.625; no verdicts -> 0.5."""
    assert judge_score([True, False, None, True]) == pytest.approx(0.625)
    assert judge_score([]) == 0.5
    assert judge_score([None, None]) == 0.5
    assert judge_score([False, False]) == 0.0


def test_agreement_round_is_the_smallest_majority():
    """P=1: 1; P=2: 2 (both must be drawn); P=3: 2 of 3; P=4: 3 (2 of 4 is no majority); P=5: 3."""
    assert [agreement_round(p) for p in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_decided_scores_fill_the_passes_not_drawn_with_the_agreed_verdict():
    """P=3, first round [1, 1]: decided, [1, 1, 1] (mean 1, where a third reject would give 2/3);
    [0, 0] -> [0, 0, 0]; two unparsable [0.5, 0.5] agree too -> [0.5] * 3; [1, 0] is open (None).
    P=5, first round [0, 0, 0] -> five 0s; [0, 0, 1] open. P=1: [1] -> [1]."""
    assert decided_scores([1.0, 1.0], 3) == [1.0, 1.0, 1.0]
    assert decided_scores([0.0, 0.0], 3) == [0.0, 0.0, 0.0]
    assert decided_scores([0.5, 0.5], 3) == [0.5, 0.5, 0.5]
    assert decided_scores([1.0, 0.0], 3) is None
    assert decided_scores([0.0, 0.0, 0.0], 5) == [0.0] * 5
    assert decided_scores([0.0, 0.0, 1.0], 5) is None
    assert decided_scores([1.0], 1) == [1.0]
    with pytest.raises(AssertionError):
        decided_scores([1.0, 1.0, 1.0], 3)  # the first round of P=3 is 2 passes


def test_mae_proposer_reward():
    """Q 0.9, S 0.3, F 1: (0.9 + 0.7 + 1) / 3 = 0.866667.
    Q 0.5 < 0.7: difficulty dropped, (0.5 + 1) / 3 = 0.5.
    Q exactly 0.7 keeps difficulty: (0.7 + 0.7 + 1) / 3 = 0.8."""
    assert mae_proposer_reward(0.9, 0.3, 1.0) == pytest.approx(2.6 / 3)
    assert mae_proposer_reward(0.5, 0.3, 1.0) == pytest.approx(0.5)
    assert mae_proposer_reward(0.7, 0.3, 1.0) == pytest.approx(0.8)
    assert mae_proposer_reward(0.5, 0.3, 1.0, min_quality=0.4) == pytest.approx((0.5 + 0.7 + 1.0) / 3)


def test_mae_solver_reward():
    """0.5 * 0.8 + 0.5 * 1.0 = 0.9."""
    assert mae_solver_reward(0.8, 1.0) == pytest.approx(0.9)
    assert mae_solver_reward(0.0, 0.0) == 0.0


def test_role_advantages_by_hand():
    """eps 0. rewards [1, 2, 3, 0.5, 0.5, 4], roles [p, s, p, s, s, j].
    p: [1, 3], mean 2, population std 1 -> [-1, 1].
    s: [2, 0.5, 0.5], mean 1, deviations [1, -0.5, -0.5], population var (1 + .25 + .25) / 3 = 0.5,
       std 0.707107 -> [1.414214, -0.707107, -0.707107].
    j: a single sample -> 0."""
    rewards = torch.tensor([1.0, 2.0, 3.0, 0.5, 0.5, 4.0])
    out = role_advantages(rewards, ["p", "s", "p", "s", "s", "j"], eps=0.0)
    expected = torch.tensor([-1.0, math.sqrt(2), 1.0, -1 / math.sqrt(2), -1 / math.sqrt(2), 0.0])
    assert torch.allclose(out, expected, atol=1e-6)


def test_role_advantages_equal_rewards_are_zero():
    """A role whose rewards are all equal has std 0: (r - mean) = 0, so 0 / eps = 0."""
    out = role_advantages(torch.tensor([0.3, 0.3, 0.3]), ["s", "s", "s"])
    assert out.tolist() == [0.0, 0.0, 0.0]


def test_learnability_reward():
    assert learnability_reward(False, True, 0.5) == -1.0     # unparsable, whatever else
    assert learnability_reward(True, False, 0.5) == -0.5     # parsable but invalid
    assert learnability_reward(True, True, 0.25) == pytest.approx(0.75)  # 1 - 0.25
    assert learnability_reward(True, True, 0.0) == 0.0       # never solved: nothing to learn
    assert learnability_reward(True, True, 1.0) == 0.0       # always solved: nothing to learn
    assert learnability_reward(True, True, None) == 0.0      # pass rate unknown


# ---------------------------------------------------------------- reliability

def test_preference_stability_by_hand():
    """Pair 0 [1, 1, -1, 1]: mode 1 agrees in 3 of 4 -> 0.75. Pair 1 [0, -1, 0, 1]: mode 0 in 2 of 4 -> 0.5.
    Mean (0.75 + 0.5) / 2 = 0.625."""
    out = preference_stability(torch.tensor([[1, 1, -1, 1], [0, -1, 0, 1]]))
    assert out.ndim == 0
    assert out.item() == pytest.approx(0.625)


def test_preference_stability_edge_cases():
    """Two modes tie ([1, -1]: either one agrees with 1 of 2 -> 0.5); no pairs -> 1.0; all agree -> 1.0."""
    assert preference_stability(torch.tensor([[1.0, -1.0]])).item() == pytest.approx(0.5)
    assert preference_stability(torch.zeros(0, 3)).item() == 1.0
    assert preference_stability(torch.tensor([[-1, -1, -1]])).item() == 1.0


# C = 3 candidates scored over P = 2 passes.
SCORES = torch.tensor([[0.2, 0.8],
                       [0.5, 0.8],
                       [0.1, 0.9]])


def test_pairwise_from_pointwise_by_hand():
    """(0,1): sign([0.2-0.5, 0.8-0.8]) = [-1, 0]; (0,2): sign([0.1, -0.1]) = [1, -1]; (1,2): sign([0.4, -0.1]) = [1, -1]."""
    out = pairwise_from_pointwise(SCORES)
    assert out.dtype == torch.float32
    assert out.tolist() == [[-1.0, 0.0], [1.0, -1.0], [1.0, -1.0]]
    assert pairwise_from_pointwise(torch.ones(1, 4)).shape == (0, 4)    # one candidate: no pairs


def test_reliability_signals_by_hand():
    """cons: population variances over passes c0 [.2, .8] -> .09, c1 [.5, .8] -> .0225, c2 [.1, .9] -> .16;
       mean .2725 / 3 = .0908333 -> cons 0.9091667.
    sep: strong = c0, c1: mean of [.2, .8, .5, .8] = 0.575; weak c2: 0.5 -> 0.075.
    stab (derived): pairs [[-1, 0], [1, -1], [1, -1]] each agree 1 of 2 -> 0.5.
    stab (given prefs [[1, 1], [1, -1]]): (1 + 0.5) / 2 = 0.75."""
    strong = torch.tensor([True, True, False])
    signals = reliability_signals(SCORES, strong)
    assert set(signals) == {"cons", "sep", "stab"}
    assert all(type(v) is float for v in signals.values())
    assert signals["cons"] == pytest.approx(1 - 0.2725 / 3, abs=1e-6)
    assert signals["sep"] == pytest.approx(0.075, abs=1e-6)
    assert signals["stab"] == pytest.approx(0.5)
    given = reliability_signals(SCORES, strong, prefs=torch.tensor([[1, 1], [1, -1]]))
    assert given["stab"] == pytest.approx(0.75)
    assert given["cons"] == pytest.approx(signals["cons"])


def test_reliability_signals_one_sided_separation_is_zero():
    """Every candidate strong (or every one weak): nothing to separate -> sep 0.0."""
    assert reliability_signals(SCORES, torch.tensor([True, True, True]))["sep"] == 0.0
    assert reliability_signals(SCORES, torch.tensor([False, False, False]))["sep"] == 0.0


def test_reliability_reward():
    """weights cons 1, sep 2: 1 * 0.9 + 2 * 0.2 = 1.3 (stab has no weight, so it is ignored)."""
    signals = {"cons": 0.9, "sep": 0.2, "stab": 0.5}
    assert reliability_reward(signals, {"cons": 1.0, "sep": 2.0}) == pytest.approx(1.3)
    assert reliability_reward(signals, {}) == 0
    with pytest.raises(KeyError):
        reliability_reward(signals, {"acc": 1.0})         # a weight for a signal that does not exist


def test_passes_thresholds():
    signals = {"cons": 0.9, "sep": 0.2}
    assert passes_thresholds(signals, {"cons": 0.9, "sep": 0.1})      # equality passes
    assert not passes_thresholds(signals, {"cons": 0.5, "sep": 0.3})  # sep 0.2 < 0.3
    assert passes_thresholds(signals, {})                             # no thresholds: nothing to fail
    with pytest.raises(KeyError):
        passes_thresholds(signals, {"stab": 0.5})


# ---------------------------------------------------------------- preference training

def test_dpo_loss_by_hand():
    """beta 0.5, refs all -1.5.
    Pair 0: pc -1, pr -2: (0.5) - (-0.5) = 1 -> -logsigmoid(0.5) = log(1 + e^-0.5) = 0.474077.
    Pair 1: pc -2, pr -1: (-0.5) - (0.5) = -1 -> -logsigmoid(-0.5) = log(1 + e^0.5) = 0.974077.
    Mean 0.724077. All-zero inputs -> log 2."""
    pc = torch.tensor([-1.0, -2.0])
    pr = torch.tensor([-2.0, -1.0])
    ref = torch.tensor([-1.5, -1.5])
    assert dpo_loss(pc, pr, ref, ref, 0.5).item() == pytest.approx(0.724077, abs=1e-6)
    zeros = torch.zeros(3)
    assert dpo_loss(zeros, zeros, zeros, zeros, 0.1).item() == pytest.approx(math.log(2))


def test_dpo_loss_gradient():
    """d loss / d pc_k = -(beta / n) * sigmoid(-beta * logit_k); d / d pr_k is its negation.
    Pair 0: -0.25 * sigmoid(-0.5) = -0.25 * 0.377541 = -0.094385.
    Pair 1: -0.25 * sigmoid(0.5) = -0.25 * 0.622459 = -0.155615.
    Descent raises the chosen log-probs and lowers the rejected ones, most where the policy is wrong (pair 1)."""
    pc = torch.tensor([-1.0, -2.0], requires_grad=True)
    pr = torch.tensor([-2.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.5, -1.5])
    dpo_loss(pc, pr, ref, ref, 0.5).backward()
    assert torch.allclose(pc.grad, torch.tensor([-0.094385, -0.155615]), atol=1e-6)
    assert torch.allclose(pr.grad, -pc.grad)
    assert (pc.grad < 0).all() and (pr.grad > 0).all()


def test_ranking_loss_by_hand():
    """logps [-1, -2, -3], scores [1, 0, 0.5]; pairs with s_i > s_j: (0,1), (0,2), (2,1).
    margin 0: relu(-2+1) = 0, relu(-3+1) = 0, relu(-2+3) = 1 -> 1/3.
    margin 1.5: relu(0.5) = 0.5, relu(-0.5) = 0, relu(2.5) = 2.5 -> 3/3 = 1."""
    logps = torch.tensor([-1.0, -2.0, -3.0])
    scores = torch.tensor([1.0, 0.0, 0.5])
    assert ranking_loss(logps, scores).item() == pytest.approx(1 / 3)
    assert ranking_loss(logps, scores, margin=1.5).item() == pytest.approx(1.0)


def test_ranking_loss_gradient():
    """Margin 0: only pair (2,1) is violated, loss = (logp_1 - logp_2) / 3 -> grad [0, +1/3, -1/3]:
    descent raises the better candidate 2 and lowers the worse candidate 1."""
    logps = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    ranking_loss(logps, torch.tensor([1.0, 0.0, 0.5])).backward()
    assert torch.allclose(logps.grad, torch.tensor([0.0, 1 / 3, -1 / 3]))


def test_ranking_loss_without_pairs_is_attached_zero():
    """All scores tied: no pair qualifies -> 0, still differentiable (zero gradient)."""
    logps = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = ranking_loss(logps, torch.tensor([0.5, 0.5]))
    assert loss.item() == 0.0 and loss.grad_fn is not None
    loss.backward()
    assert logps.grad.tolist() == [0.0, 0.0]


def test_preference_pairs():
    """[0.2, 0.9, 0.9, 0.1, 0.1]: best = first 0.9 (index 1), worst = last 0.1 (index 4), gap 0.8."""
    scores = [0.2, 0.9, 0.9, 0.1, 0.1]
    assert preference_pairs(scores, 0.5) == [(1, 4)]
    assert preference_pairs(scores, 0.9) == []                 # gap 0.8 < 0.9
    assert preference_pairs([0.0, 0.5], 0.5) == [(1, 0)]       # gap == min_gap is kept
    assert preference_pairs([0.0, 1.0], 0.0) == [(1, 0)]       # min_gap 0: any difference
    assert preference_pairs([0.5, 0.5, 0.5], 0.0) == []        # no difference: no pair
    assert preference_pairs([], 0.1) == []


def test_next_level():
    assert next_level(2, 0.8, 0.8, 5) == 3     # accuracy reaches raise_at
    assert next_level(2, 0.79, 0.8, 5) == 2    # not yet
    assert next_level(5, 1.0, 0.8, 5) == 5     # already at the top


def test_consistency_rewards_by_hand():
    """w = 0.25: approved and agreeing 0.25 + 0.75 = 1.0; approved only 0.25; agreeing only 0.75;
    unparsable verdict and no pseudo-label 0.0."""
    from cotrain.rl.majority import consistency_rewards

    r = consistency_rewards([True, False, True, None], [True, True, False, None], 0.25)
    assert r.tolist() == pytest.approx([1.0, 0.25, 0.75, 0.0])
    with pytest.raises(ValueError):
        consistency_rewards([True], [True, False], 0.5)


def test_preference_stability_counts_an_unstated_judgment_but_never_as_the_mode():
    """Pair 1: passes 1, 1, UNSTATED -> mode 1 in 2 of 3; pair 2: UNSTATED three times -> 0 of 3.
    Mean (2/3 + 0) / 2 = 1/3."""
    from cotrain.train.selfplay import UNSTATED

    prefs = torch.tensor([[1.0, 1.0, UNSTATED], [UNSTATED, UNSTATED, UNSTATED]])
    assert preference_stability(prefs).item() == pytest.approx(1 / 3)


def test_preference_metrics_by_hand():
    """Two questions of C = 3 candidates; truth: q0 (right, wrong, right), q1 (wrong, wrong, None).
    q0's pairs (0,1) and (1,2) have one right and one wrong candidate: the right one is first in (0,1)
    and second in (1,2); (0,2) are both right and do not count. Judgments: (0,1): 1, 1 (both agree);
    (0,2): 0, 1; (1,2): -1, UNSTATED (one agrees). q1's pair (0,1) is two wrong ones: no count.
    gt/pair_agree = 3 / 4; stated: 7 of 8 judgments."""
    from cotrain.train.selfplay import UNSTATED, preference_metrics

    prefs = [torch.tensor([[1.0, 1.0], [0.0, 1.0], [-1.0, UNSTATED]]), torch.tensor([[1.0, -1.0]])]
    chosen = [[(0, 1), (0, 2), (1, 2)], [(0, 1)]]
    correct = [True, False, True, False, False, None]
    m = preference_metrics(prefs, chosen, correct, 3)
    assert m == {"judge/pair_stated": pytest.approx(7 / 8), "gt/pair_agree": pytest.approx(3 / 4)}


def test_a_pairwise_warm_up_example_stands_a_solution_beside_the_reference_or_its_corruption():
    """For every example: the problem's question, the given solution one of the two, the other the
    reference or a corruption of it (one wrong step), and a target whose preference is the ground truth's."""
    import random

    from cotrain.roles.verifier import parse_preference
    from cotrain.tasks.arith import ArithTask
    from cotrain.train.verifier import pair_example

    task, rng = ArithTask(), random.Random(0)
    seen = set()
    for p in task.problems("train", 40, seed=2):
        wrong = task.corrupt(p, 0, random.Random(1))[1]
        for given in (p.solution, wrong):
            question, first, second, target = pair_example(task, p, given, rng)
            assert question == p.question and given in (first, second)
            other = second if first == given else first
            right = [task.grade(s, p) >= 1 for s in (first, second)]
            assert parse_preference(target) == int(right[0]) - int(right[1])
            seen.add((other == p.solution, first == given))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}  # both kinds, both orders
