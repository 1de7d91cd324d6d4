"""Memory options of a role's model: weight dtype, gradient checkpointing, LoRA through peft, device.

The LoRA invariants: only the adapters train; the frozen reference is the base model (the adapters
switched off, no copy) before and after training; a saved LoRA model is a plain merged model that
loads anywhere, plus its adapter, which a resumed run restores exactly.
"""
import contextlib
import copy
import shutil
import sys

import pytest
import torch
import yaml

from cotrain.config import ModelConfig, build_config
from cotrain.errors import UserError
from cotrain.models.build import (
    build_model,
    load_model,
    load_weights,
    prepare_for_training,
    reference_model,
    save_model,
)
from cotrain.models import generate as generation
from cotrain.models.generate import casts_kept, completion_logprobs, generate, group_logprobs
from cotrain.models.prompts import encode_completion, encode_generator_prompts
from cotrain.tasks import make_task
from cotrain.train.setup import initial_model, make_optimizer
from tests.conftest import EASY_TASK, nano_config
from tests.test_recipes import run_killed_and_resumed

QUESTIONS = ["1+2", "8+2+9", "5-5+8"]
ANSWERS = ["1+2=3\n#3", "8+2=10\n10+9=19\n#19", "5-5=0\n0+8=8\n#8"]


def _batch(tok):
    """Prompts [3, P] and completions [3, T] of three worked examples, padded."""
    from cotrain.models.generate import left_pad, right_pad

    prompt_ids, prompt_mask = left_pad(encode_generator_prompts(tok, QUESTIONS), tok.pad_token_id)
    target_ids, target_mask = right_pad([encode_completion(tok, a) for a in ANSWERS], tok.pad_token_id)
    return prompt_ids, prompt_mask, target_ids, target_mask


def _logp(model, tok) -> torch.Tensor:
    """Summed log-prob [3] of the worked examples under `model`."""
    prompt_ids, prompt_mask, target_ids, target_mask = _batch(tok)
    logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask)
    return (logp * target_mask).sum(-1).double()  # runs of the float64 test world against float32 models


def _train_step(model, tok, opt) -> None:
    """One AdamW step on the negative log-likelihood of the worked examples."""
    opt.zero_grad(set_to_none=True)
    (-_logp(model, tok).mean()).backward()
    opt.step()


def _greedy(model, tok) -> torch.Tensor:
    ro = generate(model, encode_generator_prompts(tok, QUESTIONS), max_new_tokens=12, eos_id=tok.eos_token_id,
                  pad_id=tok.pad_token_id, greedy=True)
    return ro.completion_ids


def _lora(**options):
    """A nano model with LoRA adapters (the given ModelConfig options) and the same model without them."""
    cfg = ModelConfig(preset="nano", lora_r=4, **options)
    base, tok = build_model(cfg, seed=0)
    model = prepare_for_training(copy.deepcopy(base), cfg, "cpu")
    return model, base.eval(), tok, cfg


# ---------------------------------------------------------------------- config


@pytest.mark.parametrize("override, message", [
    ("model.device=gpu", "model: device must be cpu, cuda, cuda:N or mps (got 'gpu')"),   # not a device kind
    ("model.device=cpu:0", "model: device must be cpu, cuda, cuda:N or mps"),             # only cuda takes an index
    ("verifier.device=cuda:x", "verifier: device must be cpu, cuda, cuda:N or mps"),      # the verifier's own device
    ("model.lora_target=[]", "lora_target must be 'all-linear' or a non-empty list"),     # adapters on nothing
    ("model.lora_r=-1", "model.lora_r: Input should be greater than or equal to 0"),      # negative rank
    ("model.dtype=int8", "model.dtype: Input should be 'float32', 'bfloat16', 'float16' or 'float64'"),
])
def test_bad_memory_options_fail_in_one_line(override, message):
    with pytest.raises(UserError) as err:
        build_config({}, [override])
    assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------- dtype


