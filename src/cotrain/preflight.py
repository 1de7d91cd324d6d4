"""`cotrain check CONFIG`: validate a run config and start it, without training or writing anything.

What a long run would do first, in order, each failure a one-line `UserError`: load and validate the
config; build the task and read its data (every split, and the eval splits it lacks are named); build
or load every model the recipe trains (the generator; the verifier of tango, frozen_verifier and
consistency; the proposer and judge of triad and reliability when `selfplay.shared_model` is false),
by the recipes' own rules (`verifier.model`, `verifier.init`, `init`, `selfplay.proposer_init`, the
memory options of `model`); encode the first training step's prompts with the chat template; run the
first rollout (`grpo.group_size` samples of each prompt, at the config's temperature and length limit,
capped by `max_new_tokens`), decode and grade it; and let the verifier or judge verify its first
sample. The report gives what a run on new hardware needs to know before it starts: each model's
class, size, dtype and device, whether it has a chat template, token counts, the rollout's speed,
the reward, a sample, and the peak memory.
"""
from __future__ import annotations

import resource
import sys
import time
from functools import partial

import torch

from cotrain import registry, threads
from cotrain.config import EvalConfig, GrpoConfig, RunConfig, VerifierConfig
from cotrain.dist import device
from cotrain.errors import UserError
from cotrain.eval.evaluate import require_eval_splits
from cotrain.models import memory
from cotrain.models.build import load_model, prepare_for_training
from cotrain.models.generate import generate
from cotrain.models.prompts import (
    decode_completions,
    encode_generator_prompts,
    encode_proposer_prompts,
    uses_chat,
)
from cotrain.models.verify import verify
from cotrain.precision import resolve_bf16
from cotrain.registry import RECIPES
from cotrain.runs.rundir import resolve_model_dir
from cotrain.train.compute import flops_estimate
from cotrain.train.progress import prefix_values
from cotrain.train.setup import build_task, derive_seed, initial_model, sample_batch, training_pool
from cotrain.train.verifier import final_noise, oracle_verifications, require_process_labels

SAMPLE_CHARS = 300
"""The sample completion is shown up to this many characters."""


