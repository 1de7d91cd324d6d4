"""RL core and sampling metrics against numbers worked out by hand."""
import math

import pytest
import torch

from cotrain.eval.metrics import majority_answer, pass_at_k, wilson_interval
from cotrain.rl.losses import aggregate, group_advantages, grpo_loss, kl_k3


def test_group_advantages_one_group():
    """rewards [1,0,0,0]: mean 0.25, unbiased std sqrt((0.75^2 + 3*0.25^2)/3) = 0.5.
    A = (r - 0.25) / (0.5 + 1e-4) = [0.75, -0.25, -0.25, -0.25] / 0.5001."""
    adv = group_advantages(torch.tensor([1.0, 0, 0, 0]), group_size=4)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / 0.5001
    assert torch.allclose(adv, expected, atol=1e-6)


@pytest.mark.parametrize("scale, expected", [
    # groups [1,0] and [1,1]: centred [0.5,-0.5] and [0,0]; group std sqrt(0.5) = 0.707107
    ("group", [0.5 / 0.707207, -0.5 / 0.707207, 0.0, 0.0]),
    # batch std of [1,0,1,1]: mean 0.75, var (3*0.0625 + 0.5625)/3 = 0.25 -> 0.5
    ("batch", [0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0]),
    # Dr. GRPO: centred only
    ("none", [0.5, -0.5, 0.0, 0.0]),
])
def test_group_advantages_scaling(scale, expected):
    adv = group_advantages(torch.tensor([1.0, 0, 1, 1]), group_size=2, scale_rewards=scale)
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-5)


def test_group_advantages_rejects_bad_shape_and_mode():
    with pytest.raises(AssertionError):
        group_advantages(torch.tensor([1.0, 0, 1]), group_size=2)
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0, 0]), group_size=2, scale_rewards="median")


def test_kl_k3():
    """logp = 0, ref = log 0.5: delta = -0.693147; exp(delta) - delta - 1 = 0.5 + 0.693147 - 1 = 0.193147.
    Equal log-probs give 0."""
    kl = kl_k3(torch.tensor([[0.0, -1.0]]), torch.tensor([[math.log(0.5), -1.0]]))
    assert torch.allclose(kl, torch.tensor([[0.193147, 0.0]]), atol=1e-6)


@pytest.mark.parametrize("loss_type, expected", [
    # per-token loss -A with A = [2, -1]: sequence 1 has 2 tokens of -2, sequence 2 one token of +1
    ("grpo", (-2 + 1) / 2),       # mean of sequence means
    ("dr_grpo", (-4 + 1) / (2 * 3)),  # token sum / (N * T)
    ("dapo", (-4 + 1) / 3),       # token sum / token count
])
def test_loss_aggregation_at_ratio_one(loss_type, expected):
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, stats = grpo_loss(logp, logp, torch.tensor([2.0, -1.0]), mask, loss_type=loss_type)
    assert loss.item() == pytest.approx(expected)
    assert stats["clip_ratio"] == 0.0


@pytest.mark.parametrize("ratio, adv, eps_high, expected_loss, clipped", [
    (1.5, 1.0, None, -1.2, "high"),   # min(1.5*1, 1.2*1) = 1.2
    (1.5, 1.0, 0.6, -1.5, None),      # clip-higher lets the ratio reach 1.6
    (0.5, -1.0, None, 0.8, "low"),    # min(-0.5, 0.8*-1) = -0.8 -> loss 0.8
    (0.5, 1.0, None, -0.5, None),     # unclipped term is the smaller: gradient still flows
])
def test_ppo_clip(ratio, adv, eps_high, expected_loss, clipped):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, stats = grpo_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1),
                            epsilon=0.2, epsilon_high=eps_high)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    assert stats["clip_ratio/high"] == (1.0 if clipped == "high" else 0.0)
    assert stats["clip_ratio/low"] == (1.0 if clipped == "low" else 0.0)
    loss.backward()
    # clipped tokens get no gradient; otherwise d(-rho*A)/dlogp = -rho*A
    assert logp.grad.item() == pytest.approx(0.0 if clipped else -ratio * adv, abs=1e-6)


def test_kl_penalty_added():
    """A = 0, one token with KL 0.193147 and beta 0.1: loss 0.0193147; stats report the KL."""
    logp = torch.zeros(1, 1)
    loss, stats = grpo_loss(logp, logp, torch.zeros(1), torch.ones(1, 1), beta=0.1,
                            ref_logp=torch.full((1, 1), math.log(0.5)))
    assert loss.item() == pytest.approx(0.0193147, abs=1e-6)
    assert stats["kl"] == pytest.approx(0.193147, abs=1e-6)


