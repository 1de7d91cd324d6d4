"""A run on a CPU it shares: 6 generator steps of the demo's tango stage (its start and final evaluation
included), alone and beside one busy process, with the default threads against one thread; then the demo's
two stages started together.

"Busy" is a one-thread spin loop started 60 seconds before the runs it stands beside. The default is what a
run chooses with neither `OMP_NUM_THREADS` nor `train.threads` set (cotrain.threads: the cores other processes
leave free); `OMP_NUM_THREADS=<cores>` is the default of before, every core whatever else runs.

    python bench/shared_cpu.py                  # the table, then shared_cpu_ratio=<busy/alone, default>
    python bench/shared_cpu.py --steps 1 --warm 5 --quick   # a look that it works

Run it on an idle machine. The goal: beside one busy process, at most 1.8x the alone time with the default.
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def stage_config(name: str, steps: int, out: Path, quick: bool = False) -> Path:
    """The demo's stage `name` as a run config with the committed starts, `steps` generator steps, no
    evaluation between the start's and the final one."""
    from cotrain.cli import demo_stages

    spec = demo_stages()
    raw = copy.deepcopy(spec["stages"][name])
    raw["init"] = str(REPO / spec["starts"][raw.pop("init_from")])
    if "verifier_from" in raw:
        raw["verifier"] = {**raw.get("verifier", {}), "init": str(REPO / spec["starts"][raw.pop("verifier_from")])}
    raw["train"] = {**raw["train"], "steps": steps}
    raw["eval"] = {**raw["eval"], "every": 0, **({"n": 20, "k": 2, "n_sampled": 8, "at_start": False} if quick else {})}
    raw["checkpoint"] = {"every": 0}
    raw["log"] = {"plots": False}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def start_run(config: Path, out: Path, threads: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = str(REPO / "src")
    if threads:
        env["OMP_NUM_THREADS"] = threads
    log = open(out.with_suffix(".log"), "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, "-m", "cotrain", "run", str(config), "--out", str(out)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def timed(procs: list[subprocess.Popen]) -> list[float]:
    t0, times = time.perf_counter(), [None] * len(procs)
    while any(t is None for t in times):
        for i, p in enumerate(procs):
            if times[i] is None and p.poll() is not None:
                if p.returncode != 0:
                    raise SystemExit(f"shared_cpu: a run failed (exit {p.returncode}): see {p.args[-1]}.log")
                times[i] = time.perf_counter() - t0
        time.sleep(0.2)
    return times


def threads_said(run: Path) -> str:
    for line in run.with_suffix(".log").read_text(encoding="utf-8").splitlines():
        if line.startswith("threads:"):
            return line.removeprefix("threads: ")
    return "?"


def short(said: str) -> str:
    """`1 (1 of 2 cores: other processes used ...)` -> `1 (1 of 2 cores)`."""
    return said.split(":")[0] + (")" if "(" in said.split(":")[0] and ")" not in said.split(":")[0] else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warm", type=float, default=60.0, help="seconds the spin loop runs before the runs beside it")
    ap.add_argument("--quick", action="store_true", help="20 problems evaluated, none at the start: a look that it works")
    ap.add_argument("--out", default=None, help="where the runs go (default: a temporary directory)")
    args = ap.parse_args()
    from cotrain.precision import machine_line

    out = Path(args.out or tempfile.mkdtemp(prefix="shared_cpu_"))
    out.mkdir(parents=True, exist_ok=True)
    tango, grpo = (stage_config(name, args.steps, out, args.quick) for name in ("tango", "grpo"))
    cores = str(len(os.sched_getaffinity(0)))
    rows = []

    def measure(what: str, threads: str | None, busy: bool) -> float:
        run = out / f"{len(rows):02d}_{what.replace(' ', '_')}"
        (seconds,) = timed([start_run(tango, run, threads)])
        rows.append((what, "busy" if busy else "alone", threads_said(run), seconds))
        print(f"  {rows[-1][1]:5s} {what:32s} {seconds:7.1f} s   threads: {rows[-1][2]}", flush=True)
        return seconds

    print(f"shared_cpu: {args.steps} steps of the demo's tango stage; {machine_line()}", flush=True)
    alone = measure("default", None, False)
    measure("1 thread", "1", False)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(args.warm)
        busy = measure("default", None, True)
        measure("1 thread", "1", True)
        measure(f"{cores} threads (the old default)", cores, True)
    finally:
        spin.kill()
        spin.wait()
    both = timed([start_run(grpo, out / "both_grpo", None), start_run(tango, out / "both_tango", None)])
    said = f"{short(threads_said(out / 'both_grpo'))} and {short(threads_said(out / 'both_tango'))}"
    print(f"\n| condition | threads | time (s) | against alone, default |\n|---|---|---|---|")
    for what, where, threads, seconds in rows:
        print(f"| {where}, {what} | {short(threads)} | {seconds:.1f} | {seconds / alone:.2f}x |")
    print(f"| the demo's grpo and tango stages started together, default | {said} | {both[0]:.1f} and {both[1]:.1f} | "
          f"tango {both[1] / alone:.2f}x |")
    print(f"\nshared_cpu_ratio={busy / alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