def check(cfg: RunConfig, *, prompts: int = 2, max_new_tokens: int | None = None,
          device_memory_gib: float | None = None, rollout: bool = True, say=print) -> dict:
    """Build everything `cfg` needs and run its first rollout; print a short report line by line.

    Args:
        cfg: a validated config (`load_config`).
        prompts: training prompts in the rollout (at most the config's prompts per step).
        max_new_tokens: cap on the rollout's completion length (default: the config's).
        device_memory_gib: the memory the plan is made for (default: the generator's device's).
        rollout: run and grade the first rollout and what follows it (False: the config, data, models and
            prompts alone, in seconds).
        say: where report lines go.

    Returns:
        The measured numbers: {"roles": {role: info}, "prompt_tokens", "completion_tokens",
        "rollout_seconds", "tokens_per_s", "reward_mean", "sample", "peak_memory_bytes", ...}.

    Raises:
        UserError: a bad option, missing data, a model that does not load, a device that does not exist,
            or out of GPU memory in the rollout.
    """
    if prompts < 1:
        raise UserError(f"--prompts must be at least 1 (got {prompts})")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1 (got {max_new_tokens})")
    for i in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(i)
    g, t = cfg.grpo, cfg.train
    report: dict = {"recipe": cfg.recipe}
    t.bf16, precision_line = resolve_bf16(t.bf16, [d for d in (cfg.model.device or device(), cfg.verifier.device) if d])
    plan = first_rollout(cfg)
    per_step, group = plan["prompts_per_step"], plan["group_size"]
    say(f"config    {cfg.recipe}: {t.steps} steps of {per_step} {plan['unit']}, micro-batch "
        f"{t.micro_batch_size or 'whole batch'}, lr {t.lr:g}, autocast bf16 {'on' if t.bf16 else 'off'}, "
        f"weights {cfg.model.dtype}")
    say(f"          {precision_line}")

    # ------------------------------------------------------------------ task and data
    # what a run reads: the training pool, and the problems the final evaluation draws from each split
    task = build_task(cfg.task)
    # self-play draws its seed questions (`selfplay.seed_questions`), the other recipes `train.n_problems`
    pool, _ = training_pool(task, cfg.seed, cfg.selfplay.seed_questions if "judge" in RECIPES[cfg.recipe].roles
                            else t.n_problems)
    named = "splits" in cfg.eval.model_fields_set  # the default splits a task lacks are skipped, named ones refused
    evaluated = require_eval_splits(task, cfg.task.name, cfg.eval.splits, max(cfg.eval.n, cfg.eval.larger_n), named)
    missing = [s for s in cfg.eval.splits if s not in task.splits]
    say(f"task      {cfg.task.name} (splits {', '.join(task.splits)}): training pool {len(pool)} problems; evaluation "
        + (", ".join(f"{s} {n}" for s, n in evaluated.items()) or "none")
        + (f"; default eval splits not in the task, skipped: {', '.join(missing)}" if missing else ""))
    report["problems"] = {"train": len(pool), **evaluated}

    # ------------------------------------------------------------------ models
    start = time.perf_counter()
    roles = build_roles(cfg)
    report["roles"] = {}
    for role, (model, tok, source) in roles.items():
        info = model_info(model, tok)
        report["roles"][role] = info
        say(f"{role:<9} {info['class']}, {info['parameters']:,} parameters"
            + (f" ({info['trainable']:,} trainable)" if info["trainable"] != info["parameters"] else "")
            + f", {info['dtype']}, {info['device']}, chat template {'yes' if info['chat'] else 'no'}; from {source}")
        note = low_precision_note(model, _role_lr(role, cfg.train.lr, cfg.verifier.lr, cfg.selfplay.proposer_lr))
        if note:
            say(f"note      {role}: {note}")
    if "judge" in RECIPES[cfg.recipe].roles and cfg.selfplay.shared_model:
        say("roles     proposer, solver and judge are the generator (selfplay.shared_model)")
    say(f"          {len(roles)} model(s) built or loaded in {time.perf_counter() - start:.1f} s")
    model, tok, _ = roles["generator"]
    dev = next(model.parameters()).device

    # ------------------------------------------------------------------ prompts
    batch = sample_batch(pool, max(per_step, prompts), cfg.seed, 1)[:prompts]
    questions = [p.question for p in batch]
    prompt_ids = encode_generator_prompts(tok, questions)
    lengths = [len(ids) for ids in prompt_ids]
    report["prompt_tokens"] = lengths
    span = f"{min(lengths)}" if min(lengths) == max(lengths) else f"{min(lengths)}-{max(lengths)}"
    proposer_tok = roles.get("proposer", roles["generator"])[1]
    say(f"prompts   {len(prompt_ids)} of step 1's training prompts, encoded: {span} tokens each"
        + (f"; proposer prompt {len(encode_proposer_prompts(proposer_tok, questions[:1])[0])} tokens"
           if "judge" in RECIPES[cfg.recipe].roles else ""))

    if not rollout:
        say("rollout   skipped (--no-rollout): nothing sampled, graded, verified or timed")
        say("ok")
        return report

    # ------------------------------------------------------------------ first rollout
    config_limit = plan["max_new_tokens"]
    limit = min(config_limit, max_new_tokens) if max_new_tokens else config_limit
    _sync(dev)
    start = time.perf_counter()
    try:
        ro = generate(model, prompt_ids, max_new_tokens=limit, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                      temperature=plan["temperature"], top_p=g.top_p, top_k=g.top_k, greedy=plan["greedy"],
                      seed=derive_seed(cfg.seed, "rollout", 1), bf16=t.bf16, group_size=group)
        _sync(dev)
    except torch.cuda.OutOfMemoryError:
        raise UserError(f"out of GPU memory in the first rollout ({len(prompt_ids)} prompts x {group} samples, "
                        f"{limit} new tokens): lower --prompts or --max-new-tokens, or see configs/real/README.md") from None
    seconds = time.perf_counter() - start
    completion_lengths = ro.lengths.tolist()
    generated = int(sum(completion_lengths))
    steps = int(ro.completion_ids.shape[1])
    report.update(completion_tokens=completion_lengths, rollout_seconds=seconds,
                  tokens_per_s=generated / seconds if seconds > 0 else float("inf"))
    say(f"rollout   {len(prompt_ids)} prompt(s) x {group} = {len(completion_lengths)} completions ({plan['what']})"
        + f", max_new_tokens {limit}" + (f" (config {config_limit})" if limit != config_limit else "")
        + f": {generated} tokens in {seconds:.2f} s = {report['tokens_per_s']:,.0f} tokens/s; "
        f"{steps} decode steps, {1000 * seconds / max(steps, 1):.1f} ms per step")
    say(f"          completion tokens mean {generated / len(completion_lengths):.1f}, max {max(completion_lengths)}; "
        f"{int(ro.truncated.sum())}/{len(completion_lengths)} reached max_new_tokens")

    # ------------------------------------------------------------------ decode and grade
    texts = decode_completions(tok, ro.completion_ids, ro.completion_mask)
    problems = [p for p in batch for _ in range(group)]                                   # [B*G]
    rewards = [task.grade(text, problem) for text, problem in zip(texts, problems)]
    answered = sum(task.extract_answer(text) is not None for text in texts)
    report["reward_mean"] = sum(rewards) / len(rewards)
    report["sample"] = texts[0]
    graded = "ground-truth grade; the recipe trains on label-free rewards" if RECIPES[cfg.recipe].label_free else "task.grade"
    say(f"reward    mean {report['reward_mean']:.3f} over {len(rewards)} ({graded}); "
        f"an answer extracted from {answered}/{len(texts)} (task.extract_answer)")
    shown = texts[0] if len(texts[0]) <= SAMPLE_CHARS else texts[0][:SAMPLE_CHARS] + " [...]"
    say(f"sample    {shown!r}")

    # ------------------------------------------------------------------ the verifier's (judge's) first verification
    if cfg.verifier.source == "rollouts":
        say(f"verify    rollouts: Monte Carlo progress from {cfg.verifier.rollouts_k} continuations of each sample at each "
            f"step boundary, graded by the task (no verifier model, no process labels; cotraining.credit "
            f"{cfg.cotraining.credit}); measured on a whole step below")
    elif cfg.verifier.source != "model":
        require_process_labels(task, cfg.verifier.source, cfg.task.name)
        first = oracle_verifications(task, problems[:1], texts[:1], [rewards[0] >= 1], cfg.verifier, seed=cfg.seed)[0]
        report["verification"] = {"source": cfg.verifier.source, "steps": first.steps, "final": first.final}
        final_fp, final_fn = final_noise(cfg.verifier)
        noise = (f" flipped at noise_fp {cfg.verifier.noise_fp:g}, noise_fn {cfg.verifier.noise_fn:g}, final verdicts "
                 f"at {final_fp:g} / {final_fn:g}" if cfg.verifier.source == "noisy" else "")
        noise += ", a final verdict approving only with every step approved" if cfg.verifier.final_strict else ""
        say(f"verify    {cfg.verifier.source} (the task's process labels{noise}; no verifier model), first sample: "
            f"{sum(first.steps)}/{len(first.steps)} steps approved, final verdict "
            f"{'CORRECT' if first.final else 'INCORRECT'}")
    checker = "verifier" if "verifier" in roles else "judge" if "judge" in roles else (
        "generator" if "judge" in RECIPES[cfg.recipe].roles else None)
    if checker is not None:
        vmodel, vtok, _ = roles[checker]
        vlimit = min(cfg.verifier.max_new_tokens, max_new_tokens) if max_new_tokens else cfg.verifier.max_new_tokens
        vro, vtexts, parsed = verify(vmodel, vtok, questions[:1], texts[:1], greedy=True, max_new_tokens=vlimit,
                                     bf16=t.bf16)
        verdict = {True: "CORRECT", False: "INCORRECT", None: "none"}[parsed[0].final]
        report["verification"] = {"prompt_tokens": int(vro.prompt_mask.sum()), "tokens": int(vro.lengths.sum()),
                                  "format": parsed[0].format, "final": parsed[0].final}
        say(f"verify    {'judge' if checker != 'verifier' else 'verifier'}, first sample, greedy: "
            f"prompt {report['verification']['prompt_tokens']} tokens, {report['verification']['tokens']} generated "
            f"(max {vlimit}); format {parsed[0].format:.1f}, final verdict {verdict}")
        if parsed[0].final is None:
            report["warnings"] = [f"the {checker}'s first verification ends in no verdict: verdicts it does not write "
                                  "give no reward, so where this holds the run trains as GRPO would (warm it up first: "
                                  "verifier.warmup_sft_steps, or verifier.init)"]
            say(f"warning   {report['warnings'][0]}")

    # ------------------------------------------------------------------ what else the recipe checks (cure: its tests)
    extra = getattr(registry.load(cfg.recipe), "check_extra", None)
    if extra is not None:
        report.update(extra(cfg, task, roles, batch[0], texts[:group], say))

    # ------------------------------------------------------------------ memory
    gpus = sorted({info["device"] for info in report["roles"].values() if info["device"].startswith("cuda")})
    if gpus:
        peaks = {d: torch.cuda.max_memory_allocated(torch.device(d)) for d in gpus}
        reserved = {d: torch.cuda.max_memory_reserved(torch.device(d)) for d in gpus}
        peak = max(peaks.values())
        where = ", ".join(f"{d} {n / 2**30:.2f} GiB allocated, {reserved[d] / 2**30:.2f} GiB reserved"
                          for d, n in peaks.items()) + " (torch.cuda.max_memory_allocated / _reserved)"
    else:
        # ru_maxrss is in kilobytes on Linux, in bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        where = f"{peak / 2**30:.2f} GiB (peak RSS of this process, CPU)"
    report["peak_memory_bytes"] = peak
    say(f"memory    peak {where}; a training update needs more (the plan below)")

    # ------------------------------------------------------------------ memory plan
    plan_roles, work = plan_inputs(cfg, roles, max(lengths), plan)
    capacity = device_memory_gib * memory.GiB if device_memory_gib else device_capacity(dev)
    phases = memory.with_engine_bytes(memory.plan(plan_roles, work), capacity)
    target = f"{device_memory_gib:g} GiB (--device-memory)" if device_memory_gib else f"{capacity / memory.GiB:.1f} GiB ({dev})"
    say(f"plan      estimated peak of each phase on {target} (cotrain.models.memory):")
    for line in memory.table(phases, capacity):
        say(f"          {line}")
    report["memory_plan"] = {"capacity_bytes": capacity, "peaks": memory.peaks(phases),
                             "fixes": memory.fixes(plan_roles, work, capacity)}
    for phase, options in report["memory_plan"]["fixes"].items():
        say(f"fix       {phase}: " + ("; ".join(options) if options else "no single option fits it: combine them, "
                                      "or a device with more memory"))

    # ------------------------------------------------------------------ what the run will cost
    # a whole step's rollout, timed warm (the first rollout above paid the warm-up): the run's pace; with the
    # rollout capped (--max-new-tokens) the capped first rollout, scaled to a step's prompts, is all it says
    if limit == config_limit:
        step_problems = sample_batch(pool, per_step, cfg.seed, 1)
        step_ids = encode_generator_prompts(tok, [p.question for p in step_problems])
        _sync(dev)
        start = time.perf_counter()
        step_ro, busy = threads.busy_during(lambda: generate(
            model, step_ids, max_new_tokens=limit, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
            temperature=plan["temperature"], top_p=g.top_p, top_k=g.top_k, greedy=plan["greedy"],
            seed=derive_seed(cfg.seed, "rollout", 1), bf16=t.bf16, group_size=group))
        _sync(dev)
        rollout_s = time.perf_counter() - start
        report["busy_cores"] = busy if dev.type == "cpu" else None  # what shared the CPU while it was timed
        if cfg.verifier.source == "rollouts":
            report["progress"] = step_progress(g, cfg.verifier, cfg.cotraining.credit, cfg.seed, t.bf16, model, tok, task, step_ro,
                                               [p for p in step_problems for _ in range(group)])
            say(progress_line(report["progress"], int(step_ro.completion_mask.sum())))
    else:
        rollout_s = seconds * per_step / len(prompt_ids)
    report["cost"] = run_cost(rollout_s, t.steps, per_step, len(pool), cfg.checkpoint.keep_last,
                              {role: model_info(m, tk) for role, (m, tk, _) in roles.items()},
                              evaluation_counts(cfg.recipe, cfg.eval, t.steps, evaluated),
                              evaluation_pace(rollout_s, per_step * group, limit,
                                              cfg.eval.max_new_tokens or cfg.grpo.max_new_tokens),
                              report.get("progress", {}).get("seconds", 0.0))
    say(cost_line(report["cost"], t.steps, per_step) + (
        f" (from the first rollout capped at {limit} new tokens, scaled to {per_step} prompts: a rough guess)"
        if limit != config_limit else ""))
    if (note := threads.busy_note(report.get("busy_cores"), len(threads.allowed_cores()))) is not None:
        say(note)
    say("ok")
    return report


