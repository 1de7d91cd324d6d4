"""Byte-identical runs across commits: 20-step runs in the sparse world of GRPO, tango, consistency, triad and
each arm of the positive control (configs/sweeps/control.yaml), whose `metrics.jsonl` less its timings
(`time`, `time/*`, `throughput/*`) must not change by one byte from one commit to another on one machine.

A refactoring that claims to change nothing is held to this; so is the pairing of a study's runs made at two
commits (configs/sweeps/control.yaml pairs runs only within one commit or commits this check shows equal).
The goldens of tests/ allow a relative 1e-6 and cover none of the oracle's constructions; this allows nothing.

    python bench/identical_runs.py --out runs/identical/head                 # the working tree
    python bench/identical_runs.py --out runs/identical/base --commit dd5d3a6 # a commit, from a git worktree
    python bench/identical_runs.py --compare runs/identical/base runs/identical/head

Each run is one thread; the digests (sha256 of each run's stripped metrics.jsonl) go to OUT/digests.json, with
the commit, the CPU and torch's kernel variables (with --only, added to the digests already there of the same
commit and CPU). Digests compare only on one machine kind and kernel set:
another CPU computes other floats. The last line of --compare is `identical=<True|False>`; it exits 1 on a
difference, naming the first differing row and key.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_500 = "results/sparse/levels/step_500/starts/sft/generator"   # the control's start
START = "results/sparse/starts/sft/generator"                     # the sparse world's committed starts
WARM = "results/sparse/starts/warm/verifier"
SMALL_EVAL = ["eval.every=10", "eval.n_during=40", "eval.n=40", "eval.k=2", "eval.n_sampled=8", "eval.splits=[test]",
              "train.steps=20", "checkpoint.every=10", "log.plots=false", "log.progress=false"]
CONTROL_ARMS = ("grpo", "oracle_final_0.3", "oracle_step_0.5", "rollouts_step_0.5")

RUNS = {  # name -> (config, overrides): each a 20-step run with a small evaluation
    "grpo": ("configs/sparse/grpo.yaml", [f"init={START}"]),
    "tango": ("configs/sparse/tango.yaml", [f"init={START}", f"verifier.init={WARM}", "verifier.warmup_sft_steps=0"]),
    "consistency": ("configs/sparse/labelfree.yaml", [f"init={START}", f"verifier.init={WARM}"]),
    "triad": ("configs/countdown_triad.yaml", [f"init={START}", "task.waypoints=true", "task.n_numbers=[4,5]",
                                               "task.max_number=15", "task.max_value=150", "selfplay.proposer_warmup_steps=4",
                                               "grpo.max_new_tokens=56"]),
}
DROPPED = ("time/", "throughput/")   # and "time" itself: the timings


def control_runs(sweep_path: Path) -> dict[str, tuple[str, list[str]]]:
    """The control's arms that its sweep file (at the commit run) declares, as 20-step runs."""
    import yaml

    sweep = yaml.safe_load(sweep_path.read_text(encoding="utf-8"))
    base = sweep["overrides"]
    out = {}
    for arm in CONTROL_ARMS:
        if arm not in sweep.get("arms", {}):
            continue
        spec = sweep["arms"][arm]
        config = str((sweep_path.parent / spec.get("config", sweep["base"])).resolve().relative_to(sweep_path.parents[2]))
        overrides = {**base, **spec.get("overrides", {})}
        out[f"control/{arm}"] = (config, [f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}"
                                          for k, v in overrides.items()])
    return out


def stripped(metrics: Path) -> bytes:
    """metrics.jsonl with its timing keys removed, row by row, as canonical JSON lines."""
    rows = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        row = {k: v for k, v in json.loads(line).items() if not (k == "time" or k.startswith(DROPPED))}
        rows.append(json.dumps(row, sort_keys=True))
    return ("\n".join(rows) + "\n").encode()


