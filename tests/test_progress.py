"""Monte Carlo progress (`verifier.source: rollouts`): its pure rewards by hand, its values against a sampler
whose V is known by construction, and a tango run that uses it."""
import json

import pytest
import torch
from conftest import nano_config, run_recipe

from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.models.build import build_char_tokenizer
from cotrain.models.generate import Rollout, left_pad, right_pad
from cotrain.rl.progress import progress_advantages, progress_rewards, prompt_values
from cotrain.train.progress import prefix_values


def test_progress_rewards_by_hand():
    """V after steps 1 and 2: 0.5, 0.25; outcome 0; V(prompt) 0.375. Rewards: 0.5 - 0.375 = +0.125,
    0.25 - 0.5 = -0.25, 0 - 0.25 = -0.25; they add up to outcome - V(prompt) = -0.375. No steps: the answer
    alone, outcome - V(prompt)."""
    assert progress_rewards([0.5, 0.25], 0.0, 0.375) == pytest.approx([0.125, -0.25, -0.25])
    assert progress_rewards([], 1.0, 0.25) == pytest.approx([0.75])
    assert prompt_values([1, 0, 0, 0, 1, 1], group_size=3) == pytest.approx([1 / 3] * 3 + [2 / 3] * 3)


def test_progress_advantages_by_hand():
    """Items [+0.125, -0.25, -0.25] ending on tokens 1, 3, 5 of 7. step: each on its own tokens, 0 after;
    to_go: the sum of the items ending at or after a token, outcome - V(before its item): -0.375 on 0-1,
    -0.5 on 2-3, -0.25 on 4-5, 0 on 6."""
    rewards, ends = [[0.125, -0.25, -0.25]], [[1, 3, 5]]
    step = progress_advantages(rewards, ends, 7, "step")
    assert torch.allclose(step, torch.tensor([[0.125, 0.125, -0.25, -0.25, -0.25, -0.25, 0.0]]))
    to_go = progress_advantages(rewards, ends, 7, "to_go")
    assert torch.allclose(to_go, torch.tensor([[-0.375, -0.375, -0.5, -0.5, -0.25, -0.25, 0.0]]))


def _rollout(tok, prompts: list[list[int]], completions: list[list[int]]) -> Rollout:
    pids, pmask = left_pad(prompts, tok.pad_token_id)
    cids, cmask = right_pad(completions, tok.pad_token_id)
    z = torch.zeros(cids.shape)
    return Rollout(pids, pmask, cids, cmask, z, z, torch.tensor([c[-1] != tok.eos_token_id for c in completions]))


def test_prefix_values_against_a_sampler_whose_v_is_known():
    """A sampler whose continuations of a prefix are right in m = min(4, count of 'g' in the prefix) of its
    k = 4 rows ("#1", else "#0"), each continuation led by one 'x' per prefix token past 5 (so long prefixes
    overrun their budget and are cut). max_new_tokens 10. Group 1 (prompt Q): A "gg\\nb\\n#0" (wrong), B
    "gg\\nggg\\n#1" (right); group 2 (prompt P): C "gggggggggg" (no newline, at the budget: wrong), D "g\\n#0".
      A: V("gg\\n") = 2/4, V("gg\\nb\\n") = 2/4; V(prompt) = (0 + 1)/2 -> rewards [0, 0, -0.5]
      B: V("gg\\n") = 2/4 (A's prefix, continued once), V("gg\\nggg\\n") = 0: its continuations "xx#1" are cut to
         its budget of 3 tokens ("xx#"), graded wrong -> rewards [0, -0.5, +1]
      C: its one step ends the completion at the budget: V = its own outcome 0, no continuation -> [0, 0]
      D: V("g\\n") = 1/4; V(prompt) = 0 -> [+0.25, -0.25]
    Continued: 4 distinct prefixes x 4 rows; generated tokens 3 rows' "#d<eos>" (3 each) x 12 + "xx#d<eos>" x 4
    = 36 + 20 = 56."""
    tok = build_char_tokenizer()
    ids = lambda text: tok.convert_tokens_to_ids(list(text))                      # noqa: E731
    eos = tok.eos_token_id
    texts = ["gg\nb\n#0", "gg\nggg\n#1", "gggggggggg", "g\n#0"]
    completions = [ids(t) + [eos] for t in texts[:2]] + [ids(texts[2]), ids(texts[3]) + [eos]]
    prompts = [ids("Q")] * 2 + [ids("P")] * 2
    ro = _rollout(tok, prompts, completions)
    calls = []

    def sample(rows, *, seed, group_size, max_new_tokens):
        calls.append((len(rows), seed, group_size, max_new_tokens))
        conts = []
        for row in rows:
            prefix = tok.decode(row[1:])                                          # the prompt is one token
            m = min(group_size, prefix.count("g"))
            conts += [ids("x" * max(0, len(prefix) - 5) + ("#1" if r < m else "#0")) + [eos] for r in range(group_size)]
        return _rollout(tok, [r for r in rows for _ in range(group_size)], conts)

    def grade(texts, problems):
        return [t.split("#")[-1].strip() == "1" if "#" in t else False for t in texts]

    progress, adv = prefix_values(sample, tok, ro, texts, prompts, grade, ["q"] * 4, k=4, max_new_tokens=10, seed=7,
                                  group_size=2, outcomes=[0.0, 1.0, 0.0, 0.0])
    assert progress.values == [[0.5, 0.5], [0.5, 0.0], [0.0], [0.25]]
    assert progress.rewards == [pytest.approx([0, 0, -0.5]), pytest.approx([0, -0.5, 1.0]), [0.0, 0.0],
                                pytest.approx([0.25, -0.25])]
    assert progress.prefixes == 4 and progress.generated == 56
    assert calls == [(4, 7, 4, 8)]                      # one call; the longest budget: 10 - len("g\n")
    # each item on its own tokens: A's answer (tokens 5-7) carries -0.5; B's second step (3-6) -0.5, its answer +1
    assert torch.allclose(adv[0, :8], torch.tensor([0, 0, 0, 0, 0, -0.5, -0.5, -0.5]))
    assert torch.allclose(adv[1], torch.tensor([0, 0, 0, -0.5, -0.5, -0.5, -0.5, 1.0, 1.0, 1.0]))
    assert torch.allclose(adv[3, :4], torch.tensor([0.25, 0.25, -0.25, -0.25]))


