"""PRIME: a generator and an implicit process reward model learned online from outcome labels alone.

Cui et al. 2025, "Process Reinforcement through Implicit Rewards" (arXiv:2502.01456); code PRIME-RL/PRIME
and verl's `recipe/prime`. Formulas in rl/prime.py and docs/design.md ("PRIME").

Models: the generator; the implicit PRM π_prm, a second causal LM started from the generator's start;
its frozen reference π_ref, a copy of that start. Each step:
  rollout   with `prime.filter`, `prime.oversample` × B prompts, G samples each, graded (outcome 1 / 0);
            a prompt passes when prime.lower ≤ its samples' accuracy ≤ prime.upper, the batch keeps B
            prompts, passing ones first (failing ones fill the rest when too few pass). The samples
            left out count in the FLOPs.
  PRM       q_t = log π_prm(y_t) − log π_ref(y_t) on the kept samples; its loss is the binary
            cross-entropy of σ(β Σ_t q_t) against the outcomes, one optimizer step a step.
            `prime.update`: before (it steps, then scores), after (its training pass's scores, then
            the step) or none (frozen at its start: the ablation).
  reward    r_t = β q_t, divided by the batch's largest |return| (`prime.norm: batch_norm`).
  advantage prm_coef · RLOO(r) + gt_coef · RLOO(outcome on the last token), summed from each token to
            the end, whitened over the batch's tokens (per token: [N, T]).
  update    the generator's PPO-clip step on these advantages (grpo settings; beta 0: no KL).

Deviations, and why:
  - Every valid token gets β q_t; verl's recipe gives the last valid token none (an artefact of its
    indexing, not in the paper).
  - One PRM optimizer step per step on the whole batch (verl: mini-batches of the actor's size).
  - verl's filter also drops prompts whose longest sample reached the length limit; here only accuracy
    filters (truncated samples are graded wrong, as everywhere in the lab).

At the end, eval.json's `prm` entry scores the PRM like a verifier on `eval.n_sampled` × `eval.k` samples
of the final generator (`evaluate_prm`, its metrics in eval/prm_metrics.py): AUROC of Σ_t q_t against
outcomes, ranking accuracy, and against the task's step labels the AUROC of each step's summed q and how
often its lowest-scored step is a wrong sample's first false one.

Metrics: `gen/*` as in grpo, `prime/prm_loss`, `prime/prm_grad_norm`, `prime/ranking_acc` (how often the
PRM's summed rewards order a group's samples as their outcomes do; `_before` its training pass's),
`prime/process_return` (mean Σ_t r_t), `prime/passed_share` (oversampled prompts within the bounds),
`prime/kept_failing` (prompts kept outside the bounds), `flops/prm`.

Run:  cotrain run configs/prime_smoke.yaml --out runs/prime
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import GrpoConfig, RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.eval.evaluate import EVAL_SEED
from cotrain.eval.prm_metrics import prm_metrics, step_scores
from cotrain.models.build import reference_model
from cotrain.models.generate import generate, select_rows
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.models.verify import step_ends
from cotrain.rl.prime import (
    accuracy_filter,
    implicit_process_rewards,
    normalise_process_rewards,
    prime_advantages,
    prm_loss,
    ranking_accuracy,
)
from cotrain.roles.verifier import split_steps
from cotrain.runs.policy import Policy
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import Task
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import Sampler, reward_metrics, rollout_metrics
from cotrain.train.setup import build_task, derive_seed, initial_model, make_optimizer, sample_batch, training_pool
from cotrain.train.update import generator_update, optimizer_step, rollout_logprobs, zero_grads

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("PRM ranking accuracy (prime)", "ranking accuracy", "ranking_acc", True),
    ("Prompts within the filter (prime)", "share of prompts drawn", "passed_share", True),
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, p = cfg.grpo, cfg.prime
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()
    prm_ref = reference_model(model)  # the generator's start (a copy, before a resume loads trained weights)
    prm, _ = initial_model(cfg.model, cfg.init if p.prm_init is None else p.prm_init, cfg.seed, cfg.train.fsdp)
    prm.train()
    pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    prm_opt, prm_sched = make_optimizer(prm, cfg.train.model_copy(update={"lr": p.lr}), cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched), "prm": Policy(prm, tokenizer, prm_opt, prm_sched)}
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="prime")
    sampler = Sampler(cfg.rollout, cfg.model, cfg.init, cfg.seed, model, tokenizer, session.run_dir)
    compute = Compute({"gen": model.num_parameters(), "prm": prm.num_parameters()}, session.state.get("compute"))
    n_prompts = cfg.train.batch_size // g.group_size
    n_drawn = max(n_prompts, int(n_prompts * p.oversample)) if p.filter else n_prompts

    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- rollout, graded, filtered
        drawn = sample_batch(pool, n_drawn, cfg.seed, step)                             # [B']
        ro, texts = sampler.groups(model, tokenizer, [q.question for q in drawn], g,
                                   seed=derive_seed(cfg.seed, "rollout", step), bf16=cfg.train.bf16)
        generated = compute.add_rollout("gen", ro)  # the samples filtered out count too
        problems = [q for q in drawn for _ in range(g.group_size)]
        rewards = torch.tensor(dist.map_shards(lambda tp: task.grade(*tp), list(zip(texts, problems))))  # [B'*G]
        kept, passed = accuracy_filter(rewards.view(-1, g.group_size).mean(dim=1).tolist(),
                                       p.lower if p.filter else 0.0, p.upper if p.filter else 1.0, n_prompts)
        rows = [i * g.group_size + j for i in kept for j in range(g.group_size)]
        ro, rewards, texts = select_rows(ro, rows), rewards[rows], [texts[r] for r in rows]          # [B*G]
        timer.lap("gen", generated)

        # -------------------------------------------------------------- the implicit PRM: update and score
        with torch.no_grad():
            ref_logp = rollout_logprobs(prm_ref, ro, g, cfg.train.bf16)
        # the rollout stays on the host; the log-ratios, the outcomes and the mask meet on the models' device
        mask, rewards = ro.completion_mask.to(ref_logp.device), rewards.to(ref_logp.device)
        prm_stats, scores_before = _prm_step(cfg, prm, prm_opt, prm_sched, ro, ref_logp, mask, rewards) \
            if p.update != "none" else ({}, None)
        if p.update == "after":
            q = scores_before
        else:
            with torch.no_grad():
                q, _ = implicit_process_rewards(rollout_logprobs(prm, ro, g, cfg.train.bf16), ref_logp, mask, p.beta)
        tokens = int(mask.sum() + ro.prompt_mask.sum())
        # the reference's pass, a scoring pass (but where the training pass scores), the training pass
        compute.add("prm", forward=tokens * (1 + (p.update != "after")), trained=tokens * (p.update != "none"))
        timer.lap("prm")

        # -------------------------------------------------------------- advantages and update
        r = p.beta * q
        if p.norm == "batch_norm":
            r = normalise_process_rewards(r, mask)
        advantages, _ = prime_advantages(r, rewards, mask, g.group_size, p.prm_coef, p.gt_coef)   # [B*G, T]
        stats = generator_update(cfg.grpo, cfg.train, model, opt, sched, ro, advantages, sampler=sampler)
        trained = stats["tokens_trained"] + stats["prompt_tokens_trained"]
        compute.add("gen", trained=trained)
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        summed = (r * mask).sum(dim=1)
        metrics = {
            **reward_metrics("gen", rewards, g.group_size),
            "gen/acc": (rewards >= 1).float().mean().item(),
            **rollout_metrics("gen", ro),
            "gen/lr": sched.get_last_lr()[0],
            **{f"gen/{k}": v for k, v in stats.items() if "tokens" not in k},
            **prm_stats,
            "prime/ranking_acc": ranking_accuracy(summed, rewards, g.group_size),
            **({"prime/ranking_acc_before": ranking_accuracy((scores_before * mask).sum(dim=1), rewards, g.group_size)}
               if scores_before is not None else {}),
            "prime/process_return": summed.mean().item(),
            "prime/passed_share": passed / n_drawn,
            "prime/kept_failing": float(max(0, n_prompts - passed)),
            **compute.metrics(),
        }
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"reward": metrics["gen/reward"], "prm": metrics["prime/ranking_acc"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    return finish(session, model, tokenizer, task, cfg.train.steps, other_models={"prm": (prm, tokenizer)},
                  other_results={"compute": compute.summary(), "prm": _prm_results(cfg, prm, prm_ref, model, tokenizer, task)})


def _prm_results(cfg: RunConfig, prm, ref, model, tokenizer, task) -> dict:
    """The final PRM scored like a verifier on the final generator's samples of the first eval split."""
    split = cfg.eval.splits[0]
    if split not in task.splits or not cfg.eval.n_sampled:
        return {}
    prm.eval()
    ekw = cfg.eval_settings()
    return {split: evaluate_prm(prm, ref, model, tokenizer, task, split, n=cfg.eval.n_sampled, k=cfg.eval.k,
                                temperature=cfg.eval.temperature, max_new_tokens=ekw["max_new_tokens"],
                                batch_size=ekw["batch_size"], bf16=cfg.train.bf16)}


