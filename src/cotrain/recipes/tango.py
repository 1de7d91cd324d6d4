"""Generator-verifier co-training (RL Tango, experiment 2.1), its frozen-verifier baseline
(experiment 1.2, `recipe: frozen_verifier`), the adversarial variant (GAR, `tango.adversarial`) and
label-free consistency self-play (`recipe: consistency`, research direction 2).

Algorithm (Zha et al. 2025, "RL Tango"; formulas in DESIGN.md):
  warm-up   the verifier is fine-tuned on verifications written for it (`verifier.warmup_sft_steps`):
            the generator's own samples and reference solutions with an injected step error, each
            labelled per step by the task and finally by its ground-truth outcome; then
            `verifier.warmup_rl_steps` verifier-only RL steps.
  generator each step samples G solutions of B prompts (the same prompts and seeds as `grpo`); the
            verifier verifies each one, giving per-step verdicts and a final verdict. Outcome reward
            r = 1[correct]; step rewards r_k = +-1/K from the verdicts (only when exactly K were
            parsed), z-normalised over the group and summed from each token to the end:
            A_t = (1 - alpha) A_out + alpha A_proc,t; then the GRPO update.
  verifier  after every Ng generator steps, Nv verifier steps: fresh solutions from the current
            generator, `verifier.group_size` sampled verifications of each (its GRPO group), reward
            1[final verdict == ground truth] + w_format * format, advantages reweighted by class
            (1/sqrt of the EMA count of correct resp. incorrect solutions, mean 1).
  frozen_verifier: the same warm-up and generator update; the verifier is never trained.
  adversarial (GAR): the verifier also earns w_catch for rejecting an incorrect solution, the
            generator w_approve for a correct solution the verifier approves.

consistency (no ground truth on the training path: it sees `tasks.base.blind` problems):
  the same loop with every ground-truth label replaced by a pseudo-label, the agreement of a
  solution's answer with the majority answer of its group of G samples (groups whose majority has a
  share below `consistency.min_share` are unlabelled). The verifier is rewarded for agreeing with
  the pseudo-label; the generator by w * 1[approved] + (1 - w) * 1[agrees with the majority], plus the
  verifier's process advantages. A verifier step samples G solutions of `verifier.solutions / G`
  prompts. No labelled warm-up: start the verifier from a warmed-up one (`verifier.init`). Ground
  truth is read only by the metrics under `gt/` (gen_acc, agree, hack_gap, pseudo_label_acc, ver_acc)
  and by evaluation (`eval/`); `ver/acc` and `cotrain/agree_pseudo` are agreement with pseudo-labels.

Deviations from the paper, and why:
  - In the tiny world the verifier's rationale recomputes each step and repeats the claimed result
    before its verdict (roles/verifier.py): tiny verifiers writing bare verdicts stay at chance.
  - The warm-up is SFT on automatically labelled verifications (the task's process labels), where
    the paper warms up by RL only; `verifier.warmup_sft_steps: 0` gives the zero warm-up of
    experiment 3.2. The verifier's RL reward never uses process labels.
  - The generator's samples are verified greedily (`verifier.greedy_verdicts`) for lower-variance
    process rewards; the verifier's own RL rollouts are sampled.
  - A verifier step draws its own solutions (one per prompt, `verifier.solutions` prompts) from the
    current generator rather than reusing the generator's batch, so each of its groups is one solution.
  - `train.steps` counts generator steps, so runs compare with `grpo` at equal generator steps; the
    warm-up is logged as step 0. Compute (tokens and FLOPs per role, warm-up included) is logged
    cumulatively as `flops/*` and `tokens/*` and written to eval.json under "compute".

Metrics: `gen/*` and `ver/*` per role (ver/* only on steps that train the verifier);
`cotrain/agree` (the verifier's verdict on the generator's samples equals ground truth),
`cotrain/agree_balanced`, `cotrain/hack_gap` (approval rate minus accuracy of those samples),
`eval/verifier/*` on a fixed held-out set of error-injected solutions every eval.every steps.

Run:  cotrain run configs/tango_smoke.yaml --out runs/tango
"""
from __future__ import annotations

