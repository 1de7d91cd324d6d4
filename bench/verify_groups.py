"""`cotraining.verify_groups: trained` against `all` on the real model: the verifier's seconds a step, and the update.

With `cotraining.process_groups: mixed` the process term trains only the groups that hold a right and a wrong
sample, so the verdicts on the other groups are read by no update; `verify_groups: trained` leaves them
unjudged. This runs one arm of `configs/sweeps/real_ceiling.yaml` (by default
`frozen_d_final_compute_mixed_0.3`: SmolLM2-135M-Instruct on the sparse world's word problems, the fourth
warm-up's verifier, frozen) for a few generator steps twice, one after the other, with nothing else
changed: `verify_groups: all`, then `trained`. It prints, per step, the seconds spent verifying, the share of
distinct samples verified and the generator's loss on both sides, then

    verify_trained_over_all   the verifier's seconds, summed over the steps, trained over all
    step_trained_over_all     the whole step's seconds, likewise
    same_update               whether the generator's loss matched at every step (greedy verdicts on the
                              same samples; a batch of other shapes may round a near-tie otherwise)

The runs' in-training evaluation is off and their final one small (8 test problems, 4 for the verifier):
they time steps, not accuracy.

    python bench/verify_groups.py [--steps 3] [--arm NAME] [--threads 2] [--out runs/bench_verify_groups]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "configs" / "sweeps" / "real_ceiling.yaml"


def overrides(arm: str) -> list[str]:
    """The sweep's shared and the arm's overrides as `key=value` arguments."""
    sweep = yaml.safe_load(SWEEP.read_text(encoding="utf-8"))
    if arm not in sweep["arms"]:
        sys.exit(f"no arm {arm!r} in {SWEEP.relative_to(REPO)}")
    merged = {**sweep.get("overrides", {}), **(sweep["arms"][arm] or {}).get("overrides", {})}
    return [f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}" for k, v in merged.items()]


def run(side: str, args: argparse.Namespace) -> list[dict]:
    out = Path(args.out) / side
    cmd = [sys.executable, "-m", "cotrain", "run", str(SWEEP.parent / yaml.safe_load(SWEEP.read_text())["base"]),
           *overrides(args.arm), f"train.steps={args.steps}", "eval.every=0", "eval.n=8", "cotraining.eval_n=4",
           "log.progress=false", "log.plots=false", f"cotraining.verify_groups={side}", f"seed={args.seed}", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO / "src")}
    subprocess.run(cmd, check=True, cwd=REPO, env=env)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("step", 0) >= 1 and "time/verify" in r]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--arm", default="frozen_d_final_compute_mixed_0.3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "runs" / "bench_verify_groups"))
    args = ap.parse_args(argv)
    rows = {side: run(side, args) for side in ("all", "trained")}
    print(f"{args.arm}, seed {args.seed}, {args.threads} threads")
    print("step | verify s: all, trained | distinct verified: all, trained | groups without a spread | gen/loss: all, trained")
    for a, t in zip(rows["all"], rows["trained"], strict=True):
        print(f"{a['step']:4d} | {a['time/verify']:7.1f} {t['time/verify']:7.1f} | {a['cotrain/distinct_verified']:.3f} "
              f"{t['cotrain/distinct_verified']:.3f} | {a['gen/frac_reward_zero_std']:.3f} | {a['gen/loss']:.6g} {t['gen/loss']:.6g}")
    total = {side: (sum(r["time/verify"] for r in rs), sum(r["time/step"] for r in rs)) for side, rs in rows.items()}
    print(f"verify_trained_over_all={total['trained'][0] / total['all'][0]:.2f}")
    print(f"step_trained_over_all={total['trained'][1] / total['all'][1]:.2f}")
    print(f"same_update={all(a['gen/loss'] == t['gen/loss'] for a, t in zip(rows['all'], rows['trained']))}")


if __name__ == "__main__":
    main()
