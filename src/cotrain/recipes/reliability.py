"""Reliability-guided self-play: questions rewarded where the judge is reliable, no labels.

No ground truth on the training path: the proposer writes questions, the solver answers, the judge
scores; seed questions come from the train split through `tasks.base.blind` (answers hidden).
Ground truth is read only by the metrics under `gt/` and by evaluation (`eval/`). The roles' models
are set up as in triad (one shared model or three; the judge is the verifier role).

Algorithm (formulas in docs/design.md, "Label-free recipes"), each step:
  proposer  as in triad; the valid proposals and buffer questions make B = batch_size / C questions.
  solver    C candidates per question from sampling regimes: strong (`n_strong` at
            `strong_temperature`, and `n_best_of` best-of-N by self-consistency) and weak (`n_weak` at
            `weak_temperature`, and `n_old` from the solver's start checkpoint).
  judge     `judge_passes` pointwise passes per candidate: scores [C, P]; R_cons = 1 - mean Var over
            passes, R_sep = E[J(strong)] - E[J(weak)], R_stab = agreement of the pairwise
            preferences across passes: with `reliability.pairwise`, `judge_passes` pairwise judgments
            of each candidate pair (the judge shown both, stating its preference; its warm-up,
            `verifier.warmup_pair_frac`, reads the ground truth as the pointwise warm-up does), else
            read from each pass's pointwise scores.
  proposer  reward = weighted sum of the signals of its question (`reliability.weights`);
            `invalid_reward` / `malformed_reward` for questions outside the limits / unparsable.
  solver    trains only on questions whose signals all pass `reliability.thresholds` (all
            questions with `reliability.filter: false`), by `solver_loss`: DPO on the (best, worst)
            judged candidates with the start checkpoint as reference, policy gradient on the judge's
            per-question normalised scores, or a ranking loss on length-normalised log-probs.
            The judge is not trained.
  update    one optimizer step per model on the sum of its roles' losses.

Deviations, and why:
  - By default pairwise preferences are read from each pass's pointwise scores (pass k prefers a_i
    over a_j when s_i > s_j); `reliability.pairwise: true` asks the judge with a pairwise prompt, at
    the cost of one judgment of two solutions per pair and pass.
  - Best-of-N picks by self-consistency (a sample with the majority answer of N), not by the
    judge's score: choosing by the judge would make the separation signal circular.
  - The judge scores by the verifier's verdict, as in triad.

Metrics: `prop/*` as in triad, `gen/*` (the solver), `judge/*`, `rel/cons|sep|stab` (over the
proposed questions; with pairwise judgments also `rel/stab_pointwise`, the pointwise reading beside it,
`judge/pair_stated` and `gt/pair_agree`), `rel/pass_share`, and the ground-truth monitors `gt/strong_acc`, `gt/weak_acc`,
`gt/judge_agree`, `gt/proposed_solver_acc`, `gt/proposed_solvable`, `gap/judge` and `gap/majority` (over each question's C
candidates).

Safeguard (`safeguard.enabled`): triad's probe of the judge (train/safeguard.py) scales the solver's learning
rate down, or to zero, until the next probe wherever its label-free signals distrust the judge (`safe/*`).

Run:  cotrain run configs/reliability_smoke.yaml --out runs/reliability
"""
from __future__ import annotations

import torch

