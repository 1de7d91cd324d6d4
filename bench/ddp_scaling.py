"""Benchmark: a GRPO (or tango) step on two torchrun processes against the same step on one process.

Three sides: one process with 1 thread (one "device"), two processes with 1 thread each
(`torchrun --nproc_per_node 2`, gloo: two devices), and one process with 2 threads (the same two cores
used by intra-op parallelism instead). They start from the same model (the SFT'd `tiny` model of
bench/grpo_vs_trl.py, built once and cached in bench/out/start/), draw the same prompts and samples
(a group's noise depends on its seed alone) and make the same updates, so the metrics agree and only
the time differs. The script checks the rewards agree before it reports a ratio.

Per side it reports the mean over steps 2..S of `time/step` and its split (`time/gen`, `time/verify`,
`time/reward`, `time/update`, `time/sync`; see `train.compute.StepTimer`) and the generator's tokens/s.

Run:  python bench/ddp_scaling.py                       (grpo, 12 steps of 32 prompts x 8, L=24)
      python bench/ddp_scaling.py --recipe tango --steps 9
The last lines are `two_over_one_step=X.XX` (two processes over one process on one thread: 0.5 is
perfect scaling) and `two_over_threads_step=X.XX` (over one process on both cores).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parent / "out" / "ddp_scaling"
PHASES = ("step", "gen", "verify", "reward", "update", "ver_update", "sync")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=["grpo", "tango"], default="grpo")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--fsdp", action="store_true", help="shard the two-process side with FSDP2")
    args = ap.parse_args(argv)

    from grpo_vs_trl import START, build_start_model  # the cached SFT'd tiny model

    build_start_model()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    overrides = [f"init={START}", f"train.steps={args.steps}", f"train.batch_size={args.prompts * args.group_size}",
                 f"grpo.group_size={args.group_size}", f"grpo.max_new_tokens={args.max_new_tokens}",
                 "checkpoint.every=0", "eval.every=0", "eval.n=32", "eval.k=0", "log.progress=false",
                 "log.tensorboard=false", "task.n_ops=[1,2]", "task.max_operand=9", "train.n_problems=2000"]
    if args.recipe == "tango":
        overrides += ["verifier.warmup_sft_steps=30", "verifier.warmup_samples=256", "verifier.solutions=32"]
    config = Path(__file__).resolve().parents[1] / "configs" / f"{args.recipe}.yaml"
    sides = {
        "one": ([sys.executable, "-m", "cotrain"], "1"),
        "threads": ([sys.executable, "-m", "cotrain"], "2"),
        "two": ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "-m", "cotrain"], "1"),
    }
    results = {}
    for name, (launcher, threads) in sides.items():
        extra = ["train.fsdp=true"] if name == "two" and args.fsdp else []
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        cmd = [*launcher, "run", str(config), *overrides, *extra, "--out", str(OUT / name)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        (OUT / f"{name}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode:
            sys.exit(f"{name}: failed, see {OUT / f'{name}.log'}")
        rows = [json.loads(line) for line in (OUT / name / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "time/step" in r and r["step"] >= 2]
        results[name] = {
            "rewards": [r["gen/reward"] for r in rows],
            **{p: statistics.mean(r.get(f"time/{p}", 0.0) for r in rows) for p in PHASES},
            "gen_tokens_per_s": statistics.mean(r["throughput/gen_tokens_per_s"] for r in rows),
        }
    one, two = results["one"], results["two"]
    gap = max(abs(a - b) for r in results.values() for a, b in zip(one["rewards"], r["rewards"]))
    print(f"{args.recipe}, {args.steps} steps of {args.prompts} prompts x {args.group_size}, L={args.max_new_tokens}; "
          f"largest reward difference between the sides: {gap:.2e}")
    print(f"{'':8}" + "".join(f"{p:>11}" for p in PHASES) + f"{'gen tok/s':>11}")
    for name, r in results.items():
        print(f"{name:8}" + "".join(f"{r[p]:>11.3f}" for p in PHASES) + f"{r['gen_tokens_per_s']:>11.0f}")
    (OUT / "summary.json").write_text(json.dumps(results, indent=2))
    if gap > 1e-6:
        sys.exit("the two sides' rewards differ: the comparison is not of the same work")
    print(f"two_over_one_step={two['step'] / one['step']:.2f}")
    print(f"two_over_threads_step={two['step'] / results['threads']['step']:.2f}")


if __name__ == "__main__":
    main()
