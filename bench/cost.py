"""Benchmark: the cost benchmarks in one command, each in a fresh process, then their ratio lines together.

Runs, in this order (each needs the one before it: the tiny start model and the warmed-up verifier
that the others reuse are built by the first two):
  grpo_vs_trl.py         speedup_vs_trl          cotrain's GRPO step against TRL's GRPOTrainer
  tango_vs_grpo.py       tango_over_grpo_step    a co-training generator step against a GRPO step
  labelfree_vs_grpo.py   triad_over_grpo_step, reliability_over_grpo_step
  rollout_efficiency.py  rollout_efficiency      the decode loop against its bound (forward time / rollout time)
Every script's own output is echoed as it runs; the summary at the end repeats each ratio line and
each side's peak resident memory. One script's failure is reported and the others still run; the
exit code is then 1.

Run:  python bench/cost.py                       (about 4.5 minutes on 2 cores; --skip NAME to leave one out)
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["grpo_vs_trl", "tango_vs_grpo", "labelfree_vs_grpo", "rollout_efficiency"]
RATIO = re.compile(r"^[a-z_]+=[0-9.]+$")
PEAK = re.compile(r"peak RSS", re.IGNORECASE)


def run_one(name: str, extra: list[str]) -> tuple[int, list[str], float]:
    """(exit code, output lines, seconds) of one benchmark script, its output echoed as it comes."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(HERE / f"{name}.py"), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=HERE.parent)
    lines = []
    for line in proc.stdout:
        print(f"  {line}", end="", flush=True)
        lines.append(line.rstrip("\n"))
    return proc.wait(), lines, time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip", action="append", default=[], choices=SCRIPTS, help="leave a benchmark out (repeatable)")
    ap.add_argument("--no-smollm2", action="store_true", help="rollout_efficiency on the tiny model only")
    args = ap.parse_args(argv)

    summary, failed = [], []
    for name in [s for s in SCRIPTS if s not in args.skip]:
        print(f"== bench/{name}.py", flush=True)
        extra = ["--no-smollm2"] if name == "rollout_efficiency" and args.no_smollm2 else []
        code, lines, seconds = run_one(name, extra)
        if code != 0:
            failed.append(name)
        ratios = [x for x in lines if RATIO.match(x.strip())]
        peaks = [x.strip() for x in lines if PEAK.search(x)]
        summary.append((name, code, seconds, ratios, peaks))

    print("\n== summary")
    for name, code, seconds, _, peaks in summary:
        print(f"{name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {seconds:.0f} s")
        for line in peaks:
            print(f"    {line}")
    for _, _, _, ratios, _ in summary:
        for line in ratios:
            print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
