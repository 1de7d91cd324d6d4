"""Benchmark: what the allocator's settings (`cotrain.allocator.tune`) save SmolLM2-135M's update.

Each process loads SmolLM2-135M-Instruct as configs/real/smollm2_sparse.yaml does (bf16 autocast where the CPU
has native bf16), samples one rollout of 4 prompts x 8 (at most --max-new-tokens tokens, seed 0), then times the
GRPO loss's forward and backward of one micro-batch (one group of 8 rows) --repeats times over the four groups,
after one warm-up round. Processes alternate between the allocator as the system has it (`COTRAIN_MALLOC=system`)
and as a run sets it, --pairs times, so that a drift of the machine falls on both. A process's figure is its
median micro-batch; the last line is `allocator_speedup=<system's median over tuned median>`.

    python bench/allocator.py              # 2 pairs of processes, about 5 minutes
Run it alone on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(max_new_tokens: int, repeats: int) -> dict:
    sys.path.insert(0, str(REPO / "src"))
    from cotrain import allocator

    tuned = allocator.tune()  # before the model loads, as early as a run's own setting is made
    import torch

    import cotrain.train.update as update
    from cotrain.config import load_config
    from cotrain.models.generate import generate
    from cotrain.models.prompts import encode_generator_prompts
    from cotrain.precision import resolve_bf16
    from cotrain.train.setup import build_task, initial_model, training_pool

    cfg = load_config(str(REPO / "configs/real/smollm2_sparse.yaml"), [])
    bf16, _ = resolve_bf16(cfg.train.bf16, ["cpu"])
    g = cfg.grpo
    torch.manual_seed(0)
    model, tok = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    pool = training_pool(build_task(cfg.task), cfg.seed, cfg.train.n_problems)[0]
    prompts = encode_generator_prompts(tok, [p.question for p in pool[:4]])
    with torch.no_grad():
        ro = generate(model, prompts, seed=0, max_new_tokens=max_new_tokens, eos_id=tok.eos_token_id,
                      pad_id=tok.pad_token_id, temperature=g.temperature, top_p=g.top_p, greedy=False, bf16=bf16,
                      group_size=g.group_size)
    model.train()
    n = ro.completion_ids.shape[0]
    advantages = torch.randn(n, generator=torch.Generator().manual_seed(0))
    mask = ro.completion_mask
    times = []
    for r in range(repeats + 1):
        for group in range(n // g.group_size):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            update._backward(model, ro, advantages, mask, g, [torch.tensor([group])], (n, int(mask.sum())), None, None, bf16)
            if r:  # the first round warms up
                times.append(time.perf_counter() - t0)
    return {"allocator": tuned, "bf16": bf16, "median_s": statistics.median(times), "times": times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds over the four groups in each process")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.max_new_tokens, args.repeats)))
        return 0
    medians: dict[str, list[float]] = {"system": [], "tuned": []}
    for _ in range(args.pairs):
        for arm in ("system", "tuned"):
            env = {k: v for k, v in os.environ.items() if k != "COTRAIN_MALLOC"}
            if arm == "system":
                env["COTRAIN_MALLOC"] = "system"
            out = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(args.repeats),
                                  "--max-new-tokens", str(args.max_new_tokens)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            medians[arm].append(r["median_s"])
            print(f"{arm:7s} median micro-batch {r['median_s']:.3f} s (bf16 {r['bf16']}; allocator {r['allocator']})",
                  flush=True)
    system, tuned = statistics.median(medians["system"]), statistics.median(medians["tuned"])
    print(f"median of medians: system {system:.3f} s, tuned {tuned:.3f} s")
    print(f"allocator_speedup={system / tuned:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
