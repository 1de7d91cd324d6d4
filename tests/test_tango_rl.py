"""Pure RL Tango functions against numbers worked out by hand."""
import math

import pytest
import torch

from cotrain.rl.tango import (
    alpha_at,
    class_weights,
    computing_items,
    final_step_rewards,
    first_error_advantages,
    flip_verdicts,
    generator_rewards,
    mix_advantages,
    most_uncertain,
    only_mixed_groups,
    process_advantages,
    step_rewards,
    step_token_ends,
    unscaled,
    verdict_counts,
    verifier_rewards,
    verifier_trust,
)


def test_step_rewards():
    """K = 3 verdicts [ok, no, ok] -> [+1/3, -1/3, +1/3]; any other count of verdicts -> unusable."""
    assert step_rewards([True, False, True], 3) == pytest.approx([1 / 3, -1 / 3, 1 / 3])
    assert step_rewards([True, False], 3) is None      # one verdict missing
    assert step_rewards([True] * 4, 3) is None         # one verdict too many
    assert step_rewards([], 0) is None                 # a solution without steps has no process reward


def test_step_token_ends():
    """Tokens "1","2","\\n","3","\\n","#","4": line 0 is closed by token 2, line 1 by token 4."""
    pieces = ["1", "2", "\n", "3", "\n", "#", "4"]
    assert step_token_ends(pieces, [0, 1]) == [2, 4]
    assert step_token_ends(pieces, [1, 0]) == [4, 2]                    # order of the request is kept
    assert step_token_ends(["a", "b"], [0]) == [1]                       # no newline: the last token
    assert step_token_ends(["x\n\n", "y", "\nz"], [0, 2]) == [0, 2]      # one token closing two lines
    assert step_token_ends([], [0]) == [0]


def test_process_advantages_by_hand():
    """Group of G=2, T=5, eps=0.

    Sample 0: step rewards [0.5, -0.5] ending at tokens [1, 3]; sample 1: [0.5, 0.5] at [2, 4].
    Pooled [0.5, -0.5, 0.5, 0.5]: mean 0.25, unbiased var (0.0625+0.5625+0.0625+0.0625)/3 = 0.25, std 0.5.
    Normalised: s0 [0.5, -1.5], s1 [0.5, 0.5].
    s0: t<=1 -> 0.5-1.5 = -1.0; t=2,3 -> -1.5; t=4 -> 0.
    s1: t<=2 -> 1.0; t=3,4 -> 0.5.
    A second group with a single step reward keeps it as it is (RL Tango: mean 0, std 1): 1.0 up to its
    end token 0; None -> zeros.
    """
    rewards = [[0.5, -0.5], [0.5, 0.5], [1.0], None]
    ends = [[1, 3], [2, 4], [0], []]
    out = process_advantages(rewards, ends, group_size=2, length=5, eps=0.0)
    expected = torch.tensor([[-1.0, -1.0, -1.5, -1.5, 0.0],
                             [1.0, 1.0, 1.0, 0.5, 0.5],
                             [1.0, 0.0, 0.0, 0.0, 0.0],
                             [0.0] * 5])
    assert torch.allclose(out, expected)
    # two equal rewards normalise to 0 (std 0: the eps keeps it finite)
    assert torch.equal(process_advantages([[0.5], [0.5]], [[0], [1]], group_size=2, length=2), torch.zeros(2, 2))


def test_process_advantages_end_beyond_length_is_clipped():
    out = process_advantages([[1.0, -1.0], [1.0, 1.0]], [[9, 9], [0, 1]], group_size=2, length=3, eps=0.0)
    assert out.shape == (2, 3) and torch.isfinite(out).all()


def test_mix_advantages():
    """alpha 0.25: 0.75 * A_out + 0.25 * A_proc; A_out [1, -1], A_proc [[2, 0], [-2, 4]] -> [[1.25, 0.75], [-1.25, 0.25]]."""
    out = mix_advantages(torch.tensor([1.0, -1.0]), torch.tensor([[2.0, 0.0], [-2.0, 4.0]]), 0.25)
    assert torch.allclose(out, torch.tensor([[1.25, 0.75], [-1.25, 0.25]]))