import random
import time

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.verifier_eval import evaluate_on_injected, evaluate_verifiers, injected_error_set
from cotrain.eval.verifier_metrics import verdict_metrics
from cotrain.models.build import load_model, reference_model, save_model
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_generator_prompts, uses_chat
from cotrain.models.verify import encode_verifier_prompts, step_ends, verify
from cotrain.recipes.policy import policy_update, supervised_step
from cotrain.rl.losses import group_advantages, masked_mean
from cotrain.rl.selfplay import consistency_rewards, pseudo_labels
from cotrain.rl.tango import (
    alpha_at,
    class_weights,
    generator_rewards,
    mix_advantages,
    process_advantages,
    step_rewards,
    verifier_rewards,
)
from cotrain.roles.verifier import reference_verification, split_steps
from cotrain.runs.rundir import Progress, list_checkpoints
from cotrain.runs.session import (
    Compute,
    Sampler,
    StepTimer,
    build_task,
    derive_seed,
    eval_during_training,
    eval_kwargs,
    finish,
    initial_model,
    initial_verifier,
    make_optimizer,
    maybe_checkpoint,
    open_session,
    rollout_tokens,
    sample_batch,
    training_pool,
)
from cotrain.tasks.base import blind

ROLES = ("gen", "ver")


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, v, tg = cfg.grpo, cfg.verifier, cfg.tango
    frozen = cfg.recipe == "frozen_verifier" or tg.ver_steps == 0
    label_free = cfg.recipe == "consistency"
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    model, tokenizer = initial_model(cfg)
    verifier, vtok = initial_verifier(cfg)
    model.train()  # each on its model config's device: initial_model and initial_verifier placed them
    verifier.train()
    # The generator's frozen reference is its start (with LoRA: its base, adapters off); none when beta == 0.
    ref_model = reference_model(model) if g.beta > 0 else None
    labelled_pool, _ = training_pool(task, cfg, cfg.train.n_problems)
    pool = blind(labelled_pool) if label_free else labelled_pool
    truth = {p.question: p for p in labelled_pool}  # ground truth of the training problems, for gt/* metrics only
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    ver_rl_steps = v.warmup_rl_steps + (0 if frozen else cfg.train.steps // tg.gen_steps * tg.ver_steps)
    vopt, vsched = make_optimizer(verifier, cfg.train.model_copy(update={"lr": v.lr, "warmup_steps": 0}),
                                  max(ver_rl_steps, 1))
    # the verifier's GRPO: its own group size, length and temperature; the generator's clip and loss type
    vg = g.model_copy(update={"group_size": v.group_size, "max_new_tokens": v.max_new_tokens,
                              "temperature": v.temperature, "beta": 0.0, "num_iterations": 1, "num_minibatches": 1})
    roles = {"generator": (model, tokenizer, opt, sched), "verifier": (verifier, vtok, vopt, vsched)}
    warmed = resume and bool(list_checkpoints(run_dir))  # a checkpoint exists only after the warm-up
    session = open_session(cfg, run_dir, resume, roles, desc=cfg.recipe)
    state = session.state
    compute = Compute({"gen": model.num_parameters(), "ver": verifier.num_parameters()}, state.get("compute"))
    ema = state.get("class_ema")
    ver_step = state.get("ver_step", 0)
    n_prompts = cfg.train.batch_size // g.group_size
    heldout = injected_error_set(task, task.problems(cfg.eval.splits[0], tg.eval_n, seed=1234)
                                 if cfg.eval.splits[0] in task.splits else [])
    ekw = eval_kwargs(cfg)
    per_prompt = g.group_size if label_free else 1  # solutions per prompt in a verifier step

    def labels_of(texts: list[str], problems: list, group_size: int) -> list[bool | None]:
        """What trains both roles: each solution's ground-truth correctness, or (label-free) its
        agreement with its group's majority answer (None: the group has no majority)."""
        if label_free:
            return pseudo_labels([task.extract_answer(t) for t in texts], group_size, cfg.consistency.min_share)
        return dist.map_shards(lambda tp: task.grade(*tp) >= 1, list(zip(texts, problems)))

    def truth_of(texts: list[str], problems: list) -> list[bool]:
        """Ground-truth correctness, for the metrics alone."""
        return dist.map_shards(lambda tp: task.grade(tp[0], truth[tp[1].question]) >= 1, list(zip(texts, problems)))

    def eval_verifier() -> dict[str, float]:
        m = evaluate_on_injected(verifier, vtok, task, heldout, max_new_tokens=v.max_new_tokens,
                                 batch_size=ekw["batch_size"], bf16=cfg.train.bf16)
        verifier.train()
        return {f"eval/verifier/{k}": x for k, x in m.items() if k in ("accuracy", "balanced_accuracy", "acc_erroneous",
                                                                       "acc_correct", "earliest_f1")}

    # ------------------------------------------------------------------ verifier step (RL)
    def verifier_step() -> dict[str, float]:
        nonlocal ema, ver_step
        ver_step += 1
        prompt_problems = sample_batch(pool, max(1, v.solutions // per_prompt), derive_seed(cfg.seed, "verifier"), ver_step)
        sample_seed = derive_seed(cfg.seed, "verifier-rollout", ver_step)
        sro = generate(model, encode_generator_prompts(tokenizer, [p.question for p in prompt_problems]),
                       group_size=per_prompt, max_new_tokens=g.max_new_tokens, eos_id=tokenizer.eos_token_id,
                       pad_id=tokenizer.pad_token_id, temperature=g.temperature, top_p=g.top_p, seed=sample_seed,
                       bf16=cfg.train.bf16)
        compute.add("gen", forward=rollout_tokens(sro)[0])  # these samples train no one: not "generated"
        solutions = decode_completions(tokenizer, sro.completion_ids, sro.completion_mask)
        problems = [p for p in prompt_problems for _ in range(per_prompt)]
        labels = labels_of(solutions, problems, per_prompt)
        keep = [i for i, lab in enumerate(labels) if lab is not None]
        if not keep:
            return {"ver/labelled": 0.0}
        solutions, problems = [solutions[i] for i in keep], [problems[i] for i in keep]
        pseudo_truth = truth_of(solutions, problems) if label_free else []  # ground truth: metrics only
        correct = [labels[i] for i in keep]
        vro, _, parsed = verify(verifier, vtok, [p.question for p in problems], solutions, group_size=v.group_size,
                                temperature=v.temperature, max_new_tokens=v.max_new_tokens,
                                seed=derive_seed(cfg.seed, "verifier-verify", ver_step), bf16=cfg.train.bf16)
        forward, generated = rollout_tokens(vro)
        labels = [c for c in correct for _ in range(v.group_size)]                       # [S*Gv]
        rewards = verifier_rewards([x.final for x in parsed], labels, [x.format for x in parsed], v.w_format,
                                   tg.adversarial, tg.w_catch)                            # [S*Gv]
        advantages = group_advantages(rewards, v.group_size, vg.scale_rewards)             # [S*Gv]
        if v.reweight:
            weights, ema = class_weights(correct, ema, v.class_decay)                     # [S]
            advantages = advantages * weights.repeat_interleave(v.group_size)
        st = policy_update(verifier, vopt, vro, advantages, vro.completion_mask, vg, max_grad_norm=cfg.train.max_grad_norm,
                           bf16=cfg.train.bf16, micro_batch_size=cfg.train.micro_batch_size)
        vsched.step()
        compute.add("ver", forward=forward, generated=generated,
                    trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        grouped = rewards.view(-1, v.group_size)
        m = verdict_metrics([x.final for x in parsed], labels)
        monitors = {}
        if label_free:  # ground truth: metrics only
            gt = verdict_metrics([x.final for x in parsed], [c for c in pseudo_truth for _ in range(v.group_size)])
            monitors = {"ver/labelled": len(keep) / len(labels), "gt/ver_acc": gt["accuracy"],
                        "gt/ver_balanced_acc": gt["balanced_accuracy"],
                        "gt/ver_pseudo_label_acc": sum(a == b for a, b in zip(correct, pseudo_truth)) / len(keep)}
        return {**monitors, "ver/reward": rewards.mean().item(), "ver/reward_std": grouped.std(dim=1).mean().item(),
                "ver/frac_reward_zero_std": (grouped.std(dim=1) == 0).float().mean().item(),
                "ver/acc": m["accuracy"], "ver/balanced_acc": m["balanced_accuracy"],
                "ver/format": sum(x.format for x in parsed) / len(parsed), "ver/approve_rate": m["approve_rate"],
                "ver/base_rate": m["base_rate"], "ver/len_mean": vro.lengths.float().mean().item(),
                "ver/len_clipped_ratio": vro.truncated.float().mean().item(),
                "ver/entropy": masked_mean(vro.entropy, vro.completion_mask).item(),
                "ver/lr": vsched.get_last_lr()[0], **{f"ver/{k}": x for k, x in st.items() if "tokens" not in k}}

    # ------------------------------------------------------------------ warm-up (step 0)
    if not warmed:
        t0 = time.time()
        metrics = warmup_verifier(cfg, task, pool, model, tokenizer, verifier, vtok, compute)
        metrics.update(eval_verifier())
        ver_rl = [verifier_step() for _ in range(v.warmup_rl_steps)]
        for key in ver_rl[0] if ver_rl else []:
            metrics[key] = sum(m[key] for m in ver_rl) / len(ver_rl)
        if ver_rl:
            metrics.update({f"{k}_after_rl": x for k, x in eval_verifier().items()})
        # kept for the final comparison
        dist.on_main(save_model, dist.plain_copy(verifier), vtok, session.run_dir / "warmup" / "verifier")
        metrics.update(compute.metrics())
        metrics["time/warmup"] = time.time() - t0
        # checkpoint first: a run killed in between resumes after the warm-up without its row, never
        # with the row twice
        maybe_checkpoint(cfg, session, 0, roles, force=True,
                         extra={"compute": compute.tokens, "class_ema": ema, "ver_step": ver_step})
        session.logger.log(0, metrics)

    sampler = Sampler(cfg, model, tokenizer, session.run_dir)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- generator rollout
        prompt_problems = sample_batch(pool, n_prompts, cfg.seed, step)                # [B]
        problems = [p for p in prompt_problems for _ in range(g.group_size)]          # [B*G], groups contiguous
        prompts = encode_generator_prompts(tokenizer, [p.question for p in prompt_problems])
        sample_seed = derive_seed(cfg.seed, "rollout", step)
        ro = sampler(model, prompts, group_size=g.group_size, max_new_tokens=g.max_new_tokens,
                     eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, temperature=g.temperature,
                     top_p=g.top_p, seed=sample_seed, bf16=cfg.train.bf16)
        texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        forward, generated = rollout_tokens(ro)
        compute.add("gen", forward=forward, generated=generated)
        timer.lap("gen", generated)

        # -------------------------------------------------------------- verification of every sample
        # Greedy verification of a repeated (question, solution) pair gives the same verdicts, so each
        # distinct pair is verified once (a group often repeats its correct solutions).
        verify_seed = derive_seed(cfg.seed, "verify", step)
        pairs = [(p.question, t) for p, t in zip(problems, texts)]
        distinct = list(dict.fromkeys(pairs)) if v.greedy_verdicts else pairs
        vro, _, parsed_distinct = verify(verifier, vtok, [q for q, _ in distinct], [t for _, t in distinct],
                                         greedy=v.greedy_verdicts, temperature=v.temperature,
                                         max_new_tokens=v.max_new_tokens, seed=verify_seed, bf16=cfg.train.bf16)
        index = {pair: i for i, pair in enumerate(distinct)}
        parsed = [parsed_distinct[index[pair]] for pair in pairs] if v.greedy_verdicts else parsed_distinct
        forward, verified = rollout_tokens(vro)
        compute.add("ver", forward=forward)
        timer.lap("verify", verified)

        # -------------------------------------------------------------- rewards and advantages
        labels = labels_of(texts, problems, g.group_size)
        approved = [x.final for x in parsed]
        if label_free:
            rewards = consistency_rewards(labels, approved, cfg.consistency.w_verdict)      # [B*G]
        else:
            rewards = generator_rewards(labels, approved, tg.adversarial, tg.w_approve)     # [B*G]
        outcome_adv = group_advantages(rewards, g.group_size, g.scale_rewards)              # [B*G]
        n_steps = [len(split_steps(t)) for t in texts]
        s_rewards = [step_rewards(x.steps, k) for x, k in zip(parsed, n_steps)]
        ends = step_ends(tokenizer, ro.completion_ids, ro.completion_mask, texts)
        process_adv = process_advantages(s_rewards, ends, g.group_size, ro.completion_ids.shape[1])  # [B*G, T]
        alpha = alpha_at(step, cfg.train.steps, tg.alpha, tg.alpha_schedule)
        advantages = mix_advantages(outcome_adv, process_adv, alpha)                      # [B*G, T]
        mask = ro.completion_mask.clone()                                                  # [B*G, T]
        if g.mask_truncated:
            mask[ro.truncated] = 0
        timer.lap("reward")

        # -------------------------------------------------------------- generator update
        sampler.before_update()
        st = policy_update(model, opt, ro, advantages, mask, g, max_grad_norm=cfg.train.max_grad_norm,
                           bf16=cfg.train.bf16, ref_model=ref_model, micro_batch_size=cfg.train.micro_batch_size,
                           tis_cap=sampler.tis_cap)
        sched.step()
        sampler.after_update(model)
        trained = st["tokens_trained"] + st["prompt_tokens_trained"]
        compute.add("gen", trained=trained)
        timer.lap("update", trained)

        # -------------------------------------------------------------- verifier steps
        ver_metrics: list[dict] = []
        if not frozen and step % tg.gen_steps == 0:
            ver_metrics = [verifier_step() for _ in range(tg.ver_steps)]
            timer.lap("ver_update")

        # -------------------------------------------------------------- log / eval / checkpoint
        correct = truth_of(texts, problems) if label_free else labels
        health = verdict_metrics(approved, correct)
        grouped = rewards.view(-1, g.group_size)
        monitors = {  # ground truth; label-free runs log it under gt/ only
            "gen/acc": sum(correct) / len(correct),
            "cotrain/agree": health["accuracy"],
            "cotrain/agree_balanced": health["balanced_accuracy"],
            "cotrain/hack_gap": health["approve_rate"] - health["base_rate"],
        }
        if label_free:
            labelled = [(lab, c) for lab, c in zip(labels, correct) if lab is not None]
            names = {"gen/acc": "gt/gen_acc", "cotrain/agree": "gt/agree", "cotrain/agree_balanced": "gt/agree_balanced",
                     "cotrain/hack_gap": "gt/hack_gap"}
            monitors = {names[k]: x for k, x in monitors.items()}
            monitors["gt/pseudo_label_acc"] = sum(a == b for a, b in labelled) / max(len(labelled), 1)
            monitors["cotrain/labelled"] = len(labelled) / len(labels)
            monitors["cotrain/agree_pseudo"] = verdict_metrics(
                [a for a, lab in zip(approved, labels) if lab is not None], [lab for lab in labels if lab is not None]
            )["accuracy"] if labelled else 0.0
        metrics = {
            "gen/reward": rewards.mean().item(),
            "gen/reward_std": grouped.std(dim=1).mean().item(),
            "gen/frac_reward_zero_std": (grouped.std(dim=1) == 0).float().mean().item(),
            **monitors,
            "gen/len_mean": ro.lengths.float().mean().item(),
            "gen/len_clipped_ratio": ro.truncated.float().mean().item(),
            "gen/entropy": masked_mean(ro.entropy, ro.completion_mask).item(),
            "gen/lr": sched.get_last_lr()[0],
            "gen/alpha": alpha,
            "gen/process_usable": sum(r is not None for r in s_rewards) / len(s_rewards),
            "gen/adv_process_abs": masked_mean(process_adv.abs(), ro.completion_mask).item(),
            **{f"gen/{k}": x for k, x in st.items() if "tokens" not in k},
            "cotrain/approve_rate": health["approve_rate"],
            "cotrain/format": sum(x.format for x in parsed) / len(parsed),
            "cotrain/distinct_verified": len(distinct) / len(pairs),
            "tokens/gen_generated": generated,
            "tokens/gen_trained": st["tokens_trained"],
        }
        for key in dict.fromkeys(k for m in ver_metrics for k in m):
            values = [m[key] for m in ver_metrics if key in m]
            metrics[key] = sum(values) / len(values)
        metrics.update(compute.metrics())
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(cfg, model, tokenizer, task))
            metrics.update(eval_verifier())
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        if step % cfg.log.every == 0 or step == cfg.train.steps:
            session.logger.log(step, metrics)
        session.progress.update(step, {"reward": metrics["gen/reward"],
                                       "agree": metrics.get("cotrain/agree", metrics.get("gt/agree")),
                                       **{k.split("/", 1)[1]: x for k, x in metrics.items() if k.startswith("eval/")}})
        maybe_checkpoint(cfg, session, step, roles,
                         extra={"compute": compute.tokens, "class_ema": ema, "ver_step": ver_step})

    # ------------------------------------------------------------------ final evaluation
    warm, wtok = load_model(session.run_dir / "warmup" / "verifier")
    warm.to(next(verifier.parameters()).device).eval()
    verifier.eval()
    results = {}
    split = cfg.eval.splits[0]
    if split in task.splits:
        both = evaluate_verifiers({"verifier": (verifier, vtok), "verifier_warmup": (warm, wtok)}, model, tokenizer,
                                  task, split, n=cfg.eval.n_sampled or tg.eval_n, k=cfg.eval.k,
                                  temperature=cfg.eval.temperature, gen_max_new_tokens=ekw["max_new_tokens"],
                                  ver_max_new_tokens=v.max_new_tokens, batch_size=ekw["batch_size"], bf16=cfg.train.bf16)
        for name, m in both.items():
            results[name] = {split: m}
        for name, (m, tok) in {"verifier": (verifier, vtok), "verifier_warmup": (warm, wtok)}.items():
            injected = evaluate_on_injected(m, tok, task, heldout, max_new_tokens=v.max_new_tokens,
                                            batch_size=ekw["batch_size"], bf16=cfg.train.bf16)
            if injected:
                results.setdefault(name, {})[f"{split}_injected"] = injected
    results["compute"] = compute.summary()
    return finish(cfg, session, model, tokenizer, task, cfg.train.steps, other_models={"verifier": (verifier, vtok)},
                  other_results=results)


# ---------------------------------------------------------------------- verifier warm-up (SFT)


def warmup_examples(cfg: RunConfig, task, pool, model, tokenizer, compute: Compute) -> list[tuple[str, str]]:
    """(question, solution) pairs for the verifier's SFT warm-up.

    `verifier.warmup_samples` in all: a `warmup_corrupt_frac` share of reference solutions with a wrong
    result injected at a uniformly drawn step (tasks with `corrupt`), and the rest the generator's own
    samples (temperature 1) of training problems.
    """
    v = cfg.verifier
    rng = random.Random(derive_seed(cfg.seed, "warmup"))
    n_corrupt = int(v.warmup_samples * v.warmup_corrupt_frac) if hasattr(task, "corrupt") else 0
    problems = [pool[i] for i in (rng.randrange(len(pool)) for _ in range(v.warmup_samples))]
    pairs = []
    for p in problems[:n_corrupt]:
        if p.steps:
            first = rng.randrange(len(p.steps))
            wrong = [first] + [i for i in range(len(p.steps)) if i != first and rng.random() < v.warmup_error_rate]
            pairs.append((p, task.corrupt(p, wrong, rng)[1]))
    sampled = problems[n_corrupt:]
    model.eval()
    for i in range(0, len(sampled), cfg.eval.batch_size):
        chunk = sampled[i:i + cfg.eval.batch_size]
        ro = generate(model, encode_generator_prompts(tokenizer, [p.question for p in chunk]),
                      max_new_tokens=cfg.grpo.max_new_tokens, eos_id=tokenizer.eos_token_id,
                      pad_id=tokenizer.pad_token_id, temperature=1.0, seed=derive_seed(cfg.seed, "warmup-samples", i),
                      bf16=cfg.train.bf16)
        compute.add("gen", forward=rollout_tokens(ro)[0])
        pairs += zip(chunk, decode_completions(tokenizer, ro.completion_ids, ro.completion_mask))
    model.train()
    return pairs


def warmup_verifier(cfg: RunConfig, task, pool, model, tokenizer, verifier, vtok, compute: Compute) -> dict[str, float]:
    """SFT of the verifier on `warmup_examples`, each labelled by `reference_verification`."""
    v = cfg.verifier
    if v.warmup_sft_steps == 0:
        return {}
    pairs = warmup_examples(cfg, task, pool, model, tokenizer, compute)
    chat = uses_chat(vtok)
    targets = [reference_verification(task, p, s, chat=chat) for p, s in pairs]
    opt, sched = make_optimizer(verifier, cfg.train.model_copy(update={"lr": v.warmup_sft_lr, "warmup_steps": 20,
                                                                        "schedule": "constant"}), v.warmup_sft_steps)
    losses = []
    rng = random.Random(derive_seed(cfg.seed, "warmup-order"))
    progress = Progress(v.warmup_sft_steps, enabled=cfg.log.progress and dist.is_main(), desc="verifier warm-up (sft)")
    for step in range(1, v.warmup_sft_steps + 1):
        idx = [rng.randrange(len(pairs)) for _ in range(v.warmup_batch_size)]
        prompts = encode_verifier_prompts(vtok, [pairs[i][0].question for i in idx], [pairs[i][1] for i in idx])
        st = supervised_step(verifier, opt, prompts, [encode_completion(vtok, targets[i]) for i in idx],
                             vtok.pad_token_id, max_grad_norm=cfg.train.max_grad_norm, bf16=cfg.train.bf16,
                             micro_batch_size=cfg.train.micro_batch_size)
        sched.step()
        compute.add("ver", trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        losses.append(st["loss"])
        progress.update(step, {"loss": st["loss"]})
    progress.close()
    tail = losses[-max(1, len(losses) // 10):]
    correct = sum(task.grade(s, p) >= 1 for p, s in pairs) / len(pairs)
    return {"ver/warmup_loss": sum(tail) / len(tail), "ver/warmup_examples": len(pairs),
            "ver/warmup_base_rate": correct}
