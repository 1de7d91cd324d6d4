"""Multi-Agent Evolve: a proposer, a solver and a judge improve one another without labels.

No ground truth on the training path: the proposer writes questions, the solver answers, the judge
scores; seed questions come from the train split through `tasks.base.blind` (answers hidden).
Ground truth is read only by the metrics under `gt/` and by evaluation (`eval/`).

Roles. One model plays all three roles through their prompts (`selfplay.shared_model`, the default:
one joint update) or three models do (the judge starts from `verifier.init`, the proposer from
`selfplay.proposer_init`). The judge is the verifier role (roles/verifier.py): each judging pass is
one sampled verification, scored 1 (approve), 0 (reject) or 0.5 (unparsable).

Algorithm (Zhang et al. 2025, "Multi-Agent Evolve"; formulas in docs/design.md, "Label-free recipes"), each step:
  proposer  `selfplay.proposals` questions from one prompt (its group); a question is parsable when
            it reads as the task's notation and valid when it is also within the size limits
            (`selfplay.max_ops`, `max_operand`).
  solver    G answers to each distinct valid proposal and to questions drawn from the buffer (B*G
            answers in all), reward 0.5 * J + 0.5 * F (J: the judge's mean score over
            `selfplay.judge_passes` passes, F: a final answer line is present).
  proposer  reward (Q + (1 - S) + F) / 3, with quality Q = 1 for a valid question (else 0, which
            drops the difficulty term), S the solver's mean judged score on it, F = 1 when parsable;
            or the learnability reward 1 - S (0 at S in {0, 1}, -0.5 invalid, -1 malformed,
            `selfplay.proposer_reward: learnability`). Valid questions enter the buffer (FIFO).
  judge     reward = the format score of each pass (`selfplay.train_judge`).
  With `grpo.beta` > 0 the solver's loss also holds the k3 KL to its start checkpoint.
  update    advantages normalised within each role's batch (the solver's optionally within each
            question's group, `selfplay.solver_norm: group`), then one optimizer step per model on the
            sum of its roles' GRPO losses.

Deviations, and why:
  - The judge scores by the verifier's verdict rather than MAE's 1-10 scale: the tiny world's
    verifier writes verdicts; averaged over passes the score is still graded.
  - MAE's judge also rates question quality; here quality is the task's validity check, which the
    tiny world can compute exactly.

Metrics: `prop/*` (reward, valid, parsable, distinct, n_ops, max_operand: the size of the proposed
questions), `gen/*` (the solver), `judge/*`, and the ground-truth monitors `gt/solver_acc`,
`gt/judge_agree`, `gt/proposed_solver_acc`, `gt/proposed_solvable` (the share of the valid proposals
with a known answer: below 1 only with `selfplay.check_solvable: false` on countdown), `gap/judge` (accuracy of the answers the judge approves
minus accuracy of all) and `gap/majority` (maj@G minus one answer's accuracy).

Safeguard (`safeguard.enabled`, train/safeguard.py): every `safeguard.every` steps a probe has the
judge score the solver's strong and weak answers to fixed blinded questions and measures the KL to the
start and the entropy; where these label-free signals say the judge cannot be trusted, the solver's
learning rate is scaled down or to zero until the next probe (`safe/*` metrics, one stderr line per change).

Run:  cotrain run configs/triad_smoke.yaml --out runs/triad
"""
from __future__ import annotations

import torch

