"""The real model's GRPO step against this machine's limits.

First the limits, measured with torch on this machine:
  GEMM rate    `F.linear` at the model's own weight shapes (every nn.Linear, the tied head included), in
               fp32 and in bf16, at M = 32 rows (a decoding pass of the whole batch) and at M = --rows-m
               rows (a micro-batch of the update): total FLOPs over total time, shapes weighted by count
  bandwidth    a copy of a 1 GiB tensor: bytes read plus bytes written over the time, best of 5

Then one GRPO step of the config (default configs/real/smollm2_sparse.yaml: SmolLM2-135M-Instruct,
4 prompts x 8 samples, at most 160 new tokens, the update in micro-batches of 8 rows), phase by phase,
each against its bound:
  prefill      the prompts run once (`logits_to_keep=1`)      bound: FLOPs / GEMM rate (M = prompt tokens)
  decode       the sampling loop after the prefill           bound: per pass, the larger of FLOPs / GEMM
               (cotrain.models.generate, finished rows leave    rate at M = 32 and bytes / bandwidth (the
               the batch)                                      bf16 weights once, the KV cache so far)
  scoring      log-probs of every completion, no graph, one  bound: FLOPs / GEMM rate
               pass per group (each prompt run once)
  update       forward with the graph, backward              bound: 3x the scoring FLOPs / GEMM rate
  optimizer    clip and AdamW over every parameter            bound: bytes / bandwidth (p, g, m, v read;
                                                                p, m, v written; g read again to clip)
FLOPs count what the passes run, padding included: 2 per weight per token, and 4 x d x (tokens attended)
per token and layer for attention. Every group is trained (advantages drawn at random), so the update
runs the whole batch, as a step whose groups all carry a gradient does. The precision is the config's
(`train.bf16: auto` is bf16 autocast where it is native). Phases are timed after one warm-up step.
Below the table, decode's time a pass beside its bound and beside the model's matrix products alone at 32 rows,
each weight read once from memory (`matmuls_pass`): the floor of any pass that runs them one by one.

    python bench/roofline.py                    # the table; last line roofline_worst=<phase>:<share of its bound>
    python bench/roofline.py --max-new-tokens 16 --quick   # a look that it works
    python bench/roofline.py --decode-only      # one rollout of the step's prompts from the model as loaded, timed

Run it alone on the machine. Goals: prefill, scoring and update at >= 50% of the GEMM rate; decode within
2x of its bound.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import DynamicCache  # noqa: E402

import cotrain.train.update as update  # noqa: E402
from cotrain import allocator  # noqa: E402
from cotrain.config import load_config  # noqa: E402
from cotrain.models.generate import autocast, casts_kept, generate, left_pad, with_cache  # noqa: E402
from cotrain.models.prompts import encode_generator_prompts  # noqa: E402
from cotrain.precision import machine_line, resolve_bf16  # noqa: E402
from cotrain.train.setup import build_task, initial_model, make_optimizer, training_pool  # noqa: E402

GIB = 1 << 30


def best_time(fn, repeats: int, inner: int = 1) -> float:
    """The best of `repeats` timings of `inner` calls of fn, per call (after one call to warm up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def linear_shapes(model) -> dict[tuple[int, int], int]:
    """{(out, in): count} of the model's nn.Linear weights (the head tied to the embedding included)."""
    shapes: dict[tuple[int, int], int] = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            shapes[tuple(m.weight.shape)] = shapes.get(tuple(m.weight.shape), 0) + 1
    return shapes


def gemm_rate(shapes: dict, rows: int, dtype: torch.dtype, repeats: int) -> float:
    """FLOP/s of F.linear over the model's shapes at `rows` rows, shapes weighted by their count."""
    flops = seconds = 0.0
    for (n_out, n_in), count in shapes.items():
        x, w = torch.randn(rows, n_in, dtype=dtype), torch.randn(n_out, n_in, dtype=dtype)
        inner = max(1, int(2e9 // (2 * rows * n_in * n_out)))  # about 2 GFLOP a timing
        seconds += count * best_time(lambda: F.linear(x, w), repeats, inner)
        flops += count * 2 * rows * n_in * n_out
    return flops / seconds


def matmuls_pass(model, rows: int, dtype: torch.dtype, repeats: int) -> float:
    """Seconds of one pass of the model's own matrix products alone at `rows` rows: every nn.Linear's weight (the
    tied head included), cast to `dtype` once, applied once, in the model's order. Unlike `gemm_rate`, which
    repeats one shape while its weight stays in cache, each weight comes from memory, as in a decoding pass:
    the floor of any pass that runs these products one by one."""
    weights = [m.weight.detach().to(dtype) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=dtype) for w in weights}

    def one_pass():
        for w in weights:
            F.linear(inputs[w.shape[1]], w)
    return best_time(one_pass, repeats)


def bandwidth(repeats: int, size: int = GIB) -> float:
    """Bytes/s of a large copy, read plus write."""
    src, dst = torch.ones(size // 4, dtype=torch.float32), torch.empty(size // 4, dtype=torch.float32)
    return 2 * size / best_time(lambda: dst.copy_(src), repeats)


class Shape:
    """The model's sizes for counting: weights in linear layers, layers, attention width, KV width."""

    def __init__(self, model):
        c = model.config
        self.linear = sum(n_out * n_in * k for (n_out, n_in), k in linear_shapes(model).items())
        self.layers, self.d = c.num_hidden_layers, c.num_attention_heads * (c.hidden_size // c.num_attention_heads)
        self.kv = c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
        self.params = model.num_parameters()
        self.head = model.get_output_embeddings().weight.numel()

    def flops(self, tokens: int, attended: int, head_tokens: int | None = None) -> float:
        """Forward FLOPs of `tokens` positions attending to `attended` positions in all (summed over the
        tokens), the head run on `head_tokens` of them (default all)."""
        return (2 * tokens * (self.linear - self.head) + 2 * (tokens if head_tokens is None else head_tokens) * self.head
                + 4 * self.d * attended * self.layers)


def decode_bound(lengths: list[int], prompt_len: int, shape: Shape, rate32: float, bw: float,
                 weight_bytes: int, kv_bytes: int) -> tuple[float, float, float, int]:
    """(bound s, FLOPs, bytes, passes) of the decoding loop: pass t runs the rows still going (length > t)
    over a cache of prompt_len + t positions; each pass is bound by the larger of its FLOPs over the GEMM
    rate and its bytes (the weights once, every live row's cache) over the bandwidth."""
    total = flops = moved = 0.0
    passes = max(lengths) - 1 if lengths else 0
    for t in range(1, passes + 1):
        live = sum(1 for n in lengths if n > t)
        f = shape.flops(live, live * (prompt_len + t))
        b = weight_bytes + live * (prompt_len + t) * kv_bytes
        total += max(f / rate32, b / bw)
        flops, moved = flops + f, moved + b
    return total, flops, moved, passes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs/real/smollm2_sparse.yaml"))
    ap.add_argument("--max-new-tokens", type=int, default=None, help="override grpo.max_new_tokens")
    ap.add_argument("--rows-m", type=int, default=1024, help="rows of the update's GEMM shape")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="fewer repeats: a look that it works")
    ap.add_argument("--decode-only", action="store_true", help="time one rollout of the step's prompts, nothing else")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    repeats = 2 if args.quick else 5
    overrides = [f"grpo.max_new_tokens={args.max_new_tokens}"] if args.max_new_tokens else []
    cfg = load_config(args.config, overrides)
    bf16, why = resolve_bf16(cfg.train.bf16, ["cpu"])
    g, dtype = cfg.grpo, torch.bfloat16 if bf16 else torch.float32
    malloc = allocator.tune()  # as a run sets it (cotrain.runs.session.choose_precision)
    print(f"roofline: {Path(args.config).name}, {'bf16 autocast' if bf16 else 'fp32'} ({why}); {machine_line()}; "
          f"allocator {malloc}", flush=True)

    torch.manual_seed(cfg.seed)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    task = build_task(cfg.task)
    pool = training_pool(task, cfg.seed, cfg.train.n_problems)[0]
    n_prompts = cfg.train.batch_size // g.group_size
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    prompts = encode_generator_prompts(tokenizer, [p.question for p in pool[:n_prompts]])
    sampling = dict(max_new_tokens=g.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                    temperature=g.temperature, top_p=g.top_p, greedy=False, bf16=bf16, group_size=g.group_size)
    times: dict[str, float] = {}
    if args.decode_only:  # the model as loaded, seed --seed: the same rollout on every commit that samples alike
        model.eval()
        generate(model, prompts, seed=args.seed + 1, **{**sampling, "max_new_tokens": 8})  # warm-up
        t0 = time.perf_counter()
        ro = generate(model, prompts, seed=args.seed, **sampling)
        took = time.perf_counter() - t0
        print(f"rollout: {took:.2f} s, {1e3 * took / ro.completion_ids.shape[1]:.1f} ms a pass; completions "
              f"{ro.lengths.tolist()}")
        return 0

    shape = Shape(model)
    shapes = linear_shapes(model)
    rates = {(dt, m): gemm_rate(shapes, m, dt, repeats) for dt in (torch.float32, torch.bfloat16)
             for m in (32, args.rows_m)}
    bw = bandwidth(repeats)
    print(f"limits: GEMM fp32 {rates[torch.float32, 32] / 1e9:.0f} GFLOP/s at M=32, "
          f"{rates[torch.float32, args.rows_m] / 1e9:.0f} at M={args.rows_m}; bf16 "
          f"{rates[torch.bfloat16, 32] / 1e9:.0f} at M=32, {rates[torch.bfloat16, args.rows_m] / 1e9:.0f} at "
          f"M={args.rows_m}; copy {bw / 1e9:.1f} GB/s", flush=True)
    rate32, rate_m = rates[dtype, 32], rates[dtype, args.rows_m]
    floor32 = matmuls_pass(model, 32, dtype, repeats)

    def prefill():
        ids, mask = left_pad(prompts, tokenizer.pad_token_id)
        with torch.no_grad(), casts_kept(model, bf16), autocast(bf16):
            model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                  **with_cache(model, DynamicCache()), use_cache=True, logits_to_keep=1)

    def step(timed: bool):
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            ro = generate(model, prompts, seed=args.seed, **sampling)
        t_rollout = time.perf_counter() - t0
        t_prefill = best_time(prefill, 1)
        model.train()
        groups = [torch.tensor([i]) for i in range(n_prompts)]
        t0 = time.perf_counter()
        with torch.no_grad():
            for grp in groups:
                update._logprobs(model, ro, grp, g, bf16)
        t_score = time.perf_counter() - t0
        advantages = torch.randn(ro.completion_ids.shape[0], generator=torch.Generator().manual_seed(args.seed))
        inner, opt_time = update.optimizer_step, []

        def timed_step(*a, **k):
            t = time.perf_counter()
            out = inner(*a, **k)
            opt_time.append(time.perf_counter() - t)
            return out
        update.optimizer_step = timed_step
        t0 = time.perf_counter()
        try:
            update.policy_update(model, opt, ro, advantages, ro.completion_mask, g, max_grad_norm=cfg.train.max_grad_norm,
                                 bf16=bf16, micro_batch_size=cfg.train.micro_batch_size)
        finally:
            update.optimizer_step = inner
        t_update = time.perf_counter() - t0
        if timed:
            times.update(prefill=t_prefill, decode=t_rollout - t_prefill, scoring=t_score,
                         update=t_update - sum(opt_time), optimizer=sum(opt_time))
        return ro

    step(timed=False)
    ro = step(timed=True)

    # what each phase ran
    p_lens = [len(p) for p in prompts]
    prefill_f = shape.flops(sum(p_lens), sum(n * (n + 1) // 2 for n in p_lens), head_tokens=len(p_lens))
    lengths = ro.lengths.tolist()
    kv_bytes = 2 * shape.kv * shape.layers * (2 if bf16 else 4)
    weight_bytes = shape.linear * (2 if bf16 else 4)
    prompt_len = max(p_lens)
    dec_bound, dec_f, dec_b, passes = decode_bound(lengths, prompt_len, shape, rate32, bw, weight_bytes, kv_bytes)
    score_f = 0.0
    gs = g.group_size
    for i in range(n_prompts):
        p_used = int(ro.prompt_mask[i * gs].sum())  # one group a pass: its prompt once, its rows to its longest
        width = max(lengths[i * gs:(i + 1) * gs])
        score_f += shape.flops(p_used, p_used * (p_used + 1) // 2, head_tokens=1)
        score_f += shape.flops(gs * width, gs * (p_used * width + width * (width + 1) // 2))
    opt_bytes = shape.params * 4 * 8  # p, g, m, v read; p, m, v written; g read again by the clip
    rows = [  # phase, seconds, work, bound seconds, what bounds it
        ("prefill", times["prefill"], f"{prefill_f / 1e9:.1f} GFLOP", prefill_f / rate_m, "GEMM"),
        ("decode", times["decode"], f"{passes} passes, {dec_f / 1e9:.0f} GFLOP, {dec_b / 1e9:.1f} GB", dec_bound,
         "max(GEMM at M=32, bandwidth) a pass"),
        ("scoring", times["scoring"], f"{score_f / 1e9:.0f} GFLOP", score_f / rate_m, "GEMM"),
        ("update", times["update"], f"{3 * score_f / 1e9:.0f} GFLOP", 3 * score_f / rate_m, "GEMM"),
        ("optimizer", times["optimizer"], f"{opt_bytes / 1e9:.1f} GB", opt_bytes / bw, "bandwidth"),
    ]
    print(f"\nstep: {n_prompts} prompts x {gs} samples, completions {sum(lengths) / len(lengths):.0f} tokens on "
          f"average (longest {max(lengths)}), prompts {sum(p_lens) / len(p_lens):.0f}")
    print(f"{'phase':<10} {'time s':>8} {'bound s':>8} {'of bound':>9}  work; bound")
    for name, sec, work, bound, by in rows:
        print(f"{name:<10} {sec:8.3f} {bound:8.3f} {bound / sec:8.0%}   {work}; {by}")
    print(f"{'step':<10} {sum(r[1] for r in rows):8.3f} {sum(r[3] for r in rows):8.3f}")
    print(f"\ndecode: {1e3 * times['decode'] / max(passes, 1):.1f} ms a pass (32 rows at most); its bound "
          f"{1e3 * dec_bound / max(passes, 1):.1f} ms; the model's matrix products alone at 32 rows, each weight once "
          f"from memory: {1e3 * floor32:.1f} ms a pass ({shape.flops(32, 0) / floor32 / 1e9:.0f} GFLOP/s)")
    # the goal of each phase but the optimizer's: at least half its bound
    worst = min((r for r in rows if r[0] != "optimizer"), key=lambda r: r[3] / r[1])
    print(f"\nroofline_worst={worst[0]}:{worst[3] / worst[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