def plan_inputs(cfg: RunConfig, roles: dict[str, tuple], prompt_tokens: int, rollout: dict) -> tuple[list, object]:
    """The memory plan's view of a run: its models (shapes from their configs, dtype, LoRA, checkpointing,
    a reference copy for the KL term) and the sizes of its phases. A verification's prompt is taken as the
    problem's prompt plus a whole solution; verifications run in batches of at most 256."""
    t, g = cfg.train, cfg.grpo
    out = []
    for name, (model, _, _) in roles.items():
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        mcfg = (cfg.verifier.model or cfg.model) if name in ("verifier", "judge") else cfg.model
        params = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
        out.append(memory.Role(name, memory.Shapes.of(base.config, params), next(base.parameters()).element_size(),
                               trains=any(p.requires_grad for p in model.parameters()), lora_r=mcfg.lora_r,
                               checkpointing=mcfg.gradient_checkpointing, reference=g.beta > 0))
    rows = rollout["prompts_per_step"] * rollout["group_size"]
    verifier = "verifier" in roles or "judge" in roles
    work = memory.Work(rollout_rows=rows, prompt_tokens=prompt_tokens, new_tokens=rollout["max_new_tokens"],
                       micro_batch=min(t.micro_batch_size or rows, rows), group_size=rollout["group_size"],
                       eval_rows=cfg.eval.batch_size, eval_new_tokens=cfg.eval.max_new_tokens or g.max_new_tokens,
                       verify_rows=min(rows, 256) if verifier else 0,
                       verify_prompt_tokens=prompt_tokens + rollout["max_new_tokens"],
                       verify_new_tokens=cfg.verifier.max_new_tokens, verify_group=cfg.verifier.group_size,
                       autocast=bool(t.bf16),
                       vllm_share=cfg.rollout.gpu_memory_utilization if cfg.rollout.engine == "vllm" else 0.0,
                       vllm_sleep=cfg.rollout.sleep, offload_optimizer=t.offload_optimizer)
    return out, work