def test_dtype_is_honoured_for_presets_and_loaded_models(tmp_path):
    """Weights take model.dtype, the rotary frequencies stay float32 (as from_pretrained leaves them),
    generation runs; a saved model loads in the dtype asked for, and by default in its own."""
    cfg = ModelConfig(preset="nano", dtype="bfloat16")
    model, tok = build_model(cfg)
    model = prepare_for_training(model, cfg, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert _greedy(model, tok).shape[0] == len(QUESTIONS)

    save_model(model, tok, tmp_path / "m")
    assert load_model(tmp_path / "m")[0].dtype == torch.bfloat16
    assert load_model(tmp_path / "m", dtype="float32")[0].dtype == torch.float32
    run = build_config(nano_config("grpo", init=str(tmp_path / "m"), model={"dtype": "float32"}))
    assert {p.dtype for p in initial_model(run.model, run.init, run.seed, run.train.fsdp)[0].parameters()} == {torch.float32}


# ---------------------------------------------------------------------- gradient checkpointing


def _checkpointed_pair():
    plain, tok = build_model(ModelConfig(preset="nano"), seed=0)
    cfg = ModelConfig(preset="nano", gradient_checkpointing=True)
    checkpointed = prepare_for_training(copy.deepcopy(plain), cfg, "cpu")
    return plain.train(), checkpointed.train(), tok


def test_gradient_checkpointing_keeps_logprobs_gradients_and_generation():
    """With checkpointing the layers are recomputed in the backward pass (each MLP runs twice), and the
    training log-probs, their gradients and greedy generation (eval mode, KV cache) are unchanged."""
    plain, checkpointed, tok = _checkpointed_pair()
    calls = {"n": 0}
    checkpointed.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1))
    logp = {}
    for name, m in (("plain", plain), ("checkpointed", checkpointed)):
        logp[name] = _logp(m, tok)
        logp[name].sum().backward()
    assert calls["n"] == 2, "the checkpointed layer was not recomputed in the backward pass"
    torch.testing.assert_close(logp["checkpointed"], logp["plain"], rtol=0, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert torch.equal(_greedy(checkpointed, tok), _greedy(plain, tok))
    assert checkpointed.training  # generate() restores the training mode


def test_group_logprobs_under_gradient_checkpointing():
    """Checkpointed layers drop the KV cache in training mode (transformers), so the shared-prompt pass
    cannot be used there: group_logprobs runs whole sequences instead, with the same result."""
    plain, checkpointed, tok = _checkpointed_pair()
    prompt_ids, prompt_mask, target_ids, target_mask = _batch(tok)
    g = 2
    mask = target_mask.repeat_interleave(g, 0)
    args = (prompt_ids, prompt_mask, target_ids.repeat_interleave(g, 0), mask, g)
    torch.testing.assert_close(group_logprobs(checkpointed, *args)[0] * mask, group_logprobs(plain, *args)[0] * mask,
                               rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------- LoRA


def test_lora_trains_only_the_adapters():
    """The optimizer holds the adapters alone; a step changes them and leaves every base weight as it was."""
    model, base, tok, _ = _lora()
    opt, _ = make_optimizer(model, build_config({}).train.model_copy(update={"lr": 1e-2}), 10)
    held = [p for group in opt.param_groups for p in group["params"]]
    names = {id(p): n for n, p in model.named_parameters()}
    assert held and all("lora_" in names[id(p)] for p in held)
    assert sum(p.numel() for p in held) < 0.1 * sum(p.numel() for p in base.parameters())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _train_step(model, tok, opt)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != ("lora_B" in n), n  # B leaves zero; A gets no gradient while B is zero


def test_a_lora_rollout_under_bf16_keeps_its_frozen_casts_and_its_samples(monkeypatch):
    """Under bf16 autocast a LoRA model's frozen base weights are marked as requiring grad for the rollout
    alone (`casts_kept`: autocast then casts each once per rollout, not once per pass): the samples and their
    log-probs are bit for bit those of a rollout without it, and every flag is as before afterwards, also
    when the rollout raises."""
    model, _, tok, _ = _lora()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # adapters that change the samples
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    assert not all(flags.values()) and any(flags.values())

    def rollout():
        return generate(model, encode_generator_prompts(tok, QUESTIONS), max_new_tokens=12, eos_id=tok.eos_token_id,
                        pad_id=tok.pad_token_id, seed=3, bf16=True)
    kept = rollout()
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    monkeypatch.setattr(generation, "casts_kept", lambda model, enabled: contextlib.nullcontext())
    plain = rollout()
    assert torch.equal(kept.completion_ids, plain.completion_ids) and torch.equal(kept.logp, plain.logp)
    with torch.no_grad(), pytest.raises(RuntimeError, match="inside"):
        with casts_kept(model, True):
            assert all(p.requires_grad for p in model.parameters())
            raise RuntimeError("inside")
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags


def test_lora_reference_is_the_base_model_before_and_after_training():
    """reference_model of a LoRA model is its base with the adapters off: equal to the model without
    adapters at the start, still equal after a step that moved the model away, at no extra memory."""
    model, base, tok, _ = _lora()
    ref = reference_model(model)
    assert next(ref.parameters()) is next(model.parameters())  # no copy; its device is the model's
    torch.testing.assert_close(_logp(ref, tok), _logp(base, tok), rtol=0, atol=1e-5)
    opt, _ = make_optimizer(model, build_config({}).train.model_copy(update={"lr": 1e-2}), 10)
    for _ in range(3):
        _train_step(model, tok, opt)
    assert not torch.allclose(_logp(model, tok), _logp(base, tok), atol=1e-3), "the step did not move the model"
    torch.testing.assert_close(_logp(ref, tok), _logp(base, tok), rtol=0, atol=1e-5)
    assert model.training and not _logp(ref, tok).requires_grad  # the reference runs in eval mode, no grad
    plain_ref = reference_model(base)
    assert not plain_ref.training and not any(p.requires_grad for p in plain_ref.parameters())


def test_lora_model_saves_as_a_plain_merged_model_and_restores_its_adapter(tmp_path):
    """save_model writes W + (alpha/r) B A as a plain model (what peft's merge_and_unload gives) and the
    adapter in adapter/; load_weights puts that adapter back into a fresh LoRA model exactly, and
    refuses a model whose frozen base is another one."""
    model, _, tok, cfg = _lora()
    opt, _ = make_optimizer(model, build_config({}).train.model_copy(update={"lr": 1e-2}), 10)
    for _ in range(3):
        _train_step(model, tok, opt)
    model.eval()
    save_model(model, tok, tmp_path / "m")
    assert (tmp_path / "m" / "adapter" / "adapter_model.safetensors").is_file()

    plain, _ = load_model(tmp_path / "m")
    assert type(plain).__name__ == "LlamaForCausalLM"
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    for k, v in plain.state_dict().items():
        torch.testing.assert_close(v, merged[k], rtol=0, atol=1e-6, msg=k)
    torch.testing.assert_close(_logp(plain, tok), _logp(model, tok), rtol=0, atol=1e-4)

    fresh = prepare_for_training(build_model(cfg, seed=0)[0], cfg, "cpu").eval()
    load_weights(fresh, tmp_path / "m")
    assert torch.equal(_logp(fresh, tok), _logp(model, tok))

    other = prepare_for_training(build_model(cfg, seed=1)[0], cfg, "cpu")
    with pytest.raises(UserError, match="frozen base differs"):
        load_weights(other, tmp_path / "m")

    # model.lora_init: a fresh model starts from the saved adapter, or from the adapter alone (a committed start)
    shutil.copytree(tmp_path / "m" / "adapter", tmp_path / "alone" / "adapter")
    for start in (tmp_path / "m", tmp_path / "alone"):
        started_cfg = cfg.model_copy(update={"lora_init": str(start)})
        started = prepare_for_training(build_model(cfg, seed=0)[0], started_cfg, "cpu").eval()
        assert torch.equal(_logp(started, tok), _logp(model, tok)), start
    with pytest.raises(UserError, match="holds no LoRA adapter"):
        prepare_for_training(build_model(cfg, seed=0)[0], cfg.model_copy(update={"lora_init": str(tmp_path)}), "cpu")
    with pytest.raises(ValueError, match="lora_init starts LoRA adapters"):
        ModelConfig(preset="nano", lora_init=str(tmp_path / "alone"))


def test_lora_errors_are_one_line(monkeypatch):
    """Without peft, and with a target module the model lacks, LoRA fails with one clear line."""
    with pytest.raises(UserError, match="lora_target") as err:
        _lora(lora_target=["no_such_proj"])
    assert "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now raises ImportError
    with pytest.raises(UserError, match=r"pip install 'cotrain\[lora\]'"):
        _lora()


# ---------------------------------------------------------------------- device


def test_device_is_honoured_and_a_missing_one_fails_at_build_time():
    from cotrain.train.setup import initial_verifier

    cfg = build_config(nano_config("tango", model={"preset": "nano", "device": "cpu"}, verifier={"device": "cpu"}))
    def model(c):
        return initial_model(c.model, c.init, c.seed, False)

    def verifier(c):
        return initial_verifier(c.verifier, c.model, c.init, c.seed, False)

    assert next(model(cfg)[0].parameters()).device.type == "cpu"
    assert next(verifier(cfg)[0].parameters()).device.type == "cpu"
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has a cuda:1")
    for build, override in ((model, {"model": {"preset": "nano", "device": "cuda:1"}}),
                            (verifier, {"verifier": {"device": "cuda:1"}})):
        with pytest.raises(UserError, match="device 'cuda:1' is not available") as err:
            build(build_config(nano_config("tango", **override)))
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------- a LoRA run end to end


@pytest.fixture(scope="module")
def answering_init(tmp_path_factory):
    """A nano model that writes `#<number>` answers, sometimes the right one: GRPO then sees groups with
    mixed rewards (60 quick supervised steps on final answers alone, no worked steps)."""
    task = make_task(**EASY_TASK)
    problems = task.problems("train", 60 * 32, seed=0)
    model, tok = build_model(ModelConfig(preset="nano"), seed=0)
    opt, _ = make_optimizer(model, build_config({}).train.model_copy(update={"lr": 1e-2}), 60)
    from cotrain.models.generate import left_pad, right_pad

    for step in range(60):
        batch = problems[step * 32:(step + 1) * 32]
        prompt_ids, prompt_mask = left_pad(encode_generator_prompts(tok, [p.question for p in batch]), tok.pad_token_id)
        target_ids, target_mask = right_pad([encode_completion(tok, f"#{p.answer}") for p in batch], tok.pad_token_id)
        logp, _ = completion_logprobs(model, prompt_ids, prompt_mask, target_ids, target_mask)
        opt.zero_grad(set_to_none=True)
        (-(logp * target_mask).sum() / target_mask.sum()).backward()
        opt.step()
    out = tmp_path_factory.mktemp("answering") / "model"
    save_model(model, tok, out)
    return out


def test_grpo_with_lora_resumes_and_ends_with_a_plain_model(answering_init, tmp_path):
    """A 3-step grpo run with LoRA adapters and a KL to the base: killed after its first checkpoint and
    resumed, it ends exactly as uninterrupted; its adapter trained; `final/generator` loads as a plain
    model whose outputs are those of the base with the final adapter."""
    raw = nano_config("grpo", init=str(answering_init), model={"preset": "nano", "lora_r": 4},
                      train={"steps": 3, "batch_size": 32, "lr": 1e-2}, grpo={"beta": 0.1, "max_new_tokens": 8},
                      eval={"n": 40, "k": 2, "n_sampled": 20}, checkpoint={"every": 1, "keep_last": 2})
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    run_killed_and_resumed(cfg_path, tmp_path, "step_1")

    final = tmp_path / "killed" / "final" / "generator"
    plain, tok = load_model(final)
    assert type(plain).__name__ == "LlamaForCausalLM" and (final / "adapter").is_dir()
    cfg = build_config(raw)
    model, _ = initial_model(cfg.model, cfg.init, cfg.seed, False)   # the run's start: the init's weights with fresh adapters
    load_weights(model, final)
    model.eval()
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in lora_b), "the adapter did not train"
    torch.testing.assert_close(_logp(plain, tok), _logp(model, tok), rtol=0, atol=1e-4)
    start, _ = load_model(answering_init)
    assert not torch.allclose(_logp(plain, tok), _logp(start, tok), atol=1e-4)


def test_adamw_with_its_moments_in_host_memory_steps_as_adamw():
    """`train.offload_optimizer`: four steps of `HostStateAdamW` equal plain AdamW's bit for bit (its moments
    are copied to the parameters' device for a step and back, even where the two are one); between steps
    they wait in the same host buffers; a state dict taken after two steps and loaded into a fresh one goes
    on as the uninterrupted optimizer does."""
    from cotrain.train.setup import HostStateAdamW

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()

    def step(net, opt, i):
        g = torch.Generator().manual_seed(i)
        loss = net(torch.randn(4, 6, generator=g, dtype=torch.float64)).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    plain, host = model(), model()
    opt_plain = torch.optim.AdamW(plain.parameters(), lr=0.05, weight_decay=0.1)
    opt_host = HostStateAdamW(host.parameters(), lr=0.05, weight_decay=0.1)
    buffers = None
    for i in range(4):
        step(plain, opt_plain, i)
        step(host, opt_host, i)
        for a, b in zip(plain.parameters(), host.parameters()):
            assert torch.equal(a, b), i
        now = [opt_host.state[p][k].data_ptr() for p in host.parameters() for k in ("exp_avg", "exp_avg_sq")]
        assert buffers is None or now == buffers  # the same host buffers every step
        buffers = now
        if i == 1:
            saved = copy.deepcopy(opt_host.state_dict())
            resumed_net = copy.deepcopy(host)
    resumed = HostStateAdamW(resumed_net.parameters(), lr=0.05, weight_decay=0.1)
    resumed.load_state_dict(saved)
    for i in (2, 3):
        step(resumed_net, resumed, i)
    for a, b in zip(plain.parameters(), resumed_net.parameters()):
        assert torch.equal(a, b)
    for p, q in zip(plain.parameters(), resumed_net.parameters()):
        assert torch.equal(opt_plain.state[p]["exp_avg_sq"], resumed.state[q]["exp_avg_sq"])


def test_offload_optimizer_is_refused_with_fsdp_and_chosen_by_make_optimizer():
    from cotrain.train.setup import HostStateAdamW

    with pytest.raises(Exception, match="offload_optimizer does not combine with train.fsdp"):
        build_config({"train": {"offload_optimizer": True, "fsdp": True}})
    cfg = build_config({"train": {"offload_optimizer": True}})
    opt, _ = make_optimizer(torch.nn.Linear(2, 2), cfg.train, 10)
    assert type(opt) is HostStateAdamW
    assert type(make_optimizer(torch.nn.Linear(2, 2), build_config({}).train, 10)[0]) is torch.optim.AdamW


@pytest.mark.parametrize("tied", [True, False])
def test_a_frozen_reference_in_bf16_gives_autocast_s_log_probs_bit_for_bit(tied):
    """`reference_model(model, bf16=True)`: the KL reference's linear layers held in bf16 (a tied head and
    the embedding stay float32); under bf16 autocast its log-probs equal the float32 copy's bit for bit, in
    less memory."""
    torch.manual_seed(0)
    model, _ = build_model(ModelConfig(preset="nano"))
    if not tied:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    plain, held = reference_model(model), reference_model(model, bf16=True)
    dtypes = {n: p.dtype for n, p in held.named_parameters()}
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] == torch.bfloat16
    assert dtypes["model.embed_tokens.weight"] == dtypes["model.norm.weight"] == torch.float32
    if not tied:
        assert dtypes["lm_head.weight"] == torch.bfloat16
    ids = torch.randint(3, model.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = plain(ids).logits.float().log_softmax(-1), held(ids).logits.float().log_softmax(-1)
    assert torch.equal(a, b)
    size = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())  # noqa: E731
    assert size(held) < 0.8 * size(plain)
    for setting in (False, "auto"):  # unresolved or off: as it was
        assert all(p.dtype == torch.float32 for p in reference_model(model, bf16=setting).parameters())