def test_rollouts_is_refused_where_it_cannot_run():
    """Label-free recipes, a credit that reads verdicts, and GAR's or alpha auto's reading of approvals: one line."""
    cases = {
        ("consistency", "to_go", False, "exp"): "reads the task's answers; recipe consistency is label-free",
        ("tango", "final", False, "exp"): "credit final reads verdicts",
        ("tango", "step", True, "exp"): "adversarial reads",
        ("tango", "step", False, "auto"): "alpha_schedule auto reads",
    }
    for (recipe, credit, adversarial, schedule), message in cases.items():
        raw = nano_config(recipe, verifier={"source": "rollouts"},
                          cotraining={"credit": credit, "adversarial": adversarial, "alpha_schedule": schedule})
        with pytest.raises(UserError, match=message):
            build_config(raw)


def test_tango_with_rollouts_trains_and_costs_what_check_says(sft_run, tmp_path, capsys):
    """Three steps of tango with Monte Carlo progress from the nano SFT model: no verifier is built, the
    process term is nonzero on some step, and the continuations' tokens and FLOPs are the compute role
    `progress` (2 N FLOPs a forward token), summed over the steps into eval.json. `cotrain check` draws the
    run's first step with its seeds: the continuations it measures are step 1's, token for token. The progress
    line shows the reward and no verifier's agreement, which no verifier gives."""
    from cotrain.preflight import check

    raw = nano_config("tango", init=str(sft_run[0]), train={"steps": 3},
                      verifier={"source": "rollouts", "rollouts_k": 2},
                      cotraining={"credit": "step", "alpha": 0.5, "alpha_schedule": "constant"},
                      eval={"n": 10, "k": 0, "n_sampled": 0}, log={"progress": True})
    lines = []
    checked = check(build_config(raw), say=lines.append)["progress"]
    capsys.readouterr()
    results = run_recipe(build_config(raw), tmp_path)
    shown = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tango ")]
    assert shown and all("reward=" in line and "agree" not in line for line in shown), shown
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "gen/progress_abs" in r]
    assert len(steps) == 3 and not (tmp_path / "final" / "verifier").exists()
    assert any(r["gen/adv_process_abs"] > 0 for r in steps)
    generated = sum(r["tokens/progress_generated"] for r in steps)
    assert generated > 0 and results["compute"]["progress"]["tokens_generated"] == generated
    gen, prog = results["compute"]["gen"], results["compute"]["progress"]
    n_params = gen["flops"] / (2 * gen["tokens_forward"] + 6 * gen["tokens_trained"])      # the generator's size
    assert prog["tokens_trained"] == 0
    assert prog["flops"] == pytest.approx(2 * n_params * prog["tokens_forward"], rel=1e-9)
    assert checked["tokens_generated"] == steps[0]["tokens/progress_generated"] > 0
    assert checked["prefixes"] == steps[0]["gen/progress_prefixes"]
    assert checked["flops"] == pytest.approx(steps[0]["flops/progress"], rel=1e-9)
    assert any(line.startswith("progress  step 1's continuations") for line in lines)