def device_capacity(dev: torch.device) -> float:
    """Bytes of memory of a device: a GPU's total, or the machine's physical memory for the CPU."""
    if dev.type == "cuda":
        return float(torch.cuda.get_device_properties(dev).total_memory)
    import os

    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


ROLLOUT_SHARE = 2 / 3
"""The rollout's share of a step taken by `run_cost` (published GRPO step breakdowns: 60-72%)."""


def eval_sequences(ev: EvalConfig, steps: int, problems: dict[str, int]) -> dict[str, int]:
    """The sequences the generator's evaluations in a run generate, by the common path (`eval/during.py`,
    `runs/session.py::finish`); a recipe that evaluates otherwise says so itself (its module's
    `check_evaluation`: mars's planner and worker both generate, and it writes no larger evaluation).

    Args:
        ev: the run's `eval` section; steps: its steps.
        problems: {split: problems it holds, up to max(n, larger_n)}, the splits evaluated (`require_eval_splits`).

    Returns:
        `during`: `n_during` greedy (or the whole first split, where it holds fewer) every `every` steps and
        once more with `at_start`, of the first split;
        `final`: each split's n greedy (`n`, or fewer where it holds fewer) and k samples of the first
        `n_sampled` of those (none with k under 2); `larger`: each split's `larger_n` greedy (`eval.larger_n`).
    """
    first = next(iter(problems.values()), 0)  # the whole split where it held fewer than were asked for
    n_during = min(ev.n_during, first) if first < max(ev.n, ev.larger_n) else ev.n_during
    during = ((steps // ev.every if ev.every else 0) + ev.at_start) * n_during if problems else 0
    final = sum(m + (ev.k * min(ev.n_sampled, m) if ev.k >= 2 else 0) for m in (min(ev.n, n) for n in problems.values()))
    larger = sum(min(ev.larger_n, n) for n in problems.values()) if ev.larger_n else 0
    return {"during": during, "final": final, "larger": larger}


def step_progress(g: GrpoConfig, v: VerifierConfig, credit: str, seed: int, bf16: bool, model, tok, task, ro,
                  problems: list) -> dict:
    """`verifier.source: rollouts` on a whole step's rollout `ro`, as the run's first step draws it (its seeds):
    the continuations' prefixes, tokens (forward, generated), FLOPs (2 N a forward token, N the generator's
    parameters) and seconds, and the first sample's values and rewards."""
    texts = decode_completions(tok, ro.completion_ids, ro.completion_mask)
    outcomes = [float(task.grade(text, p) >= 1) for text, p in zip(texts, problems)]
    draw = partial(generate, model, bf16=bf16, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                   temperature=g.temperature, top_p=g.top_p, top_k=g.top_k)
    start = time.perf_counter()
    progress, _ = prefix_values(draw, tok, ro, texts, [ids[m.bool()].tolist() for ids, m in zip(ro.prompt_ids, ro.prompt_mask)],
                                lambda ts, ps: [task.grade(x, p) >= 1 for x, p in zip(ts, ps)], problems,
                                k=v.rollouts_k, max_new_tokens=g.max_new_tokens, seed=derive_seed(seed, "progress", 1),
                                group_size=g.group_size, outcomes=outcomes, credit=credit)
    seconds = time.perf_counter() - start
    return {"prefixes": progress.prefixes, "tokens_forward": progress.forward, "tokens_generated": progress.generated,
            "flops": flops_estimate(model.num_parameters(), progress.forward, 0), "seconds": seconds,
            "first": {"values": progress.values[0], "rewards": progress.rewards[0]}}


def progress_line(p: dict, rollout_tokens: int) -> str:
    """`step_progress` as the line `cotrain check` prints."""
    first = ", ".join(f"{r:+.2f}" for r in p["first"]["rewards"])
    return (f"progress  step 1's continuations: {p['prefixes']} prefixes, {p['tokens_generated']:,} tokens generated "
            f"({p['tokens_generated'] / max(rollout_tokens, 1):.1f}x the rollout's {rollout_tokens:,}), "
            f"{p['flops']:.3g} FLOPs, {p['seconds']:.1f} s; the first sample's item rewards {first or 'none'}")


def run_cost(rollout_s: float, steps: int, per_step: int, pool: int, keep_last: int,
             roles: dict[str, dict], evaluation: dict[str, int], sequence_s: float,
             progress_s: float = 0.0) -> dict[str, float]:
    """What a run will cost, estimated from the first rollout and the models' sizes.

    Args:
        rollout_s: a whole step's rollout, measured.
        steps: the run's steps; per_step: prompts per step; pool: its training problems.
        keep_last: checkpoints kept at once (`checkpoint.keep_last`).
        roles: `model_info` of each model the run trains.
        evaluation: `eval_sequences`, the sequences the generator's evaluations generate.
        sequence_s: seconds an evaluated sequence takes (`evaluation_pace`).
        progress_s: seconds a step's Monte Carlo continuations take (`verifier.source: rollouts`), added to a step.

    Returns:
        `step_s`: seconds a step, the rollout over `ROLLOUT_SHARE`; `total_s` = steps x step_s (evaluation
        aside); `eval_s` and `larger_s`: the generator's evaluations, all and `eval.larger_n`'s alone, at
        `sequence_s` (a verifier's evaluations are left out); `checkpoint_bytes`: one checkpoint, each model's weights (4
        bytes a parameter) and AdamW's two fp32 states of its trainable parameters; `disk_bytes` = keep_last
        checkpoints and the final models; `epochs`: passes over the training problems (steps x per_step / pool).
    """
    weights = sum(4 * r["parameters"] for r in roles.values())
    states = sum(8 * r["trainable"] for r in roles.values())
    step_s = rollout_s / ROLLOUT_SHARE + progress_s
    return {"step_s": step_s, "total_s": step_s * steps, "checkpoint_bytes": float(weights + states),
            "disk_bytes": float(keep_last * (weights + states) + weights), "epochs": steps * per_step / max(pool, 1),
            "eval_s": sequence_s * sum(evaluation.values()), "larger_s": sequence_s * evaluation.get("larger", 0)}


def evaluation_pace(rollout_s: float, sequences: int, rollout_tokens: int, eval_tokens: int) -> float:
    """Seconds an evaluated sequence takes, guessed from the timed rollout: its seconds a sequence, scaled by
    the evaluation's completion limit over the rollout's (a rough guess: greedy completions stop when they
    stop, and evaluation batches are other sizes)."""
    return rollout_s / max(sequences, 1) * eval_tokens / max(rollout_tokens, 1)


def cost_line(cost: dict[str, float], steps: int, per_step: int) -> str:
    """`run_cost` as the lines `cotrain check` prints."""
    def gib(n: float) -> str:
        return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.1f} MiB"

    def hms(s: float) -> str:
        return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"

    return (f"cost      about {hms(cost['step_s'])} a step (a step's rollout of {per_step} prompts, taken as "
            f"{ROLLOUT_SHARE:.0%} of a step; a co-training step adds its verifier's), {hms(cost['total_s'])} for "
            f"{steps} steps before evaluation; the generator's evaluation about {hms(cost['eval_s'])} more"
            + (f" ({hms(cost['larger_s'])} of it eval.larger_n's)" if cost["larger_s"] else "")
            + " at the rollout's pace a token\n"
            f"          disk: {gib(cost['checkpoint_bytes'])} a checkpoint (weights and optimizer states), "
            f"{gib(cost['disk_bytes'])} with those kept and the final models; {steps} steps x {per_step} prompts "
            f"are {cost['epochs']:.2g} passes over the training problems")


def evaluation_counts(recipe: str, ev: EvalConfig, steps: int, problems: dict[str, int]) -> dict[str, int]:
    """`eval_sequences` of a run of `recipe`, through the recipe's own `check_evaluation` where it has one."""
    counts = eval_sequences(ev, steps, problems)
    own = getattr(registry.load(recipe), "check_evaluation", None)
    return own(counts) if own is not None else counts


def first_rollout(cfg: RunConfig) -> dict:
    """How the recipe's first step samples its generator (solver): prompts per step and what each
    prompt gets. A recipe that samples otherwise says so itself (its module's `check_rollout`: sft
    samples nothing in training, reliability's first regime is the strong one)."""
    own = getattr(registry.load(cfg.recipe), "check_rollout", None)
    if own is not None:
        return own(cfg)
    g, t = cfg.grpo, cfg.train
    return {"prompts_per_step": t.batch_size // g.group_size, "unit": f"prompts x G={g.group_size}",
            "group_size": g.group_size, "greedy": False, "temperature": g.temperature,
            "max_new_tokens": g.max_new_tokens,
            "what": f"temperature {g.temperature:g}" + (f", top-k {g.top_k}" if g.top_k else "") + (
                f", top-p {g.top_p:g}" if g.top_p < 1 else "")}


def build_roles(cfg: RunConfig) -> dict[str, tuple]:
    """{role: (model, tokenizer, where it comes from)} of every model a run of `cfg` builds, by the
    recipes' own rules; one entry when proposer, solver and judge share the generator."""
    from cotrain.train.setup import initial_verifier  # the recipes' own rule, so a check loads what a run loads

    # every checkpoint path first: a wrong one fails before minutes of loading the others
    for path in (cfg.init, cfg.verifier.init, cfg.selfplay.proposer_init):
        if path:
            resolve_model_dir(path)
    model, tok = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    roles = {"generator": (model, tok, _source(cfg.init, cfg.model))}
    v = cfg.verifier
    verifier_source = (_source(None, v.model) + " (verifier.model)" if v.model is not None
                       else f"{v.init} (verifier.init)" if v.init
                       else f"{cfg.init} (init, as the generator)" if cfg.init
                       else _source(None, cfg.model) + (", a second copy" if cfg.model.path else ", its own seed"))
    own = getattr(registry.load(cfg.recipe), "check_models", None)  # a recipe's models of its own (cure, mars)
    if own:
        roles.update(own(cfg, generator=roles["generator"][2], verifier=verifier_source))
    if "verifier" in RECIPES[cfg.recipe].roles and v.source == "model":  # an oracle builds no verifier
        roles["verifier"] = (*initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp), verifier_source)
    elif "judge" in RECIPES[cfg.recipe].roles and not cfg.selfplay.shared_model:
        sp = cfg.selfplay
        if sp.proposer_init:
            proposer, ptok = load_model(resolve_model_dir(sp.proposer_init), dtype=cfg.model.dtype)
            roles["proposer"] = (prepare_for_training(proposer, cfg.model, device()), ptok,
                                 f"{sp.proposer_init} (selfplay.proposer_init)")
        else:
            roles["proposer"] = (*initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp),
                                 roles["generator"][2] + ", a second copy")
        roles["judge"] = (*initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp), verifier_source)
    return roles


