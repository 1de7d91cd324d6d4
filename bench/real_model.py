"""Benchmark: rollout and training-step cost on the real SmolLM2-135M-Instruct (`model.path: smollm2`).

Part 1, the sampler against HF `generate`: cotrain's `generate` (one prefill per prompt, its KV cache
copied to the G rows, finished rows dropped from the batch) and `model.generate` (the P x G rows
prefilled one by one, every row kept until all end) sample the same batch (P prompts of
configs/real/smollm2_cpu_grpo.yaml's task through the chat template, G samples each, temperature
0.7, top-p 1, top-k off, at most L new tokens) under the same autocast and threads, one after the
other, each timed twice after an untimed warm-up call; the faster of the two counts. Two settings:
  free   both stop at eos: the samples differ (different random streams), so are their lengths;
         compare tokens per second;
  fixed  eos suppressed on both sides (cotrain: an eos id no token has; HF: min_new_tokens=L): the
         same P x G x L tokens, the clean ratio.
Part 2, one GRPO update on the `free` rollout, split into its phases as `train.update` runs them
(micro-batches of M sequences): the forward pass with log-probs, the backward pass, clipping and the
AdamW step, each timed, with the peak resident memory of each phase (Linux: VmHWM, reset before
each phase through /proc/self/clear_refs) and the size of one micro-batch's float32 logits.

Run:  python bench/real_model.py                        (P 4 x G 8, L 128, micro-batch 8, 2 threads)
The last line is `sampler_over_generate=X.XX` (HF time / cotrain time at fixed length: >1 is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out" / "real_model"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--bf16", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def peak_reset() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    from cotrain.config import GrpoConfig
    from cotrain.models.build import load_model
    from cotrain.models.generate import autocast, completion_logprobs, generate, left_pad
    from cotrain.models.prompts import encode_generator_prompts
    from cotrain.precision import machine_line, resolve_bf16
    from cotrain.rl.losses import group_advantages, grpo_loss
    from cotrain.tasks import make_task

    bf16, _ = resolve_bf16("auto" if args.bf16 == "auto" else args.bf16 == "on", ["cpu"])
    model, tok = load_model("smollm2")
    task = make_task("wordproblems", n_steps=[1, 1], max_number=10)
    problems = task.problems("train", args.prompts, seed=args.seed)
    prompts = encode_generator_prompts(tok, [p.question for p in problems])
    P, G, L = args.prompts, args.group_size, args.max_len
    print(f"{machine_line()}; {args.threads} threads, "
          f"bf16 autocast {'on' if bf16 else 'off'}; P {P} x G {G}, L {L}, T {args.temperature}")

    # ---------------------------------------------------------------- part 1: sampler vs generate
    ids, mask = left_pad(prompts, tok.pad_token_id)
    rows, row_mask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)   # [P*G, prompt]

    def ours(fixed: bool, seed: int):
        ro = generate(model, prompts, max_new_tokens=L, eos_id=-1 if fixed else tok.eos_token_id,
                      pad_id=tok.pad_token_id, temperature=args.temperature, seed=seed, bf16=bf16, group_size=G)
        return ro, int(ro.completion_mask.sum())

    def theirs(fixed: bool, seed: int):
        torch.manual_seed(seed)
        model.eval()
        with torch.no_grad(), autocast(bf16, "cpu"):
            out = model.generate(input_ids=rows, attention_mask=row_mask, do_sample=True, temperature=args.temperature,
                                 top_p=1.0, top_k=0, max_new_tokens=L, min_new_tokens=L if fixed else 0,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        new = out[:, rows.shape[1]:]
        ended = (new == tok.eos_token_id).int().cumsum(-1)
        return None, int(((ended == 0) | ((ended == 1) & (new == tok.eos_token_id))).sum())

    results: dict = {"machine": machine_line(), "threads": args.threads, "bf16": bf16,
                     "P": P, "G": G, "L": L}
    free_rollout = None
    for setting in ("free", "fixed"):
        fixed = setting == "fixed"
        ours(fixed, 99), theirs(fixed, 99)  # warm-up: allocator, kernels
        best = {}
        for side, fn in (("cotrain", ours), ("hf_generate", theirs)):
            runs = [timed(fn, fixed, args.seed + r) for r in range(2)]
            secs, (ro, tokens) = min(runs, key=lambda x: x[0])
            best[side] = {"seconds": round(secs, 3), "tokens": tokens, "tokens_per_s": round(tokens / secs, 1)}
            if side == "cotrain" and not fixed:
                free_rollout = ro
        best["time_ratio"] = round(best["hf_generate"]["seconds"] / best["cotrain"]["seconds"], 2)
        best["tokens_per_s_ratio"] = round(best["cotrain"]["tokens_per_s"] / best["hf_generate"]["tokens_per_s"], 2)
        results[setting] = best
        print(f"{setting:5s}  cotrain {best['cotrain']['seconds']:.2f} s ({best['cotrain']['tokens']} tokens, "
              f"{best['cotrain']['tokens_per_s']:.0f}/s)   HF generate {best['hf_generate']['seconds']:.2f} s "
              f"({best['hf_generate']['tokens']} tokens, {best['hf_generate']['tokens_per_s']:.0f}/s)   "
              f"time ratio {best['time_ratio']:.2f}, tokens/s ratio {best['tokens_per_s_ratio']:.2f}")

    # ---------------------------------------------------------------- part 2: one update, by phase
    ro = free_rollout
    rewards = torch.tensor([task.grade(tok.decode(c[m.bool()], skip_special_tokens=True), problems[i // G])
                            for i, (c, m) in enumerate(zip(ro.completion_ids, ro.completion_mask))])
    advantages = group_advantages(rewards, G)
    g = GrpoConfig(group_size=G, max_new_tokens=L, temperature=args.temperature)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.95), weight_decay=0.0)
    phases = {"forward_logprobs": 0.0, "backward": 0.0, "clip_and_adamw": 0.0}
    peaks = dict.fromkeys(phases, 0.0)
    n, tokens = ro.completion_ids.shape[0], int(ro.completion_mask.sum())
    for start in range(0, n, args.micro_batch):
        sl = slice(start, start + args.micro_batch)
        peak_reset()
        secs, (logp, _) = timed(completion_logprobs, model, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
                                ro.completion_mask[sl], temperature=g.temperature, bf16=bf16)
        loss, _ = grpo_loss(logp, logp.detach(), advantages[sl], ro.completion_mask[sl].float(), epsilon=g.epsilon,
                            num_sequences=n, num_tokens=tokens, max_len=L)
        phases["forward_logprobs"] += secs
        peaks["forward_logprobs"] = max(peaks["forward_logprobs"], peak_gib())
        peak_reset()
        phases["backward"] += timed(loss.backward)[0]
        peaks["backward"] = max(peaks["backward"], peak_gib())
    peak_reset()
    phases["clip_and_adamw"] = (timed(torch.nn.utils.clip_grad_norm_, model.parameters(), 1.0)[0]
                                + timed(opt.step)[0])
    peaks["clip_and_adamw"] = peak_gib()
    rollout_s = results["free"]["cotrain"]["seconds"]
    width = ro.prompt_ids.shape[1] + ro.completion_ids.shape[1]
    logits_gib = args.micro_batch * width * model.config.vocab_size * 4 / 2**30
    results["update"] = {"rollout_s": rollout_s, **{f"{k}_s": round(v, 3) for k, v in phases.items()},
                         **{f"{k}_peak_gib": round(v, 2) for k, v in peaks.items()},
                         "micro_batch_logits_gib": round(logits_gib, 2), "sequences": n, "tokens": tokens}
    total = rollout_s + sum(phases.values())
    print(f"step   rollout {rollout_s:.1f} s ({100 * rollout_s / total:.0f}%), "
          + ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f}%, peak {peaks[k]:.2f} GiB)" for k, v in phases.items()))
    print(f"       one micro-batch's float32 logits: {args.micro_batch} x {width} x {model.config.vocab_size} = "
          f"{logits_gib:.2f} GiB")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    print(f"sampler_over_generate={results['fixed']['time_ratio']:.2f}")


if __name__ == "__main__":
    main()
