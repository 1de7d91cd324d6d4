"""GPU smoke check: every path a GPU session needs, proven in one process within a global deadline.

The first thing to run when a GPU is lent (about 8 minutes on one H100 or H200, the torch, transformers
and peft preinstalled there, no network). Phases run in priority order; each is guarded (an error or an
out-of-memory is recorded and the next phase runs, a phase the deadline leaves no room for is skipped),
appends one JSON line to `--out` and prints one row: phase, PASS / FAIL / SKIP / OOM, seconds, figures.

  versions      torch, CUDA, the device and its free memory, transformers, peft, vLLM
  update_0.5b   a generator and a verifier of Qwen2.5-0.5B's shapes (random weights, built here), each
                trained 3 AdamW steps on one synthetic rollout with forced non-zero advantages (half of
                each group +1, half -1): learning shows as the log-prob gap between the +1 and -1
                completions widening; peak allocated and reserved memory of the phase
  update_1.5b   the same at Qwen2.5-1.5B's shapes
  decode        the decode loop at 16 and 128 rows (64 tokens): ms per decode step, host syncs per
                generated token (torch profiler: aten::item and aten::_local_scalar_dense), and, with an
                eos that ends rows at different steps, the compacting loop's greedy tokens against the
                static (uncompacted) loop's
  checkpoint    save_checkpoint, then load_checkpoint_state into a fresh optimizer: weights and AdamW
                states equal, on the model's device
  lora          LoRA adapters trained one step; the merged plain model's logits equal the adapted model's
  vllm          (when vLLM is installed) an engine on the model's directory samples; a weight sync of
                perturbed weights changes its greedy output; sleep frees GPU memory
  compiled      decoding through torch.compile with a static KV cache: greedy tokens against the plain loop
  offload_1.5b  update_1.5b with AdamW's moments in host memory between steps (train.offload_optimizer):
                the moments on the host after each step, the gap widening, the peak against update_1.5b's
  decode_tiny   the tiny preset's generator and verifier decodes of a sparse-world tango step, apart: ms
                per decode step, the prefill's seconds, host reads per token (the tiny world's verification
                was 2x slower on an H200 than on 2 CPU cores)
  recipes       the recipes through the CLI on the device: `cotrain demo` (GRPO and RL Tango from the
                committed sparse-world starts, rewards varying, so both models take optimizer steps), a tango
                run SIGKILLed after its step-2 checkpoint and resumed, each other recipe's smoke config for
                2 steps; every run's env.json must name the device

  python bench/gpu_smoke.py                  # on a CUDA machine; --deadline 480 (seconds) by default
  python bench/gpu_smoke.py --cpu-dry-run    # every phase at nano shapes on the CPU (make test runs it)

Without CUDA and without --cpu-dry-run it ends with one line and exit code 2. Exit 1 when a phase failed.
Record the rows, the device and the versions in configs/real/README.md.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

# config.json sizes of Qwen2.5-0.5B-Instruct and Qwen2.5-1.5B-Instruct (vocab_size: the stand-in's BPE
# merges; model_vocab_size: the embedding rows, as the real models have them)
QWEN05 = {"hidden_size": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate_size": 4864,
          "model_vocab_size": 151936, "vocab_size": 4096}
QWEN15 = {"hidden_size": 1536, "layers": 28, "heads": 12, "kv_heads": 2, "intermediate_size": 8960,
          "model_vocab_size": 151936, "vocab_size": 4096}
NANO = {"hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 128,
        "model_vocab_size": None, "vocab_size": 400}

# rows, prompt and completion lengths of the synthetic rollouts: GPU sizes, then the dry run's
SIZES = {"gpu": {"prompts": 4, "group": 4, "prompt_len": 128, "completion_len": 256, "micro_batch": 4},
         "dry": {"prompts": 2, "group": 2, "prompt_len": 8, "completion_len": 8, "micro_batch": 2}}
DECODE_ROWS = {"gpu": (16, 128), "dry": (2, 4)}
MIN_SECONDS = {"versions": 1, "update_0.5b": 60, "update_1.5b": 120, "decode": 45, "checkpoint": 20, "lora": 30,
               "vllm": 90, "compiled": 60, "offload_1.5b": 120, "recipes": 120, "decode_tiny": 20}
"""A phase starts only with this much of the deadline left (the dry run divides by 30)."""


# ---------------------------------------------------------------------- the phases


def phase_versions(ctx: dict) -> dict:
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "cuda": torch.version.cuda, "device": ctx["device"]}
    for name in ("peft", "vllm"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    if ctx["device"] == "cuda":
        free, total = torch.cuda.mem_get_info()
        out.update(gpu=torch.cuda.get_device_name(0), free_gib=round(free / 2**30, 1), total_gib=round(total / 2**30, 1))
    return out


def _rollout(tok, size: dict, device, seed: int = 0):
    """A synthetic rollout of random tokens (no eos inside), groups contiguous, every completion full."""
    import torch

    from cotrain.models.generate import Rollout

    g = torch.Generator().manual_seed(seed)
    n, vocab = size["prompts"] * size["group"], len(tok)
    prompts = torch.randint(10, vocab, (size["prompts"], size["prompt_len"]), generator=g)
    prompt_ids = prompts.repeat_interleave(size["group"], dim=0)
    completion_ids = torch.randint(10, vocab, (n, size["completion_len"]), generator=g)
    ones = torch.ones_like
    return Rollout(prompt_ids=prompt_ids.to(device), prompt_mask=ones(prompt_ids).to(device),
                   completion_ids=completion_ids.to(device), completion_mask=ones(completion_ids).to(device),
                   logp=torch.zeros(n, size["completion_len"], device=device),
                   entropy=torch.zeros(n, size["completion_len"], device=device),
                   truncated=torch.ones(n, dtype=torch.bool, device=device))


def _forced_advantages(size: dict, device):
    """+1 for the first half of each group, -1 for the rest: every group trains."""
    import torch

    half = size["group"] // 2
    return torch.tensor(([1.0] * half + [-1.0] * (size["group"] - half)) * size["prompts"], device=device)


def _logp_gap(model, ro, advantages, g, bf16: bool) -> float:
    """Mean completion log-prob of the +1 rows minus that of the -1 rows."""
    import torch

    from cotrain.train.update import rollout_logprobs

    with torch.no_grad():
        logp = rollout_logprobs(model, ro, g, bf16).float().mean(-1)              # [N]
    return (logp[advantages > 0].mean() - logp[advantages < 0].mean()).item()


def phase_update(ctx: dict, shape_name: str, offload: bool = False) -> dict:
    """Generator and verifier, each 3 AdamW steps on a forced-advantage rollout, both resident; with
    `offload`, AdamW's moments in host memory between steps (`train.offload_optimizer`)."""
    import torch

    from cotrain.config import GrpoConfig
    from cotrain.models.build import load_model
    from cotrain.train.setup import HostStateAdamW
    from cotrain.train.update import policy_update

    model_dir = ctx["models"][shape_name]
    size, device, bf16 = SIZES[ctx["mode"]], ctx["device"], ctx["bf16"]
    g = GrpoConfig(group_size=size["group"], max_new_tokens=size["completion_len"])
    _reset_peak(device)
    models = {}
    for role in ("generator", "verifier"):
        model, tok = load_model(model_dir)
        adamw = HostStateAdamW if offload else torch.optim.AdamW
        models[role] = (model.to(device).train(), tok, adamw(model.parameters(), lr=1e-5))
    out = {}
    for role, (model, tok, opt) in models.items():
        ro = _rollout(tok, size, device, seed=1 if role == "verifier" else 0)
        adv = _forced_advantages(size, device)
        before = _logp_gap(model, ro, adv, g, bf16)
        t0 = time.perf_counter()
        for _ in range(3):
            st = policy_update(model, opt, ro, adv, ro.completion_mask, g, max_grad_norm=1.0, bf16=bf16,
                               micro_batch_size=size["micro_batch"])
        _sync(device)
        after = _logp_gap(model, ro, adv, g, bf16)
        assert st["tokens_trained"] > 0, f"{role}: no token trained (the forced advantages were skipped)"
        assert after > before, f"{role}: the +1/-1 log-prob gap did not widen ({before:.4f} -> {after:.4f})"
        if offload:
            places = {t.device.type for s in opt.state.values() for k, t in s.items() if k != "step"}
            assert places == {"cpu"}, f"{role}: AdamW's moments are on {places} between steps"
        out[role] = {"step_s": round((time.perf_counter() - t0) / 3, 3), "gap_before": round(before, 4),
                     "gap_after": round(after, 4), "grad_norm": round(st.get("grad_norm", float("nan")), 3)}
    out.update(_peak(device))
    out["parameters"] = sum(p.numel() for p in models["generator"][0].parameters())
    out["plan_gib"] = _plan_gib(models["generator"][0].config, size, bf16, offload)
    return out


