"""Self-Rewarding LMs: the model judges its own samples and learns by DPO from its best against its worst.

Yuan et al. 2024, "Self-Rewarding Language Models" (ICML). DPO's loss and the (best, worst) pair in
rl/preference.py (`dpo_loss`, `preference_pairs`); the judge's format is the verifier's (roles/verifier.py).

The paper's loop: M_1 is fine-tuned on instruction data and on LLM-as-judge data (EFT: its judging
ability comes from labelled seed judgments); iteration t samples N responses per new prompt from M_t,
M_t scores each with an LLM-as-judge prompt (a 1-5 scale, averaged over 3 judgments), the highest and
the lowest scored make a preference pair (none when they tie), and M_{t+1} is trained from M_t by DPO on
those pairs with M_t as the reference. The judge is the model itself and improves with it.

Here, each step:
  sample   B training questions (blinded: no answer, no reference), G samples each from the model.
  judge    the same model verifies each sample greedily in the verifier's format (a verdict per step
           and a final one); its score is `verifier_score` (1 for a final CORRECT, plus half the share
           of steps judged correct).
  pair     each question's first-highest and last-lowest scored samples, when their scores differ by
           more than `self_rewarding.min_gap`.
  update   one DPO step (β `self_rewarding.beta`) on the step's pairs, the reference M_t: the model as
           the iteration began (every `self_rewarding.iteration_steps` steps), frozen.

Labels: the judge's warm-up (`verifier.warmup_sft_steps`, step 0) reads them, as the paper's EFT seed
data does: the verifier's SFT warm-up with `self_rewarding.rehearse` of each batch rehearsing the
generator on reference solutions (the judge is the generator). After it the training path sees
blinded problems only; ground truth is read by the `gt/` monitors alone (tests/test_labelfree.py runs
it with every answer poisoned).

Deviations, and why:
  - Each step samples its own questions from the training pool (the paper generates new prompts with
    the model itself); the tiny world's questions come from the task.
  - One greedy judgment in the verifier's format per sample instead of three sampled 1-5 scores: the
    format the lab's judges already speak; ties are frequent and give no pair, as in the paper.
  - An iteration is a fixed number of steps, not a pass over a new prompt set.

Metrics: `sr/pairs`, `sr/dpo_loss`, `sr/dpo_acc` (pairs with a positive margin), `sr/margin`, `sr/iteration`, `judge/approved` (share of samples it
approves), `judge/parsed` (with a final verdict), `judge/score`; behind the wall `gt/acc` (the samples'
accuracy), `gt/judge_agree` (verdicts equal to the truth, balanced over right and wrong samples),
`gt/pair_right` (pairs whose chosen sample is right and rejected one wrong). eval.json adds `judge`:
the final model judging its own samples (`evaluate_verifiers`).

Run:  cotrain run configs/self_rewarding_smoke.yaml --out runs/self_rewarding
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.eval.verifier_eval import evaluate_verifiers, verifier_score
from cotrain.models.build import load_weights
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.models.verify import verify
from cotrain.rl.preference import preference_pairs
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import list_checkpoints
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import blind
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_metrics
from cotrain.train.selfplay import gt_correct
from cotrain.train.setup import (
    build_task,
    derive_seed,
    initial_model,
    iterate_dir,
    keep_iterate,
    make_optimizer,
    sample_batch,
    training_pool,
)
from cotrain.train.update import dpo_backward, optimizer_step, zero_grads
from cotrain.train.verifier import warmup_verifier

REFERENCE = "self_rewarding/reference"  # each iteration's M_t: run_dir/self_rewarding/reference_<t>

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("Judge agrees with the truth, balanced (self_rewarding)", "balanced accuracy", "judge_agree", True),
    ("Pairs ordered right by the truth (self_rewarding)", "share of pairs", "pair_right", True),
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, sr = cfg.grpo, cfg.self_rewarding
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)  # the generator and its own judge
    model.train()
    reference, _ = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)      # M_t, DPO's reference, frozen
    reference.eval().requires_grad_(False)
    labelled, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    pool = blind(labelled)                                     # the training path: questions only
    truth = {p.question: p for p in labelled}                  # the gt/ monitors alone read it
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched)}
    warmed = resume and bool(list_checkpoints(run_dir))        # a checkpoint exists only after the warm-up
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="self_rewarding")
    n_params = model.num_parameters()
    compute = Compute({"gen": n_params, "ver": n_params}, session.state.get("compute"))  # ver: its judging
    n_prompts = cfg.train.batch_size // g.group_size
    if session.start_step % sr.iteration_steps:                # resumed within an iteration: its M_t as saved
        load_weights(reference, iterate_dir(session.run_dir, REFERENCE, session.start_step // sr.iteration_steps))

    # ------------------------------------------------------------------ warm-up (step 0: the judge, from labels)
    if not warmed and cfg.verifier.warmup_sft_steps:
        metrics = warmup_verifier(cfg.verifier, cfg.train, task, labelled, model, tokenizer, model, tokenizer, compute,
                                  seed=cfg.seed, progress=cfg.log.progress, batch_size=cfg.eval.batch_size,
                                  max_new_tokens=g.max_new_tokens, rehearse=sr.rehearse)
        maybe_checkpoint(session, 0, roles, force=True, extra={"compute": compute.tokens})
        session.logger.log(0, {**metrics, **compute.metrics()})

    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        iteration = (step - 1) // sr.iteration_steps
        if (step - 1) % sr.iteration_steps == 0:               # a new iteration: M_t is the model now
            reference.load_state_dict(model.state_dict())
            dist.on_main(keep_iterate, reference, tokenizer, session.run_dir, REFERENCE, iteration)
        # -------------------------------------------------------------- sample: G responses to each question
        problems = sample_batch(pool, n_prompts, cfg.seed, step)                                 # [B], blinded
        questions = [p.question for p in problems for _ in range(g.group_size)]                  # [B*G]
        ro = generate(model, encode_generator_prompts(tokenizer, [p.question for p in problems]), group_size=g.group_size,
                      max_new_tokens=g.max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                      temperature=g.temperature, top_p=g.top_p, seed=derive_seed(cfg.seed, "rollout", step),
                      bf16=cfg.train.bf16)
        texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        generated = compute.add_rollout("gen", ro)
        timer.lap("gen", generated)

        # -------------------------------------------------------------- judge: the model scores its own samples
        jro, _, verdicts = verify(model, tokenizer, questions, texts, greedy=True,
                                  max_new_tokens=cfg.verifier.max_new_tokens, bf16=cfg.train.bf16)
        judged = compute.add_rollout("ver", jro)
        scores = [verifier_score(v) for v in verdicts]                                           # [B*G]
        G = g.group_size
        pairs = [(b * G + i, b * G + j) for b in range(n_prompts)
                 for i, j in preference_pairs(scores[b * G:(b + 1) * G], sr.min_gap)]
        timer.lap("judge", judged)

        # -------------------------------------------------------------- DPO on (best, worst), M_t the reference
        zero_grads(model)
        st = dpo_backward(model, reference, tokenizer, [questions[i] for i, _ in pairs], [texts[i] for i, _ in pairs],
                          [texts[j] for _, j in pairs], sr.beta, bf16=cfg.train.bf16) if pairs else {}
        grad_norm = optimizer_step(model, opt, cfg.train.max_grad_norm)
        sched.step()
        compute.add("gen", forward=st.get("tokens", 0), trained=st.get("tokens", 0))  # M_t's pass, the model's
        timer.lap("update", st.get("tokens", 0))

        # -------------------------------------------------------------- log / eval / checkpoint
        right = gt_correct(task, truth.get, questions, texts)                                   # metrics only
        metrics = {"sr/pairs": float(len(pairs)), "sr/iteration": float(iteration), "gen/grad_norm": grad_norm,
                   "gen/lr": sched.get_last_lr()[0], **{f"sr/{k}": v for k, v in st.items() if k != "tokens"},
                   **_judge_metrics(verdicts, scores, right, pairs), **rollout_metrics("gen", ro), **compute.metrics()}
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"pairs": len(pairs), "approved": metrics["judge/approved"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    # ------------------------------------------------------------------ final evaluation: the model judging its own samples
    e, split = cfg.eval_settings(), cfg.eval.splits[0]
    judge = {split: evaluate_verifiers({"judge": (model, tokenizer)}, model, tokenizer, task, split,
                                       n=cfg.eval.n_sampled or cfg.cotraining.eval_n, k=cfg.eval.k or 4,
                                       temperature=e["temperature"], gen_max_new_tokens=e["max_new_tokens"],
                                       ver_max_new_tokens=cfg.verifier.max_new_tokens, batch_size=e["batch_size"],
                                       bf16=cfg.train.bf16)["judge"]} if split in task.splits else {}
    return finish(session, model, tokenizer, task, cfg.train.steps,
                  other_results={"judge": judge, "compute": compute.summary()})


def _judge_metrics(verdicts, scores: list[float], right: list[bool | None], pairs: list[tuple[int, int]]) -> dict:
    """The judge's own figures, and behind the wall its agreement with the truth (balanced over right and
    wrong samples, a missing verdict counted as a rejection) and the share of pairs ordered right."""
    approved = [v.final is True for v in verdicts]
    out = {"judge/approved": sum(approved) / len(approved), "judge/score": sum(scores) / len(scores),
           "judge/parsed": sum(v.final is not None for v in verdicts) / len(verdicts),
           "gt/acc": sum(bool(r) for r in right) / len(right)}
    per_class = [[a == r for a, r in zip(approved, right) if r is cls] for cls in (True, False)]
    if all(per_class):
        out["gt/judge_agree"] = sum(sum(c) / len(c) for c in per_class) / 2
    if pairs:
        out["gt/pair_right"] = sum(bool(right[i]) and right[j] is False for i, j in pairs) / len(pairs)
    return out