@torch.no_grad()
def evaluate_prm(prm, ref, generator, tokenizer, task: Task, split: str, *, n: int, k: int, temperature: float,
                 max_new_tokens: int, batch_size: int = 256, bf16: bool = False) -> dict[str, float]:
    """`prm_metrics` of the PRM on `k` samples (temperature `temperature`) of each of `n` problems of
    `split` drawn from `generator`; {} when the split has no problems."""
    problems = task.problems(split, n, seed=EVAL_SEED)
    if not problems:
        return {}
    k = max(k, 1)
    g = GrpoConfig.model_construct(group_size=k)  # log-probs of k samples a prompt (k = 1 is fine here)
    scores, correct, steps, labels = [], [], [], []
    per_batch = max(1, batch_size // k)
    for i in range(0, len(problems), per_batch):
        chunk = problems[i:i + per_batch]
        ro = generate(generator, encode_generator_prompts(tokenizer, [p.question for p in chunk]), group_size=k,
                      max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                      temperature=temperature, seed=EVAL_SEED + i, bf16=bf16)
        texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        logp = rollout_logprobs(prm, ro, g, bf16)
        q = ((logp - rollout_logprobs(ref, ro, g, bf16)) * ro.completion_mask.to(logp.device)).tolist()
        ends = step_ends(tokenizer, ro.completion_ids, ro.completion_mask, texts)
        for j, (text, row, e) in enumerate(zip(texts, q, ends)):
            problem = chunk[j // k]
            scores.append(float(sum(row)))
            correct.append(task.grade(text, problem) >= 1)
            steps.append(step_scores(row, e))
            labels.append(list(task.step_labels(problem, [s for _, s in split_steps(text)]))
                          if hasattr(task, "step_labels") else None)
    return prm_metrics(scores, correct, k, steps, labels)


def _prm_step(cfg: RunConfig, prm, opt, sched, ro, ref_logp: torch.Tensor, mask: torch.Tensor,
              outcome: torch.Tensor) -> tuple[dict[str, float], torch.Tensor]:
    """The PRM's optimizer step on its cross-entropy against the outcomes; its stats and the log-ratios
    q [N, T] of its training pass (before the step), detached."""
    p = cfg.prime
    zero_grads(prm)
    q, _ = implicit_process_rewards(rollout_logprobs(prm, ro, cfg.grpo, cfg.train.bf16), ref_logp, mask, p.beta)
    loss = prm_loss(q, mask, outcome.float(), p.beta)
    loss.backward()
    grad_norm = optimizer_step(prm, opt, cfg.train.max_grad_norm)
    sched.step()
    return {"prime/prm_loss": loss.item(), "prime/prm_grad_norm": grad_norm}, q.detach()