def _plan_gib(config, size: dict, bf16: bool, offload: bool) -> float:
    """The memory plan's largest phase for this phase's two models and sizes (`models/memory.py`)."""
    from cotrain.models import memory

    shapes = memory.Shapes.of(config)
    w = memory.Work(rollout_rows=size["prompts"] * size["group"], prompt_tokens=size["prompt_len"],
                    new_tokens=size["completion_len"], micro_batch=size["micro_batch"], group_size=size["group"],
                    verify_prompt_tokens=size["prompt_len"], verify_new_tokens=size["completion_len"],
                    verify_group=size["group"], autocast=bf16, offload_optimizer=offload)
    phases = memory.plan([memory.Role("generator", shapes), memory.Role("verifier", shapes)], w)
    return round(max(memory.peaks(phases).values()) / memory.GiB, 4)


def phase_decode(ctx: dict) -> dict:
    """ms per decode step and host syncs per token at two batch sizes; compaction against static decoding."""
    from cotrain.models.build import load_model
    from cotrain.models.generate import generate

    model, tok = load_model(ctx["models"]["small"])
    model.to(ctx["device"]).eval()
    device, bf16, steps = ctx["device"], ctx["bf16"], 16 if ctx["mode"] == "dry" else 64
    prompt = tok("Count the apples: 3 + 4 =")["input_ids"]
    out = {}
    for rows in DECODE_ROWS[ctx["mode"]]:
        kwargs = {"max_new_tokens": steps, "eos_id": -1, "pad_id": tok.pad_token_id, "temperature": 1.0, "seed": 0,
                  "bf16": bf16, "group_size": rows}
        seconds, ro = _timed_generate(model, [prompt], kwargs, device)
        out[f"ms_per_step_{rows}"] = round(1000 * seconds / steps, 2)
        syncs = _host_reads(functools.partial(generate, model, [prompt], **kwargs), device)
        out[f"syncs_per_token_{rows}"] = round(syncs / max(int(ro.lengths.max()), 1), 2)
    # an eos that ends rows at different steps: the greedy token of the first row at its fourth step. In
    # fp32: random weights give near-flat logits, and bf16's rounding, which differs between batch shapes,
    # flips their near-ties (0.77 of the tokens equal in bf16 on an H200), so the check of the loop's
    # logic would read the kernels' rounding
    rows = DECODE_ROWS[ctx["mode"]][0]
    prompts = [prompt[: len(prompt) - i] for i in range(rows)]
    free = generate(model, prompts, max_new_tokens=steps, eos_id=-1, pad_id=tok.pad_token_id, greedy=True)
    eos = int(free.completion_ids[0, 3])
    common = {"max_new_tokens": steps, "eos_id": eos, "pad_id": tok.pad_token_id, "greedy": True}
    batch = generate(model, prompts, **common)          # rows leave the batch (and its cache) as they end
    alone = [generate(model, [p], **common) for p in prompts]  # each row decoded by itself: nothing to compact
    out["compaction_rows_ended_early"] = int((~batch.truncated).sum())
    out["compaction_equal"] = round(sum(_same_tokens(_row(batch, i), a) for i, a in enumerate(alone)) / rows, 4)
    return out


