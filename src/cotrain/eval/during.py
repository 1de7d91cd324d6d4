"""Evaluation during training: the periodic greedy pass@1 on the first eval split of a run's session
(its settings from `RunSettings.eval_settings`), and the fixed held-out set of solutions with injected
errors a co-trained verifier is scored on."""
from __future__ import annotations

from cotrain.config import VerifierConfig
from cotrain.eval.evaluate import evaluate_split
from cotrain.eval.verifier_eval import evaluate_on_injected, injected_error_set
from cotrain.tasks.base import Task


def eval_during_training(session, model, tokenizer, task: Task) -> dict[str, float]:
    """Greedy pass@1 on the first eval split (`eval.n_during` problems) of the session's run, as
    `eval/<split>/pass@1`."""
    s = session.settings
    split = s.eval.splits[0]
    m = evaluate_split(model, tokenizer, task, split, n=s.eval.n_during, **{**s.eval_settings(), "k": 0})
    return {f"eval/{split}/pass@1": m["pass@1"]}


def eval_at_start(session, model, tokenizer, task: Task) -> None:
    """With `eval.at_start`, the greedy pass@1 of `eval_during_training` before a fresh run's first step,
    logged at step 0: every curve then starts at the start. Leaves the model in train mode."""
    if session.settings.eval.at_start and session.start_step == 0:
        session.logger.log(0, eval_during_training(session, model, tokenizer, task))
        model.train()


def injected_heldout(task: Task, split: str, n: int) -> list:
    """`n` problems of `split` (the first eval split, `cotraining.eval_n` of them), each with a reference
    solution whose error (if any) was injected at a known step: the fixed set a verifier is evaluated on
    during training; empty for a split the task does not have."""
    return injected_error_set(task, task.problems(split, n, seed=1234) if split in task.splits else [])


def eval_verifier_during(verifier, vtok, task: Task, heldout: list, v: VerifierConfig, batch_size: int,
                         bf16: bool) -> dict[str, float]:
    """The verifier's greedy verdicts on `heldout` (`injected_heldout`) at its length (`verifier.max_new_tokens`),
    the evaluation's batch size and the run's precision, as `eval/verifier/<metric>`; leaves it in train mode."""
    m = evaluate_on_injected(verifier, vtok, task, heldout, max_new_tokens=v.max_new_tokens, batch_size=batch_size,
                             bf16=bf16)
    verifier.train()
    return {f"eval/verifier/{k}": x for k, x in m.items() if k in ("accuracy", "balanced_accuracy", "acc_erroneous",
                                                                   "acc_correct", "earliest_f1") or k.startswith("caught/")}

