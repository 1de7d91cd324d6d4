"""Supervised fine-tuning on reference solutions: the warm-up before RL.

Algorithm: for a batch of training problems, maximise the log-likelihood of the task's reference
solution (steps, final answer line, eos) given the generator prompt; the loss is the mean over
completion tokens (prompt tokens are not trained). Works for from-scratch presets and pretrained
models (their chat template wraps the prompt).

Stopping rule: with `train.stop_at_acc`, training ends once greedy pass@1 on held-out problems of the
*train* split (disjoint from the training pool; the test split is never looked at) reaches the
target. A warm-up for RL should stop before it converges so that RL has room to improve, and the
step at which a small model "gets" arithmetic varies with the seed: stopping at an accuracy rather
than a step count hands every seed's RL stage the same starting point.

Run:  cotrain run configs/sft.yaml --out runs/sft
"""
from __future__ import annotations

import torch

from cotrain.config import RunConfig
from cotrain.errors import UserError
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.eval.evaluate import greedy_accuracy
from cotrain.models.prompts import encode_completion, encode_generator_prompts
from cotrain.runs.policy import Policy
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.setup import build_task, initial_model, make_optimizer, sample_batch, training_pool
from cotrain.train.update import supervised_step


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()  # on model.device: initial_model placed it
    n_val = cfg.eval.n_during if cfg.train.stop_at_acc else 0
    pool, val = training_pool(task, cfg.seed, cfg.train.n_problems, n_val)
    pool = [p for p in pool if p.solution]
    if not pool:
        raise UserError(f"task {cfg.task.name} has no reference solutions to fine-tune on")
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched)}
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="sft")
    compute = Compute({"gen": model.num_parameters()}, session.state.get("compute"))  # FLOPs beside the RL arms'

    # ------------------------------------------------------------------ loop
    step = session.start_step
    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        if session.stopped:  # resumed after the stopping rule fired: nothing left to train
            step -= 1
            break
        timer = StepTimer()
        batch = sample_batch(pool, cfg.train.batch_size, cfg.seed, step)
        st = supervised_step(model, opt, encode_generator_prompts(tokenizer, [p.question for p in batch]),
                             [encode_completion(tokenizer, p.solution) for p in batch], tokenizer.pad_token_id,
                             max_grad_norm=cfg.train.max_grad_norm, bf16=cfg.train.bf16,
                             micro_batch_size=cfg.train.micro_batch_size)
        sched.step()
        trained = st["tokens_trained"] + st["prompt_tokens_trained"]
        compute.add("gen", trained=trained)  # 6N a token: its forward and backward pass
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {"gen/loss": st["loss"], "gen/grad_norm": st["grad_norm"], "gen/lr": sched.get_last_lr()[0],
                   "tokens/gen_train": st["tokens_trained"]}
        stop = False
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            if val:
                kw = cfg.eval_settings()
                val_acc = greedy_accuracy(model, tokenizer, task, val, max_new_tokens=kw["max_new_tokens"],
                                          batch_size=kw["batch_size"], bf16=kw["bf16"])
                metrics["eval/val/pass@1"] = val_acc
                stop = val_acc >= cfg.train.stop_at_acc
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        metrics.update(compute.metrics())
        log_step(session, step, metrics, {"loss": metrics["gen/loss"]}, force=stop)
        maybe_checkpoint(session, step, roles, stop=stop, extra={"compute": compute.tokens})
        if stop:
            break

    return finish(session, model, tokenizer, task, step, other_results={"compute": compute.summary()})


def check_rollout(cfg: RunConfig) -> dict:
    """`cotrain check`'s first rollout: SFT samples nothing in training, so its check runs what its
    evaluation runs (greedy)."""
    return {"prompts_per_step": cfg.train.batch_size, "unit": "reference solutions", "group_size": 1, "greedy": True,
            "temperature": 1.0, "max_new_tokens": cfg.eval.max_new_tokens or cfg.grpo.max_new_tokens,
            "what": "greedy, as the evaluation runs"}
