"""GPU check: the real-model path on one CUDA GPU, measured against the estimates of configs/real/README.md.

One command for the first GPU a user gets, with the torch, transformers and peft preinstalled
there and no network. It builds a model of Qwen2.5-0.5B-Instruct's shapes locally (random weights,
the real config's sizes: 24 layers, hidden 896, MLP 4,864, 14 query and 2 key/value heads,
vocabulary 151,936 rows, tied embeddings; a byte-level BPE tokenizer trained offline with a ChatML
template), then runs a few steps of the shipped GSM8K configs, each case in its own process:

  sft bf16             configs/real/sft.yaml (64 GSM8K solutions, micro-batches of 16): the update alone
  grpo bf16            configs/real/grpo.yaml (16 prompts x 8, 512 new tokens, bf16 autocast)
  grpo FSDP2 torchrun  under torchrun --nproc_per_node 1 with train.fsdp=true
  grpo LoRA            + model.lora_r=16
  grpo checkpointing   + model.gradient_checkpointing=true
  grpo compiled        + rollout.compile=true (decoding through torch.compile with a static KV cache)
  tango bf16           configs/real/tango.yaml without the verifier's 40 RL warm-up steps (Ng:Nv = 3:1)

Random weights never write eos, so every completion runs to its length limit: the worst case the
README's estimates assume. They never solve a problem either, so every group's advantages are zero and
the RL cases skip their updates (`tokens/gen_trained` 0): their rows time the rollouts and the
verification, and `sft bf16` times an update. The table gives, per case, the rollout tokens/s, the step-time split
(rollout, verification, update, rest; mean over the steps after the first), the peak GPU memory of
a step, and the README's estimate of the time per step and peak memory beside them.

  python bench/gpu_check.py                 # on a CUDA machine: about 12 minutes on one H200 (2 steps a case; --cases for less)
  python bench/gpu_check.py --cpu-dry-run   # the whole path on a nano stand-in on the CPU (make test runs it)

Without CUDA and without --cpu-dry-run it ends with one line and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Qwen2.5-0.5B-Instruct's config.json sizes.
QWEN05 = {"hidden_size": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate_size": 4864,
          "model_vocab_size": 151936, "vocab_size": 4096}
NANO = {"hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 128,
        "model_vocab_size": None, "vocab_size": 400}

# configs/real/README.md, "GPU memory and time per step: estimates" (one 80 GB H100, as shipped).
ESTIMATES = {"grpo": {"step_s": 13.5, "peak_gb": 45.0}, "tango": {"step_s": 35.0, "peak_gb": 58.0},
             "grpo_ckpt": {"step_s": None, "peak_gb": 33.0}, "sft": {"step_s": 0.3, "peak_gb": 30.0}}

COMMON = ["train.steps={steps}", "eval.splits=[test]", "eval.n={eval_n}", "eval.k=0", "eval.every=0", "eval.max_new_tokens=64",
          "checkpoint.every=0", "log.progress=false", "log.tensorboard=false", "train.warmup_steps=0"]
CASES = {  # name: (config, estimate key, launcher, overrides); the cheap cases first, tango (the longest) last
    "sft bf16": ("sft", "sft", "python", ["train.bf16=true"]),
    "grpo bf16": ("grpo", "grpo", "python", ["train.bf16=true"]),
    "grpo FSDP2 torchrun": ("grpo", None, "torchrun", ["train.bf16=true", "train.fsdp=true"]),
    "grpo LoRA": ("grpo", None, "python", ["train.bf16=true", "model.lora_r=16"]),
    "grpo checkpointing": ("grpo", "grpo_ckpt", "python", ["train.bf16=true", "model.gradient_checkpointing=true"]),
    "grpo compiled": ("grpo", None, "python", ["train.bf16=true", "rollout.compile=true"]),
    "tango bf16": ("tango", "tango", "python", ["train.bf16=true", "verifier.warmup_rl_steps=0", "cotraining.eval_n=8"]),
}
# The dry run: the same cases on a nano stand-in, small enough for the test suite.
DRY = ["train.batch_size=4", "train.micro_batch_size=2", "grpo.group_size=2", "grpo.max_new_tokens=6",
       "verifier.max_new_tokens=6", "verifier.solutions=2", "verifier.group_size=2", "train.n_problems=64",
       "eval.max_new_tokens=6", "eval.n_sampled=2", "cotraining.eval_n=2", "log.plots=false"]


def corpus() -> list[str]:
    """Texts the stand-in's BPE merges are learned from: arithmetic and every role's chat prompts."""
    from cotrain.roles import generator, verifier
    from cotrain.tasks.arith import ArithTask

    problems = ArithTask().problems("train", 400)
    texts = [p.question for p in problems] + [p.solution for p in problems]
    for p in problems[:100]:
        texts.append(generator.CHAT_INSTRUCTION.format(question=p.question))
        texts.append(verifier.chat_messages(p.question, p.solution)[0]["content"])
    return texts


def build(out: Path, shape: dict) -> Path:
    from cotrain.models.build import build_standin

    return build_standin("qwen2", out, corpus=corpus(), **shape)


def run_case(name: str, model_dir: Path, out: Path, dry: bool, steps: int) -> dict:
    config, estimate, launcher, overrides = CASES[name]
    run_dir = out / name.replace(" ", "_")
    args = [f"model.path={model_dir}", *[c.format(steps=steps, eval_n=2 if dry else 16) for c in COMMON], *overrides]
    if dry:
        args += DRY + ["model.device=cpu"]
    cli = ["-m", "cotrain", "run", str(REPO / "configs" / "real" / f"{config}.yaml"), "--out", str(run_dir), *args]
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *cli]
           if launcher == "torchrun" else [sys.executable, *cli])
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - start
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "output.log").write_text(proc.stdout + proc.stderr)  # kept for a failed case's whole story
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"case": name, "error": f"exit {proc.returncode}: {tail}", "wall_s": wall}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_rows = [r for r in rows if "time/step" in r]
    later = steps_rows[1:] or steps_rows  # the first step carries warm-up (kernels, allocator)

    def mean(key: str) -> float | None:
        vals = [r[key] for r in later if key in r]
        return sum(vals) / len(vals) if vals else None

    step = mean("time/step")
    parts = {k: mean(f"time/{k}") or 0.0 for k in ("gen", "verify", "update", "ver_update")}
    return {"case": name, "steps": len(steps_rows), "wall_s": wall,
            "rollout_tok_s": mean("throughput/gen_tokens_per_s"), "step_s": step,
            "gen_s": parts["gen"], "verify_s": parts["verify"], "update_s": parts["update"] + parts["ver_update"],
            "other_s": (step or 0.0) - sum(parts.values()),
            "peak_gb": max((r["memory/peak_gib"] * 2**30 / 1e9 for r in steps_rows if "memory/peak_gib" in r), default=None),
            "estimate": ESTIMATES.get(estimate or "", {}),
            "env": json.loads((run_dir / "env.json").read_text())}


def table(results: list[dict]) -> str:
    def f(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)

    head = (f"{'case':<22}{'steps':>6}{'tok/s':>10}{'step s':>9}{'rollout':>9}{'verify':>8}{'update':>8}"
            f"{'other':>8}{'peak GB':>9}{'est. s':>8}{'est. GB':>8}")
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['case']:<22} FAILED {r['error']}")
            continue
        e = r["estimate"]
        lines.append(f"{r['case']:<22}{r['steps']:>6}{f(r['rollout_tok_s'], '{:.0f}'):>10}{f(r['step_s']):>9}"
                     f"{f(r['gen_s']):>9}{f(r['verify_s']):>8}{f(r['update_s']):>8}{f(r['other_s']):>8}"
                     f"{f(r['peak_gb'], '{:.1f}'):>9}{f(e.get('step_s'), '{:.1f}'):>8}{f(e.get('peak_gb'), '{:.0f}'):>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-dry-run", action="store_true", help="run the whole path on a nano stand-in on the CPU")
    ap.add_argument("--steps", type=int, default=None, help="steps per case (default: 2)")
    ap.add_argument("--cases", default=None, help="comma-separated subset of: " + ", ".join(CASES))
    ap.add_argument("--out", default=None, help="directory for the runs and gpu_check.json (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch

    dry = args.cpu_dry_run
    if not dry and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA GPU here (torch {torch.__version__} sees none); run it on a GPU machine, "
              "or pass --cpu-dry-run to check the path on the CPU", file=sys.stderr)
        return 2
    names = [c.strip() for c in args.cases.split(",")] if args.cases else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"gpu_check: unknown case {unknown[0]!r} (valid: {', '.join(CASES)})", file=sys.stderr)
        return 2
    if dry:
        from cotrain.dist import fsdp_on_cpu

        if not fsdp_on_cpu() and "grpo FSDP2 torchrun" in names:
            print(f"gpu_check: leaving out 'grpo FSDP2 torchrun': FSDP2 on the CPU needs torch >= 2.7 "
                  f"(this is {torch.__version__}; on GPUs it runs from 2.6)", flush=True)
            names.remove("grpo FSDP2 torchrun")
    steps = args.steps or 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    out.mkdir(parents=True, exist_ok=True)

    from cotrain.precision import machine_line

    print(f"gpu_check: {'CPU dry run on a nano stand-in' if dry else 'Qwen2.5-0.5B-shaped model'}; {machine_line()}",
          flush=True)
    start = time.perf_counter()
    model_dir = build(out / "model", NANO if dry else QWEN05)
    print(f"model built in {time.perf_counter() - start:.1f} s -> {model_dir}", flush=True)
    results = []
    for name in names:
        print(f"  {name} ...", end="", flush=True)
        r = run_case(name, model_dir, out, dry, steps)
        print(f" {r['wall_s']:.0f} s" + (f"  FAILED {r['error']}" if "error" in r else ""), flush=True)
        results.append(r)
        (out / "gpu_check.json").write_text(json.dumps(results, indent=2) + "\n")  # a case at a time: a cut run keeps the rest
    print(table(results))
    if not dry:
        print("estimates: configs/real/README.md (full 500-step configs on one 80 GB H100; time per step and "
              "peak memory, worst case of every completion at its length limit)")
    print(f"results: {out / 'gpu_check.json'}  ({time.perf_counter() - start:.0f} s in all)")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