def phase_decode_tiny(ctx: dict) -> dict:
    """The tiny preset's two decodes of a sparse-world tango step, timed apart: the generator's (8 prompts
    of 30 tokens x 8 samples, 56 new tokens, sampled) and the verifier's (64 distinct prompts of 100-180
    tokens, greedy, 160 new tokens); no eos, so every row runs to its limit. On the H200 a tango step's
    verification took 5.9 s against the generation's 0.34 s (2 Zen 4 cores: 2.7 s and 0.49 s): ms per
    decode step, host reads per token and the share of the time spent in the prompts' prefill tell where."""
    import torch

    from cotrain.config import ModelConfig
    from cotrain.models.build import build_model
    from cotrain.models.generate import generate

    device = ctx["device"]
    model, tok = build_model(ModelConfig(preset="tiny"), seed=0)
    model.to(device).eval()
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    shapes = {"generator": ([torch.randint(10, vocab, (30,), generator=g).tolist() for _ in range(8)], 8, 56, False),
              "verifier": ([torch.randint(10, vocab, (int(n),), generator=g).tolist()
                            for n in torch.randint(100, 181, (64,), generator=g)], 1, 160, True)}
    if ctx["mode"] == "dry":
        shapes = {k: (prompts[:4], group, 8, greedy) for k, (prompts, group, _, greedy) in shapes.items()}
    out = {}
    for name, (prompts, group, steps, greedy) in shapes.items():
        kwargs = {"max_new_tokens": steps, "eos_id": -1, "pad_id": tok.pad_token_id, "greedy": greedy, "seed": 0,
                  "bf16": ctx["bf16"], "group_size": group}
        total, ro = _timed_generate(model, prompts, kwargs, device)
        prefill, _ = _timed_generate(model, prompts, {**kwargs, "max_new_tokens": 1}, device, warm_up=False)
        syncs = _host_reads(functools.partial(generate, model, prompts, **kwargs), device)
        out[name] = {"rows": int(ro.completion_ids.shape[0]), "s": round(total, 3),
                     "ms_per_step": round(1000 * (total - prefill) / max(steps - 1, 1), 2),
                     "prefill_s": round(prefill, 3), "syncs_per_token": round(syncs / steps, 2)}
    return out


