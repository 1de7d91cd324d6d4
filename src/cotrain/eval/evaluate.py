"""Generator evaluation per split: greedy pass@1, sampled pass@k (unbiased) and maj@k."""
from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cotrain import dist
from cotrain.errors import UserError
from cotrain.eval.metrics import majority_answer, pass_at_k, wilson_interval
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.tasks.base import Problem, Task

EVAL_SEED = 1234  # problem selection and sampling of evaluation do not depend on the run's seed
OUTCOMES = "outcomes"  # evaluate_split's entry of per-problem outcomes, which `take_outcomes` lifts out


def _complete(model, tokenizer, problems: list[Problem], repeats: int, *, greedy: bool, temperature: float,
              max_new_tokens: int, batch_size: int, bf16: bool, seed: int | None, done: Callable | None = None):
    """Completions (texts, truncated flags, lengths) of each problem repeated `repeats` times, in order; `done(n)`
    is told of each batch of n completions (a progress line)."""
    prompts = [p for p in encode_generator_prompts(tokenizer, [q.question for q in problems]) for _ in range(repeats)]
    texts, truncated, lengths = [], [], []
    for i in range(0, len(prompts), batch_size):
        r = generate(model, prompts[i:i + batch_size], max_new_tokens=max_new_tokens,
                     eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, greedy=greedy,
                     temperature=temperature, seed=None if seed is None else seed + i, bf16=bf16)
        texts += decode_completions(tokenizer, r.completion_ids, r.completion_mask)
        truncated += r.truncated.tolist()
        lengths += r.lengths.tolist()
        if done is not None:
            done(len(prompts[i:i + batch_size]))
    return texts, truncated, lengths


def greedy_accuracy(model, tokenizer, task: Task, problems: list[Problem], *, max_new_tokens: int,
                    batch_size: int = 256, bf16: bool = False) -> float:
    """Fraction of `problems` whose greedy completion is graded correct."""
    texts, _, _ = _complete(model, tokenizer, problems, 1, greedy=True, temperature=1.0,
                            max_new_tokens=max_new_tokens, batch_size=batch_size, bf16=bf16, seed=None)
    return sum(dist.map_shards(lambda tp: task.grade(*tp), list(zip(texts, problems)))) / len(problems)


def evaluate_split(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, split: str, *,
                   n: int, k: int = 0, n_sampled: int = 0, temperature: float = 1.0, max_new_tokens: int = 48,
                   batch_size: int = 256, bf16: bool = False, outcomes: bool = False, done: Callable | None = None) -> dict:
    """Metrics of one split: pass@1 (greedy) with its 95% Wilson interval, the greedy completions' mean
    length, truncation and format rates (`format_ratio`: a final-answer line, one that starts with `#`,
    as every generator prompt asks: a gain that only comes from answering in the asked form shows
    there), and pass@k, maj@k, the samples' accuracy and gap/majority (maj@k minus that accuracy) from
    k samples of each of n_sampled problems. With `outcomes`, also `OUTCOMES`: each problem's greedy
    outcome in the evaluation's order ("1" right, "0" not) and a hash of its questions, so that two runs
    can be compared problem by problem (`take_outcomes` lifts it out; every other entry is a number). `done(n)` is
    told of every batch of n completions generated (`evaluation_size` counts them all)."""
    problems = task.problems(split, n, seed=EVAL_SEED)
    if not problems:
        raise UserError(f"split '{split}' of task {task.name} has no problems to evaluate")
    texts, truncated, lengths = _complete(model, tokenizer, problems, 1, greedy=True, temperature=1.0,
                                          max_new_tokens=max_new_tokens, batch_size=batch_size, bf16=bf16,
                                          seed=None, done=done)
    correct = dist.map_shards(lambda tp: task.grade(*tp), list(zip(texts, problems)))
    lo, hi = wilson_interval(int(sum(c >= 1.0 for c in correct)), len(problems))
    out = {"pass@1": sum(correct) / len(problems), "n": len(problems), "pass@1_ci95_lo": lo, "pass@1_ci95_hi": hi,
           "len_mean": sum(lengths) / len(lengths), "truncated_ratio": sum(truncated) / len(truncated),
           "format_ratio": sum(any(line.lstrip().startswith("#") for line in t.split("\n")) for t in texts) / len(texts)}
    if outcomes:
        out[OUTCOMES] = {"correct": "".join("1" if c >= 1.0 else "0" for c in correct),
                         "questions_sha256": questions_hash(problems)}
    if k >= 2 and n_sampled > 0:  # k = 1 would only repeat pass@1 with sampling noise
        sub = problems[:n_sampled]
        texts, _, _ = _complete(model, tokenizer, sub, k, greedy=False, temperature=temperature,
                                max_new_tokens=max_new_tokens, batch_size=batch_size, bf16=bf16, seed=EVAL_SEED,
                                done=done)
        pk, maj, mean = [], [], []
        for j, p in enumerate(sub):
            group = texts[j * k:(j + 1) * k]
            scores = [task.grade(t, p) for t in group]
            answers = [task.extract_answer(t) for t in group]
            pk.append(pass_at_k(k, int(sum(s >= 1.0 for s in scores)), k))
            mean.append(sum(scores) / k)
            voted = majority_answer(answers, getattr(task, "answers_equal", None))
            maj.append(scores[answers.index(voted)] if voted is not None else 0.0)
        out[f"pass@{k}"] = sum(pk) / len(sub)
        out[f"maj@{k}"] = sum(maj) / len(sub)
        out["sampled_acc"] = sum(mean) / len(sub)
        out["gap/majority"] = out[f"maj@{k}"] - out["sampled_acc"]  # what a majority knows beyond one sample
    return out


