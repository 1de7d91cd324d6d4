"""Tiny models, the char tokenizer, save/load, and rollouts."""
import dataclasses
import math

import pytest
import torch

from cotrain.config import ModelConfig
from cotrain.errors import UserError
from cotrain.models.build import build_model, load_model, save_model
from cotrain.models.generate import (
    _generate,
    completion_logprobs,
    concat_rollouts,
    entropy_of,
    generate,
    group_logprobs,
    sample_token,
)


@pytest.fixture(scope="module")
def nano():
    return build_model(ModelConfig(preset="nano"), seed=0)


def test_char_tokenizer_round_trip_and_specials(nano):
    _, tok = nano
    text = "12+34=46\n46-5=41\n#41 CORRECT?"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id


def test_save_and_load_round_trip(nano, tmp_path):
    model, tok = nano
    save_model(model, tok, tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").is_file()
    loaded, tok2 = load_model(tmp_path / "m")
    assert tok2.padding_side == "left" and tok2("1+2")["input_ids"] == tok("1+2")["input_ids"]
    for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k


def test_load_rejects_non_model_paths(tmp_path):
    with pytest.raises(UserError, match="not a model directory"):
        load_model(tmp_path)


def _rollout(model, tok, group_size=1, **kw):
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n"]]
    return generate(model, prompts, group_size=group_size, max_new_tokens=10, eos_id=tok.eos_token_id,
                    pad_id=tok.pad_token_id, **kw), prompts


def test_rollout_logprobs_match_training_forward(nano):
    """The sampler's log-probs equal a fresh forward pass over the finished sequences (ratio = 1)."""
    model, tok = nano
    ro, _ = _rollout(model, tok, group_size=4, temperature=2.0, seed=0)
    logp, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                  temperature=2.0)
    m = ro.completion_mask.bool()
    assert torch.allclose(logp[m], ro.logp[m], atol=1e-5)
    assert ro.completion_ids.shape[0] == 12 and ro.truncated.dtype == torch.bool
    # a row ends at its first eos: nothing is generated after it
    for ids, mask, trunc in zip(ro.completion_ids, ro.completion_mask, ro.truncated):
        n = int(mask.sum())
        assert trunc == (tok.eos_token_id not in ids[:n].tolist())
        assert (ids[n:] == tok.pad_token_id).all()


def test_token_logprobs_by_hand_and_against_the_plain_expression(monkeypatch):
    """Logits (0, ln 3), target 1: log-prob ln 3/4, gradient one-hot - softmax = (-1/4, +1/4). In chunks of
    float64, float32 and bf16 logits give the plain expression's values and gradients bit for bit in one
    chunk (the same operations; bf16: the gradient rounded to bf16 as the plain expression's upcast
    rounds it), and up to rounding in chunks of 3 positions."""
    import cotrain.models.generate as gen

    x = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64, requires_grad=True)
    lp = gen.token_logprobs(x, torch.tensor([1]))
    lp.sum().backward()
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-15)
    assert torch.allclose(x.grad, torch.tensor([[-0.25, 0.25]], dtype=torch.float64), atol=1e-15)
    for chunked in (False, True):  # one chunk: bit for bit; chunks of 3 positions: up to the reductions' rounding
        if chunked:
            monkeypatch.setattr(gen, "LOGPROB_CHUNK_BYTES", 3 * 4 * 11)
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            logits = torch.randn(2, 5, 11, dtype=dtype, requires_grad=True)
            targets, w = torch.randint(0, 11, (2, 5)), torch.randn(2, 5, dtype=torch.float64)
            ours = gen.token_logprobs(logits, targets, 0.7)
            (ours.double() * w).sum().backward()
            g_ours, logits.grad = logits.grad.clone(), None
            x = gen.upcast(logits) / 0.7
            plain = x.gather(-1, targets[..., None]).squeeze(-1) - x.logsumexp(-1)
            (plain.double() * w).sum().backward()
            assert ours.dtype == plain.dtype and g_ours.dtype == dtype, dtype
            if chunked:
                tol = 1e-12 if dtype == torch.float64 else 1e-5
                assert torch.allclose(ours, plain, atol=tol, rtol=0), dtype
                assert torch.allclose(g_ours.double(), logits.grad.double(), atol=tol, rtol=0), dtype
            else:
                assert torch.equal(ours, plain) and torch.equal(g_ours, logits.grad), dtype