def test_alpha_schedules():
    """exp (RL Tango's code): max(1e-3, a0 exp(-ln(a0 / 1e-3) (step - 1) / total)). From 0.5 over 3 steps:
    0.5, 0.5 * 500^(-1/3) = 0.0629961, 0.5 * 500^(-2/3) = 0.00793701. From 0.1 over 300 steps: step 101
    is 0.1 * 100^(-1/3) = 0.0215443 and step 300 0.1 * 100^(-299/300) = 0.00101547 (the reference's
    values); past the end it stays at 1e-3."""
    assert alpha_at(7, 10, 0.3) == 0.3
    assert alpha_at(1, 3, 0.5, "exp") == pytest.approx(0.5)
    assert alpha_at(2, 3, 0.5, "exp") == pytest.approx(0.0629961, rel=1e-6)
    assert alpha_at(3, 3, 0.5, "exp") == pytest.approx(0.00793701, rel=1e-6)
    assert alpha_at(101, 300, 0.1, "exp") == pytest.approx(0.0215443, rel=1e-5)
    assert alpha_at(300, 300, 0.1, "exp") == pytest.approx(0.00101547, rel=1e-5)
    assert alpha_at(900, 300, 0.1, "exp") == pytest.approx(1e-3)
    assert alpha_at(1, 1, 0.5, "exp") == pytest.approx(0.5)
    with pytest.raises(ValueError):
        alpha_at(1, 3, 0.5, "cosine")


def test_verifier_rewards():
    """final [T, F, None, F] vs correct [T, T, F, F], format [1, .5, .5, 1], w 0.2:
    [1 + .2, 0 + .1, 0 (no final verdict: no format reward either), 1 + .2]; adversarial adds 1 for the
    rejected incorrect solution (the last)."""
    final, correct, fmt = [True, False, None, False], [True, True, False, False], [1.0, 0.5, 0.5, 1.0]
    assert torch.allclose(verifier_rewards(final, correct, fmt, 0.2), torch.tensor([1.2, 0.1, 0.0, 1.2]))
    assert torch.allclose(verifier_rewards(final, correct, fmt, 0.2, adversarial=True, w_catch=1.0),
                          torch.tensor([1.2, 0.1, 0.0, 2.2]))


def test_most_uncertain_keeps_the_highest_scores_in_their_order():
    """[0.2, 0.9, 0.5, 0.9, 0.1], share 0.5: ceil(2.5) = 3 kept, 0.9 (i=1), 0.9 (i=3), 0.5 (i=2) ->
    [1, 2, 3]; share 0.2: 1 kept, the tie at 0.9 goes to the earlier (i=1); share 0.01: still one;
    share 1: all; no items: none."""
    u = [0.2, 0.9, 0.5, 0.9, 0.1]
    assert most_uncertain(u, 0.5) == [1, 2, 3]
    assert most_uncertain(u, 0.2) == [1]
    assert most_uncertain(u, 0.01) == [1]
    assert most_uncertain(u, 1.0) == [0, 1, 2, 3, 4]
    assert most_uncertain([], 0.5) == []


def test_generator_rewards():
    """correct [T, T, F], approved [T, F, T]: outcome [1, 1, 0]; GAR adds 0.5 to the first only."""
    assert generator_rewards([True, True, False], [True, False, True]).tolist() == [1.0, 1.0, 0.0]
    assert generator_rewards([True, True, False], [True, False, True], adversarial=True, w_approve=0.5).tolist() \
        == [1.5, 1.0, 0.0]


