"""The demo's result over several seeds: greedy pass@1 of GRPO and tango from the demo's start, per split,
with the mean and spread of tango's difference from GRPO, and each seed's wall time.

    python bench/demo_seeds.py                 # seeds 0 1 2, three at a time, into runs/seeds/
    python bench/demo_seeds.py --seeds 0 1 2 3 4 --jobs 2

Each seed is `cotrain demo --seed S --out OUT/sS` in its own process (one thread each when several run
at once). Finished stages are reused, so a second call only prints the table.
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

ROOT = Path(__file__).resolve().parents[1]


def run_seeds(seeds: list[int], out: Path, jobs: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if jobs > 1:
        env["OMP_NUM_THREADS"] = "1"
    pending, running = list(seeds), {}
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            log = open(out / f"s{seed}.log", "w")
            cmd = [sys.executable, "-m", "cotrain", "demo", "--seed", str(seed), "--out", str(out / f"s{seed}"),
                   "log.progress=false"]
            running[seed] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log, time.time())
            print(f"seed {seed}: started (log {out / f's{seed}.log'})", flush=True)
        for seed, (proc, log, t0) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                del running[seed]
                status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                print(f"seed {seed}: {status} in {time.time() - t0:.0f} s", flush=True)
                if proc.returncode == 0:
                    (out / f"s{seed}" / "wall_seconds.txt").write_text(f"{time.time() - t0:.0f} (jobs={jobs})\n")
        time.sleep(2)


def table(seeds: list[int], out: Path) -> str:
    rows, diffs = [], {}
    for seed in seeds:
        d = out / f"s{seed}"
        try:
            ev = {stage: json.loads((d / stage / "eval.json").read_text())["generator"] for stage in ("grpo", "tango")}
        except FileNotFoundError:
            rows.append(f"| {seed} | (missing) | | |")
            continue
        cells = []
        for split in ("test", "ood"):
            g, t = ev["grpo"][split]["pass@1"], ev["tango"][split]["pass@1"]
            diffs.setdefault(split, []).append(t - g)
            cells.append(f"{g:.3f} / {t:.3f}")
        wall = (d / "wall_seconds.txt").read_text().strip() if (d / "wall_seconds.txt").is_file() else "-"
        rows.append(f"| {seed} | " + " | ".join(cells) + f" | {wall} |")
    lines = ["| seed | test: GRPO / tango | ood: GRPO / tango | wall s |", "|---|---|---|---|", *rows]
    for split, g in diffs.items():
        sd = statistics.stdev(g) if len(g) > 1 else 0.0
        lines.append(f"\n{split}: tango − GRPO, mean {100 * statistics.mean(g):+.1f} points, "
                     f"sd {100 * sd:.1f}, min {100 * min(g):+.1f}, max {100 * max(g):+.1f} (n={len(g)} seeds)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=3, help="seeds run at once (one thread each when > 1)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "seeds")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run_seeds(args.seeds, args.out, args.jobs)
    print(table(args.seeds, args.out))


if __name__ == "__main__":
    main()
