"""RL Tango: a generator and a generative verifier co-trained by RL, each rewarding the other.

Also its frozen-verifier baseline (experiment 1.2, `recipe: frozen_verifier`) and the adversarial
variant (GAR, `cotraining.adversarial`), which differ from it by configuration alone.

Algorithm (Zha et al. 2025, "RL Tango"; formulas in docs/design.md):
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

`verifier.source: rollouts` (VinePPO's Monte Carlo values, PAV's progress; not RL Tango): no verifier and no
verdicts; at each step boundary of each sample, `verifier.rollouts_k` continuations from the current generator
(no gradient), V(prefix) the share graded right, and each step's reward V(after) - V(before), the answer's
outcome - V(before it), V(prompt) the group's mean outcome (rl/progress.py), on each item's own tokens
(`credit: step`) or summed to go; not z-scored. Its continuations are logged as compute role `progress`.

`cotraining.alpha: auto` (ours, not the paper's): the paper's schedule times the verifier's measured
reliability r_t in [0, 1] (rl/tango.py `verifier_trust`: 0 for a verifier no measurably better than
chance on the generator's current samples, 1 from 0.9 balanced accuracy), so that a verifier that
cannot check leaves the update GRPO's.

Defaults are the paper's code's (kaiwenzha/RL-Tango, scripts/run_rl_tango.sh): alpha 0.1 decaying
exponentially to 1e-3 (`cotraining.alpha`, `alpha_schedule: exp`), w_format 0.8, class weights
1 / (sqrt(EMA count) + 1e-6) with decay 0.8 and no clamp, a group's lone step reward kept as it is,
no reward at all for a verification without a final verdict, Ng:Nv = 3:1, verifier temperature 1.

Deviations from the paper, and why (none of them measured against the paper's choice yet, except
where a figure is given):
  - In the tiny world the verifier's rationale recomputes each step and repeats the claimed result
    before its verdict (roles/verifier.py): tiny verifiers writing bare verdicts stay at chance
    (README: bare verdicts stayed at chance). Its format score is 0.5 for a final verdict plus 0.5
    for one verdict per step, not the paper's rubric of penalties for its tags.
  - The warm-up is SFT on automatically labelled verifications (the task's process labels: the one
    place a process label is used, see `train.verifier.warmup_verifier`), where the paper warms up by
    40 RL steps only (`verifier.warmup_rl_steps: 40`, `warmup_sft_steps: 0` gives that; 0 and 0 the
    zero warm-up of experiment 3.2). The verifier's RL reward never uses process labels.
  - The generator's samples are verified greedily (`verifier.greedy_verdicts`, the paper samples one
    verification at temperature 1: `greedy_verdicts: false`), for lower-variance process rewards and
    so that a repeated solution is verified once; the verifier's own RL rollouts are sampled.
  - No KL term and no entropy bonus by default (the paper: KL 0.001 on both models, entropy 0.001);
    `grpo.beta` adds the generator's KL, the verifier's RL has none. The loss is aggregated by
    `grpo.loss_type` (the paper: token mean), the outcome advantage's epsilon is TRL's 1e-4 (the
    paper's verl: 1e-6), and sizes and learning rates are the tiny world's (the paper: 5 samples per
    prompt, 5 verifications per solution, 256 solutions per verifier step, learning rate 1e-6).
  - A verifier step draws its own solutions (one per prompt, `verifier.solutions` prompts) from the
    current generator rather than reusing the generator's batch, so each of its groups is one solution.
  - `train.steps` counts generator steps, so runs compare with `grpo` at equal generator steps; the
    warm-up is logged as step 0. Compute (tokens and FLOPs per role, warm-up included) is logged
    cumulatively as `flops/*` and `tokens/*` and written to eval.json under "compute".

Metrics: `gen/*` and `ver/*` per role (ver/* only on steps that train the verifier);
`cotrain/agree` (the verifier's verdict on the generator's samples equals ground truth),
`cotrain/agree_balanced`, `cotrain/auroc`, `cotrain/hack_gap` (approval rate minus accuracy of those
samples), the generation-verification gaps on them: `gap/verifier` (accuracy of the samples the
verifier approves minus accuracy of all) and `gap/majority` (maj@G minus one sample's accuracy),
`eval/verifier/*` on a fixed held-out set of error-injected solutions every eval.every steps.
With `cotraining.verify_groups: trained` (ours; needs `process_groups: mixed`) the verifier judges only the
groups the process term trains: the same update for less verification, and the `cotrain/*` verdict
metrics then read those groups alone (absent on a step where no group is mixed).

Run:  cotrain run configs/tango_smoke.yaml --out runs/tango
"""
from __future__ import annotations

