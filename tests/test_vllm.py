"""The vLLM rollout engine without vLLM: truncated importance sampling, the import guard, and the
engine against a fake `vllm` module whose outputs are shaped like vLLM's `RequestOutput`."""
import math
import os
import sys
import types
from dataclasses import dataclass

import pytest
import torch

from cotrain.config import ModelConfig
from cotrain.errors import UserError
from cotrain.models.build import build_model
from cotrain.models.vllm_engine import VllmEngine, vllm_weight_items
from cotrain.rl.losses import importance_stats, truncated_importance_weights

EOS, PAD = 2, 0


# ----------------------------------------------------------------------------- truncated importance sampling

def test_truncated_importance_weights_by_hand():
    """Ratios exp(trainer - sampler) of 0.5, 1 and 4 with cap 2 give weights 0.5, 1, 2.

    The last position is padding with an extreme log-ratio (exp(100) overflows float32): weight 0.
    Stats over the 3 real tokens: mean (0.5 + 1 + 2) / 3 = 7/6; one of three tokens at the cap.
    """
    sampler = torch.tensor([[-1.0, -2.0, -3.0, -50.0]])
    trainer = sampler + torch.tensor([[math.log(0.5), 0.0, math.log(4.0), 100.0]])
    trainer.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_importance_weights(trainer, sampler, mask, cap=2.0)
    assert w.shape == (1, 4)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.0, 2.0, 0.0]]))
    assert not w.requires_grad, "weights are a constant factor of the loss"
    stats = importance_stats(w, mask, cap=2.0)
    assert stats["is_weight_mean"] == pytest.approx(7 / 6)
    assert stats["is_capped_frac"] == pytest.approx(1 / 3)


def test_truncated_importance_weights_on_policy_are_one():
    logp = torch.randn(3, 5)
    mask = torch.ones(3, 5, dtype=torch.long)
    torch.testing.assert_close(truncated_importance_weights(logp, logp.clone(), mask, cap=3.0), torch.ones(3, 5))


# ----------------------------------------------------------------------------- a fake vllm module

@dataclass
class Logprob:
    logprob: float
    rank: int = 1


@dataclass
class CompletionOutput:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]]
    finish_reason: str
    index: int = 0


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput]


def completion(token_ids: list[int], logps: list[float], finish_reason: str) -> CompletionOutput:
    return CompletionOutput(list(token_ids), [{t: Logprob(lp)} for t, lp in zip(token_ids, logps)], finish_reason)


class FakeLLM:
    """Records what the engine asks of it; `generate` returns the `responses` a test sets."""

    def __init__(self, **kwargs):
        self.init_kwargs = kwargs
        self.responses: list[list[CompletionOutput]] = []
        self.calls: list[tuple] = []
        self.loaded: list[tuple[str, torch.Tensor]] = []
        self.events: list = []
        model = types.SimpleNamespace(load_weights=self._load_weights)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(
                model_runner=types.SimpleNamespace(model=model))))

    def _load_weights(self, weights):
        self.loaded += [(name, tensor.clone()) for name, tensor in weights]  # clone: the model unmerges after

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params))
        return [RequestOutput(outputs) for outputs in self.responses]

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append("wake_up")


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "")  # records the value to restore: the engine sets them for vLLM's launcher
        monkeypatch.delenv(key)
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


# ----------------------------------------------------------------------------- the engine

def test_missing_vllm_is_a_one_line_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, installed or not
    with pytest.raises(UserError) as err:
        VllmEngine("some/model")
    message = str(err.value)
    assert "\n" not in message
    assert "pip install vllm" in message and "rollout.engine: hf" in message


def test_engine_is_built_colocated(fake_vllm):
    engine = VllmEngine("some/model", gpu_memory_utilization=0.25, max_model_len=256, seed=7)
    kw = engine.llm.init_kwargs
    assert kw["model"] == "some/model" and kw["gpu_memory_utilization"] == 0.25 and kw["max_model_len"] == 256
    assert kw["seed"] == 7 and kw["dtype"] == "bfloat16"
    assert kw["distributed_executor_backend"] == "external_launcher"
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("0", "1"), "a world of one for a plain run"
    assert int(os.environ["MASTER_PORT"]) > 0


