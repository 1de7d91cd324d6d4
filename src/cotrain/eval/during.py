"""Evaluation during training: the recipes' shared settings of evaluation (`eval_kwargs`), the periodic
greedy pass@1 on the first eval split, and a co-trained verifier's accuracy on a fixed held-out set
of solutions with injected errors."""
from __future__ import annotations

from cotrain.config import RunConfig
from cotrain.eval.evaluate import evaluate_split
from cotrain.eval.verifier_eval import evaluate_on_injected, injected_error_set
from cotrain.tasks.base import Task


def eval_kwargs(cfg: RunConfig) -> dict:
    e = cfg.eval
    return dict(k=e.k, n_sampled=e.n_sampled, temperature=e.temperature,
                max_new_tokens=e.max_new_tokens or cfg.grpo.max_new_tokens, batch_size=e.batch_size,
                bf16=cfg.train.bf16)


def eval_during_training(cfg: RunConfig, model, tokenizer, task: Task) -> dict[str, float]:
    """Greedy pass@1 on the first eval split (`eval.n_during` problems), as `eval/<split>/pass@1`."""
    split = cfg.eval.splits[0]
    m = evaluate_split(model, tokenizer, task, split, n=cfg.eval.n_during, **{**eval_kwargs(cfg), "k": 0})
    return {f"eval/{split}/pass@1": m["pass@1"]}


def eval_at_start(cfg: RunConfig, session, model, tokenizer, task: Task) -> None:
    """With `eval.at_start`, the greedy pass@1 of `eval_during_training` before a fresh run's first step,
    logged at step 0: every curve then starts at the start. Leaves the model in train mode."""
    if cfg.eval.at_start and session.start_step == 0:
        session.logger.log(0, eval_during_training(cfg, model, tokenizer, task))
        model.train()


def injected_heldout(cfg: RunConfig, task: Task) -> list:
    """`cotraining.eval_n` problems of the first eval split, each with a reference solution whose error (if
    any) was injected at a known step: the fixed set a verifier is evaluated on during training."""
    split = cfg.eval.splits[0]
    return injected_error_set(task, task.problems(split, cfg.cotraining.eval_n, seed=1234) if split in task.splits else [])


def eval_verifier_during(cfg: RunConfig, verifier, vtok, task: Task, heldout: list) -> dict[str, float]:
    """The verifier's greedy verdicts on `heldout`, as `eval/verifier/<metric>`; leaves it in train mode."""
    m = evaluate_on_injected(verifier, vtok, task, heldout, max_new_tokens=cfg.verifier.max_new_tokens,
                             batch_size=eval_kwargs(cfg)["batch_size"], bf16=cfg.train.bf16)
    verifier.train()
    return {f"eval/verifier/{k}": x for k, x in m.items() if k in ("accuracy", "balanced_accuracy", "acc_erroneous",
                                                                   "acc_correct", "earliest_f1") or k.startswith("caught/")}