def test_class_weights_by_hand():
    """Batch 1, labels [T, T, T, F]: ema (3, 1); coefficients (1/sqrt 3, 1) = (0.57735, 1);
    mean over the batch (3 * 0.57735 + 1) / 4 = 0.68301 -> weights [0.84530] * 3 + [1.46410].
    Batch 2, labels [T, F]: ema (0.8*3 + 0.2*1, 0.8*1 + 0.2*1) = (2.6, 1.0); coefficients (0.620174, 1),
    mean 0.810087 -> [0.765566, 1.234434]."""
    w, ema = class_weights([True, True, True, False], None, 0.8)
    assert ema == (3.0, 1.0)
    assert torch.allclose(w, torch.tensor([0.84530, 0.84530, 0.84530, 1.46410]), atol=1e-5)
    w, ema = class_weights([True, False], ema, 0.8)
    assert ema == pytest.approx((2.6, 1.0))
    assert torch.allclose(w, torch.tensor([0.765566, 1.234434]), atol=1e-5)
    assert w.mean().item() == pytest.approx(1.0)


def test_class_weights_of_a_class_rarer_than_one_per_batch():
    """RL Tango's code, no clamp: batch 1 all 16 correct -> ema (16, 0); batch 2 15 correct, 1 wrong ->
    ema (0.8*16 + 0.2*15, 0.2*1) = (15.8, 0.2); coefficients (1/sqrt 15.8, 1/sqrt 0.2) = (0.251577, 2.236068),
    mean (15 * 0.251577 + 2.236068) / 16 = 0.375608 -> [0.669785] * 15 + [5.953197]."""
    _, ema = class_weights([True] * 16, None, 0.8)
    w, ema = class_weights([True] * 15 + [False], ema, 0.8)
    assert ema == pytest.approx((15.8, 0.2))
    assert w[0].item() == pytest.approx(0.669785, rel=1e-5) and w[-1].item() == pytest.approx(5.953197, rel=1e-5)


def test_verdict_counts():
    """approved [T, T, F, F, T], correct [T, F, F, T, T]: approved correct 2 (0, 4) of 3 correct,
    rejected incorrect 1 (2) of 2 incorrect."""
    assert verdict_counts([True, True, False, False, True], [True, False, False, True, True]) == (2, 3, 1, 2)


def test_reliability_by_hand():
    """Window of two steps, pooled: approved 9 of 10 correct (TPR 0.9), rejected 8 of 10 incorrect
    (TNR 0.8). BA = 0.85; m = sqrt(0.9 * 0.1 / 10 + 0.8 * 0.2 / 10) = sqrt(0.025) = 0.158114;
    r = (0.85 - 0.5 - 0.158114) / (0.9 - 0.5 - 0.158114) = 0.191886 / 0.241886 = 0.793291."""
    r, ba, m = verifier_trust([(4, 5, 3, 4), (5, 5, 5, 6)], previous=0.0)
    assert ba == pytest.approx(0.85)
    assert m == pytest.approx(0.1581139, abs=1e-7)
    assert r == pytest.approx(0.7932910, abs=1e-6)


def test_reliability_is_zero_at_chance_one_when_sure_and_kept_on_one_class():
    # a verifier approving everything: TPR 1, TNR 0, BA 0.5, m 0 -> r = 0
    assert verifier_trust([(6, 6, 0, 10)], previous=0.7)[0] == 0.0
    # rejecting everything likewise
    assert verifier_trust([(0, 6, 10, 10)], previous=0.7)[0] == 0.0
    # perfect verdicts on 50 + 50 samples: BA 1, m 0 -> r = 1 (clipped from 1.25)
    assert verifier_trust([(50, 50, 50, 50)], previous=0.0)[0] == 1.0
    # BA 0.95 on 2 + 2 samples is not measurably better than chance: m = sqrt(0/2 + 0.25/2) ... TPR 1, TNR 0.5
    # -> BA 0.75, m = sqrt(0 + 0.5 * 0.5 / 2) = 0.353553, room 0.046447, (0.75 - 0.853553) < 0 -> 0
    assert verifier_trust([(2, 2, 1, 2)], previous=0.4)[0] == 0.0
    # the current step holds one class: r stays the previous one, BA unknown
    r, ba, _ = verifier_trust([(50, 50, 50, 50), (3, 8, 0, 0)], previous=0.4)
    assert r == 0.4 and math.isnan(ba)


