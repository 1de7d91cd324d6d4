"""Benchmark: the cost of a co-training step against a GRPO step at the same generator batch.

Both recipes start from the same model (the SFT'd `tiny` model of bench/grpo_vs_trl.py, built once
and cached in bench/out/start/) and draw the same prompts with the same seeds. A `tango` step is one
generator step as the recipe runs it: the generator's rollout, the verifier's greedy verification of
every sample, the process advantages and the generator update, plus the verifier's RL steps
amortised over the round (Nv verifier steps after every Ng generator steps; `time/step` includes
them on the steps that run them). The verifier's warm-up happens before step 1 and is reported
separately, not in the ratio. Both sides run in one process, one after the other, on the same threads.

Run:  python bench/tango_vs_grpo.py                    (24 steps each, 16 prompts x 8 samples)
      python bench/tango_vs_grpo.py --steps 6          (a quick check)
The last line is `tango_over_grpo_step=X.XX`: the mean tango step time over the mean grpo step time
(step 1 left out as a warm-up of caches). Each side's line ends with the process's peak resident memory
during its run (Linux VmHWM, reset before each side; the first side's includes the imports).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parent / "out" / "tango_vs_grpo"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=24, help="generator steps of each side")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per generator step")
    ap.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--gen-steps", type=int, default=3, help="Ng")
    ap.add_argument("--ver-steps", type=int, default=1, help="Nv")
    ap.add_argument("--solutions", type=int, default=32, help="solutions per verifier step (configs/tango.yaml: 32)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides (default: fp32)")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="train.micro_batch_size of both sides (groups chunked by length; default: whole batches)")
    ap.add_argument("--verify-share", type=float, default=1.0,
                    help="verifier.verify_share: verify only this share of the distinct samples, the least sure")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from grpo_vs_trl import START, TASK, build_start_model
    from real_model import peak_gib, peak_reset

    from cotrain.config import build_config
    from cotrain.recipes import grpo, tango

    start = build_start_model()
    common = {
        "seed": 0, "init": str(START), "task": dict(TASK),
        "train": {"steps": args.steps, "batch_size": args.prompts * args.group_size, "lr": 1e-4, "n_problems": 2000,
                  "micro_batch_size": args.micro_batch,
                  "bf16": args.bf16},
        "grpo": {"group_size": args.group_size, "max_new_tokens": args.max_new_tokens},
        "eval": {"splits": ["test"], "n": 32, "k": 0, "every": 0},
        "checkpoint": {"every": 0}, "log": {"progress": False, "tensorboard": False},
    }
    verifier = {"warmup_sft_steps": 100, "warmup_batch_size": 32, "warmup_sft_lr": 2e-3, "warmup_samples": 512,
                "solutions": args.solutions, "group_size": 4, "max_new_tokens": 64, "verify_share": args.verify_share}
    sides = {
        "grpo": (grpo, build_config({**common, "recipe": "grpo"})),
        "tango": (tango, build_config({**common, "recipe": "tango", "verifier": verifier,
                                       "tango": {"gen_steps": args.gen_steps, "ver_steps": args.ver_steps,
                                                 "eval_n": 32}})),
    }
    times, rows_by_side, peaks = {}, {}, {}
    for name, (recipe, cfg) in sides.items():
        run_dir = OUT / name
        shutil.rmtree(run_dir, ignore_errors=True)
        peak_reset()
        recipe.run(cfg, run_dir)
        peaks[name] = peak_gib()
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "time/step" in r and r["step"] >= 1]
        rows_by_side[name] = rows
        times[name] = [r["time/step"] for r in rows[1:]]

    print(f"start model: {START} (greedy pass@1 {start.get('greedy_pass@1', float('nan')):.3f}); "
          f"{args.prompts} prompts x {args.group_size} samples, {args.max_new_tokens} tokens, {args.threads} threads; "
          f"Ng:Nv {args.gen_steps}:{args.ver_steps}, {args.solutions} solutions x 4 verifications per verifier step")
    for name, t in times.items():
        print(f"{name:6s} mean {statistics.mean(t):.3f} s/step  median {statistics.median(t):.3f}  (steps 2..{args.steps})  "
              f"peak RSS {peaks[name]:.2f} GiB")
    tango_rows = rows_by_side["tango"]
    split = {k: statistics.mean(r.get(k, 0.0) for r in tango_rows[1:])
             for k in ("time/gen", "time/verify", "time/update", "time/ver_update")}
    print("tango step split (mean s): " + "  ".join(f"{k.split('/')[1]}={v:.3f}" for k, v in split.items()))
    ver_rows = [r for r in tango_rows[1:] if "time/ver_policy" in r]
    if ver_rows:
        parts = {k: statistics.mean(r[k] for r in ver_rows) for k in ("time/ver_solutions", "time/ver_verify",
                                                                    "time/ver_policy")}
        print(f"one verifier step (mean s over {len(ver_rows)}): "
              + "  ".join(f"{k.split('/')[1]}={v:.3f}" for k, v in parts.items()))
    warm = json.loads((OUT / "tango" / "metrics.jsonl").read_text().splitlines()[0])
    print(f"tango verifier warm-up (not in the ratio): {warm.get('time/warmup', float('nan')):.1f} s")
    flops = {n: rows_by_side[n][-1].get("flops/total") for n in sides}
    if all(flops.values()):
        print(f"estimated FLOPs after {args.steps} steps: grpo {flops['grpo']:.3g}, tango {flops['tango']:.3g} "
              f"(warm-up included), ratio {flops['tango'] / flops['grpo']:.2f}")
    # What the verification decides, so that a cheaper one is seen with its effect (means over the steps).
    keys = ("gen/reward", "cotrain/distinct_verified", "gen/process_usable", "gen/adv_process_abs", "cotrain/agree")
    print("tango: " + "  ".join(f"{k}={statistics.mean(r[k] for r in tango_rows if k in r):.3f}" for k in keys
                                if any(k in r for r in tango_rows)))
    for name in sides:
        final = json.loads((OUT / name / "eval.json").read_text())["generator"]["test"]["pass@1"]
        print(f"{name}: greedy pass@1 on 32 test problems after {args.steps} steps: {final:.3f}")
    print(f"tango_over_grpo_step={statistics.mean(times['tango']) / statistics.mean(times['grpo']):.2f}")


if __name__ == "__main__":
    main()