def test_generate_builds_the_rollout(fake_vllm):
    """Two prompts of lengths 3 and 1, group_size 2, eos 2, pad 0, max_new_tokens 4:

    row 0: [10 11 2]    "stop", eos kept by vLLM       -> mask 1 1 1 0, not truncated
    row 1: [12 13 14 15] "length"                       -> mask 1 1 1 1, truncated
    row 2: [16]         "stop", eos left out by vLLM   -> [16 2], its logp 0, not truncated
    row 3: [2]          "stop", eos only               -> [2]
    The logprob dicts of row 0 also hold a non-sampled token (as with logprobs=k > 0): it is ignored.
    """
    engine = VllmEngine("m")
    row0 = completion([10, 11, 2], [-0.1, -0.2, -0.3], "stop")
    row0.logprobs[1][99] = Logprob(-5.0, rank=2)
    engine.llm.responses = [
        [row0, completion([12, 13, 14, 15], [-1.0, -1.1, -1.2, -1.3], "length")],
        [completion([16], [-0.5], "stop"), completion([2], [-0.7], "stop")],
    ]
    ro = engine.generate([[5, 6, 7], [8]], group_size=2, max_new_tokens=4, eos_id=EOS, pad_id=PAD,
                         temperature=0.8, top_p=0.9, seed=3)

    assert torch.equal(ro.prompt_ids, torch.tensor([[5, 6, 7], [5, 6, 7], [0, 0, 8], [0, 0, 8]]))
    assert torch.equal(ro.prompt_mask, torch.tensor([[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]))
    assert torch.equal(ro.completion_ids, torch.tensor([[10, 11, 2, 0], [12, 13, 14, 15], [16, 2, 0, 0], [2, 0, 0, 0]]))
    assert torch.equal(ro.completion_mask, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]))
    torch.testing.assert_close(ro.logp, torch.tensor([[-0.1, -0.2, -0.3, 0.0], [-1.0, -1.1, -1.2, -1.3],
                                                      [-0.5, 0.0, 0.0, 0.0], [-0.7, 0.0, 0.0, 0.0]]))
    assert torch.equal(ro.entropy, torch.zeros(4, 4))
    assert ro.truncated.tolist() == [False, True, False, False]
    assert ro.lengths.tolist() == [3, 4, 2, 1]
    assert ro.completion_ids.dtype == ro.prompt_ids.dtype == torch.long and ro.logp.dtype == torch.float32

    prompts, params = engine.llm.calls[0]
    assert prompts == [{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8]}]
    for p in params:
        assert (p.n, p.temperature, p.top_p, p.max_tokens, p.logprobs) == (2, 0.8, 0.9, 4, 0)
        assert p.stop_token_ids == [EOS] and p.ignore_eos, "stop at eos_id only"
    seeds = [p.seed for p in params]
    assert seeds[0] != seeds[1], "each prompt draws its own stream"
    engine.generate([[5, 6, 7], [8]], group_size=2, max_new_tokens=4, eos_id=EOS, pad_id=PAD, seed=3)
    assert [p.seed for p in engine.llm.calls[1][1]] == seeds, "the same seed gives the same request seeds"
    engine.generate([[5, 6, 7], [8]], group_size=2, max_new_tokens=4, eos_id=EOS, pad_id=PAD, seed=4)
    assert [p.seed for p in engine.llm.calls[2][1]] != seeds
    engine.generate([[5, 6, 7], [8]], group_size=2, max_new_tokens=4, eos_id=EOS, pad_id=PAD)
    assert [p.seed for p in engine.llm.calls[3][1]] == [None, None]


def test_greedy_asks_one_completion_and_repeats_it(fake_vllm):
    """vLLM refuses n > 1 with temperature 0: one completion per prompt, repeated group_size times.
    Completions are padded to the longest one (2), not to max_new_tokens."""
    engine = VllmEngine("m")
    engine.llm.responses = [[completion([3, 2], [-0.1, -0.2], "stop")], [completion([4], [-0.3], "length")]]
    ro = engine.generate([[5], [6]], group_size=3, max_new_tokens=1, eos_id=EOS, pad_id=PAD, greedy=True, top_p=0.5)
    assert torch.equal(ro.completion_ids, torch.tensor([[3, 2]] * 3 + [[4, 0]] * 3))
    assert ro.truncated.tolist() == [False] * 3 + [True] * 3
    assert ro.prompt_ids.flatten().tolist() == [5, 5, 5, 6, 6, 6]
    params = engine.llm.calls[0][1]
    assert all((p.n, p.temperature, p.top_p) == (1, 0.0, 1.0) for p in params)


