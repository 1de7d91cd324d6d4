"""Label-free proposer-solver-judge loops: the Multi-Agent Evolve triad (`recipe: triad`, experiment
3.3) and reliability-guided task generation (`recipe: reliability`, research/004).

No ground truth on the training path: the proposer writes questions, the solver answers, the judge
scores; seed questions come from the train split through `tasks.base.blind` (answers hidden).
Ground truth is read only by the metrics under `gt/` and by evaluation (`eval/`).

Roles. One model plays all three roles through their prompts (`selfplay.shared_model`, the default:
one joint update) or three models do (the judge starts from `verifier.init`, the proposer from
`selfplay.proposer_init`). The judge is the verifier role (roles/verifier.py): each judging pass is
one sampled verification, scored 1 (approve), 0 (reject) or 0.5 (unparsable).

triad (Zhang et al. 2025, "Multi-Agent Evolve"; formulas in DESIGN.md), each step:
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

reliability (research/004), each step:
  proposer  as in triad; the valid proposals and buffer questions make B = batch_size / C questions.
  solver    C candidates per question from sampling regimes: strong (`n_strong` at
            `strong_temperature`, and `n_best_of` best-of-N by self-consistency) and weak (`n_weak` at
            `weak_temperature`, and `n_old` from the solver's start checkpoint).
  judge     `judge_passes` pointwise passes per candidate: scores [C, P]; R_cons = 1 - mean Var over
            passes, R_sep = E[J(strong)] - E[J(weak)], R_stab = agreement of the pairwise
            preferences across passes.
  proposer  reward = weighted sum of the signals of its question (`reliability.weights`);
            `invalid_reward` / `malformed_reward` for questions outside the limits / unparsable.
  solver    trains only on questions whose signals all pass `reliability.thresholds` (all
            questions with `reliability.filter: false`), by `solver_loss`: DPO on the (best, worst)
            judged candidates with the start checkpoint as reference, policy gradient on the judge's
            per-question normalised scores, or a ranking loss on length-normalised log-probs.
            The judge is not trained.

Deviations, and why:
  - The judge scores by the verifier's verdict rather than MAE's 1-10 scale: the tiny world's
    verifier writes verdicts; averaged over passes the score is still graded.
  - MAE's judge also rates question quality; here quality is the task's validity check, which the
    tiny world can compute exactly.
  - Pairwise preferences in `reliability` are read from each pass's pointwise scores (pass k
    prefers a_i over a_j when s_i > s_j), not asked of the judge with a pairwise prompt.
  - Best-of-N picks by self-consistency (a sample with the majority answer of N), not by the
    judge's score: choosing by the judge would make the separation signal circular.

Metrics: `prop/*` (reward, valid, parsable, distinct, n_ops, max_operand: the size of the proposed
questions), `gen/*` (the solver), `judge/*`, `rel/cons|sep|stab` (over the proposed questions),
`rel/pass_share`, and the ground-truth monitors `gt/solver_acc`, `gt/judge_agree`,
`gt/proposed_solver_acc`, `gt/strong_acc`, `gt/weak_acc`.

Run:  cotrain run configs/triad_smoke.yaml --out runs/triad
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.models.build import load_model, load_weights, prepare_for_training, save_model
from cotrain.models.generate import generate
from cotrain.models.prompts import (
    decode_completions,
    encode_completion,
    encode_generator_prompts,
    encode_proposer_prompts,
    uses_chat,
)
from cotrain.models.verify import verify
from cotrain.recipes.policy import optimizer_step, policy_backward, sequence_logprobs, supervised_step, zero_grads
from cotrain.rl.losses import group_advantages, masked_mean
from cotrain.rl.selfplay import (
    dpo_loss,
    judge_score,
    learnability_reward,
    mae_proposer_reward,
    mae_solver_reward,
    majority_vote,
    passes_thresholds,
    preference_pairs,
    ranking_loss,
    reliability_reward,
    reliability_signals,
    role_advantages,
)
from cotrain.roles import proposer as proposer_role
from cotrain.runs.rundir import Progress, list_checkpoints, resolve_model_dir
from cotrain.runs.session import (
    Compute,
    StepTimer,
    build_task,
    derive_seed,
    device,
    eval_during_training,
    finish,
    initial_model,
    initial_verifier,
    make_optimizer,
    maybe_checkpoint,
    open_session,
    rollout_tokens,
    training_pool,
)
from cotrain.tasks.base import blind


def check_question(task, question: str | None, max_ops: int | None, max_operand: int | None) -> tuple[bool, bool]:
    """(parsable, valid) of a proposed question: the task's own check where it has one, else any
    non-empty question is both."""
    if question is None:
        return False, False
    if hasattr(task, "check_question"):
        return task.check_question(question, max_ops=max_ops, max_operand=max_operand)
    return True, True


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    sp, v, g, rel = cfg.selfplay, cfg.verifier, cfg.grpo, cfg.reliability
    reliability = cfg.recipe == "reliability"
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    solver, tok = initial_model(cfg)
    if sp.shared_model:
        proposer, ptok, judge, jtok = solver, tok, solver, tok
    else:
        if sp.proposer_init:
            proposer, ptok = load_model(resolve_model_dir(sp.proposer_init), dtype=cfg.model.dtype)
            proposer = prepare_for_training(proposer, cfg.model, device())
        else:
            proposer, ptok = initial_model(cfg)
        judge, jtok = initial_verifier(cfg)
    models = list({id(m): m for m in (solver, proposer, judge)}.values())
    for m in models:
        m.train()  # each on its model config's device: placed when built
    labelled, _ = training_pool(task, cfg, sp.seed_questions)
    seeds = [p.question for p in blind(labelled)]
    truth = {p.question: p for p in labelled}  # ground truth, for gt/* metrics only

    def truth_of(question: str):
        """The ground truth of a question, for the metrics alone (None when unknown)."""
        if question in truth:
            return truth[question]
        return task.problem_of(question) if hasattr(task, "problem_of") else None

    opt, sched = make_optimizer(solver, cfg.train, cfg.train.steps)
    roles = {"generator": (solver, tok, opt, sched)}
    optimizers = {id(solver): (opt, sched)}
    if not sp.shared_model:
        popt, psched = make_optimizer(proposer, cfg.train.model_copy(update={"lr": sp.proposer_lr or cfg.train.lr}),
                                      cfg.train.steps)
        jopt, jsched = make_optimizer(judge, cfg.train.model_copy(update={"lr": v.lr, "warmup_steps": 0}), cfg.train.steps)
        roles.update({"proposer": (proposer, ptok, popt, psched), "judge": (judge, jtok, jopt, jsched)})
        optimizers.update({id(proposer): (popt, psched), id(judge): (jopt, jsched)})
    older = None  # the solver's start: the weak regime's older checkpoint, DPO's and the KL's reference
    warmed = resume and bool(list_checkpoints(run_dir))
    # With one shared model, the proposer's warm-up changes the solver too: RL starts after it.
    start_dir = Path(run_dir) / "warmup" / "start"
    if (reliability and (rel.n_old or rel.solver_loss == "dpo")) or (not reliability and g.beta > 0):
        older, _ = initial_model(cfg)
        if warmed and start_dir.is_dir():
            load_weights(older, start_dir)  # the shared model after the proposer's warm-up
        older.eval().requires_grad_(False)
    session = open_session(cfg, run_dir, resume, roles, desc=cfg.recipe)
    state = session.state
    buffer: list[str] = list(state.get("buffer", seeds))
    compute = Compute({"prop": proposer.num_parameters(), "gen": solver.num_parameters(),
                       "judge": judge.num_parameters()}, state.get("compute"))
    chat = uses_chat(ptok)
    n_candidates = rel.n_strong + rel.n_weak + rel.n_old + rel.n_best_of
    n_questions = max(1, cfg.train.batch_size // (n_candidates if reliability else g.group_size))
    gp = g.model_copy(update={"group_size": sp.proposals, "max_new_tokens": sp.question_max_new_tokens,
                              "temperature": sp.proposer_temperature, "beta": 0.0})

    def save_state(step: int, force: bool = False) -> None:
        maybe_checkpoint(cfg, session, step, roles, force=force,
                         extra={"compute": compute.tokens, "buffer": buffer[-sp.buffer_size:]})

    # ------------------------------------------------------------------ proposer warm-up (step 0, no answers)
    if not warmed and sp.proposer_warmup_steps:
        metrics = warmup_proposer(cfg, proposer, ptok, seeds, compute)
        if sp.shared_model and older is not None:
            older.load_state_dict(solver.state_dict())
            dist.on_main(save_model, solver, tok, start_dir)
        metrics.update(compute.metrics())
        save_state(0, force=True)
        session.logger.log(0, metrics)

    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        rng = random.Random(derive_seed(cfg.seed, "questions", step))
        # -------------------------------------------------------------- proposer
        sample_seed = derive_seed(cfg.seed, "propose", step)
        pro = generate(proposer, encode_proposer_prompts(ptok, [rng.choice(seeds)]), group_size=sp.proposals,
                       max_new_tokens=sp.question_max_new_tokens, eos_id=ptok.eos_token_id, pad_id=ptok.pad_token_id,
                       temperature=sp.proposer_temperature, seed=sample_seed, bf16=cfg.train.bf16)
        compute.add("prop", forward=rollout_tokens(pro)[0], generated=rollout_tokens(pro)[1])
        timer.lap("propose", rollout_tokens(pro)[1])
        proposed = [proposer_role.parse(t, chat=chat) for t in decode_completions(ptok, pro.completion_ids,
                                                                                   pro.completion_mask)]
        checks = [check_question(task, q, sp.max_ops, sp.max_operand) for q in proposed]
        fresh = list(dict.fromkeys(q for q, (_, valid) in zip(proposed, checks) if valid))
        questions = fresh + [rng.choice(buffer) for _ in range(max(0, n_questions - len(fresh)))]

        # -------------------------------------------------------------- solver and judge
        round_ = _reliability_round if reliability else _triad_round
        out = round_(cfg, task, truth_of, questions, len(fresh), solver, tok, judge, jtok, compute, step, timer,
                     older=older)

        # -------------------------------------------------------------- proposer reward
        per_question = out["per_question"]  # {question: solver score S, or reliability signals}
        prop_rewards = []
        for q, (parsable, valid) in zip(proposed, checks):
            if reliability:
                r = (reliability_reward(per_question[q], rel.weights) if valid
                     else rel.invalid_reward if parsable else rel.malformed_reward)
            elif sp.proposer_reward == "learnability":
                r = learnability_reward(parsable, valid, per_question.get(q))
            else:
                r = mae_proposer_reward(float(valid), per_question.get(q, 1.0), float(parsable), sp.min_quality)
            prop_rewards.append(r)
        prop_rewards = torch.tensor(prop_rewards)                                         # [P]
        buffer.extend(fresh)  # quality is validity here: every valid question passes the quality filter
        del buffer[:-sp.buffer_size]

        timer.lap("reward")

        # -------------------------------------------------------------- one update per model
        trained_before = sum(t["trained"] for t in compute.tokens.values())
        for m in models:
            zero_grads(m)
        prop_st = policy_backward(proposer, pro, role_advantages(prop_rewards, ["prop"] * len(prop_rewards)),
                                  pro.completion_mask, gp, bf16=cfg.train.bf16,
                                  micro_batch_size=cfg.train.micro_batch_size)
        compute.add("prop", trained=prop_st["tokens_trained"] + prop_st["prompt_tokens_trained"])
        stats = {"prop": prop_st, **out["update"]()}
        grad_norms = {}
        for m in models:
            m_opt, m_sched = optimizers[id(m)]
            grad_norms[id(m)] = optimizer_step(m, m_opt, cfg.train.max_grad_norm)
            m_sched.step()
        timer.lap("update", sum(t["trained"] for t in compute.tokens.values()) - trained_before)

        # -------------------------------------------------------------- log / eval / checkpoint
        sizes = [task.size(q) for q in proposed if q is not None] if hasattr(task, "size") else []
        sizes = [s for s in sizes if s]
        metrics = {
            "prop/reward": prop_rewards.mean().item(),
            "prop/reward_std": prop_rewards.std().item(),
            "prop/parsable": _mean([float(p) for p, _ in checks]),
            "prop/valid": _mean([float(ok) for _, ok in checks]),
            "prop/distinct": len(fresh) / len(proposed),
            "prop/len_mean": pro.lengths.float().mean().item(),
            "prop/entropy": masked_mean(pro.entropy, pro.completion_mask).item(),
            "prop/grad_norm": grad_norms[id(proposer)],
            **{f"prop/{k}": _mean([s[k] for s in sizes]) for k in ("n_ops", "max_operand") if sizes},
            **{f"prop/{k}": x for k, x in prop_st.items() if "tokens" not in k},
            "gen/grad_norm": grad_norms[id(solver)],
            **{f"{role}/{k}": x for role, st in stats.items() if role != "prop" for k, x in st.items()
               if "tokens" not in k},
            **out["metrics"],
            "buffer/size": len(buffer),
            **compute.metrics(),
        }
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(cfg, solver, tok, task))
            solver.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        if step % cfg.log.every == 0 or step == cfg.train.steps:
            session.logger.log(step, metrics)
        session.progress.update(step, {"valid": metrics["prop/valid"], "judge": metrics["gen/judge_score"],
                                       **{k.split("/", 1)[1]: x for k, x in metrics.items() if k.startswith("eval/")}})
        save_state(step)

    others = {} if sp.shared_model else {"proposer": (proposer, ptok), "judge": (judge, jtok)}
    return finish(cfg, session, solver, tok, task, cfg.train.steps, other_models=others,
                  other_results={"compute": compute.summary()})


# ---------------------------------------------------------------------- triad: solver and judge


def _judge(cfg: RunConfig, judge, jtok, questions: list[str], answers: list[str], compute: Compute, step: int,
           tag: str, timer: StepTimer):
    """`judge_passes` sampled verifications of each answer; (rollout, parsed, scores [N, P])."""
    passes = cfg.selfplay.judge_passes
    sample_seed = derive_seed(cfg.seed, tag, step)
    jro, _, parsed = verify(judge, jtok, questions, answers, group_size=passes, temperature=cfg.verifier.temperature,
                            max_new_tokens=cfg.verifier.max_new_tokens, seed=sample_seed, bf16=cfg.train.bf16)
    forward, generated = rollout_tokens(jro)
    compute.add("judge", forward=forward, generated=generated)
    timer.lap("verify", generated)
    scores = torch.tensor([[judge_score([x.final]) for x in parsed[i * passes:(i + 1) * passes]]
                           for i in range(len(answers))])                                # [N, P]
    return jro, parsed, scores


def _gt_correct(task, truth_of, questions: list[str], answers: list[str]) -> list[bool | None]:
    """Ground-truth correctness of each answer (None: the question's truth is unknown); metrics only."""
    out = []
    for q, a in zip(questions, answers):
        problem = truth_of(q)
        out.append(None if problem is None else task.grade(a, problem) >= 1)
    return out


def _judge_agreement(parsed, passes: int, correct: list[bool | None]) -> float:
    pairs = [(x.final, c) for i, c in enumerate(correct) if c is not None for x in parsed[i * passes:(i + 1) * passes]]
    return _mean([float(f is c) for f, c in pairs])


def _triad_round(cfg: RunConfig, task, truth_of, questions: list[str], n_fresh: int, solver, tok, judge, jtok,
                 compute: Compute, step: int, timer: StepTimer, older=None) -> dict:
    """Solve each question G times, judge every answer; the solver's and judge's losses, the
    proposer's per-question solver score, and the round's metrics."""
    sp, g = cfg.selfplay, cfg.grpo
    G = g.group_size
    sample_seed = derive_seed(cfg.seed, "solve", step)
    sro = generate(solver, encode_generator_prompts(tok, questions), group_size=G, max_new_tokens=g.max_new_tokens,
                   eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=g.temperature, top_p=g.top_p,
                   seed=sample_seed, bf16=cfg.train.bf16)
    forward, generated = rollout_tokens(sro)
    compute.add("gen", forward=forward, generated=generated)
    answers = decode_completions(tok, sro.completion_ids, sro.completion_mask)
    timer.lap("gen", generated)
    asked = [q for q in questions for _ in range(G)]
    jro, parsed, scores = _judge(cfg, judge, jtok, asked, answers, compute, step, "judge", timer)
    J = scores.mean(dim=1)                                                                   # [N]
    fmt = [float(task.extract_answer(a) is not None) for a in answers]
    rewards = torch.tensor([mae_solver_reward(j, f) for j, f in zip(J.tolist(), fmt)])        # [N]
    judge_rewards = torch.tensor([x.format for x in parsed])                                  # [N*P]
    per_question = {}
    for i, q in enumerate(questions):
        per_question.setdefault(q, J[i * G:(i + 1) * G].mean().item())

    def update() -> dict:
        mask = sro.completion_mask.clone()
        if g.mask_truncated:
            mask[sro.truncated] = 0
        adv = (role_advantages(rewards, ["gen"] * len(rewards)) if sp.solver_norm == "role"
               else group_advantages(rewards, G, "group"))
        st = {"gen": policy_backward(solver, sro, adv, mask, g, bf16=cfg.train.bf16, ref_model=older,
                                     micro_batch_size=cfg.train.micro_batch_size)}
        compute.add("gen", trained=st["gen"]["tokens_trained"] + st["gen"]["prompt_tokens_trained"])
        if sp.train_judge:
            gj = g.model_copy(update={"group_size": sp.judge_passes, "max_new_tokens": cfg.verifier.max_new_tokens,
                                      "temperature": cfg.verifier.temperature})
            st["judge"] = policy_backward(judge, jro, role_advantages(judge_rewards, ["judge"] * len(judge_rewards)),
                                          jro.completion_mask, gj.model_copy(update={"beta": 0.0}), bf16=cfg.train.bf16,
                                          micro_batch_size=cfg.train.micro_batch_size)
            compute.add("judge", trained=st["judge"]["tokens_trained"] + st["judge"]["prompt_tokens_trained"])
        return st

    correct = _gt_correct(task, truth_of, asked, answers)
    known = [c for c in correct if c is not None]
    fresh_correct = [c for c in correct[:G * n_fresh] if c is not None]
    metrics = {
        "gen/reward": rewards.mean().item(), "gen/judge_score": J.mean().item(), "gen/format": _mean(fmt),
        "gen/len_mean": sro.lengths.float().mean().item(),
        "gen/len_clipped_ratio": sro.truncated.float().mean().item(),
        "gen/entropy": masked_mean(sro.entropy, sro.completion_mask).item(),
        "judge/reward": judge_rewards.mean().item(), "judge/approve_rate": _mean(
            [float(x.final is True) for x in parsed]),
        "judge/score_var": scores.var(dim=1, unbiased=False).mean().item(),
        "gt/solver_acc": _mean([float(c) for c in known]),
        "gt/judge_agree": _judge_agreement(parsed, sp.judge_passes, correct),
        "gt/proposed_solver_acc": _mean([float(c) for c in fresh_correct]),
    }
    return {"per_question": per_question, "update": update, "metrics": metrics}


# ---------------------------------------------------------------------- reliability: candidates, judge, solver


def _reliability_round(cfg: RunConfig, task, truth_of, questions: list[str], n_fresh: int, solver, tok, judge, jtok,
                       compute: Compute, step: int, timer: StepTimer, older=None) -> dict:
    """Candidates from strong and weak regimes, judged pointwise over passes; each question's
    reliability signals, the solver's loss on the questions above the thresholds, and the metrics."""
    sp, g, rel = cfg.selfplay, cfg.grpo, cfg.reliability
    prompts = encode_generator_prompts(tok, questions)
    regimes = [(solver, rel.n_strong, rel.strong_temperature, True), (solver, rel.n_weak, rel.weak_temperature, False),
               (older, rel.n_old, 1.0, False)]
    texts: list[list[str]] = [[] for _ in questions]     # [B][C]
    strong: list[bool] = []                               # [C], the same regimes for every question
    for r, (model, n, temperature, is_strong) in enumerate(regimes):
        if not n:
            continue
        sample_seed = derive_seed(cfg.seed, "candidates", r, step)
        ro = generate(model, prompts, group_size=n, max_new_tokens=g.max_new_tokens, eos_id=tok.eos_token_id,
                      pad_id=tok.pad_token_id, temperature=temperature, seed=sample_seed, bf16=cfg.train.bf16)
        compute.add("gen", forward=rollout_tokens(ro)[0])
        decoded = decode_completions(tok, ro.completion_ids, ro.completion_mask)
        timer.lap("gen", rollout_tokens(ro)[1])
        for i in range(len(questions)):
            texts[i] += decoded[i * n:(i + 1) * n]
        strong += [is_strong] * n
    if rel.n_best_of:  # best-of-N by self-consistency: per block of N samples, one with the majority answer
        N = rel.best_of
        sample_seed = derive_seed(cfg.seed, "best-of", step)
        ro = generate(solver, prompts, group_size=rel.n_best_of * N, max_new_tokens=g.max_new_tokens,
                      eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.0, seed=sample_seed,
                      bf16=cfg.train.bf16)
        compute.add("gen", forward=rollout_tokens(ro)[0])
        decoded = decode_completions(tok, ro.completion_ids, ro.completion_mask)
        timer.lap("gen", rollout_tokens(ro)[1])
        answers = [task.extract_answer(t) for t in decoded]
        majorities, _ = majority_vote(answers, N)
        for b, majority in enumerate(majorities):
            block = range(b * N, (b + 1) * N)
            pick = next((k for k in block if majority is not None and answers[k] == majority), block[0])
            texts[b // rel.n_best_of].append(decoded[pick])
        strong += [True] * rel.n_best_of
    C, P = len(strong), sp.judge_passes
    asked = [q for q in questions for _ in range(C)]
    answers = [t for row in texts for t in row]
    _, parsed, scores = _judge(cfg, judge, jtok, asked, answers, compute, step, "judge", timer)  # scores [B*C, P]
    scores = scores.view(len(questions), C, P)
    strong_t = torch.tensor(strong)
    signals = [reliability_signals(scores[i], strong_t) for i in range(len(questions))]
    passed = [passes_thresholds(s, rel.thresholds) for s in signals]
    per_question = {}
    for q, s in zip(questions, signals):
        per_question.setdefault(q, s)
    trained = [i for i in range(len(questions)) if passed[i] or not rel.filter]

    def update() -> dict:
        loss, n_pairs, tokens = _solver_loss(cfg, solver, tok, older, questions, texts, scores, trained)
        if loss is not None:
            loss.backward()
        compute.add("gen", trained=tokens)
        return {"gen": {"loss": 0.0 if loss is None else loss.item(), "pairs": float(n_pairs)}}

    correct = _gt_correct(task, truth_of, asked, answers)
    by_regime = {"strong": [], "weak": []}
    for k, c in enumerate(correct):
        if c is not None:
            by_regime["strong" if strong[k % C] else "weak"].append(float(c))
    fresh = signals[:n_fresh]
    metrics = {
        "gen/judge_score": scores.mean().item(),
        "gen/format": _mean([float(task.extract_answer(a) is not None) for a in answers]),
        "judge/approve_rate": _mean([float(x.final is True) for x in parsed]),
        "judge/score_var": scores.var(dim=2, unbiased=False).mean().item(),
        **{f"rel/{k}": _mean([s[k] for s in fresh]) for k in ("cons", "sep", "stab") if fresh},
        "rel/pass_share": _mean([float(p) for p in passed[:n_fresh]]) if n_fresh else 0.0,
        "rel/pass_share_all": _mean([float(p) for p in passed]),
        "rel/trained_questions": float(len(trained)),
        "gt/strong_acc": _mean(by_regime["strong"]),
        "gt/weak_acc": _mean(by_regime["weak"]),
        "gt/judge_agree": _judge_agreement(parsed, P, correct),
        "gt/proposed_solver_acc": _mean([float(c) for c in correct[:C * n_fresh] if c is not None]),
    }
    return {"per_question": per_question, "update": update, "metrics": metrics}


def _solver_loss(cfg: RunConfig, solver, tok, older, questions: list[str], texts: list[list[str]],
                 scores: torch.Tensor, trained: list[int]) -> tuple[torch.Tensor | None, int, int]:
    """The solver's loss on the candidates of the `trained` questions: (loss or None, pairs or
    candidates used, tokens trained). scores: [B, C, P] judge scores."""
    rel, bf16 = cfg.reliability, cfg.train.bf16
    mean = scores.mean(dim=2)                                                                  # [B, C]
    if rel.solver_loss == "dpo":
        pairs = [(i, c, r) for i in trained for c, r in preference_pairs(mean[i].tolist(), rel.min_gap)]
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
    target = mean[trained].to(per_token.device)                                                # [b, C]
    if rel.solver_loss == "rank":
        loss = torch.stack([ranking_loss(per_token[k], target[k]) for k in range(len(trained))]).mean()
    else:  # policy gradient on the judge's scores, normalised within each question
        adv = (target - target.mean(dim=1, keepdim=True)) / (target.std(dim=1, unbiased=False, keepdim=True) + 1e-4)
        loss = -(adv * per_token).mean()
    return loss, len(flat), int(n_tok.sum())


# ---------------------------------------------------------------------- proposer warm-up (SFT, no answers)


def warmup_proposer(cfg: RunConfig, proposer, ptok, seeds: list[str], compute: Compute) -> dict[str, float]:
    """SFT of the proposer on the task's own questions (answers never seen): it learns the notation."""
    sp = cfg.selfplay
    opt, sched = make_optimizer(proposer, cfg.train.model_copy(update={"lr": cfg.verifier.warmup_sft_lr,
                                                                        "warmup_steps": 10, "schedule": "constant"}),
                                sp.proposer_warmup_steps)
    rng = random.Random(derive_seed(cfg.seed, "proposer-warmup"))
    progress = Progress(sp.proposer_warmup_steps, enabled=cfg.log.progress and dist.is_main(),
                        desc="proposer warm-up (sft)")
    losses = []
    for step in range(1, sp.proposer_warmup_steps + 1):
        batch = [rng.choice(seeds) for _ in range(cfg.verifier.warmup_batch_size)]
        examples = [rng.choice(seeds) for _ in batch]
        st = supervised_step(proposer, opt, encode_proposer_prompts(ptok, examples),
                             [encode_completion(ptok, q) for q in batch], ptok.pad_token_id,
                             max_grad_norm=cfg.train.max_grad_norm, bf16=cfg.train.bf16,
                             micro_batch_size=cfg.train.micro_batch_size)
        sched.step()
        compute.add("prop", trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        losses.append(st["loss"])
        progress.update(step, {"loss": st["loss"]})
    progress.close()
    tail = losses[-max(1, len(losses) // 10):]
    return {"prop/warmup_loss": sum(tail) / len(tail)}