def _timed_generate(model, prompts: list, kwargs: dict, device, warm_up: bool = True):
    """(seconds, rollout) of one `generate` call, after a warm-up call, the device synchronised around it."""
    from cotrain.models.generate import generate

    if warm_up:
        generate(model, prompts, **kwargs)
    _sync(device)
    t0 = time.perf_counter()
    ro = generate(model, prompts, **kwargs)
    _sync(device)
    return time.perf_counter() - t0, ro


HOST_READS = ("item", "__bool__", "cpu", "tolist", "numpy", "__int__", "__float__", "nonzero")


def _host_reads(fn, device) -> int:
    """How many times fn() read a tensor of `device` on the host (item, bool, a copy to the CPU, nonzero...):
    on a GPU each is a sync; on a CPU (the dry run) every read of any tensor counts."""
    import torch
    from torch.overrides import TorchFunctionMode

    count = [0]

    def on_device(args) -> bool:
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        return t is not None and (t.device.type == torch.device(device).type)

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            count[0] += getattr(func, "__name__", "") in HOST_READS and on_device(args)
            return func(*args, **(kwargs or {}))

    with Reads():
        fn()
    return count[0]


def _row(ro, i: int):
    from cotrain.models.generate import select_rows

    return select_rows(ro, [i])


def phase_checkpoint(ctx: dict) -> dict:
    import torch

    from cotrain.models.build import load_model
    from cotrain.runs import rundir
    from cotrain.runs.policy import Policy

    model, tok = load_model(ctx["models"]["small"])
    model.to(ctx["device"]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(10, len(tok), (2, 16), device=ctx["device"])
    model(ids, labels=ids).loss.backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    t0 = time.perf_counter()
    (ctx["out"] / "ckpt").mkdir(parents=True, exist_ok=True)
    ckpt = rundir.save_checkpoint(ctx["out"] / "ckpt", 1, {"generator": Policy(model, tok, opt, sched)},
                                  {"step": 1, "rng": rundir.rng_state()}, keep_last=1)
    saved = ckpt / "generator"
    fresh, _ = load_model(saved)
    fresh.to(ctx["device"])
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-4)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0)
    rundir.load_checkpoint_state(ckpt, {"generator": Policy(fresh, tok, opt2, sched2)})
    a, b = opt.state_dict()["state"], opt2.state_dict()["state"]
    weights_equal = all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters()))
    states_equal = all(torch.equal(a[i][k], b[i][k]) for i in a for k in a[i] if torch.is_tensor(a[i][k]))
    on_device = all(v.device.type == torch.device(ctx["device"]).type for s in b.values() for v in s.values()
                    if torch.is_tensor(v) and v.dim() > 0)
    assert weights_equal and states_equal and on_device, (weights_equal, states_equal, on_device)
    size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    return {"round_trip_s": round(time.perf_counter() - t0, 2), "bytes": size}