def test_min_form_process_advantages_by_hand():
    """G = 2, T = 5. Sample 0: rewards [-1/2, +1/2] ending at tokens 1 and 3; sample 1: [+1/2, +1/2] ending
    at 0 and 2. Pooled [-.5, .5, .5, .5]: mean .25, std sqrt(.75/3) = .5, so -1/2 -> -1.5 and +1/2 -> +0.5.
    min (PURE): a token takes the worst step at or after it.
      sample 0: t 0-1 min(-1.5, .5) = -1.5; t 2-3 .5; t 4 0        (to_go: -1, -1, .5, .5, 0)
      sample 1: t 0 .5; t 1-2 .5; t 3-4 0                           (to_go: 1, .5, .5, 0, 0)
    """
    rewards, ends = [[-0.5, 0.5], [0.5, 0.5]], [[1, 3], [0, 2]]
    got = process_advantages(rewards, ends, group_size=2, length=5, credit="min")
    assert torch.allclose(got, torch.tensor([[-1.5, -1.5, 0.5, 0.5, 0.0], [0.5, 0.5, 0.5, 0.0, 0.0]]), atol=1e-5)
    to_go = process_advantages(rewards, ends, group_size=2, length=5)
    assert torch.allclose(to_go, torch.tensor([[-1.0, -1.0, 0.5, 0.5, 0.0], [1.0, 0.5, 0.5, 0.0, 0.0]]), atol=1e-5)


def test_min_form_with_steps_ending_on_one_token_and_past_the_end():
    """Two steps closed by the same token both count there; an end past T is clipped to the last token.
    Sample 0: [+1/3, -1/3, +1/3] ending at 0, 0 and 9 with T = 3; its partner has no usable verdicts.
    Pooled: mean 1/9, deviations 2/9, -4/9, 2/9, std sqrt((24/81) / 2) = sqrt(12)/9, so +1/3 -> 1/sqrt(3)
    = .5774 and -1/3 -> -2/sqrt(3) = -1.1547. t 0: min of all three, -1.1547; t 1-2: the last, .5774."""
    got = process_advantages([[1 / 3, -1 / 3, 1 / 3], None], [[0, 0, 9], []], group_size=2, length=3, credit="min")
    assert torch.allclose(got, torch.tensor([[-2 / math.sqrt(3), 1 / math.sqrt(3), 1 / math.sqrt(3)], [0.0, 0.0, 0.0]]),
                          atol=1e-5)


def test_final_step_rewards_by_hand():
    """K step verdicts and the final one each earn +-1/(K+1); the final item is + only when approved AND
    complete; unusable step verdicts leave the final item alone at +-1."""
    assert final_step_rewards([True, False], 2, False, True) == pytest.approx([1 / 3, -1 / 3, -1 / 3])
    assert final_step_rewards([True, True], 2, True, True) == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    # one right step, then the sample stops: approved or not, rejected where the answer should be
    assert final_step_rewards([True], 1, True, False) == pytest.approx([0.5, -0.5])
    assert final_step_rewards([True], 2, True, True) == pytest.approx([1.0])      # one verdict missing
    assert final_step_rewards([], 0, None, False) == pytest.approx([-1.0])         # no steps, no verdict


def test_stopping_early_no_longer_pays_as_much_as_a_whole_correct_solution():
    """The gaming RL Tango's construction allows: with to_go, 3 right steps then a stop earn the same
    summed process return at the first token as 4 right steps and the answer; with `final` they earn less.
    (Raw sums, before the group's z-normalisation, which is monotone.)"""
    whole = final_step_rewards([True] * 4, 4, True, True)
    early = final_step_rewards([True] * 3, 3, True, False)
    assert sum(step_rewards([True] * 3, 3)) == sum(step_rewards([True] * 4, 4)) == pytest.approx(1.0)
    assert sum(whole) == pytest.approx(1.0) and sum(early) == pytest.approx(0.5)


