"""SPIN: self-play fine-tuning, the reference solution preferred over the previous iterate's own sample.

Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong Language Models" (ICML;
code uclaml/SPIN). Loss in rl/preference.py (`spin_loss`).

The paper's loop: iteration t trains π_{t+1} from π_t on pairs (y, y') for every SFT prompt x, y the
human (reference) solution and y' ~ π_t(·|x), by the logistic loss
  −log σ(β [(log π(y|x) − log π_t(y|x)) − (log π(y'|x) − log π_t(y'|x))]),
with π_t the frozen opponent and reference; then π_t ← π_{t+1}.

Here, each step draws B training problems with reference solutions, samples y' from the opponent
(`spin.temperature`) and takes one optimizer step on the loss above; every `spin.iteration_steps` steps
the opponent becomes the current model (the first: the start). The labels it reads are the reference
solutions (the SFT data), as SPIN's do.

Deviations, and why:
  - SPIN samples the opponent's solutions for its whole SFT set once per iteration and trains epochs
    over them; here each step samples its own problems' from the same frozen opponent: the same
    distribution, without storing a dataset.
  - An iteration is a fixed number of steps, not epochs.
  - The loss runs the step's 2B sequences through the model in one pass (`train.micro_batch_size` is
    not applied yet): size `train.batch_size` to the memory at hand.

Metrics: `spin/loss`, `spin/margin` (mean β-scaled margin), `spin/pair_acc` (share of pairs with a
positive margin), `spin/iteration`, `spin/synthetic_acc` (the opponent's samples graded: how often the
"rejected" solution is in fact right, a measure of what SPIN pushes down), `spin/synthetic_len`.

Run:  cotrain run configs/spin_smoke.yaml --out runs/spin
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.models.build import load_weights
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.preference import spin_loss
from cotrain.runs.policy import Policy
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.train.compute import Compute, StepTimer
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
from cotrain.train.update import optimizer_step, sequence_logprobs, zero_grads

OPPONENT = "spin/opponent"  # each iteration's opponent: run_dir/spin/opponent_<k>

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("Reference preferred (spin)", "share of pairs", "pair_acc", True),
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    sp = cfg.spin
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()
    opponent, _ = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    opponent.eval().requires_grad_(False)
    pool = [p for p in training_pool(task, cfg.seed, cfg.train.n_problems)[0] if p.solution]
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched)}
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="spin")
    if session.start_step % sp.iteration_steps:  # resumed within an iteration: its opponent as saved
        load_weights(opponent, iterate_dir(session.run_dir, OPPONENT, session.start_step // sp.iteration_steps))
    compute = Compute({"gen": model.num_parameters()}, session.state.get("compute"))

    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        iteration = (step - 1) // sp.iteration_steps
        if (step - 1) % sp.iteration_steps == 0 and step > 1:  # a new iteration: the opponent is the model now
            opponent.load_state_dict(model.state_dict())
        if (step - 1) % sp.iteration_steps == 0:
            dist.on_main(keep_iterate, opponent, tokenizer, session.run_dir, OPPONENT, iteration)
        # -------------------------------------------------------------- the opponent's synthetic solutions
        problems = sample_batch(pool, cfg.train.batch_size, cfg.seed, step)                      # [B]
        questions = [p.question for p in problems]
        ro = generate(opponent, encode_generator_prompts(tokenizer, questions), max_new_tokens=cfg.grpo.max_new_tokens,
                      eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, temperature=sp.temperature,
                      seed=derive_seed(cfg.seed, "opponent", step), bf16=cfg.train.bf16)
        synthetic = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        generated = compute.add_rollout("gen", ro)
        timer.lap("gen", generated)

        # -------------------------------------------------------------- SPIN's loss and one step
        both = [p.solution for p in problems] + synthetic
        zero_grads(model)
        logp, n_tok = sequence_logprobs(model, tokenizer, questions * 2, both, bf16=cfg.train.bf16)
        with torch.no_grad():
            ref, _ = sequence_logprobs(opponent, tokenizer, questions * 2, both, bf16=cfg.train.bf16)
        n = len(problems)
        loss, margins = spin_loss(logp[:n], logp[n:], ref[:n], ref[n:], sp.beta)
        loss.backward()
        grad_norm = optimizer_step(model, opt, cfg.train.max_grad_norm)
        sched.step()
        trained = int(n_tok.sum())
        compute.add("gen", forward=trained, trained=trained)  # the opponent's pass, the model's pass
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        right = [task.grade(t, p) >= 1 for t, p in zip(synthetic, problems)]  # metrics only
        metrics = {"spin/loss": loss.item(), "spin/margin": margins.mean().item(),
                   "spin/pair_acc": (margins > 0).float().mean().item(), "spin/iteration": float(iteration),
                   "spin/synthetic_acc": sum(right) / n, "spin/synthetic_len": ro.lengths.float().mean().item(),
                   "gen/grad_norm": grad_norm, "gen/lr": sched.get_last_lr()[0], **compute.metrics()}
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"loss": metrics["spin/loss"], "pair_acc": metrics["spin/pair_acc"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    return finish(session, model, tokenizer, task, cfg.train.steps, other_results={"compute": compute.summary()})

