"""Benchmark: the wall time of a label-free step (the triad, reliability-guided self-play) against a
GRPO step at the same solver batch.

All three start from the same model (the SFT'd `tiny` model of bench/grpo_vs_trl.py, built once and
cached in bench/out/start/; the proposer starts from it too, the judge from the warmed-up verifier of
bench/tango_vs_grpo.py, so run that first: a judge that cannot judge makes the safeguard skip the
solver's updates, and the step cheaper than it is) and run the shipped settings of configs/triad.yaml
and configs/reliability.yaml (their `train.micro_batch_size` included) with the benchmark's sizes: 16
prompts x 8 samples, 24 new tokens for the solver, the easy world's task, fp32, no evaluation or
checkpoint inside the loop. A step is one solver step as the recipe runs it (proposing, solving, judging, rewards, every
update it makes, the safeguard's probes on the steps that run them); the proposer's warm-up comes
before step 1 and is not in the ratio. The three run one after the other in one process, on the same
threads.

Run:  python bench/labelfree_vs_grpo.py               (12 steps each)
The last two lines are `triad_over_grpo_step=X.XX` and `reliability_over_grpo_step=X.XX`: mean step
time over GRPO's mean step time, step 1 left out as a warm-up of caches. Each side's line also gives the
process's peak resident memory during its run (Linux VmHWM, reset before each side).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "out" / "labelfree_vs_grpo"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=12, help="solver steps of each side")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per solver step")
    ap.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="train.micro_batch_size of all three sides (groups chunked by length; default: grpo whole "
                         "batches, the others their shipped config's)")
    ap.add_argument("--judge-every-copy", action="store_true",
                    help="judge every answer, repeats too (selfplay.judge_distinct=false, the behaviour before it)")
    ap.add_argument("--judge-early-stop", action="store_true",
                    help="selfplay.judge_early_stop=true: a third judging pass only where the first two disagree")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from grpo_vs_trl import START, TASK, build_start_model
    from real_model import peak_gib, peak_reset

    from cotrain.config import build_config
    from cotrain.recipes import grpo, reliability, triad

    build_start_model()
    sizes = {
        "seed": 0, "init": str(START), "task": dict(TASK),
        "train": {"steps": args.steps, "batch_size": args.prompts * args.group_size, "lr": 1e-4, "n_problems": 2000,
                  "bf16": False, "micro_batch_size": args.micro_batch},
        "eval": {"splits": ["test"], "n": 32, "k": 0, "every": 0},
        "checkpoint": {"every": 0}, "log": {"progress": False, "tensorboard": False},
    }

    judge = Path(__file__).resolve().parent / "out" / "tango_vs_grpo" / "tango" / "warmup" / "verifier"
    if not judge.is_dir():
        sys.exit(f"no judge at {judge}: run python bench/tango_vs_grpo.py first")

    def shipped(name: str) -> dict:
        raw = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
        micro = raw.get("train", {}).get("micro_batch_size") if args.micro_batch is None else args.micro_batch
        raw = {k: v for k, v in raw.items() if k not in sizes}
        raw["verifier"] = {**raw.get("verifier", {}), "init": str(judge)}
        raw["grpo"] = {**raw.get("grpo", {}), "group_size": args.group_size, "max_new_tokens": args.max_new_tokens}
        if args.judge_every_copy:
            raw["selfplay"] = {**raw.get("selfplay", {}), "judge_distinct": False}
        if args.judge_early_stop:
            raw["selfplay"] = {**raw.get("selfplay", {}), "judge_early_stop": True}
        return {**raw, **sizes, "train": {**sizes["train"], "micro_batch_size": micro}}

    sides = {
        "grpo": (grpo, build_config({**sizes, "recipe": "grpo",
                                     "grpo": {"group_size": args.group_size, "max_new_tokens": args.max_new_tokens}})),
        "triad": (triad, build_config(shipped("triad"))),
        "reliability": (reliability, build_config(shipped("reliability"))),
    }
    times, splits, peaks = {}, {}, {}
    for name, (recipe, cfg) in sides.items():
        run_dir = OUT / name
        shutil.rmtree(run_dir, ignore_errors=True)
        peak_reset()
        recipe.run(cfg, run_dir)
        peaks[name] = peak_gib()
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "time/step" in r and r["step"] >= 1][1:]
        times[name] = [r["time/step"] for r in rows]
        keys = sorted({k for r in rows for k in r if k.startswith("time/") and k != "time/step"})
        splits[name] = {k.split("/", 1)[1]: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in keys}

    print(f"start model: {START}; {args.prompts} prompts x {args.group_size} samples, {args.max_new_tokens} tokens, "
          f"{args.threads} threads, fp32; triad and reliability at configs/*.yaml's other settings")
    for name, t in times.items():
        split = "  ".join(f"{k}={v:.3f}" for k, v in splits[name].items())
        print(f"{name:12s} mean {statistics.mean(t):.3f} s/step  median {statistics.median(t):.3f}  "
              f"peak RSS {peaks[name]:.2f} GiB   ({split})")
    base = statistics.mean(times["grpo"])
    for name in ("triad", "reliability"):
        rows = [json.loads(x) for x in (OUT / name / "metrics.jsonl").read_text().splitlines()]
        scales = [r["safe/scale"] for r in rows if r.get("safe/scale") is not None]
        if scales:
            print(f"{name}: safeguard scale of the solver's updates, mean over steps {statistics.mean(scales):.2f}")
        # What judging decides, so that a cheaper judging is seen with its effect (means over the steps).
        signals = ("judge/drawn", "judge/approve_rate", "judge/score_var", "gen/judge_score", "gt/judge_agree",
                   "gap/judge", "rel/cons", "rel/sep", "rel/stab", "rel/pass_share_all", "prop/reward")
        means = {k: statistics.mean(r[k] for r in rows if r.get(k) is not None) for k in signals
                 if any(r.get(k) is not None for r in rows)}
        print(f"{name}: " + "  ".join(f"{k}={v:.3f}" for k, v in means.items()))
    print(f"triad_over_grpo_step={statistics.mean(times['triad']) / base:.2f}")
    print(f"reliability_over_grpo_step={statistics.mean(times['reliability']) / base:.2f}")


if __name__ == "__main__":
    main()