def test_flip_verdicts_meets_its_rates_and_is_seeded():
    """On a fixed batch of 20,000 labels (half right), the noisy oracle approves 15% of the false ones and
    rejects 4% of the right ones, to within sampling error (3 standard errors); rates 0 change nothing;
    the same seed gives the same flips."""
    import random

    labels = [i % 2 == 0 for i in range(20_000)]
    out = flip_verdicts(labels, 0.15, 0.04, random.Random(7))
    false_approved = sum(o for o, lab in zip(out, labels) if not lab) / 10_000
    right_rejected = sum(not o for o, lab in zip(out, labels) if lab) / 10_000
    assert abs(false_approved - 0.15) < 3 * math.sqrt(0.15 * 0.85 / 10_000)
    assert abs(right_rejected - 0.04) < 3 * math.sqrt(0.04 * 0.96 / 10_000)
    assert flip_verdicts(labels[:50], 0.0, 0.0, random.Random(1)) == labels[:50]
    assert out == flip_verdicts(labels, 0.15, 0.04, random.Random(7))


def test_the_min_form_takes_unscaled_step_rewards():
    """+-1/K becomes +-1 (None stays None): the minimum of scaled rewards would rank a wrong 9-step solution
    (-1/9) above a wrong 3-step one (-1/3)."""
    assert unscaled([[1 / 3, -1 / 3, 1 / 3], None, [-0.5]]) == [[1.0, -1.0, 1.0], None, [-1.0]]
    long, short = step_rewards([True] * 8 + [False], 9), step_rewards([True, True, False], 3)
    assert min(long) > min(short) and min(unscaled([long])[0]) == min(unscaled([short])[0]) == -1.0


def test_first_error_advantages_by_hand():
    """T = 8; -1 on the first rejected item's tokens (after the last item that ended before it), 0 elsewhere.
      sample 0: items +, -, -, - ending at 1, 3, 5, 7: tokens 2-3 (the cascade and the answer left alone)
      sample 1: every item approved: 0 throughout
      sample 2: two right steps, then a final item rejected (stopped early) ending at 5: tokens 3-5
      sample 3: no usable items: 0
      sample 4: a right and a false step closed by one token (one line), then a right one: the line, 0-3
      sample 5: a false item ending past T: clipped, tokens 3-7"""
    rewards = [[0.25, -0.25, -0.25, -0.25], [1 / 3] * 3, [1 / 3, 1 / 3, -1 / 3], None, [1.0, -1.0, 1.0], [0.5, -0.5]]
    ends = [[1, 3, 5, 7], [2, 4, 6], [1, 2, 5], [], [3, 3, 6], [2, 20]]
    got = first_error_advantages(rewards, ends, length=8)
    want = torch.zeros(6, 8)
    want[0, 2:4] = want[2, 3:6] = want[4, 0:4] = want[5, 3:8] = -1.0
    assert torch.equal(got, want)


def test_under_first_error_right_steps_earn_nothing_and_a_wrong_solution_is_not_pushed_down_whole():
    """The two failures of the other constructions, measured on SmolLM2's word problems: RL Tango's to_go
    pays for restating the story as extra right steps (its first token's process advantage rises with each
    restatement); min_final gives every token of a wrong solution one value, in a group that is all wrong
    a uniform push down. Under first_error no token is ever above 0, a restatement's tokens are 0, and only
    the first false step's tokens are blamed. A group of 2, T = 12: sample 0 restates 3 facts (right steps
    ending at 1, 3, 5), then a false step (7) and a rejected final item (11); sample 1 is the false step
    (1) and the final item (5) alone."""
    padded, bare = final_step_rewards([True, True, True, False], 4, False, True), final_step_rewards([False], 1, False, True)
    ends = [[1, 3, 5, 7, 11], [1, 5]]
    to_go = process_advantages([padded, bare], ends, group_size=2, length=12)
    assert to_go[0, 0] > 0 > to_go[1, 0]                       # restating pays under to_go
    min_final = process_advantages(unscaled([padded, bare]), ends, group_size=2, length=12, credit="min")
    assert torch.unique(min_final[0]).numel() == 1 and min_final[0, 0] < 0  # every token of it alike, negative
    assert torch.unique(min_final[1, :6]).numel() == 1 and min_final[1, 0] < 0
    got = first_error_advantages([padded, bare], ends, length=12)
    assert got.max() == 0 and got[0, :6].abs().sum() == 0 and got[1, 6:].abs().sum() == 0
    assert torch.equal(got[0, 6:8], torch.full((2,), -1.0)) and got[0, 8:].abs().sum() == 0
    assert torch.equal(got[1, :2], torch.full((2,), -1.0))


