"""Label-free co-training by self-consistency: tango with majority-vote pseudo-labels.

RL Tango with every ground-truth label replaced by the agreement with its group's majority answer.

Algorithm (the loop of recipes/tango.py; formulas in docs/design.md, "Label-free recipes"). No ground truth on the training
path: it sees `tasks.base.blind` problems.
  pseudo-label  a solution is labelled correct when its answer equals the majority answer of its group
            of G samples; groups whose majority has a share below `consistency.min_share` are
            unlabelled (None), and their solutions train neither role.
  generator each step samples G solutions of B prompts; the verifier verifies each one; reward
            r = w * 1[approved] + (1 - w) * 1[agrees with the majority] (w = `consistency.w_verdict`),
            group advantages mixed with the verifier's process advantages as in tango (`cotraining.credit`,
            `cotraining.process_groups` as there, a group mixed when its rewards differ; a blinded problem
            has no reference steps, so a sample is complete for `final` when it states an answer); the GRPO update.
  verifier  after every Ng generator steps, Nv verifier steps: G fresh solutions of each of
            `verifier.solutions / G` prompts (a group, so that they have a majority), rewarded for a
            final verdict that agrees with the pseudo-label, advantages reweighted by class.

Deviations: no labelled warm-up (it would read labels): start the verifier from a warmed-up one
(`verifier.init`); `verifier.warmup_rl_steps` RL steps on pseudo-labels may follow.

Metrics: as tango, but ground truth is read only by the metrics under `gt/` (gen_acc, agree,
agree_balanced, auroc, hack_gap, pseudo_label_acc, ver_acc, ver_balanced_acc, ver_pseudo_label_acc)
and `gap/` (verifier, majority) and by evaluation (`eval/`); `ver/acc` and `cotrain/agree_pseudo` are agreement with pseudo-labels,
`cotrain/labelled` the share of samples with a pseudo-label.

Safeguard (`safeguard.enabled`, train/safeguard.py): every `safeguard.every` steps a probe has the
judge score the solver's strong and weak answers to fixed blinded questions and measures the KL to the
start and the entropy; where these label-free signals say the judge cannot be trusted, the solver's
learning rate is scaled down or to zero until the next probe (`safe/*` metrics, one stderr line per change).

Run:  cotrain run configs/consistency_smoke.yaml --out runs/consistency
"""
from __future__ import annotations