def test_group_logprobs_equal_full_forward_and_backprop(nano):
    model, tok = nano
    ro, _ = _rollout(model, tok, group_size=3, temperature=1.5, seed=1)
    full, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    shared, ent = group_logprobs(model, ro.prompt_ids[::3], ro.prompt_mask[::3], ro.completion_ids,
                                 ro.completion_mask, 3, with_entropy=True)
    m = ro.completion_mask.bool()
    assert torch.allclose(full[m], shared[m], atol=1e-5)
    assert (ent[m] > 0).all()
    shared[m].sum().backward()
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_greedy_is_deterministic_and_seeded_sampling_reproducible(nano):
    model, tok = nano
    a, _ = _rollout(model, tok, greedy=True)
    b, _ = _rollout(model, tok, greedy=True)
    assert torch.equal(a.completion_ids, b.completion_ids)
    c, _ = _rollout(model, tok, group_size=2, seed=5)
    d, _ = _rollout(model, tok, group_size=2, seed=5)
    assert torch.equal(c.completion_ids, d.completion_ids)


def test_top_p_keeps_only_the_nucleus():
    from cotrain.models.generate import _top_p_filter

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = _top_p_filter(logits, 0.7).isfinite()
    # 0.5 alone is below 0.7, 0.5 + 0.3 crosses it: the first two tokens stay
    assert kept.tolist() == [[True, True, False, False]]


def test_top_k_samples_among_the_k_most_likely_tokens_renormalised():
    """Probabilities (0.5, 0.3, 0.15, 0.05), k = 2: the draw's distribution is (0.625, 0.375, 0, 0), and
    u = 0.7 falls past 0.625: the second token."""
    from cotrain.models.generate import choose_tokens

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64))
    token, logp = choose_tokens(logits, torch.tensor([0.7], dtype=torch.float64), temperature=1.0, top_p=1.0,
                                greedy=False, top_k=2)
    assert logp.exp()[0].tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0]) and token.tolist() == [1]
    token, _ = choose_tokens(logits, torch.tensor([0.7], dtype=torch.float64), temperature=1.0, top_p=1.0,
                             greedy=False, top_k=0)
    assert token.tolist() == [1]  # all four: 0.7 falls in (0.5, 0.8]


CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_pretrained_path_with_chat_template_runs_grpo(nano, tmp_path):
    """`model.path` loads a saved causal LM with its chat template; prompts go through the template."""
    from cotrain.config import build_config
    from cotrain.models.prompts import encode_generator_prompts, uses_chat
    from cotrain.recipes import grpo
    from tests.conftest import nano_config

    model, tok = nano
    tok.chat_template = CHAT_TEMPLATE
    save_model(model, tok, tmp_path / "chat_model")
    tok.chat_template = None
    _, loaded_tok = load_model(tmp_path / "chat_model")
    assert uses_chat(loaded_tok)
    ids = encode_generator_prompts(loaded_tok, ["1+2"])[0]
    text = loaded_tok.decode(ids, skip_special_tokens=True)
    assert text.startswith("<user>Solve the problem step by step") and text.endswith("Problem: 1+2\n<assistant>")
    raw = nano_config("grpo", model={"path": str(tmp_path / "chat_model")}, train={"steps": 2},
                      grpo={"max_new_tokens": 8}, eval={"n": 4, "k": 0})
    raw["model"] = {"path": str(tmp_path / "chat_model")}
    results = grpo.run(build_config(raw), tmp_path / "run")
    assert 0.0 <= results["generator"]["test"]["pass@1"] <= 1.0
    assert (tmp_path / "run" / "final" / "generator" / "tokenizer_config.json").is_file()


def test_group_logprobs_with_single_token_completions(nano):
    model, tok = nano
    ro, _ = _rollout(model, tok, group_size=2, seed=0)
    one = ro.completion_ids[:, :1]
    logp, _ = group_logprobs(model, ro.prompt_ids[::2], ro.prompt_mask[::2], one, torch.ones_like(one), 2)
    full, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, one, torch.ones_like(one))
    assert logp.shape == (6, 1) and torch.allclose(logp, full, atol=1e-5)


