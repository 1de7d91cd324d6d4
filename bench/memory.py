"""Benchmark: peak memory of a GRPO run under the memory options, each in a fresh process.

Every variant runs the same 2 GRPO steps of the `base` preset (~25M parameters, char tokenizer) on
arith with 32 prompts x 8 samples of up to 96 new tokens, with `grpo.beta` > 0 so every group is
trained (and a reference model is held). Memory is the process's peak resident set (ru_maxrss) minus
that of a process that only builds the same model: what training adds, on the CPU. Options:

  plain            full fine-tuning, float32 weights, one forward/backward over the whole batch
  micro_batch 32   train.micro_batch_size=32: gradient accumulation over 4-group micro-batches
  checkpointing    model.gradient_checkpointing=true
  lora r=16        model.lora_r=16: adapters only; the reference is the base with the adapter off
  all three        micro-batches, checkpointing and LoRA together

Run:  python bench/memory.py            (about two minutes on 2 cores)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

VARIANTS = {
    "plain": [],
    "micro_batch 32": ["train.micro_batch_size=32"],
    "checkpointing": ["model.gradient_checkpointing=true"],
    "lora r=16": ["model.lora_r=16"],
    "all three": ["train.micro_batch_size=32", "model.gradient_checkpointing=true", "model.lora_r=16"],
}

DRIVER = r"""
import json, resource, sys, tempfile
from cotrain.config import build_config
raw = {"recipe": "grpo", "model": {"preset": "base"}, "task": {"name": "arith", "n_ops": [2, 3], "max_operand": 50},
       "train": {"steps": 2, "batch_size": 256, "lr": 1e-5, "n_problems": 2000},
       "grpo": {"group_size": 8, "max_new_tokens": 96, "beta": 0.04},
       "eval": {"splits": ["test"], "n": 8, "k": 0, "every": 0}, "checkpoint": {"every": 0},
       "log": {"progress": False, "tensorboard": False}}
cfg = build_config(raw, sys.argv[2:])
if sys.argv[1] == "build":
    from cotrain.train.setup import initial_model
    model, _ = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    n = sum(p.numel() for p in model.parameters())
else:
    from cotrain.recipes import grpo
    with tempfile.TemporaryDirectory() as d:
        grpo.run(cfg, d)
    n = 0
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "params": n}))
"""


def _peak(mode: str, overrides: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", DRIVER, mode, *overrides], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2"})
    if out.returncode:
        sys.exit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    base = _peak("build", [])
    print(f"base preset: {base['params'] / 1e6:.1f}M parameters; a process that only builds it peaks at "
          f"{base['peak_mb']:.0f} MB")
    print(f"{'variant':<16}{'peak MB':>10}{'training adds':>15}{'vs plain':>10}")
    plain = None
    for name, overrides in VARIANTS.items():
        added = _peak("run", overrides)["peak_mb"] - base["peak_mb"]
        plain = plain or added
        print(f"{name:<16}{added + base['peak_mb']:>10.0f}{added:>12.0f} MB{added / plain:>10.2f}")


if __name__ == "__main__":
    main()
