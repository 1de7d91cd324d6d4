"""Benchmark: how close the decode loop of `cotrain.models.generate` comes to its bound, and what
drafted decoding (`rollout.draft_tokens`, prompt lookup) saves.

The bound of a rollout is the time of the forward passes the loop really runs, at the batch and
cache length it has at each step (finished rows leave the batch): the prefill, then one batched
pass per decoding step. Every model forward inside `generate` is timed (a wrapper around
`model.forward`); `rollout_efficiency` = forward time / rollout time, the rest being the loop's own
work (choosing tokens, log-probs and entropy over the vocabulary, bookkeeping, compaction).

Workloads (each timed three times after an untimed warm-up; the fastest counts):
  tiny/rollout     the generator rollout of bench/tango_vs_grpo.py and bench/grpo_vs_trl.py: the
                   SFT'd tiny model (bench/out/start), 16 prompts x 8 samples, 24 tokens, T = 1
  tiny/verify      greedy verification of those samples (each distinct one once, 64 tokens) by the
                   warmed-up verifier of bench/tango_vs_grpo.py (run that first; skipped without it)
  smollm2/rollout  SmolLM2-135M-Instruct (`model.path: smollm2`, when installed): 4 wordproblems x 4
                   samples through the chat template, 128 tokens, T = 0.7
  smollm2/verify   SmolLM2 verifying those 16 samples through the verifier's chat prompt, greedy,
                   96 tokens
Each verify workload also runs drafted (`draft_tokens` = --draft), asserting the same verifications,
and prints the speed-up and the forward passes of each. With --compiled, each workload also runs
compiled (`generate(compiled=True)`: static KV cache, torch.compile, every pass over all rows),
asserting the same samples, and prints its first call (compilation included) and the speed-up.

Run:  python bench/rollout_efficiency.py                (fp32, 2 threads; --no-smollm2 for the tiny model only)
The last line is `rollout_efficiency=X.XX` of tiny/rollout (the rollout of the benchmarks' GRPO step).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Timed:
    """Times every forward pass of `model` while in use."""

    def __init__(self, model):
        self.model, self.seconds, self.passes = model, 0.0, 0

    def __enter__(self):
        forward = self.model.forward

        def timed(*a, **k):
            t = time.perf_counter()
            out = forward(*a, **k)
            self.seconds += time.perf_counter() - t
            self.passes += 1
            return out

        self.model.forward = timed
        return self

    def __exit__(self, *exc):
        del self.model.forward


def measure(model, run, repeats: int = 3) -> dict:
    """The fastest of `repeats` calls of run() (after a warm-up call): its wall time, forward time,
    forward passes and result."""
    run()
    best = None
    for _ in range(repeats):
        with Timed(model) as timer:
            t = time.perf_counter()
            result = run()
            wall = time.perf_counter() - t
        if best is None or wall < best["wall"]:
            best = {"wall": wall, "forward": timer.seconds, "passes": timer.passes, "result": result}
    best["efficiency"] = best["forward"] / best["wall"]
    return best


def report(name: str, m: dict, tokens: int) -> None:
    print(f"{name:16s} {m['wall']:7.3f} s  forward {m['forward']:7.3f} s in {m['passes']:3d} passes  "
          f"{tokens / m['wall']:8.1f} tokens/s  rollout_efficiency {m['efficiency']:.2f}")


def verify_both(name: str, model, tok, questions, texts, max_new_tokens: int, draft: int,
                compiled: bool = False) -> None:
    """Greedy verification of (question, text) pairs, plain and drafted (and compiled): times, passes, equality."""
    import torch

    from cotrain.models.verify import verify

    def run(k):
        return lambda: verify(model, tok, questions, texts, greedy=True, max_new_tokens=max_new_tokens, seed=0,
                              draft_tokens=k)[0]

    plain, drafted = measure(model, run(0)), measure(model, run(draft))
    tokens = int(plain["result"].completion_mask.sum())
    report(name, plain, tokens)
    report(f"{name}+draft{draft}", drafted, tokens)
    same = torch.equal(plain["result"].completion_ids, drafted["result"].completion_ids)
    assert same, "drafted decoding changed a verification"
    print(f"{'':16s} drafted/plain: {plain['wall'] / drafted['wall']:.2f}x faster, passes {plain['passes']} -> "
          f"{drafted['passes']}, same verifications: {same}")
    if compiled:
        compiled_vs_plain(name, model, lambda **k: verify(model, tok, questions, texts, greedy=True,
                                                          max_new_tokens=max_new_tokens, seed=0, **k)[0], plain)


def compiled_vs_plain(name: str, model, run, plain: dict) -> None:
    """`run(compiled=True)` against the plain loop's measurement `plain`: the first call (compiling),
    then the fastest of three, and whether the samples are the same."""
    import torch

    t = time.perf_counter()
    run(compiled=True)
    first = time.perf_counter() - t
    best, result = None, None
    for _ in range(3):
        t = time.perf_counter()
        result = run(compiled=True)
        wall = time.perf_counter() - t
        best = wall if best is None else min(best, wall)
    same = torch.equal(result.completion_ids, plain["result"].completion_ids)
    assert same, f"compiled decoding changed the samples of {name}"
    print(f"{name + '+compiled':16s} {best:7.3f} s  (first call {first:.1f} s, compiling)  compiled/plain: "
          f"{plain['wall'] / best:.2f}x faster, same samples: {same}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", type=int, default=4, help="draft_tokens of the drafted runs")
    ap.add_argument("--no-smollm2", action="store_true", help="skip the SmolLM2 workloads")
    ap.add_argument("--compiled", action="store_true", help="also run each workload with compiled decoding")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from grpo_vs_trl import START, TASK, build_start_model

    from cotrain.config import build_config
    from cotrain.models.build import load_model
    from cotrain.models.generate import generate
    from cotrain.models.prompts import decode_completions, encode_generator_prompts
    from cotrain.train.setup import build_task

    print(f"torch {torch.__version__}, {args.threads} threads, fp32")
    build_start_model()
    model, tok = load_model(START)
    model.eval()
    task = build_task(build_config({"task": dict(TASK)}).task)
    questions = [p.question for p in task.problems("train", 16, seed=1)]
    prompts = encode_generator_prompts(tok, questions)
    def tiny_rollout(**k):
        return generate(model, prompts, group_size=8, max_new_tokens=24, eos_id=tok.eos_token_id,
                        pad_id=tok.pad_token_id, seed=0, **k)
    rollout = measure(model, tiny_rollout)
    ro = rollout["result"]
    report("tiny/rollout", rollout, int(ro.completion_mask.sum()))
    if args.compiled:
        compiled_vs_plain("tiny/rollout", model, tiny_rollout, rollout)
    warm = Path(__file__).resolve().parent / "out" / "tango_vs_grpo" / "tango" / "warmup" / "verifier"
    if warm.is_dir():
        verifier, vtok = load_model(warm)
        verifier.eval()
        pairs = list(dict.fromkeys(zip([q for q in questions for _ in range(8)],
                                       decode_completions(tok, ro.completion_ids, ro.completion_mask))))
        verify_both("tiny/verify", verifier, vtok, [q for q, _ in pairs], [t for _, t in pairs], 64, args.draft,
                    args.compiled)
    else:
        print(f"tiny/verify      skipped: no verifier at {warm} (run bench/tango_vs_grpo.py first)")

    if not args.no_smollm2:
        from cotrain.errors import UserError
        from cotrain.models import gguf_source

        try:
            path = gguf_source.resolve("smollm2")
        except UserError as e:
            print(f"smollm2          skipped: {e}")
        else:
            big, btok = load_model(path)
            big.eval()
            words = build_task(build_config({"task": {"name": "wordproblems", "n_steps": [1, 1], "max_number": 10}}).task)
            wq = [p.question for p in words.problems("train", 4, seed=1)]
            wp = encode_generator_prompts(btok, wq)
            def big_rollout(**k):
                return generate(big, wp, group_size=4, max_new_tokens=128, temperature=0.7,
                                eos_id=btok.eos_token_id, pad_id=btok.pad_token_id, seed=0, **k)
            big_ro = measure(big, big_rollout, repeats=2)
            report("smollm2/rollout", big_ro, int(big_ro["result"].completion_mask.sum()))
            if args.compiled:
                compiled_vs_plain("smollm2/rollout", big, big_rollout, big_ro)
            texts = decode_completions(btok, big_ro["result"].completion_ids, big_ro["result"].completion_mask)
            verify_both("smollm2/verify", big, btok, [q for q in wq for _ in range(4)], texts, 96, args.draft,
                        args.compiled)
    print(f"rollout_efficiency={rollout['efficiency']:.2f}")


if __name__ == "__main__":
    main()