def _role_lr(role: str, lr: float, verifier_lr: float, proposer_lr: float | None) -> float:
    """The learning rate a role trains at: the verifier's for a verifier or judge, the proposer's (else the
    run's) for a proposer, the run's for the rest."""
    if role in ("verifier", "judge"):
        return verifier_lr
    if role == "proposer":
        return proposer_lr or lr
    return lr


def _source(init: str | None, model_cfg) -> str:
    from cotrain.models import gguf_source

    for path, key in ((init, "init"), (model_cfg.path, "model.path")):
        if path and gguf_source.is_gguf_source(path):
            file, converted = gguf_source.gguf_file(path), gguf_source.resolve(path)
            return f"{path} ({key}; GGUF {file.name}, de-quantized to float32, converted in {converted})"
        if path:
            return f"{path} ({key})"
    return f"a new {model_cfg.preset} model (model.preset)"


def model_info(model, tokenizer) -> dict:
    """Class, parameter counts, dtype, device and chat template of a built model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a LoRA (peft) wrapper
    params = list(model.parameters())
    dtypes: dict[torch.dtype, int] = {}
    for p in params:
        dtypes[p.dtype] = dtypes.get(p.dtype, 0) + p.numel()
    return {
        "class": type(base).__name__ + (" + LoRA" if base is not model else ""),
        "parameters": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
        "dtype": str(max(dtypes, key=dtypes.get)).removeprefix("torch."),
        "device": str(params[0].device),
        "chat": uses_chat(tokenizer),
    }


def low_precision_note(model, lr: float) -> str | None:
    """A warning when trainable weights are 16-bit and a step of size `lr` cannot move most of them.

    AdamW moves each weight by about lr per step. A weight with |w| in [2^e, 2^(e+1)) changes only when
    the step reaches half its spacing, 2^(e-8) in bfloat16 (8 significant bits) and 2^(e-11) in float16,
    so no weight with |w| >= 512 lr (bfloat16) or 2048 lr (float16) can move at all.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    kinds = {p.dtype for p in trainable}
    if not trainable or not kinds & {torch.bfloat16, torch.float16}:
        return None
    factor = 512 if torch.bfloat16 in kinds else 2048
    with torch.no_grad():
        stuck = sum(int((p.detach().abs() >= factor * lr).sum()) for p in trainable)
    share = stuck / sum(p.numel() for p in trainable)
    dtype = "bfloat16" if torch.bfloat16 in kinds else "float16"
    return (f"trainable weights are {dtype}: a step of lr={lr:g} cannot change any weight with |w| >= {factor * lr:.2g} "
            f"({100 * share:.1f}% of them); model.dtype=float32 keeps every update")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