def test_sync_weights_plain_model(fake_vllm):
    model, _ = build_model(ModelConfig(preset="nano"))
    engine = VllmEngine("m")
    engine.sync_weights(model)
    expected = list(model.named_parameters())
    assert [name for name, _ in engine.llm.loaded] == [name for name, _ in expected]
    assert "lm_head.weight" not in dict(engine.llm.loaded), "tied weights are sent once, under the embedding's name"
    assert all(torch.equal(t, p) for (_, t), (_, p) in zip(engine.llm.loaded, expected))
    assert engine.llm.events == ["reset_prefix_cache"], "cached prompt KV entries are stale after a sync"


def test_sync_weights_merges_a_lora_adapter(fake_vllm):
    """The engine receives W + scale * B @ A under the base model's names; the trainer's base is untouched."""
    peft = pytest.importorskip("peft")
    model, _ = build_model(ModelConfig(preset="nano"))
    base_names = [name for name, _ in model.named_parameters()]
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    q_proj = lora.base_model.model.model.layers[0].self_attn.q_proj
    before = q_proj.base_layer.weight.detach().clone()
    expected_q = before + q_proj.get_delta_weight("default").detach()

    assert [name for name, _ in vllm_weight_items(lora)] == base_names

    engine = VllmEngine("m")
    engine.sync_weights(lora)
    loaded = dict(engine.llm.loaded)
    assert list(loaded) == base_names and not any("lora_" in name for name in loaded)
    torch.testing.assert_close(loaded["model.layers.0.self_attn.q_proj.weight"], expected_q)
    assert not torch.allclose(loaded["model.layers.0.self_attn.q_proj.weight"], before), "the adapter is merged"
    torch.testing.assert_close(loaded["model.layers.0.self_attn.k_proj.weight"],
                               lora.base_model.model.model.layers[0].self_attn.k_proj.weight)
    assert not q_proj.merged, "the trainer's model is unmerged after the sync"
    assert torch.equal(q_proj.base_layer.weight.detach(), before), "the base is never merged in place"


def test_sleep_and_wake_up(fake_vllm):
    engine = VllmEngine("m")
    engine.sleep()
    engine.wake_up()
    assert engine.llm.events == [], "without sleep mode both are no-ops"

    engine = VllmEngine("m", enable_sleep_mode=True)
    engine.llm.responses = [[completion([2], [-0.1], "stop")]]
    args = dict(group_size=1, max_new_tokens=2, eos_id=EOS, pad_id=PAD)
    engine.sleep(level=2)
    with pytest.raises(AssertionError, match="asleep"):
        engine.generate([[5]], **args)
    engine.wake_up()
    with pytest.raises(AssertionError, match="sync_weights"):
        engine.generate([[5]], **args)
    model, _ = build_model(ModelConfig(preset="nano"))
    engine.sync_weights(model)
    assert engine.generate([[5]], **args).completion_ids.tolist() == [[2]]
    assert engine.llm.events == [("sleep", 2), "wake_up", "reset_prefix_cache"]


# ----------------------------------------------------------------------------- a run on the vLLM path


class HFBackedLLM:
    """A `vllm.LLM` stand-in that samples with cotrain's own `generate` from the directory it is given,
    loads pushed weights into that model, and reports each log-prob shifted by `logp_shift` (a
    sampler that disagrees with the trainer)."""

    logp_shift = 0.0
    instances: list = []

    def __init__(self, model, **kwargs):
        from cotrain.models.build import load_model

        self.model, _ = load_model(model)
        self.syncs = 0
        self.events: list = []
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._load_weights)))))
        HFBackedLLM.instances.append(self)

    def _load_weights(self, weights):
        missing, unexpected = self.model.load_state_dict(dict(weights), strict=False)
        assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)  # tied head
        self.syncs += 1

    def generate(self, prompts, sampling_params, use_tqdm=True):
        from cotrain.models.generate import generate

        out = []
        self.events.append("generate")
        for prompt, sp in zip(prompts, sampling_params):
            eos = sp.stop_token_ids[0]
            ro = generate(self.model, [prompt["prompt_token_ids"]], group_size=sp.n, max_new_tokens=sp.max_tokens,
                          eos_id=eos, pad_id=eos, temperature=sp.temperature, top_p=sp.top_p, seed=sp.seed)
            outputs = []
            for ids, mask, lp, trunc in zip(ro.completion_ids, ro.completion_mask, ro.logp, ro.truncated):
                n = int(mask.sum())
                outputs.append(completion(ids[:n].tolist(), (lp[:n] + self.logp_shift).tolist(),
                                          "length" if trunc else "stop"))
            out.append(RequestOutput(outputs))
        return out

    def reset_prefix_cache(self):
        self.events.append("sync")

    def sleep(self, level=1):
        self.events.append(("sleep", level))
        if level == 2:  # the weights are gone: sampling before a sync would show it
            with torch.no_grad():
                for p in self.model.parameters():
                    p.fill_(float("nan"))

    def wake_up(self, tags=None):
        self.events.append("wake_up")