from functools import partial

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training, eval_verifier_during, injected_heldout
from cotrain.eval.verifier_metrics import verdict_metrics
from cotrain.models.build import reference_model
from cotrain.rl.losses import group_advantages, masked_mean
from cotrain.rl.majority import consistency_rewards, pseudo_labels
from cotrain.rl.tango import alpha_at, mix_advantages
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import list_checkpoints
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import blind
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import Sampler, complete_solutions, reward_metrics, rollout_metrics
from cotrain.train.safeguard import Safeguard, verifier_judge
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
    cotrain_monitors,
    final_verifier_results,
    mean_metrics,
    process_term,
    verify_samples,
    warm_up,
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, v, tg = cfg.grpo, cfg.verifier, cfg.cotraining
    frozen = tg.ver_steps == 0
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    verifier, vtok = initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()  # each on its model config's device: initial_model and initial_verifier placed them
    # The generator's frozen start (with LoRA: its base, adapters off): the KL's reference, the safeguard's.
    ref_model = reference_model(model, bf16=cfg.train.bf16) if g.beta > 0 or cfg.safeguard.measures_kl else None
    labelled_pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    pool = blind(labelled_pool)
    truth = {p.question: p for p in labelled_pool}  # ground truth of the training problems, for gt/* metrics only
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched),
             "verifier": build_verifier((verifier, vtok), v, tg, cfg.train, frozen)}
    warmed = resume and bool(list_checkpoints(run_dir))  # a checkpoint exists only after the warm-up
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc=cfg.recipe)
    compute = Compute({"gen": model.num_parameters(), "ver": verifier.num_parameters()}, session.state.get("compute"))

    def pseudo(texts: list[str], problems: list, group_size: int) -> list[bool | None]:
        """Each solution's agreement with its group's majority answer (None: the group has no majority)."""
        return pseudo_labels([task.extract_answer(t) for t in texts], group_size, cfg.consistency.min_share)

    def truth_of(texts: list[str], problems: list) -> list[bool]:
        """Ground-truth correctness, for the metrics alone."""
        return dist.map_shards(lambda tp: task.grade(tp[0], truth[tp[1].question]) >= 1, list(zip(texts, problems)))

    ver_rl = VerifierRL(cfg.seed, g, v, tg, cfg.train, cfg.rollout, pool, (model, tokenizer), roles["verifier"], compute,
                        labels=pseudo, truth=truth_of, per_prompt=g.group_size, ema=session.state.get("class_ema"),
                        step_count=session.state.get("ver_step", 0))
    n_prompts = cfg.train.batch_size // g.group_size
    heldout = injected_heldout(task, cfg.eval.splits[0], tg.eval_n)  # eval/verifier/* metrics on it:
    eval_verifier = partial(eval_verifier_during, verifier, vtok, task, heldout, v, cfg.eval.batch_size, cfg.train.bf16)
    safeguard = Safeguard(cfg.safeguard, cfg.train, cfg.seed, g.max_new_tokens, [p.question for p in pool], (model, tokenizer),
                          ref_model, verifier_judge(v, cfg.train, cfg.seed, (verifier, vtok), compute), compute,
                          session.state.get("safeguard"))

    # ------------------------------------------------------------------ warm-up (step 0: RL on pseudo-labels, if any)
    if not warmed:
        warm_up(session, roles, task, pool, ver_rl, eval_verifier)
    sampler = Sampler(cfg.rollout, cfg.model, cfg.init, cfg.seed, model, tokenizer, session.run_dir)
    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- generator rollout
        problems, ro, texts, generated = sampler.batch(model, tokenizer, pool, n_prompts, g, step, compute, timer,
                                                       seed=cfg.seed, bf16=cfg.train.bf16)  # [B*G], groups contiguous

        # -------------------------------------------------------------- verification of every sample
        vro, parsed, distinct = verify_samples(verifier, vtok, [p.question for p in problems], texts, v,
                                               seed=derive_seed(cfg.seed, "verify", step), bf16=cfg.train.bf16)
        timer.lap("verify", compute.add_rollout("ver", vro, generated=False))

        # -------------------------------------------------------------- pseudo-labels, rewards and advantages
        labels = pseudo(texts, problems, g.group_size)                                     # [B*G]
        rewards = consistency_rewards(labels, [x.final for x in parsed], cfg.consistency.w_verdict)  # [B*G]
        outcome_adv = group_advantages(rewards, g.group_size, g.scale_rewards)              # [B*G]
        complete = complete_solutions(task, problems, texts)  # blinded: no reference steps, so "states an answer"
        s_rewards, process_adv = process_term(tg, tokenizer, task, ro, texts, parsed, rewards, complete, g.group_size)
        alpha = alpha_at(step, cfg.train.steps, tg.alpha, tg.alpha_schedule)
        advantages = mix_advantages(outcome_adv, process_adv, alpha)                      # [B*G, T]
        timer.lap("reward")

        # -------------------------------------------------------------- generator update
        st = generator_update(cfg.grpo, cfg.train, model, opt, sched, ro, advantages, sampler=sampler,
                              ref_model=ref_model if g.beta > 0 else None, lr_scale=safeguard.step_scale(step, timer))
        trained = st["tokens_trained"] + st["prompt_tokens_trained"]
        compute.add("gen", trained=trained)
        timer.lap("update", trained)

        # -------------------------------------------------------------- verifier steps: Nv after every Ng generator steps
        ver_metrics: list[dict] = []
        for _ in range(tg.ver_steps if not frozen and step % tg.gen_steps == 0 else 0):
            batch = ver_rl.sample()                    # fresh solutions, each labelled by its group's majority answer
            if not batch.solutions:                    # no group had a majority: nothing to train on
                ver_metrics.append({"ver/labelled": 0.0})
                continue
            vro, vparsed = ver_rl.verify(batch)                   # Gv sampled verifications of each: its groups
            vrewards, vadv = ver_rl.advantages(batch, vparsed)    # 1[verdict == pseudo-label] + w_format format, by class
            vst = ver_rl.update(vro, vadv)                        # GRPO's update of the verifier
            ver_metrics.append(ver_rl.metrics(batch, vro, vparsed, vrewards, vst))
        if ver_metrics:
            timer.lap("ver_update")

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {
            **reward_metrics("gen", rewards, g.group_size),
            **label_free_monitors(labels, parsed, truth_of(texts, problems), [task.extract_answer(t) for t in texts],
                                  g.group_size, getattr(task, "answers_equal", None)),
            **rollout_metrics("gen", ro),
            "gen/lr": sched.get_last_lr()[0], "gen/alpha": alpha,
            "gen/process_usable": sum(r is not None for r in s_rewards) / len(s_rewards),
            "gen/adv_process_abs": masked_mean(process_adv.abs(), ro.completion_mask).item(),
            **{f"gen/{k}": x for k, x in st.items() if "tokens" not in k},
            "cotrain/format": sum(x.format for x in parsed) / len(parsed), "cotrain/distinct_verified": distinct,
            "tokens/gen_generated": generated, "tokens/gen_trained": st["tokens_trained"],
            **mean_metrics(ver_metrics), **safeguard.metrics(), **compute.metrics(),
        }
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            metrics.update(eval_verifier())
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"reward": metrics["gen/reward"], "agree": metrics["gt/agree"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens, **ver_rl.state(), **safeguard.state()})

    # ------------------------------------------------------------------ final evaluation
    results = final_verifier_results(session, task, (model, tokenizer), (verifier, vtok), heldout, tg.eval_n, trained=not frozen)
    results["compute"] = compute.summary()
    return finish(session, model, tokenizer, task, cfg.train.steps, other_models={"verifier": (verifier, vtok)},
                  other_results=results)



def label_free_monitors(labels: list[bool | None], parsed: list, correct: list[bool], answers: list[str | None],
                        group_size: int, equal=None) -> dict:
    """The co-training monitors against ground truth, under gt/ and gap/ (`correct` trains no one), and
    how the pseudo-labels cover the samples (cotrain/labelled), match the truth (gt/pseudo_label_acc)
    and agree with the verifier (cotrain/agree_pseudo)."""
    approved = [x.final for x in parsed]
    names = {"gen/acc": "gt/gen_acc", "cotrain/agree": "gt/agree", "cotrain/agree_balanced": "gt/agree_balanced",
             "cotrain/auroc": "gt/auroc", "cotrain/hack_gap": "gt/hack_gap"}
    labelled = [(lab, c) for lab, c in zip(labels, correct) if lab is not None]
    agree_pseudo = verdict_metrics([a for a, lab in zip(approved, labels) if lab is not None],
                                   [lab for lab in labels if lab is not None])["accuracy"] if labelled else 0.0
    return {**{names.get(k, k): x for k, x in cotrain_monitors(parsed, correct, answers, group_size, equal).items()},
            "gt/pseudo_label_acc": sum(a == b for a, b in labelled) / max(len(labelled), 1),
            "cotrain/labelled": len(labelled) / len(labels), "cotrain/agree_pseudo": agree_pseudo}