def test_computing_items_by_hand():
    """Steps 0 and 2 compute, step 1 restates a fact: their verdicts and ends stay, the answer's end last;
    verdicts that are not one per step leave the answer's end alone (the final item scored by itself)."""
    assert computing_items([True, True, False], [2, 5, 9, 12], [True, False, True]) == ([True, False], [2, 9, 12])
    assert computing_items([True, True], [3, 7, 9], [False, False]) == ([], [9])         # nothing computes
    assert computing_items([True], [2, 5, 9], [True, True]) == ([], [9])                  # a verdict missing


def test_under_final_compute_a_restated_fact_earns_nothing_and_each_equation_its_reward():
    """A group of 2, T = 10. Sample A restates a fact (line ending at token 2), then a right equation (5) and
    a right, approved answer (7); sample B a false equation (3) and a rejected answer (6). Under
    final_compute A's items are the equation and the answer, +1/2 each, B's -1/2 each: pooled mean 0, std
    sqrt(1/3), so z = +-sqrt(3)/2. To-go: A's tokens 0-5 (the fact's too) sqrt(3), 6-7 sqrt(3)/2; B's 0-3
    -sqrt(3), 4-6 -sqrt(3)/2. Without the restated line A's tokens get the same values: padding pays
    nothing. Under `final` the fact is a third item, +1/3 (z-scores over [1/3, 1/3, 1/3, -1/2, -1/2]), and
    the padded A's first token earns more than the bare one's."""
    a_items = computing_items([True, True], [2, 5, 7], [False, True])
    b_items = computing_items([False], [3, 6], [True])
    a = final_step_rewards(a_items[0], len(a_items[0]), True, True)
    b = final_step_rewards(b_items[0], len(b_items[0]), False, True)
    assert a == pytest.approx([0.5, 0.5]) and b == pytest.approx([-0.5, -0.5])
    got = process_advantages([a, b], [a_items[1], b_items[1]], group_size=2, length=10)
    z = math.sqrt(3) / 2
    want = torch.zeros(2, 10)
    want[0, :6], want[0, 6:8], want[1, :4], want[1, 4:7] = 2 * z, z, -2 * z, -z
    assert torch.allclose(got, want, atol=1e-5)
    bare_items = computing_items([True], [5, 7], [True])
    bare = process_advantages([final_step_rewards(bare_items[0], 1, True, True), b], [bare_items[1], b_items[1]],
                              group_size=2, length=10)
    assert torch.allclose(bare, got, atol=1e-6)                       # with or without the restated fact
    padded_final = process_advantages([final_step_rewards([True, True], 2, True, True), b], [[2, 5, 7], [3, 6]],
                                      group_size=2, length=10)
    bare_final = process_advantages([final_step_rewards([True], 1, True, True), b], [[5, 7], [3, 6]],
                                    group_size=2, length=10)
    assert padded_final[0, 0] > bare_final[0, 0]                       # under final, padding pays


def test_only_mixed_groups_by_hand():
    """G = 2, three groups: rewards (1, 0) mixed, (0, 0) all wrong, (1, 1) all right. Only the first group's
    process advantages stay; the others become 0 (so those groups, whose outcome advantages are 0 too, do
    not train)."""
    process = torch.arange(12, dtype=torch.float32).view(6, 2) - 5                    # [N=6, T=2]
    got = only_mixed_groups(process, torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), group_size=2)
    want = process.clone()
    want[2:] = 0
    assert torch.equal(got, want)