def phase_lora(ctx: dict) -> dict:
    import torch

    from cotrain.config import GrpoConfig, ModelConfig
    from cotrain.models.build import load_model
    from cotrain.models.lora import apply_lora, merged_weights
    from cotrain.train.update import policy_update

    size, device = SIZES[ctx["mode"]], ctx["device"]
    model, tok = load_model(ctx["models"]["small"])
    lora = apply_lora(model.to(device), ModelConfig(lora_r=16))
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-3)
    ro = _rollout(tok, size, device)
    g = GrpoConfig(group_size=size["group"], max_new_tokens=size["completion_len"])
    policy_update(lora, opt, ro, _forced_advantages(size, device), ro.completion_mask, g, max_grad_norm=1.0,
                  bf16=False, micro_batch_size=size["micro_batch"])
    plain, _ = load_model(ctx["models"]["small"])
    plain.load_state_dict(dict(merged_weights(lora)), strict=False)
    plain.to(device).eval()
    lora.eval()
    ids = ro.completion_ids[:2]
    with torch.no_grad():
        a, b = lora(ids).logits.float(), plain(ids).logits.float()
    diff = (a - b).abs().max().item()
    assert diff < 1e-3 * max(1.0, a.abs().max().item()), f"merged logits differ by {diff}"
    return {"max_logit_diff": diff, "trainable": sum(p.numel() for p in lora.parameters() if p.requires_grad)}