@pytest.fixture
def hf_backed_vllm(fake_vllm, monkeypatch):
    monkeypatch.setattr(fake_vllm, "LLM", HFBackedLLM)
    HFBackedLLM.instances = []
    return HFBackedLLM


@pytest.mark.parametrize("shift,cap", [(0.0, 2.0), (-0.5, 1.2)])
def test_grpo_on_the_vllm_path_syncs_and_corrects(hf_backed_vllm, monkeypatch, tmp_path, shift, cap):
    """`rollout.engine: vllm`: the engine is synced at the start and after every update, and the loss
    is weighted by the truncated importance weights: 1 when sampler and trainer agree; with a sampler
    that reports every log-prob 0.5 lower, exp(0.5) = 1.65 on every token, capped at 1.2."""
    from cotrain.config import build_config
    from cotrain.recipes import grpo
    from tests.conftest import nano_config
    from tests.test_recipes import _rows

    monkeypatch.setattr(hf_backed_vllm, "logp_shift", shift)
    cfg = build_config(nano_config("grpo", train={"steps": 3}, rollout={"engine": "vllm", "tis_cap": cap},
                                   grpo={"group_size": 4, "max_new_tokens": 24, "beta": 0.05}))  # every group trains
    grpo.run(cfg, tmp_path)
    [engine] = hf_backed_vllm.instances
    assert engine.syncs == 1 + 3
    rows = [r for r in _rows(tmp_path) if "gen/is_weight_mean" in r]
    assert len(rows) == 3
    for r in rows:
        if shift == 0:
            assert r["gen/is_weight_mean"] == pytest.approx(1.0, abs=1e-4) and r["gen/is_capped_frac"] == 0.0
        else:
            assert r["gen/is_weight_mean"] == pytest.approx(cap, abs=1e-5) and r["gen/is_capped_frac"] == 1.0
    for name, p in engine.model.named_parameters():  # the engine holds the trainer's final weights
        assert torch.equal(p, dict(grpo_final_weights(tmp_path))[name]), name


def test_the_engine_sleeps_outside_its_rollouts_and_samples_the_trainer_s_weights(hf_backed_vllm, tmp_path):
    """`rollout.sleep`: the engine wakes for each rollout, takes the trainer's weights, samples and sleeps
    at level 2 (its weights discarded: the stand-in sets them to NaN) before anything else runs; the run
    equals the one whose engine stays awake and takes the weights after each update."""
    from cotrain.config import build_config
    from cotrain.recipes import grpo
    from tests.conftest import nano_config
    from tests.test_recipes import _rows

    def run(sleep: bool, out):
        cfg = build_config(nano_config("grpo", train={"steps": 3}, rollout={"engine": "vllm", "sleep": sleep},
                                       grpo={"group_size": 4, "max_new_tokens": 24, "beta": 0.05}))
        grpo.run(cfg, out)
        return hf_backed_vllm.instances[-1], [{k: v for k, v in r.items() if not k.startswith(("time", "throughput/"))}
                                              for r in _rows(out)]

    awake, awake_rows = run(False, tmp_path / "awake")
    asleep, asleep_rows = run(True, tmp_path / "asleep")
    assert asleep_rows == awake_rows
    assert asleep.events == [("sleep", 2)] + ["wake_up", "sync", "generate", ("sleep", 2)] * 3
    assert awake.events == ["sync"] + ["generate", "sync"] * 3 and awake.syncs == asleep.syncs + 1


def grpo_final_weights(run_dir):
    from cotrain.models.build import load_model

    model, _ = load_model(run_dir / "final" / "generator")
    return model.named_parameters()


def test_vllm_engine_is_refused_where_it_does_not_sample():
    from cotrain.config import build_config

    with pytest.raises(UserError, match="rollout.engine: vllm samples the generator of grpo"):
        build_config({"recipe": "triad", "rollout": {"engine": "vllm"}})


def test_a_process_given_no_prompts_gets_an_empty_rollout(fake_vllm):
    ro = VllmEngine("m").generate([], group_size=4, max_new_tokens=8, eos_id=EOS, pad_id=PAD)
    assert ro.completion_ids.shape[0] == 0 and ro.truncated.shape == (0,)
