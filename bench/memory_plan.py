"""The memory plan (`cotrain.models.memory`) against measured peaks, and the plan of the real configs.

    python bench/memory_plan.py                     # measure: tiny, small presets and SmolLM2's shapes
    python bench/memory_plan.py --shapes tiny       # one shape (seconds)
    python bench/memory_plan.py --real              # the plan of configs/real/tango.yaml at Qwen2.5 shapes

Measuring: each case runs in a fresh process with glibc's allocation cache off (MALLOC_MMAP_THRESHOLD_,
so a freed tensor's pages go back at once) on a randomly initialised Llama of the shape (the weights'
values do not change the memory). A phase's peak is the process's peak resident memory (VmHWM, reset
through /proc/self/clear_refs) above its resident memory before the phase, after one warm-up run; it is
compared with what the plan adds to the resident state in that phase: for a rollout the KV cache and
the decode step (weights in float32, no autocast copy on the CPU's float32 runs), for an update the
micro-batch's activations (gradients allocated before the measurement, as a run's first update leaves
them). Linux only. Prints one JSON line per case and a table; exits 1 when a case is off by more than
--tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

SHAPES = {  # hidden, layers, heads, kv heads, MLP width, vocabulary (the presets' with a BPE-sized vocabulary)
    "tiny": (128, 4, 4, 2, 512, 8192),
    "small": (256, 6, 8, 4, 1024, 8192),
    "smollm2": (576, 30, 9, 3, 1536, 49152),
}
CASES = {  # (rows, prompt tokens, new tokens, group size, bf16 autocast)
    "tiny": [(16, 40, 120, 1, False), (32, 40, 120, 8, False), (16, 40, 120, 1, True)],
    "small": [(16, 40, 120, 1, False), (16, 40, 120, 8, True)],
    "smollm2": [(8, 100, 64, 8, False), (8, 100, 64, 1, True)],
}


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _peak_above(fn) -> int:
    import gc

    gc.collect()
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident memory
    fn()
    return _status("VmHWM") - base


def measure(shape: str, rows: int, prompt: int, new: int, group: int, bf16: bool) -> dict:
    """One case, in this process: the measured and planned bytes of a rollout and of an update's
    micro-batch."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cotrain.models import memory
    from cotrain.models.generate import completion_logprobs, generate, group_logprobs
    from cotrain.train.update import zero_grads

    d, layers, heads, kv, f, vocab = SHAPES[shape]
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                         intermediate_size=f, vocab_size=vocab, tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(config)
    role = memory.Role("generator", memory.Shapes.of(config))
    work = memory.Work(rollout_rows=rows, prompt_tokens=prompt, new_tokens=new, micro_batch=rows, group_size=group,
                       autocast=bf16)
    prompts = [[1] + [5 + (i * 7 + j) % (vocab - 5) for j in range(prompt - 1)] for i in range(rows // group)]

    def rollout():
        return generate(model, prompts, max_new_tokens=new, eos_id=-1, pad_id=0, temperature=1.0, seed=0, bf16=bf16,
                        group_size=group)

    ro = rollout()  # warm-up
    decode = _peak_above(rollout)
    zero_grads(model)

    def update():
        if group > 1:
            logp, _ = group_logprobs(model, ro.prompt_ids[::group], ro.prompt_mask[::group], ro.completion_ids,
                                     ro.completion_mask, group, bf16=bf16)
        else:
            logp, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                          bf16=bf16)
        (logp * ro.completion_mask).sum().backward()

    update()  # warm-up
    train = _peak_above(update)
    planned_decode = (memory.kv_cache(role, work, rows, prompt + new) + memory.autocast_copy(role, work)
                      + memory.decode_work(role, rows, rows // group, prompt, work))
    planned_train = memory.activations(role, work, rows, prompt, new, group) + memory.autocast_copy(role, work)
    return {"shape": shape, "params": role.shapes.params, "rows": rows, "prompt": prompt, "new": new, "group": group,
            "bf16": bf16, "rollout_measured_mib": round(decode / 2**20, 1),
            "rollout_planned_mib": round(planned_decode / 2**20, 1),
            "update_measured_mib": round(train / 2**20, 1), "update_planned_mib": round(planned_train / 2**20, 1)}


def run_case(shape: str, case: tuple) -> dict:
    """`measure` in a fresh process with glibc's allocation cache off."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    code = (f"import sys, json; sys.path.insert(0, {str(REPO / 'bench')!r}); import memory_plan; "
            f"print(json.dumps(memory_plan.measure({shape!r}, *{case!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{shape} {case}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def real_plans() -> list[str]:
    """The plan of configs/real/tango.yaml (16 prompts x G 8, 512 tokens, micro-batch 16, verifications of
    512 tokens on prompts of 768 in groups of 4, bf16 autocast on float32 weights; prompts of 256 tokens) at Qwen2.5-0.5B and 1.5B shapes on an 80 GiB GPU: as
    the code held memory before (gradients never freed) and now, and with the options that fit (checkpointing,
    LoRA, AdamW's moments in host memory)."""
    from cotrain.models import memory

    lines = []
    capacity = 80 * memory.GiB
    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"):
        s = memory.KNOWN_SHAPES[name]
        roles = [memory.Role("generator", s), memory.Role("verifier", s)]
        work = memory.Work(rollout_rows=128, prompt_tokens=256, new_tokens=512, micro_batch=16, group_size=8,
                           eval_rows=64, eval_new_tokens=1024, verify_rows=128, verify_prompt_tokens=768,
                           verify_new_tokens=512, verify_group=4, autocast=True)
        import dataclasses

        for label, rs, w in (("before (gradients held)", roles, dataclasses.replace(work, grads_held=True)),
                             ("now", roles, work),
                             ("now, checkpointing", [dataclasses.replace(r, checkpointing=True) for r in roles], work),
                             ("now, LoRA r16", [dataclasses.replace(r, lora_r=16) for r in roles], work),
                             ("now, optimizer states in host memory", roles,
                              dataclasses.replace(work, offload_optimizer=True))):
            lines.append(f"## {name}, {label}")
            lines += memory.table(memory.plan(rs, w), capacity)
            lines.append(f"fixes: {memory.fixes(rs, w, capacity) or 'none needed'}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    ap.add_argument("--tolerance", type=float, default=0.2, help="largest relative error allowed (default 0.2)")
    ap.add_argument("--real", action="store_true", help="print the plan of configs/real/tango.yaml and exit")
    args = ap.parse_args(argv)
    if args.real:
        print("\n".join(real_plans()))
        return 0
    worst = 0.0
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            print(f"memory_plan: unknown shape {shape!r} (valid: {', '.join(SHAPES)})", file=sys.stderr)
            return 2
        for case in CASES[shape]:
            row = run_case(shape, case)
            for phase in ("rollout", "update"):
                err = row[f"{phase}_planned_mib"] / row[f"{phase}_measured_mib"] - 1
                row[f"{phase}_error"] = round(err, 3)
                worst = max(worst, abs(err))
            print(json.dumps(row), flush=True)
    print(f"largest error {worst:.1%} (tolerance {args.tolerance:.0%})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
