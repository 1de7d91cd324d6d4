"""Throughput of the sandbox (cotrain.sandbox) against a bare interpreter, side by side in one run.

Workload: the tiny code world's kind of program, a one-line function called on 10 inputs, run `--n`
times across `--workers` slots (default 2, the cores of the development machine). The baseline starts
the same interpreter on the same harness-free program with no isolation and no limits; the sandbox
adds bubblewrap's namespaces, the resource limits, the harness and the verdict.

Prints `sandbox_programs_per_s`, `bare_programs_per_s` and `sandbox_over_bare` (the sandbox's cost
per program as a multiple of a bare interpreter start).
"""
from __future__ import annotations

import argparse
import platform
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from cotrain import sandbox

PROGRAM = "def f(x):\n    return [v * 2 + 1 for v in x if v % 3]\n"
INPUTS = [[list(range(i, i + 8))] for i in range(10)]


def bare(n: int, workers: int) -> float:
    script = PROGRAM + "".join(f"print(f({args[0]!r}))\n" for args in INPUTS)
    python = sandbox._python()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: subprocess.run([python, "-I", "-S", "-c", script], capture_output=True, check=True),
                      range(n)))
    return n / (time.perf_counter() - t0)


def isolated(n: int, workers: int) -> float:
    t0 = time.perf_counter()
    runs = sandbox.run_many([(PROGRAM, "f", INPUTS)] * n, workers=workers)
    rate = n / (time.perf_counter() - t0)
    bad = [r for r in runs if r.status != "ok"]
    assert not bad, f"{len(bad)} runs did not finish: {bad[0]}"
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"cpu: {platform.processor() or platform.machine()}; isolation: {sandbox.isolation()}; "
          f"{args.n} programs on {args.workers} workers")
    isolated(20, args.workers), bare(20, args.workers)  # warm the caches
    s, b = isolated(args.n, args.workers), bare(args.n, args.workers)
    print(f"sandbox_programs_per_s={s:.1f}")
    print(f"bare_programs_per_s={b:.1f}")
    print(f"sandbox_over_bare={b / s:.2f}")


if __name__ == "__main__":
    main()