from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.losses import group_advantages
from cotrain.rl.mae import learnability_reward, mae_proposer_reward, mae_solver_reward, role_advantages
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_metrics
from cotrain.train.selfplay import (
    gt_correct,
    judge,
    judge_agreement,
    judge_gaps,
    mean,
    open_selfplay,
    proposer_backward,
    proposer_metrics,
    step_models,
    zero_all,
)
from cotrain.train.setup import build_task, derive_seed
from cotrain.train.update import policy_backward


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    sp, g = cfg.selfplay, cfg.grpo
    G = g.group_size
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    run = open_selfplay(cfg.selfplay, cfg.verifier, cfg.safeguard, cfg.model, cfg.init, cfg.seed, g.max_new_tokens,
                        cfg.run_settings(), cfg.to_dict(), run_dir, resume, task, "triad",
                        older_wanted=g.beta > 0)  # older: the KL's reference
    m, session, compute, buffer, safeguard = run.m, run.session, run.compute, run.buffer, run.safeguard
    older, at, truth_of = run.older, run.at, run.truth_of
    n_questions = max(1, cfg.train.batch_size // G)
    (solver, tok), (proposer, _) = m.solver, m.proposer

    eval_at_start(session, solver, tok, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        lr_scale = safeguard.step_scale(step, timer)  # < 1 where label-free signals distrust the judge
        # -------------------------------------------------------------- proposer
        props, questions = run.questions(sp, task, n_questions, step, timer)

        # -------------------------------------------------------------- solver: G answers to each question
        sro = generate(solver, encode_generator_prompts(tok, questions), group_size=G, max_new_tokens=g.max_new_tokens,
                       eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=g.temperature, top_p=g.top_p,
                       seed=derive_seed(cfg.seed, "solve", step), bf16=cfg.train.bf16)
        generated = compute.add_rollout("gen", sro)
        answers = decode_completions(tok, sro.completion_ids, sro.completion_mask)
        timer.lap("gen", generated)

        # -------------------------------------------------------------- judge: every answer, P passes
        asked = [q for q in questions for _ in range(G)]
        judged = judge(sp, cfg.verifier, m.judge, asked, answers, compute, step, timer, **at)
        parsed, scores = judged.parsed, judged.scores                                         # [N*P], [N, P]

        # -------------------------------------------------------------- rewards
        J = scores.mean(dim=1)                                                                # [N]
        extracted = [task.extract_answer(a) for a in answers]
        fmt = [float(x is not None) for x in extracted]
        rewards = torch.tensor([mae_solver_reward(j, f) for j, f in zip(J.tolist(), fmt)])     # [N]
        judge_rewards = torch.tensor([x.format for x in judged.sampled])                       # [D*P]
        solver_score = {}                                                                     # S of each question
        for i, q in enumerate(questions):
            solver_score.setdefault(q, J[i * G:(i + 1) * G].mean().item())
        prop_rewards = torch.tensor([
            learnability_reward(parsable, valid, solver_score.get(q)) if sp.proposer_reward == "learnability"
            else mae_proposer_reward(float(valid), solver_score.get(q, 1.0), float(parsable), sp.min_quality)
            for q, (parsable, valid) in zip(props.questions, props.checks)])                   # [P]
        buffer.extend(props.fresh)  # quality is validity here: every valid question passes the quality filter
        del buffer[:-sp.buffer_size]
        timer.lap("reward")

        # -------------------------------------------------------------- one update per model
        trained_before = sum(t["trained"] for t in compute.tokens.values())
        zero_all(m)
        prop_st = proposer_backward(cfg.selfplay, cfg.grpo, cfg.train, m.proposer, props, prop_rewards, compute)
        stats = _solver_and_judge_backward(cfg, m, sro, rewards, judged.rollout, judge_rewards, older, compute)
        grad_norms = step_models(cfg.train, m, lr_scale)
        timer.lap("update", sum(t["trained"] for t in compute.tokens.values()) - trained_before)

        # -------------------------------------------------------------- log / eval / checkpoint
        correct = gt_correct(task, truth_of, asked, answers)  # ground truth: metrics only
        metrics = {
            **proposer_metrics(task, props, prop_rewards, prop_st, grad_norms[id(proposer)]),
            "gen/grad_norm": grad_norms[id(solver)],
            **{f"{role}/{k}": x for role, st in stats.items() for k, x in st.items() if "tokens" not in k},
            "gen/reward": rewards.mean().item(), "gen/judge_score": J.mean().item(), "gen/format": mean(fmt),
            **rollout_metrics("gen", sro),
            "judge/reward": judge_rewards.mean().item(),
            "judge/approve_rate": mean([float(x.final is True) for x in parsed]),
            "judge/score_var": scores.var(dim=1, unbiased=False).mean().item(),
            "judge/distinct": judged.distinct,
            "judge/drawn": judged.drawn,
            "gt/solver_acc": mean([float(c) for c in correct if c is not None]),
            "gt/judge_agree": judge_agreement(parsed, sp.judge_passes, correct),
            "gt/proposed_solver_acc": mean([float(c) for c in correct[:G * len(props.fresh)] if c is not None]),
            **judge_gaps(extracted, correct, J.tolist(), G, getattr(task, "answers_equal", None)),
            "buffer/size": len(buffer),
            **safeguard.metrics(),
            **compute.metrics(),
        }
        run.end_step(step, metrics, timer, task, cfg.eval.every)   # evaluation when due, the row, the checkpoint

    return run.finish(task, cfg.train.steps)


def _solver_and_judge_backward(cfg: RunConfig, m, sro, rewards: torch.Tensor, jro, judge_rewards: torch.Tensor,
                               older, compute: Compute) -> dict:
    """Add the solver's GRPO loss (with the KL to `older` when grpo.beta > 0) and, with
    `selfplay.train_judge`, the judge's to their models' gradients; each role's update statistics."""
    sp, g = cfg.selfplay, cfg.grpo
    mask = sro.completion_mask.clone()
    if g.mask_truncated:
        mask[sro.truncated] = 0
    adv = (role_advantages(rewards, ["gen"] * len(rewards)) if sp.solver_norm == "role"
           else group_advantages(rewards, g.group_size, "group"))
    st = {"gen": policy_backward(m.solver[0], sro, adv, mask, g, bf16=cfg.train.bf16, ref_model=older,
                                 micro_batch_size=cfg.train.micro_batch_size)}
    compute.add("gen", trained=st["gen"]["tokens_trained"] + st["gen"]["prompt_tokens_trained"])
    if sp.train_judge:
        # Stopped early, an answer has fewer passes than judge_passes; the role baseline needs no groups.
        passes = 1 if sp.judge_early_stop else sp.judge_passes
        gj = g.model_copy(update={"group_size": passes, "max_new_tokens": cfg.verifier.max_new_tokens,
                                  "temperature": cfg.verifier.temperature, "beta": 0.0})
        st["judge"] = policy_backward(m.judge[0], jro, role_advantages(judge_rewards, ["judge"] * len(judge_rewards)),
                                      jro.completion_mask, gj, bf16=cfg.train.bf16,
                                      micro_batch_size=cfg.train.micro_batch_size)
        compute.add("judge", trained=st["judge"]["tokens_trained"] + st["judge"]["prompt_tokens_trained"])
    return st