def evaluate_generator(model, tokenizer, task: Task, splits: list[str], **kwargs) -> dict[str, dict]:
    """{split: metrics} for the requested splits the task has."""
    return {s: evaluate_split(model, tokenizer, task, s, **kwargs) for s in splits if s in task.splits}


def evaluation_size(task: Task, splits: list[str], *, n: int, k: int = 0, n_sampled: int = 0, **_) -> int:
    """The completions `evaluate_generator` generates with these settings: each split's greedy ones, and k samples
    of its first n_sampled problems."""
    total = 0
    for split in (s for s in splits if s in task.splits):
        m = len(task.problems(split, n, seed=EVAL_SEED))
        total += m + (min(n_sampled, m) * k if k >= 2 and n_sampled > 0 else 0)
    return total


def questions_hash(problems: list[Problem]) -> str:
    """A short hash of the problems' questions in order: two evaluations pair problem by problem when it is equal."""
    return hashlib.sha256("\0".join(p.question for p in problems).encode("utf-8")).hexdigest()[:16]


def take_outcomes(results: dict[str, dict]) -> dict[str, dict]:
    """Remove the per-problem outcomes (`OUTCOMES`) from `evaluate_generator`'s {split: metrics}, leaving numbers
    alone there, and return them as {split: {"correct": "0110…", "questions_sha256": …}} (`outcomes.json`)."""
    return {split: metrics.pop(OUTCOMES) for split, metrics in results.items() if OUTCOMES in metrics}


def require_eval_splits(task: Task, name: str, splits: list[str], n: int, named: bool = True) -> dict[str, int]:
    """Load every evaluation split before the first training step, so that a typo or a broken data file
    stops a run at once rather than after its training: {split: problems loaded}.

    Args:
        name: the task's name, for the message.
        splits: `eval.splits`.
        n: `eval.n`, the problems the final evaluation draws.
        named: the splits were named in the config; the default ones (test, ood) that a task lacks are
            left out as before.

    Raises:
        UserError: a named split the task does not have, or a split whose data does not load (one line).
    """
    out = {}
    for split in splits:
        if split not in task.splits:
            if not named:
                continue
            close = difflib.get_close_matches(split, task.splits, n=1)
            raise UserError(f"eval.splits names {split!r}, which task {name} does not have (its splits: "
                            f"{', '.join(task.splits)}){f'; did you mean {close[0]!r}?' if close else ''}")
        try:
            out[split] = len(task.problems(split, n, seed=EVAL_SEED))
        except UserError as err:  # a message that names its split (a test split reads the train split too) stays as it is
            raise UserError(str(err) if " split)" in str(err) else f"eval split {split!r}: {err}") from None
        except (OSError, ValueError) as err:  # a file that vanished or does not decode
            raise UserError(f"eval split {split!r} of task {name} does not load: {err}") from None
    return out


def sample_records(model, tokenizer, task: Task, split: str, *, n: int, max_new_tokens: int, batch_size: int = 256,
                   bf16: bool = False, verifier: tuple | None = None, verifier_max_new_tokens: int = 64) -> list[dict]:
    """A few greedy completions of the first `n` evaluation problems of `split`, for people to read
    (`samples.jsonl`, the report): question, completion, whether it is right and, with `verifier`
    ((model, tokenizer)), its greedy verdict on it."""
    problems = task.problems(split, n, seed=EVAL_SEED) if split in task.splits else []
    if not problems:
        return []
    texts, truncated, _ = _complete(model, tokenizer, problems, 1, greedy=True, temperature=1.0,
                                    max_new_tokens=max_new_tokens, batch_size=batch_size, bf16=bf16, seed=None)
    out = [{"split": split, "question": p.question, "completion": t, "correct": task.grade(t, p) >= 1,
            "truncated": bool(c)} for p, t, c in zip(problems, texts, truncated)]
    if verifier is not None:
        from cotrain.models.verify import verify_batched

        verdicts = verify_batched(*verifier, [p.question for p in problems], texts, batch_size=batch_size,
                                  greedy=True, max_new_tokens=verifier_max_new_tokens, bf16=bf16)
        for row, v in zip(out, verdicts):
            row["verdict"] = {True: "correct", False: "wrong", None: "none"}[v.final]
            row["step_verdicts"] = ["correct" if x else "wrong" for x in v.steps]
    return out
