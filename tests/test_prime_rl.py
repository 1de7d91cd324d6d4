"""PRIME's implicit process rewards (rl/prime.py) against numbers worked out by hand."""
import math

import pytest
import torch

from cotrain.rl.prime import (
    accuracy_filter,
    implicit_process_rewards,
    last_token_mask,
    masked_rloo,
    masked_whiten,
    normalise_process_rewards,
    prime_advantages,
    prm_loss,
    ranking_accuracy,
    reverse_cumsum,
)


def close(tensor: torch.Tensor, expected, tol: float = 1e-6) -> bool:
    return torch.allclose(tensor.float(), torch.tensor(expected, dtype=torch.float32), atol=tol, rtol=0)


def test_implicit_process_rewards_are_beta_times_the_log_ratio_on_valid_tokens():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    q, r = implicit_process_rewards(logp, ref, torch.tensor([[1, 1, 0]]), beta=0.05)
    assert q.tolist() == [[0.5, -1.0, 0.0]]
    assert close(r, [[0.025, -0.05, 0.0]])


def test_prm_loss_by_hand():
    """β = 0.5; sample 0 sums q = 2 -> σ(1) = 0.731059, right: −ln 0.731059 = 0.313262; sample 1 sums
    q = 0.5 (its second token masked) -> σ(0.25) = 0.562177, wrong: −ln 0.437823 = 0.825939; mean 0.569601."""
    q = torch.tensor([[1.0, 1.0], [0.5, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert prm_loss(q, mask, torch.tensor([1.0, 0.0]), beta=0.5).item() == pytest.approx(0.569601, abs=1e-6)


def test_masked_rloo_of_an_outcome_is_leave_one_out():
    """n = 3, outcomes 1, 0, 0 on each sample's last token: 1 − 0 = 1, 0 − 0.5 = −0.5 twice."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[False, True], [False, True], [False, True]])
    assert close(masked_rloo(rewards, mask, 3), [[0.0, 1.0], [0.0, -0.5], [0.0, -0.5]])


def test_masked_rloo_of_process_rewards_keeps_the_samples_own_mean_in_the_baseline():
    """n = 2: sample 0 rewards 0.2, 0.4 (mean 0.3), sample 1 0.1 and a masked token (mean 0.1); S = 0.4,
    baseline S / (n − 1) = 0.4, scale n / (n − 1) = 2: [0.4 − 0.4, 0.8 − 0.4] and [0.2 − 0.4, 0]."""
    rewards = torch.tensor([[0.2, 0.4], [0.1, 7.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert close(masked_rloo(rewards, mask, 2), [[0.0, 0.4], [-0.2, 0.0]])


def test_reverse_cumsum_last_token_and_whitening():
    assert reverse_cumsum(torch.tensor([[1.0, 2.0, 3.0]])).tolist() == [[6.0, 5.0, 3.0]]
    assert last_token_mask(torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])).tolist() == \
        [[False, True, False], [False, False, True], [False, False, False]]
    # 1, 2, 3 valid (mean 2, unbiased variance 1), the fourth masked: −1, 0, 1, 0
    out = masked_whiten(torch.tensor([1.0, 2.0, 3.0, 50.0]), torch.tensor([1, 1, 1, 0]))
    assert out.tolist() == pytest.approx([-1.0, 0.0, 1.0, 0.0], abs=1e-6)


def test_prime_advantages_by_hand():
    """n = 2; sample 0 has 3 valid tokens, process rewards 0.1, 0, 0.1, outcome 1; sample 1 has 2, process
    rewards 0.2, 0.2, outcome 0; prm_coef = gt_coef = 1.
    Process RLOO: means 0.2/3 and 0.2, S = 0.26667, scale 2 -> s0 −0.06667, −0.26667, −0.06667; s1 0.13333,
    0.13333. Outcome RLOO on the last tokens: 2·1 − 1 = 1 and 2·0 − 1 = −1. Sums: s0 −0.06667, −0.26667,
    0.93333; s1 0.13333, −0.86667. Returns: s0 0.6, 0.66667, 0.93333; s1 −0.73333, −0.86667. Whitened over
    the 5 valid tokens: mean 0.12, unbiased variance 2.89244 / 4 = 0.72311, sd 0.85036."""
    process = torch.tensor([[0.1, 0.0, 0.1], [0.2, 0.2, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = prime_advantages(process, torch.tensor([1.0, 0.0]), mask, 2, prm_coef=1.0, gt_coef=1.0)
    assert close(ret, [[0.6, 2 / 3, 14 / 15], [-11 / 15, -13 / 15, 0.0]], 1e-5)
    sd = math.sqrt(2.89244 / 4)
    expected = [[0.48 / sd, 0.54667 / sd, 0.81333 / sd], [-0.85333 / sd, -0.98667 / sd, 0.0]]
    assert close(adv, expected, 1e-4)
    # one source alone: the outcome's return is its RLOO on every token before the last
    _, ret = prime_advantages(process, torch.tensor([1.0, 0.0]), mask, 2, prm_coef=0.0, gt_coef=1.0)
    assert close(ret, [[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])


def test_normalised_process_rewards_keep_every_return_within_one():
    """Returns 0.3, 0.2 and −0.4, 0: the largest in size is 0.4, so r / 0.4."""
    r = torch.tensor([[0.1, 0.2], [-0.4, 0.0]])
    assert close(normalise_process_rewards(r, torch.ones(2, 2)), [[0.25, 0.5], [-1.0, 0.0]], 1e-5)


def test_accuracy_filter_keeps_the_passing_prompts_first_and_fills_with_the_rest():
    """Bounds 0.2 and 0.8 inclusive: prompts 1 (0.5), 2 (0.2), 4 (0.8) pass; 0, 3, 5 do not."""
    acc = [0.0, 0.5, 0.2, 1.0, 0.8, 0.9]
    assert accuracy_filter(acc, 0.2, 0.8, keep=2) == ([1, 2], 3)
    assert accuracy_filter(acc, 0.2, 0.8, keep=5) == ([1, 2, 4, 0, 3], 3)


def test_ranking_accuracy_by_hand():
    """Group 1: scores 3, 1, 2, outcomes 1, 0, 1: pair (0,1) ordered right, (1,2) right, (0,2) no weight
    -> 1. Group 2: scores 0, 1, 2, outcomes 1, 0, 0: (0,1) and (0,2) wrong -> 0. Group 3: equal outcomes
    -> 0.5. Mean 0.5."""
    scores = torch.tensor([3.0, 1.0, 2.0, 0.0, 1.0, 2.0, 5.0, 1.0, 0.0])
    outcome = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    assert ranking_accuracy(scores, outcome, 3) == pytest.approx(0.5)


def test_step_scores_sum_each_steps_tokens():
    """Tokens 0-1 are step 1 (it ends on token 1), 2-4 step 2, 5 the final line: 0.5 − 0.25 and
    1 + 0 − 2."""
    from cotrain.eval.prm_metrics import step_scores

    assert step_scores([0.5, -0.25, 1.0, 0.0, -2.0, 9.0], [1, 4]) == [0.25, -1.0]


def test_prm_metrics_by_hand():
    """Two problems of k = 2 samples. Scores 2, −1 (right, wrong) and 0, 1 (wrong, right): the
    outcomes' AUROC is 3 of 4 positive-negative pairs ordered right (2 > −1, 2 > 0, 1 > −1; 1 < ... no:
    1 > 0 too) -> positives {2, 1}, negatives {−1, 0}: all 4 ordered right, 1.0; within problems:
    problem 1 ordered right, problem 2 ordered right -> ranking 1.0. Steps: sample 1 (right) steps
    0.5, 1.5 both correct; sample 2 (wrong) steps 0.2, −1.2 with the second false; sample 3 (wrong)
    steps −0.5, 0.5 with the first false; sample 4 unlabelled. Step AUROC: correct {0.5, 1.5, 0.2},
    false {−1.2, −0.5}: all 6 pairs ordered right, 1.0. First errors: sample 2's lowest step is its
    second (the first false): match; sample 3's lowest is its first (the first false): match -> 1.0."""
    from cotrain.eval.prm_metrics import prm_metrics

    m = prm_metrics([2.0, -1.0, 0.0, 1.0], [True, False, False, True], 2,
                    [[0.5, 1.5], [0.2, -1.2], [-0.5, 0.5], [1.0]],
                    [[True, True], [True, False], [False, True], None])
    assert m == {"n": 4.0, "n/correct": 2.0, "auroc": 1.0, "ranking_acc": 1.0, "n_steps": 6.0, "n_false_steps": 2.0,
                 "step_auroc": 1.0, "first_error_match": 1.0, "n_first_error": 2.0}
    # a PRM that says nothing (every score 0): AUROC 0.5, ranking 0.0 (ties are not ordered right)
    flat = prm_metrics([0.0] * 4, [True, False, False, True], 2, [[0.0]] * 4, [[True], [False], [False], [True]])
    assert flat["auroc"] == 0.5 and flat["step_auroc"] == 0.5