def phase_vllm(ctx: dict) -> dict:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return {"skip": "vLLM is not installed"}
    if ctx["device"] != "cuda":
        return {"skip": "vLLM needs a GPU"}
    import torch

    from cotrain.models.build import load_model
    from cotrain.models.vllm_engine import VllmEngine

    model, tok = load_model(ctx["models"]["small"])
    model.to("cuda")
    engine = VllmEngine(str(ctx["models"]["small"]), gpu_memory_utilization=0.3, enable_sleep_mode=True, max_model_len=512)
    prompt = tok("Count the apples: 3 + 4 =")["input_ids"]
    kwargs = {"group_size": 1, "max_new_tokens": 16, "eos_id": tok.eos_token_id, "pad_id": tok.pad_token_id,
              "greedy": True, "seed": 0}
    first = engine.generate([prompt], **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine.sync_weights(model)
    second = engine.generate([prompt], **kwargs)
    changed = not torch.equal(first.completion_ids.cpu(), second.completion_ids.cpu())
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep(1)
    freed = torch.cuda.mem_get_info()[0] - free_awake
    engine.wake_up()
    assert changed, "a weight sync left the greedy output unchanged"
    assert freed > 0, "sleep freed no GPU memory"
    return {"sync_changes_output": changed, "sleep_freed_gib": round(freed / 2**30, 2)}


def phase_compiled(ctx: dict) -> dict:
    from cotrain.models.build import load_model
    from cotrain.models.generate import generate

    model, tok = load_model(ctx["models"]["small"])
    model.to(ctx["device"]).eval()
    prompts = [tok("Count the apples: 3 + 4 =")["input_ids"], tok("Mia has 7 pencils.")["input_ids"]]
    common = {"max_new_tokens": 8 if ctx["mode"] == "dry" else 32, "eos_id": -1, "pad_id": tok.pad_token_id,
              "greedy": True}  # fp32, as in phase_decode's comparison: bf16 flips random weights' near-ties
    plain = generate(model, prompts, **common)
    t0 = time.perf_counter()
    compiled = generate(model, prompts, compiled=True, **common)
    return {"first_call_s": round(time.perf_counter() - t0, 1), "tokens_equal": _same_tokens(plain, compiled)}


# ---------------------------------------------------------------------- helpers


def _same_tokens(a, b) -> float:
    """The share of completion tokens two rollouts agree on (1.0: identical)."""
    import torch

    x, y = a.completion_ids.cpu(), b.completion_ids.cpu()
    width = min(x.shape[1], y.shape[1])
    return round(torch.eq(x[:, :width], y[:, :width]).float().mean().item(), 4)


def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


RECIPE_STEPS = {"gpu": 6, "dry": 1}
"""Generator steps of each demo arm (and of the killed-then-resumed tango run: 4 on a GPU, 2 dry)."""


def _on(devices: list[str], kind: str) -> bool:
    """Whether every device of a run's env.json is of this kind ('cuda:0' is cuda)."""
    return bool(devices) and all(d.partition(":")[0] == kind for d in devices)


def _cotrain(args: list[str]) -> int:
    """`cotrain ARGS` in this process (the CLI's own error handling: 0, or 2 with one line)."""
    from cotrain.cli import main as cli

    return cli(args)


def _arm_figures(run: Path) -> dict:
    """A finished run's record: its devices, steps, tokens trained and mean step time, and pass@1."""
    env = json.loads((run / "env.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "time/step" in r]
    done = json.loads((run / "eval.json").read_text())
    trained = {k.removeprefix("tokens/").removesuffix("_trained_total"): v for k, v in steps[-1].items()
               if k.startswith("tokens/") and k.endswith("_trained_total")} if steps else {}
    return {"devices": env["precision"]["devices"], "steps": len(steps), "tokens_trained": trained,
            "step_s": round(sum(r["time/step"] for r in steps[1:]) / max(len(steps) - 1, 1), 3),
            "test_pass@1": done["generator"]["test"].get("pass@1")}


def phase_recipes(ctx: dict) -> dict:
    """The recipes themselves on the device, through the CLI: `cotrain demo` (GRPO and RL Tango from the
    committed sparse-world starts, so that rewards vary and both models take real optimizer steps); a tango
    run SIGKILLed after its step-2 checkpoint and resumed to its end; then each recipe's smoke config for 2
    steps, as many as the deadline allows. The models' devices are read back from each run's env.json."""
    import os
    import signal
    import subprocess

    device, mode, out = ctx["device"], ctx["mode"], ctx["out"] / "recipes"
    steps = RECIPE_STEPS[mode]
    small = [f"eval.n={64 if mode == 'gpu' else 8}", f"eval.n_during={64 if mode == 'gpu' else 8}", "eval.k=0",
             "eval.n_sampled=16", "eval.splits=[test]", "eval.every=0", "eval.at_start=false", "cotraining.eval_n=32",
             "log.progress=false", "log.plots=false", "log.tensorboard=false"]
    figures: dict = {}
    t0 = time.monotonic()
    code = _cotrain(["demo", "--out", str(out / "demo"), f"train.steps={steps}", "checkpoint.every=0", *small])
    assert code == 0, f"cotrain demo ended with exit code {code}"
    for arm in ("grpo", "tango"):
        arm_fig = _arm_figures(out / "demo" / arm)
        assert _on(arm_fig["devices"], device), f"demo {arm} ran on {arm_fig['devices']}, not {device}"
        assert arm_fig["tokens_trained"].get("gen", 0) > 0, f"demo {arm}: the generator trained no token in {steps} steps"
        figures[f"demo_{arm}"] = arm_fig
    if mode == "gpu":  # 6 steps of tango's 3:1 schedule hold verifier steps
        assert figures["demo_tango"]["tokens_trained"].get("ver", 0) > 0, "demo tango: the verifier trained no token"
    figures["demo_s"] = round(time.monotonic() - t0, 1)

    # kill after the step-2 checkpoint, resume to the end
    t0 = time.monotonic()
    kill_steps = 4 if mode == "gpu" else 2
    run = out / "killed"
    starts = REPO / "results" / "sparse" / "starts"
    args = ["run", str(REPO / "configs" / "sparse" / "tango.yaml"), f"init={starts / 'sft' / 'generator'}",
            f"verifier.init={starts / 'warm' / 'verifier'}", "verifier.warmup_sft_steps=0",
            f"train.steps={kill_steps}", "checkpoint.every=1", *small, "--out", str(run)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    victim = subprocess.Popen([sys.executable, "-m", "cotrain", *args], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not (run / "checkpoints" / "step_2").is_dir():
        assert victim.poll() is None, f"the run to kill ended first: {victim.stderr.read().decode()[-300:]}"
        assert time.monotonic() < ctx["deadline"], "no step-2 checkpoint before the deadline"
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert _cotrain([*args, "--resume"]) == 0, "the resumed run failed"
    resumed = _arm_figures(run)
    assert _on(resumed["devices"], device) and resumed["steps"] == kill_steps, resumed
    figures["killed_then_resumed"] = {**resumed, "seconds": round(time.monotonic() - t0, 1)}

    # every other recipe's smoke config, 2 steps each, while the deadline allows
    import shutil

    smoke = {}
    for path in sorted((REPO / "configs").glob("*_smoke.yaml")):
        name = path.stem.removesuffix("_smoke")
        if name == "tango" or mode == "dry":  # tango ran above; the dry run stops at the demo and the kill
            continue
        if name.startswith("cure") and shutil.which("bwrap") is None:
            smoke[name] = "SKIP (no bubblewrap: the sandbox runs no program)"
            continue
        if time.monotonic() + 30 > ctx["deadline"]:
            smoke[name] = "SKIP (deadline)"
            continue
        t1 = time.monotonic()
        code = _cotrain(["run", str(path), "train.steps=2", "checkpoint.every=0", *small, "--out", str(out / name)])
        devices = json.loads((out / name / "env.json").read_text())["precision"]["devices"] if code == 0 else None
        smoke[name] = f"{'PASS' if code == 0 and _on(devices, device) else 'FAIL'} {time.monotonic() - t1:.0f} s" + (
            f" on {devices}" if code == 0 else f" (exit {code})")
    if smoke:
        figures["smoke"] = smoke
    failed = [n for n, v in smoke.items() if v.startswith("FAIL")]
    assert not failed, f"smoke configs failed: {failed} ({smoke})"
    return figures


def _reset_peak(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak(device) -> dict:
    import torch

    if not str(device).startswith("cuda"):
        return {}
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


class Models(dict):
    """{"small": dir, "large": dir}: each stand-in built (bench/gpu_check.py `build`) the first time a phase asks."""

    def __init__(self, out: Path, small: dict, large: dict):
        super().__init__()
        self.out, self.shapes = out, {"small": small, "large": large}

    def __missing__(self, name: str) -> Path:
        from gpu_check import build  # bench/ is this script's directory: the same offline stand-in builder

        self[name] = build(self.out / f"model_{name}", self.shapes[name])
        return self[name]


PHASES = {"versions": phase_versions, "update_0.5b": lambda ctx: phase_update(ctx, "small"),
          "update_1.5b": lambda ctx: phase_update(ctx, "large"), "decode": phase_decode,
          "checkpoint": phase_checkpoint, "lora": phase_lora, "vllm": phase_vllm, "compiled": phase_compiled,
          "offload_1.5b": lambda ctx: phase_update(ctx, "large", offload=True), "recipes": phase_recipes,
          "decode_tiny": phase_decode_tiny}


def run_phase(name: str, ctx: dict, deadline: float) -> dict:
    """One guarded phase: its row (phase, status, seconds, figures)."""
    import torch

    need = MIN_SECONDS[name] / (30 if ctx["mode"] == "dry" else 1)
    if time.monotonic() + need > deadline:
        return {"phase": name, "status": "SKIP", "seconds": 0.0, "figures": {"skip": f"under {need:.0f} s of the deadline left"}}
    t0 = time.monotonic()
    try:
        figures = PHASES[name](ctx)
        status = "SKIP" if "skip" in figures else "PASS"
    except torch.cuda.OutOfMemoryError as err:
        status, figures = "OOM", {"error": str(err).splitlines()[0][:300]}
    except Exception as err:  # recorded, and the next phase runs
        status, figures = "FAIL", {"error": f"{type(err).__name__}: {str(err)[:300]}",
                                   "where": traceback.format_exc().strip().splitlines()[-3:]}
    finally:
        _reset_peak(ctx["device"])
    return {"phase": name, "status": status, "seconds": round(time.monotonic() - t0, 1), "figures": figures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-dry-run", action="store_true", help="every phase at nano shapes on the CPU")
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole check (default 480)")
    ap.add_argument("--phases", default=None, help="comma-separated subset of: " + ", ".join(PHASES))
    ap.add_argument("--out", default=None, help="directory for rows.jsonl and the models (default: a temporary one)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    deadline = start + args.deadline

    import torch

    dry = args.cpu_dry_run
    if not dry and not torch.cuda.is_available():
        print(f"gpu_smoke: no CUDA GPU here (torch {torch.__version__} sees none); run it on a GPU machine, "
              "or pass --cpu-dry-run to check every phase on the CPU", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.phases.split(",")] if args.phases else list(PHASES)
    unknown = [n for n in names if n not in PHASES]
    if unknown:
        print(f"gpu_smoke: unknown phase {unknown[0]!r} (valid: {', '.join(PHASES)})", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"

    ctx = {"mode": "dry" if dry else "gpu", "device": "cpu" if dry else "cuda", "bf16": not dry, "out": out, "deadline": deadline,
           "models": Models(out, NANO if dry else QWEN05, NANO if dry else QWEN15)}
    print(f"gpu_smoke: {'CPU dry run at nano shapes' if dry else 'Qwen2.5 0.5B and 1.5B shapes'} (each built here on "
          f"first use: random weights, an offline BPE); deadline {args.deadline:.0f} s", flush=True)
    print(f"{'phase':<13}{'status':<8}{'seconds':>8}  figures", flush=True)
    failed = False
    for name in names:
        row = run_phase(name, ctx, deadline)
        failed |= row["status"] in ("FAIL", "OOM")
        with rows_path.open("a", encoding="utf-8") as f:  # a row at a time: a cut run keeps the rest
            f.write(json.dumps(row) + "\n")
        print(f"{name:<13}{row['status']:<8}{row['seconds']:>8.1f}  {json.dumps(row['figures'])}", flush=True)
    print(f"rows: {rows_path}  ({time.monotonic() - start:.0f} s in all)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