def test_per_token_advantages_and_gradient():
    """Per-token advantages [N, T]; grpo loss = mean over sequences of token means of -A_t, so
    d loss / d logp_t = -A_t / (tokens of its sequence * N) at ratio 1."""
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([[1.0, 3.0]]), torch.ones(1, 2))
    assert loss.item() == pytest.approx(-2.0)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -1.5]]))


def test_aggregate_empty_mask_is_zero_not_nan():
    assert aggregate(torch.ones(2, 2), torch.zeros(2, 2), "dapo").item() == 0.0
    assert aggregate(torch.ones(2, 2), torch.zeros(2, 2), "grpo").item() == 0.0


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
    (4, 0, 1, 0.0),          # nothing correct
    (4, 4, 3, 1.0),          # everything correct
    (10, 3, 1, 0.3),         # pass@1 is the fraction correct
    (8, 1, 8, 1.0),          # n - c < k: a correct sample is always among k = n
])
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("hits, n, expected", [
    # p = 1/2, z^2 = 3.8415: centre (0.5 + 0.19207) / 1.38415 = 0.5;
    # half 1.96 * sqrt(0.025 + 0.0096) / 1.38415 = 0.2634
    (5, 10, (0.2366, 0.7634)),
    # p = 0: centre 0.19207 / 1.38415 = 0.13877 = half, so the interval starts at 0
    (0, 10, (0.0, 0.2775)),
    (10, 10, (0.7225, 1.0)),   # the mirror image
    (0, 0, (0.0, 1.0)),        # no data: everything possible
])
def test_wilson_interval(hits, n, expected):
    lo, hi = wilson_interval(hits, n)
    assert lo == pytest.approx(expected[0], abs=1e-4) and hi == pytest.approx(expected[1], abs=1e-4)


@pytest.mark.parametrize("answers, expected", [
    (["3", "4", "3", None], "3"),  # plain majority
    (["4", "3"], "4"),             # tie: first seen wins
    ([None, None], None),          # nothing parsed
    ([None, "7"], "7"),            # None never wins
])
def test_majority_answer(answers, expected):
    assert majority_answer(answers) == expected


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_subset_with_batch_normalisers_equals_full_batch(loss_type):
    """Rows whose per-token loss is zero can be dropped if the batch's normalisers are kept.
    Rows 1 and 3 have zero loss; the subset {0, 2} with N=4, T=3 and the batch token count gives the
    full-batch value: e.g. dapo = (1+2 + 3) / 7 tokens."""
    per_token = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]])
    full = aggregate(per_token, mask, loss_type)
    sub = aggregate(per_token[[0, 2]], mask[[0, 2]], loss_type, num_sequences=4, num_tokens=7, max_len=3)
    assert sub.item() == pytest.approx(full.item())
    expected = {"grpo": (1.5 + 0 + 3 + 0) / 4, "dr_grpo": 6 / 12, "dapo": 6 / 7}[loss_type]
    assert full.item() == pytest.approx(expected)


@pytest.mark.parametrize("advantages, beta, expected", [
    ([0.0, 0.0, 1.0, -1.0, 0.0, 0.0], 0.0, [1]),        # only the middle group has signal
    ([0.0, 0.0, 1.0, -1.0, 0.0, 0.0], 0.1, [0, 1, 2]),  # KL makes every group count
    ([0.0] * 6, 0.0, []),                                # nothing to learn from
])
def test_contributing_groups(advantages, beta, expected):
    from cotrain.rl.losses import contributing_groups

    assert contributing_groups(torch.tensor(advantages), 2, beta).tolist() == expected


def test_majority_with_answer_equivalence():
    """"1/2", "0.5" and "\\frac{1}{2}" are one answer with three votes, beating two votes for "3"."""
    from fractions import Fraction

    def equal(a, b):
        to = {"1/2": Fraction(1, 2), "0.5": Fraction(1, 2), "\\frac{1}{2}": Fraction(1, 2), "3": Fraction(3)}
        return to[a] == to[b]

    answers = ["3", "1/2", "\\frac{1}{2}", "0.5", "3"]
    assert majority_answer(answers) == "3"            # by strings, "3" has the most votes
    assert majority_answer(answers, equal) == "1/2"   # by value, 1/2 wins and its first spelling is returned
