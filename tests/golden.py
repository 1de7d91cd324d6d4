"""Fixed-seed goldens that hold on any x86-64 CPU, and the mutations each must catch.

A golden is a few metrics of every step of a short fixed-seed run in the float64 test world (see
conftest.py): rewards, which move only when a sampled token moves, and losses and gradient norms,
which move with any change to the numbers of an algorithm. They are compared to a relative 1e-6:
kernel rounding in float64 stays some 1e-13 deep, while a changed algorithm moves them by far more.
Each recipe's golden also has a test that applies one named mutation (a flipped advantage, a dropped
KL term, a verifier reward off by one, ...) and asserts that the golden then fails: a golden that
cannot fail would guard nothing.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

REL = 1e-6   # relative tolerance of a golden value
ABS = 1e-8   # absolute tolerance, for values that are zero up to rounding (float32 advantages)


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def golden_metrics(run_dir: Path, keys: list[str]) -> dict[str, list[float]]:
    """{key: [its value at each step that logged it]} for each of `keys`."""
    logged = rows(run_dir)
    return {k: [r[k] for r in logged if k in r] for k in keys}


def mismatch(got: dict[str, list[float]], golden: dict[str, list[float]]) -> str | None:
    """None when `got` matches `golden` key by key within the tolerances, else the first difference."""
    for key, want in golden.items():
        have = got.get(key, [])
        if len(have) != len(want):
            return f"{key}: {len(have)} values, golden has {len(want)}"
        for i, (a, b) in enumerate(zip(have, want)):
            if not math.isclose(a, b, rel_tol=REL, abs_tol=ABS):
                return f"{key}[{i}] = {a!r}, golden {b!r}"
    return None


def assert_golden(run_dir: Path, golden: dict[str, list[float]]) -> None:
    got = golden_metrics(run_dir, list(golden))
    problem = mismatch(got, golden)
    assert problem is None, f"{problem}\nthis run: {got}"