def test_sample_token_inverts_the_cdf_by_hand():
    """probs [0.5, 0, 0.3, 0.2]: cdf [0.5, 0.5, 0.8, 1.0]; u 0.1 -> 0, 0.55 -> 2 (token 1 has p = 0 and is
    skipped), 0.79 -> 2, 0.85 -> 3, and a u just below 1 stays on the last token."""
    logp = torch.tensor([0.5, 0.0, 0.3, 0.2]).log().expand(5, 4)
    u = torch.tensor([0.1, 0.55, 0.79, 0.85, 1 - 1e-12], dtype=torch.float64)
    assert sample_token(logp, u).tolist() == [0, 2, 2, 3, 3]



def test_entropy_of_counts_zero_probability_tokens_as_zero():
    """probs [0.5, 0, 0.25, 0.25] (token 1 at log-prob -inf, as top-p leaves it): entropy
    0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2, with no NaN from 0 * -inf; a one-hot row has entropy 0."""
    logp = torch.tensor([[0.5, 0.0, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]).log()
    assert torch.allclose(entropy_of(logp), torch.tensor([1.5 * math.log(2), 0.0]), atol=1e-7)


def test_a_groups_samples_do_not_depend_on_the_rest_of_its_batch(nano):
    """The seeded noise belongs to (seed, group): generating a prompt's group alone, or at another
    position of a batch split as torchrun splits it, gives the same completions."""
    model, tok = nano
    whole, prompts = _rollout(model, tok, group_size=3, temperature=1.5, seed=7)
    parts = [_generate(model, prompts[:1], 0, max_new_tokens=10, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                       temperature=1.5, top_p=1.0, greedy=False, seed=7, bf16=False, group_size=3),
             _generate(model, prompts[1:], 1, max_new_tokens=10, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                       temperature=1.5, top_p=1.0, greedy=False, seed=7, bf16=False, group_size=3)]
    joined = concat_rollouts(parts, tok.pad_token_id)
    assert torch.equal(joined.completion_ids, whole.completion_ids)
    assert torch.equal(joined.completion_mask, whole.completion_mask)
    assert torch.equal(joined.prompt_ids, whole.prompt_ids) and torch.equal(joined.truncated, whole.truncated)
    assert torch.allclose(joined.logp, whole.logp, atol=1e-5)
    other, _ = _rollout(model, tok, group_size=3, temperature=1.5, seed=8)
    assert not torch.equal(other.completion_ids, whole.completion_ids)


def test_ngram_drafter_by_hand():
    """Source [5, 6, 7, 8, 5, 6, 9]. After [1, 5, 6] the bigram (5, 6) ends at positions 2 and 6; the one
    nearest the output's length 3 is 2, so the draft is what follows it: [7, 8, 5] (k = 3). After [4, 9]
    nothing longer than (9,) matches, and 9 ends the source: no draft. After [8] the unigram ends at 4:
    [5, 6]. k = 0 or an empty output drafts nothing."""
    from cotrain.models.generate import NgramDrafter

    d = NgramDrafter([[5, 6, 7, 8, 5, 6, 9]])
    assert d.draft(0, [1, 5, 6], 3) == [7, 8, 5]
    assert d.draft(0, [4, 9], 3) == []
    assert d.draft(0, [8], 2) == [5, 6]
    assert d.draft(0, [8], 0) == [] and d.draft(0, [], 3) == []
    assert d.draft(0, [7, 8, 5, 6], 8) == [9]  # (8, 5, 6) ends at 6: the draft stops at the source's end


class _Oracle:
    """Drafts each row's true continuation (from a plain rollout), every `wrong`-th token corrupted (its
    id's last bit flipped: another token of the vocabulary)."""

    def __init__(self, ro, wrong):
        self.rows = [ids[:int(m.sum())].tolist() for ids, m in zip(ro.completion_ids, ro.completion_mask)]
        self.wrong = wrong

    def draft(self, row, generated, k):
        nxt = self.rows[row][len(generated):len(generated) + k]
        return [t ^ 1 if self.wrong and (len(generated) + i) % self.wrong == 0 else t for i, t in enumerate(nxt)]


@pytest.mark.parametrize("greedy", [True, False])
def test_compiled_decoding_gives_the_samples_of_plain_decoding(nano, greedy, monkeypatch):
    """`generate(compiled=True)`: the static cache and the loop that keeps finished rows give the
    completions, ends and truncation flags of the plain loop, and its log-probs and entropies up to
    float rounding (dynamo traces the model; the "eager" backend skips code generation)."""
    import cotrain.models.generate as gen

    monkeypatch.setattr(gen, "COMPILE_BACKEND", "eager")
    model, tok = nano
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "9-9\n"]]
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.3, top_p=0.95,
              greedy=greedy, seed=5, bf16=False, group_size=3)
    plain = _generate(model, prompts, 0, **kw)
    # sampled, a row ends while others go on (greedy, the untrained nano model writes to the limit)
    assert 0 < plain.truncated.sum() < len(plain.truncated) or greedy
    ro = _generate(model, prompts, 0, compiled=True, **kw)
    for name in ("completion_ids", "completion_mask", "truncated", "prompt_ids", "prompt_mask"):
        assert torch.equal(getattr(ro, name), getattr(plain, name)), name
    assert torch.allclose(ro.logp, plain.logp, atol=1e-9) and torch.allclose(ro.entropy, plain.entropy, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampling_and_entropy_equal_their_plain_expressions_bit_for_bit(dtype):
    """The decode loop's sampling (the cdf summed in float64 from each float32 term) and entropy (tokens above
    -inf counted) equal their plain expressions bit for bit, on log-probs with tokens at -inf (top-k) and a row
    of NaN (a broken model), which counts 0 either way."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g, dtype=dtype) * 4
    logits[:3, ::3] = float("-inf")
    logp = logits.log_softmax(-1)
    logp[5] = float("nan")
    u = torch.rand(6, generator=g, dtype=torch.float64)
    cdf = logp.exp().double().cumsum(-1)
    plain_tokens = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1).clamp(max=49)
    assert torch.equal(sample_token(logp[:5], u[:5]), plain_tokens[:5])
    plain_entropy = -torch.where(logp.isfinite(), logp.exp() * logp, 0.0).sum(-1)
    assert torch.equal(entropy_of(logp), plain_entropy)


@pytest.mark.parametrize("dtype, bf16", [("float32", False), ("float32", True), ("float64", True)],
                         ids=["fp32", "bf16-autocast", "float64-under-autocast"])
def test_a_cache_with_room_decodes_exactly_as_a_growing_one(nano, dtype, bf16, monkeypatch):
    """The plain loop's cache (`roomy`: keys and values written in place, float32 ones held in bf16 under bf16
    autocast) gives bit for bit the rollout of transformers' `DynamicCache`, which concatenates a pass's keys onto
    the whole cache and leaves autocast to cast them (a float64 model's, autocast leaves alone), rows leaving the
    batch as they end included."""
    import cotrain.models.generate as gen

    model, tok = nano if dtype == "float32" else build_model(ModelConfig(preset="nano", dtype=dtype), seed=0)
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "9-9\n"]]
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.3, top_p=1.0,
              greedy=False, seed=5, bf16=bf16, group_size=3)
    roomy = _generate(model, prompts, 0, **kw)
    assert 0 < roomy.truncated.sum() < len(roomy.truncated)  # a row ends while others go on
    held = []
    monkeypatch.setattr(gen, "_RoomyLayer", lambda layer, room, dtype: held.append(dtype) or layer)
    growing = _generate(model, prompts, 0, **kw)
    assert held and set(held) == {torch.bfloat16 if bf16 else None}, held
    for f in dataclasses.fields(roomy):
        assert torch.equal(getattr(roomy, f.name), getattr(growing, f.name)), f.name


HOST_READS = ("item", "__bool__", "cpu", "tolist", "numpy", "__int__", "__float__")


def _host_reads(fn) -> tuple[object, int]:
    """fn()'s result and how many times it read a tensor on the host (on a GPU each read of a device tensor
    is a sync; on a CPU every read counts, so this bounds the syncs a GPU would see)."""
    from torch.overrides import TorchFunctionMode

    count = [0]

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            count[0] += getattr(func, "__name__", "") in HOST_READS
            return func(*args, **(kwargs or {}))

    with Reads():
        result = fn()
    return result, count[0]


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.heavy)], ids=["plain", "compiled"])
def test_decoding_reads_the_host_once_per_block_and_keeps_its_samples(nano, compiled, monkeypatch):
    """With `check_every` 8 the decode loops (plain and compiled) take their stop and compaction decisions
    on the host once per block of 8 tokens: the samples, ends and truncation flags equal those of a look
    at every token, log-probs and entropies up to float rounding, and the host reads fall from at least 2
    per generated token (a look per token) to at most 0.35 (a block's transfer and its decision, plus the
    prefill's). The SDPA step mask is built by the loop, so transformers reads none. (The compiled loop,
    whose tracing takes some 20 s, in make test-heavy.)"""
    import cotrain.models.generate as gen

    monkeypatch.setattr(gen, "COMPILE_BACKEND", "eager")
    model, tok = nano
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "9-9\n"]]
    kw = dict(max_new_tokens=40, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.3, top_p=1.0,
              greedy=False, seed=5, bf16=False, group_size=4, compiled=compiled)
    if compiled:
        _generate(model, prompts, 0, **kw)  # dynamo traces once, outside the count
    each, reads_each = _host_reads(lambda: _generate(model, prompts, 0, check_every=1, **kw))
    block, reads_block = _host_reads(lambda: _generate(model, prompts, 0, check_every=8, **kw))
    assert 0 < each.truncated.sum() < len(each.truncated)  # rows end at different steps: compaction ran
    for name in ("completion_ids", "completion_mask", "truncated"):
        assert torch.equal(getattr(block, name), getattr(each, name)), name
    assert torch.allclose(block.logp, each.logp, atol=1e-9) and torch.allclose(block.entropy, each.entropy, atol=1e-9)
    tokens = int(each.lengths.max())
    assert tokens == kw["max_new_tokens"]
    assert reads_each / tokens >= 2 and reads_block / tokens <= 0.35, (reads_each, reads_block, tokens)


@pytest.mark.heavy
def test_compiled_decoding_with_inductor_gives_the_samples_of_plain_decoding(nano):
    """The same check with the code torch.compile generates (inductor: a C++ compiler, half a minute)."""
    model, tok = nano
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n"]]
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.0, top_p=1.0,
              greedy=False, seed=3, bf16=False, group_size=2)
    plain, ro = _generate(model, prompts, 0, **kw), _generate(model, prompts, 0, compiled=True, **kw)
    assert torch.equal(ro.completion_ids, plain.completion_ids) and torch.equal(ro.truncated, plain.truncated)
    assert torch.allclose(ro.logp, plain.logp, atol=1e-9)


@pytest.mark.parametrize("greedy", [True, False])
def test_drafted_decoding_gives_the_samples_of_plain_decoding(nano, greedy):
    """Drafted decoding keeps a draft only where the sampler, with the row's own uniform, chose it anyway:
    with drafts that are perfect, partly wrong or from prompt lookup, at any draft length, the
    completions, their ends and truncation flags equal plain decoding's, the log-probs and entropies
    equal them up to float rounding, and good drafts take fewer forward passes."""
    model, tok = nano
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "9-9\n"]]
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.3, top_p=0.95,
              greedy=greedy, seed=5, bf16=False, group_size=3)
    passes = []
    forward = model.forward

    def counted(*a, **k):
        passes[-1] += 1
        return forward(*a, **k)

    model.forward = counted
    try:
        passes.append(0)
        plain = _generate(model, prompts, 0, **kw)
        assert 0 < plain.truncated.sum() < len(plain.truncated) or greedy  # both ends are exercised
        for k, wrong in [(1, 0), (3, 0), (8, 0), (3, 3), (8, 2), (5, 1)]:
            passes.append(0)
            ro = _generate(model, prompts, 0, draft_tokens=k, drafter=_Oracle(plain, wrong), **kw)
            for name in ("completion_ids", "completion_mask", "truncated", "prompt_ids"):
                assert torch.equal(getattr(ro, name), getattr(plain, name)), (k, wrong, name)
            assert torch.allclose(ro.logp, plain.logp, atol=1e-5) and torch.allclose(ro.entropy, plain.entropy, atol=1e-5)
            if not wrong:
                assert passes[-1] < passes[0], (k, passes)
        passes.append(0)
        looked_up = _generate(model, prompts, 0, draft_tokens=4, **kw)
        assert torch.equal(looked_up.completion_ids, plain.completion_ids)
    finally:
        del model.forward