from functools import partial

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training, eval_verifier_during, injected_heldout
from cotrain.models.build import reference_model
from cotrain.rl.losses import group_advantages, masked_mean
from cotrain.rl.tango import generator_rewards, mix_advantages
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import list_checkpoints
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.progress import progress_monitors, progress_term
from cotrain.train.rollout import Sampler, complete_solutions, reward_metrics, rollout_metrics
from cotrain.train.setup import (
    build_task,
    derive_seed,
    initial_model,
    initial_verifier,
    make_optimizer,
    training_pool,
)
from cotrain.train.update import generator_update
from cotrain.train.verifier import (
    VerifierRL,
    build_verifier,
    final_verifier_results,
    mean_metrics,
    mixed_groups,
    oracle_results,
    process_term,
    require_process_labels,
    scheduled_alpha,
    verdict_monitors,
    verdicts_on_samples,
    warm_up,
)

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("Process-reward weight α (tango)", "α", "alpha", False),
    ("Verifier reliability r (cotraining.alpha: auto)", "r", "alpha_trust", True),
)


def graded(task, texts: list[str], problems: list, group_size: int = 1) -> list[bool]:
    """Each solution's ground-truth correctness, graded once across processes."""
    return dist.map_shards(lambda tp: task.grade(*tp) >= 1, list(zip(texts, problems)))


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, v, tg = cfg.grpo, cfg.verifier, cfg.cotraining
    oracle = v.source != "model"  # no verifier model at all: verdicts from the task's labels, or progress (rollouts)
    rollouts = v.source == "rollouts"  # Monte Carlo progress from continuations: no verdicts
    frozen = cfg.recipe == "frozen_verifier" or tg.ver_steps == 0 or oracle
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    require_process_labels(task, v.source, cfg.task.name)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()  # on its model config's device: initial_model placed it
    ref_model = reference_model(model, bf16=cfg.train.bf16) if g.beta > 0 else None  # its start (LoRA: its base); none at β 0
    pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched, reference=ref_model)}
    if not oracle:  # the verifier, on its model config's device, with its optimizer over its RL steps
        verifier, vtok = built = initial_verifier(v, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
        roles["verifier"] = build_verifier(built, v, tg, cfg.train, frozen)
    warmed = oracle or resume and bool(list_checkpoints(run_dir))  # a checkpoint exists only after the warm-up
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc=cfg.recipe)
    n_params = {"gen": model.num_parameters(), "ver": 0 if oracle else verifier.num_parameters()}
    compute = Compute(n_params | ({"progress": n_params["gen"]} if rollouts else {}), session.state.get("compute"))
    grade = partial(graded, task)
    if not oracle:
        ver_rl = VerifierRL(cfg.seed, g, v, tg, cfg.train, cfg.rollout, pool, (model, tokenizer), roles["verifier"],
                            compute, labels=grade, ema=session.state.get("class_ema"), step_count=session.state.get("ver_step", 0))
        heldout = injected_heldout(task, cfg.eval.splits[0], tg.eval_n)  # eval/verifier/* metrics on it:
        eval_verifier = partial(eval_verifier_during, verifier, vtok, task, heldout, v, cfg.eval.batch_size, cfg.train.bf16)
    # alpha: auto: the verdict counts of the last 5 steps and the reliability they gave (kept on resume)
    window, trust = [tuple(c) for c in session.state.get("alpha_window", [])], session.state.get("alpha_trust", 0.0)
    # ------------------------------------------------------------------ warm-up (step 0)
    if not warmed:
        warm_up(session, roles, task, pool, ver_rl, eval_verifier)

    sampler = Sampler(cfg.rollout, cfg.model, cfg.init, cfg.seed, model, tokenizer, session.run_dir)
    n_prompts = cfg.train.batch_size // g.group_size
    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- generator rollout
        problems, ro, texts, generated = sampler.batch(model, tokenizer, pool, n_prompts, g, step, compute, timer,
                                                       seed=cfg.seed, bf16=cfg.train.bf16)  # [B*G], groups contiguous

        # -------------------------------------------------------------- verification of every sample
        correct = grade(texts, problems)
        judged = mixed_groups(correct, g.group_size) if tg.verify_groups == "trained" and not oracle else None
        vro, parsed, distinct = (None, None, 0.0) if rollouts else verdicts_on_samples(
            None if oracle else (verifier, vtok), task, problems, texts, correct, v, rollout=ro,
            seed=derive_seed(cfg.seed, "verify", step), bf16=cfg.train.bf16, needed=judged)  # oracle: the task's (no rollout)
        timer.lap("verify", compute.add_rollout("ver", vro, generated=False) if vro is not None else 0)

        # -------------------------------------------------------------- rewards and advantages
        complete = complete_solutions(task, problems, texts)
        approved = [None] * len(texts) if rollouts else [x.final for x in parsed]
        rewards = generator_rewards(correct, approved, tg.adversarial, tg.w_approve)        # [B*G]
        outcome_adv = group_advantages(rewards, g.group_size, g.scale_rewards)              # [B*G]
        if rollouts:  # k continuations at each step boundary: V(after) - V(before) on each step's tokens
            progress, process_adv = progress_term(sampler, model, tokenizer, ro, texts, grade, problems, rewards, g, v, tg,
                                                  compute, derive_seed(cfg.seed, "progress", step), cfg.train.bf16)
            s_rewards = progress.rewards
            timer.lap("progress", progress.generated)
        else:
            s_rewards, process_adv = process_term(tg, tokenizer, task, ro, texts, parsed, rewards, complete, g.group_size)
        alpha, window, trust, trust_ba = scheduled_alpha(tg, step, cfg.train.steps, parsed, correct, window, trust)
        advantages = mix_advantages(outcome_adv, process_adv, alpha)                      # [B*G, T]
        timer.lap("reward")

        # -------------------------------------------------------------- generator update
        st = generator_update(cfg.grpo, cfg.train, model, opt, sched, ro, advantages, sampler=sampler, ref_model=ref_model)
        trained = st["tokens_trained"] + st["prompt_tokens_trained"]
        compute.add("gen", trained=trained)
        timer.lap("update", trained)

        # -------------------------------------------------------------- verifier steps: Nv after every Ng generator steps
        ver_metrics: list[dict] = []
        for _ in range(tg.ver_steps if not frozen and step % tg.gen_steps == 0 else 0):
            batch = ver_rl.sample()                               # fresh solutions of the current generator, graded
            vro, vparsed = ver_rl.verify(batch)                   # Gv sampled verifications of each: its groups
            vrewards, vadv = ver_rl.advantages(batch, vparsed)    # 1[verdict == truth] + w_format format, by class
            vst = ver_rl.update(vro, vadv)                        # GRPO's update of the verifier
            ver_metrics.append(ver_rl.metrics(batch, vro, vparsed, vrewards, vst))
        if ver_metrics:
            timer.lap("ver_update")

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {
            **reward_metrics("gen", rewards, g.group_size),
            **(progress_monitors(progress, outcome_adv, g.group_size) if rollouts else
               verdict_monitors(task, problems, texts, parsed, complete, correct, g.group_size, judged)),
            **rollout_metrics("gen", ro),
            "gen/lr": sched.get_last_lr()[0], "gen/alpha": alpha,
            **({"gen/alpha_trust": trust, "gen/alpha_trust_ba": trust_ba} if tg.alpha_schedule == "auto" else {}),
            "gen/process_usable": sum(r is not None for r in s_rewards) / len(s_rewards),
            "gen/adv_process_abs": masked_mean(process_adv.abs(), ro.completion_mask).item(),
            **{f"gen/{k}": x for k, x in st.items() if "tokens" not in k},
            "cotrain/distinct_verified": distinct, "tokens/gen_generated": generated, "tokens/gen_trained": st["tokens_trained"],
            **mean_metrics(ver_metrics), **compute.metrics(),
        }
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            metrics.update({} if oracle else eval_verifier())
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        shown = {"reward": metrics["gen/reward"], "agree": metrics.get("cotrain/agree")}  # no verdicts under rollouts
        log_step(session, step, metrics, {k: v for k, v in shown.items() if v is not None})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens, "alpha_window": window,
                                                           "alpha_trust": trust, **({} if oracle else ver_rl.state())})

    # ------------------------------------------------------------------ final evaluation
    results = (oracle_results(session.settings, v, cfg.seed, task, (model, tokenizer)) if oracle else
               final_verifier_results(session, task, (model, tokenizer), (verifier, vtok), heldout, tg.eval_n, trained=not frozen))
    results["compute"] = compute.summary()
    return finish(session, model, tokenizer, task, cfg.train.steps, other_results=results,
                  other_models=None if oracle else {"verifier": (verifier, vtok)})
