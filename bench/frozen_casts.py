"""Benchmark: what `casts_kept` (cotrain.models.generate) saves a LoRA verifier's rollout under bf16 autocast.

Autocast keeps its bf16 copy of a weight for a whole autocast region only for leaves that require grad, so a
frozen float32 weight (a LoRA model's base, and the head tied to its frozen embedding) was cast again on
every forward pass. `casts_kept` marks those weights as requiring grad for the rollout alone. This runs the
same greedy verification with and without it, alternately, and asserts the same tokens and log-probs.

Workload: the fourth warm-up's verifier of the real sparse world (SmolLM2-135M-Instruct with the committed
LoRA adapter results/smollm2_sparse/starts/verifier_lora_d) judging the published model's first --samples
samples of results/smollm2_sparse/verifier_warmup/lora_d_eval (their committed verifications file), greedy,
--new-tokens tokens, bf16 autocast, each side --repeats times after an untimed warm-up; the sum of each side's times counts.

Run:  OMP_NUM_THREADS=2 python bench/frozen_casts.py [--samples 32 --new-tokens 256 --repeats 2]
The last line is `casts_kept_speedup=X.XX` (time without / time with).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "results/smollm2_sparse/starts/verifier_lora_d"
SAMPLES = ROOT / "results/smollm2_sparse/verifier_warmup/lora_d_eval/verifications/verifier_warmup_test.jsonl.gz"


def main() -> None:
    from cotrain.config import load_config
    from cotrain.models import generate as generation
    from cotrain.models.verify import verify
    from cotrain.train.setup import initial_verifier

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    cfg = load_config(ROOT / "configs/real/smollm2_sparse.yaml", [
        "recipe=tango", "verifier.model.path=smollm2", "verifier.model.lora_r=32", "verifier.model.lora_alpha=64",
        f"verifier.model.lora_init={ADAPTER}", "verifier.warmup_sft_steps=0"])
    verifier, tokenizer = initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    with gzip.open(SAMPLES, "rt") as f:
        records = [json.loads(line) for line in f][:args.samples]
    questions, samples = [r["problem"] for r in records], [r["sample"] for r in records]
    kept = generation.casts_kept
    times, rollouts = {True: 0.0, False: 0.0}, {}
    verify(verifier, tokenizer, questions[:2], samples[:2], greedy=True, max_new_tokens=2, bf16=True)  # untimed warm-up
    for _ in range(args.repeats):
        for on in (False, True):
            generation.casts_kept = kept if on else (lambda model, enabled: contextlib.nullcontext())
            start = time.perf_counter()
            rollouts[on], _, _ = verify(verifier, tokenizer, questions, samples, greedy=True,
                                        max_new_tokens=args.new_tokens, bf16=True)
            times[on] += time.perf_counter() - start
            print(f"{'casts kept' if on else 'per pass  '}  {time.perf_counter() - start:7.1f} s", flush=True)
    generation.casts_kept = kept
    a, b = rollouts[False], rollouts[True]
    same = torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logp, b.logp)
    assert same, "casts_kept changed the verifications"
    print(f"{args.samples} verifications, {int(b.completion_mask.sum())} tokens generated, threads "
          f"{torch.get_num_threads()}; same tokens and log-probs: {same}")
    print(f"casts_kept_speedup={times[False] / times[True]:.2f}")


if __name__ == "__main__":
    main()