from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.judge_reliability import passes_thresholds, reliability_reward, reliability_signals
from cotrain.rl.majority import majority_vote
from cotrain.rl.preference import dpo_loss, preference_pairs, ranking_loss
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.selfplay import (
    gt_correct,
    judge,
    judge_agreement,
    judge_gaps,
    judge_preferences,
    mean,
    open_selfplay,
    preference_metrics,
    proposer_backward,
    proposer_metrics,
    step_models,
    zero_all,
)
from cotrain.train.setup import build_task, derive_seed
from cotrain.train.update import sequence_logprobs


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    sp, rel = cfg.selfplay, cfg.reliability
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    # the solver's start: the weak regime's older checkpoint and DPO's reference
    run = open_selfplay(cfg.selfplay, cfg.verifier, cfg.safeguard, cfg.model, cfg.init, cfg.seed, cfg.grpo.max_new_tokens,
                        cfg.run_settings(), cfg.to_dict(), run_dir, resume, task, "reliability",
                        older_wanted=bool(rel.n_old or rel.solver_loss == "dpo"))
    m, session, compute, buffer, safeguard = run.m, run.session, run.compute, run.buffer, run.safeguard
    older, at, truth_of = run.older, run.at, run.truth_of
    n_questions = max(1, cfg.train.batch_size // (rel.n_strong + rel.n_weak + rel.n_old + rel.n_best_of))  # B = batch / C
    (solver, tok), (proposer, _) = m.solver, m.proposer

    eval_at_start(session, solver, tok, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        lr_scale = safeguard.step_scale(step, timer)  # < 1 where label-free signals distrust the judge
        # -------------------------------------------------------------- proposer
        props, questions = run.questions(sp, task, n_questions, step, timer)

        # -------------------------------------------------------------- solver: C candidates per question
        texts, strong = _candidates(cfg, task, solver, tok, older, questions, compute, step, timer)  # [B][C], [C]
        C, P = len(strong), sp.judge_passes

        # -------------------------------------------------------------- judge: every candidate, P passes
        asked = [q for q in questions for _ in range(C)]
        answers = [t for row in texts for t in row]
        judged = judge(sp, cfg.verifier, m.judge, asked, answers, compute, step, timer, **at)
        parsed, scores = judged.parsed, judged.scores.view(len(questions), C, P)               # [B, C, P]

        # -------------------------------------------------------------- reliability signals and rewards
        strong_t = torch.tensor(strong)
        prefs, pairs = judge_preferences(P, rel.pairs_per_question, cfg.verifier, m.judge, questions, texts, compute, step,
                                         timer, **at) if rel.pairwise else (None, None)
        signals = [reliability_signals(scores[i], strong_t, prefs[i] if prefs else None) for i in range(len(questions))]
        passed = [passes_thresholds(s, rel.thresholds) for s in signals]
        per_question = {}
        for q, s in zip(questions, signals):
            per_question.setdefault(q, s)
        trained = [i for i in range(len(questions)) if passed[i] or not rel.filter]
        prop_rewards = torch.tensor([
            reliability_reward(per_question[q], rel.weights) if valid
            else rel.invalid_reward if parsable else rel.malformed_reward
            for q, (parsable, valid) in zip(props.questions, props.checks)])                   # [P]
        buffer.extend(props.fresh)  # quality is validity here: every valid question passes the quality filter
        del buffer[:-sp.buffer_size]
        timer.lap("reward")

        # -------------------------------------------------------------- one update per model
        trained_before = sum(t["trained"] for t in compute.tokens.values())
        zero_all(m)
        prop_st = proposer_backward(cfg.selfplay, cfg.grpo, cfg.train, m.proposer, props, prop_rewards, compute)
        loss, n_pairs, tokens = _solver_loss(cfg, solver, tok, older, questions, texts, scores, trained)
        if loss is not None:
            loss.backward()
        compute.add("gen", trained=tokens)
        grad_norms = step_models(cfg.train, m, lr_scale)
        timer.lap("update", sum(t["trained"] for t in compute.tokens.values()) - trained_before)

        # -------------------------------------------------------------- log / eval / checkpoint
        correct = gt_correct(task, truth_of, asked, answers)  # ground truth: metrics only
        extracted = [task.extract_answer(a) for a in answers]
        by_regime = _by_regime(correct, strong)
        fresh = signals[:len(props.fresh)]
        metrics = {
            **proposer_metrics(task, props, prop_rewards, prop_st, grad_norms[id(proposer)]),
            "gen/grad_norm": grad_norms[id(solver)],
            "gen/loss": 0.0 if loss is None else loss.item(), "gen/pairs": float(n_pairs),
            "gen/judge_score": scores.mean().item(),
            "gen/format": mean([float(x is not None) for x in extracted]),
            "judge/approve_rate": mean([float(x.final is True) for x in parsed]),
            "judge/score_var": scores.var(dim=2, unbiased=False).mean().item(),
            "judge/distinct": judged.distinct, "judge/drawn": judged.drawn,
            **{f"rel/{k}": mean([s[k] for s in fresh]) for k in ("cons", "sep", "stab") if fresh},
            **({"rel/stab_pointwise": mean([reliability_signals(scores[i], strong_t)["stab"] for i in range(len(fresh))]),
                **preference_metrics(prefs, pairs, correct, C)} if prefs else {}),
            "rel/pass_share": mean([float(p) for p in passed[:len(props.fresh)]]) if props.fresh else 0.0,
            "rel/pass_share_all": mean([float(p) for p in passed]),
            "rel/trained_questions": float(len(trained)),
            "gt/strong_acc": mean(by_regime["strong"]),
            "gt/weak_acc": mean(by_regime["weak"]),
            "gt/judge_agree": judge_agreement(parsed, P, correct),
            "gt/proposed_solver_acc": mean([float(c) for c in correct[:C * len(props.fresh)] if c is not None]),
            **judge_gaps(extracted, correct, scores.mean(dim=2).reshape(-1).tolist(), C,
                         getattr(task, "answers_equal", None)),
            "buffer/size": len(buffer),
            **safeguard.metrics(),
            **compute.metrics(),
        }
        run.end_step(step, metrics, timer, task, cfg.eval.every)   # evaluation when due, the row, the checkpoint

    return run.finish(task, cfg.train.steps)


# ---------------------------------------------------------------------- candidates from the sampling regimes


def _by_regime(correct: list[bool | None], strong: list[bool]) -> dict[str, list[float]]:
    """The ground-truth correctness (metrics only) of the candidates of known truth, by sampling regime;
    `correct` holds each question's C candidates in turn, `strong` says which of the C are strong."""
    by_regime = {"strong": [], "weak": []}
    for k, c in enumerate(correct):
        if c is not None:
            by_regime["strong" if strong[k % len(strong)] else "weak"].append(float(c))
    return by_regime


def _candidates(cfg: RunConfig, task, solver, tok, older, questions: list[str], compute: Compute, step: int,
                timer: StepTimer) -> tuple[list[list[str]], list[bool]]:
    """Each question's C candidates ([B][C] texts) and which regimes are strong ([C], the same regimes
    for every question): strong and weak temperatures, the older checkpoint, best-of-N."""
    g, rel = cfg.grpo, cfg.reliability
    prompts = encode_generator_prompts(tok, questions)
    regimes = [(solver, rel.n_strong, rel.strong_temperature, True), (solver, rel.n_weak, rel.weak_temperature, False),
               (older, rel.n_old, 1.0, False)]
    texts: list[list[str]] = [[] for _ in questions]     # [B][C]
    strong: list[bool] = []                               # [C]
    for r, (model, n, temperature, is_strong) in enumerate(regimes):
        if not n:
            continue
        ro = generate(model, prompts, group_size=n, max_new_tokens=g.max_new_tokens, eos_id=tok.eos_token_id,
                      pad_id=tok.pad_token_id, temperature=temperature, seed=derive_seed(cfg.seed, "candidates", r, step),
                      bf16=cfg.train.bf16)
        sampled = compute.add_rollout("gen", ro, generated=False)  # forward passes alone: not counted as generated
        decoded = decode_completions(tok, ro.completion_ids, ro.completion_mask)
        timer.lap("gen", sampled)
        for i in range(len(questions)):
            texts[i] += decoded[i * n:(i + 1) * n]
        strong += [is_strong] * n
    if rel.n_best_of:  # best-of-N by self-consistency: per block of N samples, one with the majority answer
        N = rel.best_of
        ro = generate(solver, prompts, group_size=rel.n_best_of * N, max_new_tokens=g.max_new_tokens,
                      eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.0,
                      seed=derive_seed(cfg.seed, "best-of", step), bf16=cfg.train.bf16)
        sampled = compute.add_rollout("gen", ro, generated=False)
        decoded = decode_completions(tok, ro.completion_ids, ro.completion_mask)
        timer.lap("gen", sampled)
        answers = [task.extract_answer(t) for t in decoded]
        majorities, _ = majority_vote(answers, N)
        for b, majority in enumerate(majorities):
            block = range(b * N, (b + 1) * N)
            pick = next((k for k in block if majority is not None and answers[k] == majority), block[0])
            texts[b // rel.n_best_of].append(decoded[pick])
        strong += [True] * rel.n_best_of
    return texts, strong


# ---------------------------------------------------------------------- the solver's loss


def _solver_loss(cfg: RunConfig, solver, tok, older, questions: list[str], texts: list[list[str]],
                 scores: torch.Tensor, trained: list[int]) -> tuple[torch.Tensor | None, int, int]:
    """The solver's loss on the candidates of the `trained` questions: (loss or None, pairs or
    candidates used, tokens trained). scores: [B, C, P] judge scores."""
    rel, bf16 = cfg.reliability, cfg.train.bf16
    mean_score = scores.mean(dim=2)                                                            # [B, C]
    if rel.solver_loss == "dpo":
        pairs = [(i, c, r) for i in trained for c, r in preference_pairs(mean_score[i].tolist(), rel.min_gap)]
        if not pairs:
            return None, 0, 0
        qs = [questions[i] for i, _, _ in pairs] * 2
        both = [texts[i][c] for i, c, _ in pairs] + [texts[i][r] for i, _, r in pairs]
        logp, n_tok = sequence_logprobs(solver, tok, qs, both, bf16=bf16)
        with torch.no_grad():
            ref, _ = sequence_logprobs(older, tok, qs, both, bf16=bf16)
        n = len(pairs)
        return dpo_loss(logp[:n], logp[n:], ref[:n], ref[n:], rel.dpo_beta), n, int(n_tok.sum())
    if not trained:
        return None, 0, 0
    qs = [questions[i] for i in trained for _ in texts[i]]
    flat = [t for i in trained for t in texts[i]]
    logp, n_tok = sequence_logprobs(solver, tok, qs, flat, bf16=bf16)
    per_token = (logp / n_tok.clamp(min=1)).view(len(trained), -1)                            # [b, C]
    target = mean_score[trained].to(per_token.device)                                          # [b, C]
    if rel.solver_loss == "rank":
        loss = torch.stack([ranking_loss(per_token[k], target[k]) for k in range(len(trained))]).mean()
    else:  # policy gradient on the judge's scores, normalised within each question
        adv = (target - target.mean(dim=1, keepdim=True)) / (target.std(dim=1, unbiased=False, keepdim=True) + 1e-4)
        loss = -(adv * per_token).mean()
    return loss, len(flat), int(n_tok.sum())


def check_rollout(cfg: RunConfig) -> dict:
    """`cotrain check`'s first rollout: the solver's strong regime, the first that samples a step."""
    r, t = cfg.reliability, cfg.train
    candidates = r.n_strong + r.n_weak + r.n_old + r.n_best_of
    return {"prompts_per_step": max(1, t.batch_size // candidates), "unit": f"questions x {candidates} candidates",
            "group_size": r.n_strong, "greedy": False, "temperature": r.strong_temperature,
            "max_new_tokens": cfg.grpo.max_new_tokens, "what": f"strong regime, temperature {r.strong_temperature:g}"}