def run_all(out: Path, tree: Path, only: list[str] | None) -> dict:
    runs = {**RUNS, **control_runs(tree / "configs/sweeps/control.yaml")}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree / "src")}
    digests = {}
    for name, (config, overrides) in runs.items():
        if only and name not in only:
            continue
        run_dir = out / name
        if not (run_dir / "eval.json").exists():
            cmd = [sys.executable, "-m", "cotrain", "run", config, *overrides, *SMALL_EVAL, "--out", str(run_dir)]
            if run_dir.exists():
                cmd.append("--resume")
            print(f"{name}: {' '.join(cmd[3:])}", flush=True)
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode:
                print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
                raise SystemExit(f"{name}: the run failed (exit {done.returncode})")
        digests[name] = hashlib.sha256(stripped(run_dir / "metrics.jsonl")).hexdigest()
        print(f"{name}: {digests[name][:16]}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "src", "configs"], cwd=tree,
                                capture_output=True, text=True).stdout.strip())
    kernels = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
               if k in os.environ}
    info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()[:30] if ":" in line)
    info = {k.strip(): v.strip() for k, v in info.items()}
    cpu = (f"{info.get('model name', platform.processor())} {info.get('cpu family', '?')}/{info.get('model', '?')}"
           if info else platform.processor())
    earlier = json.loads((out / "digests.json").read_text(encoding="utf-8")) if (out / "digests.json").is_file() else {}
    if only and earlier.get("commit") == commit and earlier.get("cpu") == cpu:  # --only adds to what ran before
        digests = {**earlier.get("digests", {}), **digests}
    summary = {"commit": commit, "dirty": dirty, "cpu": cpu, "kernels": kernels, "digests": digests}
    (out / "digests.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def first_difference(a: Path, b: Path) -> str:
    rows_a, rows_b = stripped(a).decode().splitlines(), stripped(b).decode().splitlines()
    for i, (x, y) in enumerate(zip(rows_a, rows_b)):
        if x != y:
            x, y = json.loads(x), json.loads(y)
            key = next(k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k))
            return f"row {i} (step {x.get('step')}): {key} {x.get(key)!r} -> {y.get(key)!r}"
    return f"{len(rows_a)} rows -> {len(rows_b)}"


def compare(a: Path, b: Path) -> bool:
    da, db = (json.loads((d / "digests.json").read_text(encoding="utf-8")) for d in (a, b))
    print(f"{a}: commit {da['commit'][:10]}{' (dirty)' if da['dirty'] else ''}, {da['cpu']} {da['kernels']}")
    print(f"{b}: commit {db['commit'][:10]}{' (dirty)' if db['dirty'] else ''}, {db['cpu']} {db['kernels']}")
    if (da["cpu"], da["kernels"]) != (db["cpu"], db["kernels"]):
        print("warning: other machine kinds or kernel sets compute other floats; a difference may be that alone")
    same = True
    for name in sorted(set(da["digests"]) & set(db["digests"])):
        equal = da["digests"][name] == db["digests"][name]
        same &= equal
        said = "identical" if equal else "DIFFERS: " + first_difference(a / name / "metrics.jsonl", b / name / "metrics.jsonl")
        print(f"  {name:28s} {said}")
    for name in sorted(set(da["digests"]) ^ set(db["digests"])):
        print(f"  {name:28s} in one only")
    print(f"identical={same}")
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where the runs and digests.json go")
    ap.add_argument("--commit", help="run this commit's code (a git worktree under OUT/tree) instead of the working tree")
    ap.add_argument("--only", nargs="*", help="these runs alone (names as in digests.json)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two runs' digests")
    args = ap.parse_args()
    if args.compare:
        raise SystemExit(0 if compare(*args.compare) else 1)
    if args.out is None:
        ap.error("--out is needed unless --compare")
    args.out.mkdir(parents=True, exist_ok=True)
    tree = REPO
    if args.commit:
        tree = args.out.resolve() / "tree"
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), args.commit], cwd=REPO, check=True)
    run_all(args.out.resolve(), tree, args.only)


if __name__ == "__main__":
    main()
