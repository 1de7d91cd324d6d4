"""Verifier evaluation: verdicts on held-out generator samples (accuracy, F1, AUROC), earliest-error
identification on solutions with injected errors (ProcessBench-style), and best-of-N / verifier-weighted
voting for the generator. Problem selection and sampling use EVAL_SEED, not the run's seed."""
from __future__ import annotations

import random

from cotrain import dist
from cotrain.eval.evaluate import EVAL_SEED, _complete
from cotrain.eval.verifier_metrics import (
    best_of_n,
    earliest_error_metrics,
    first_error,
    step_verdict_metrics,
    verdict_metrics,
    verifier_gap,
    weighted_vote,
)
from cotrain.models.prompts import uses_chat
from cotrain.models.verify import verify_batched
from cotrain.roles.verifier import Verification, reference_verification, split_steps
from cotrain.tasks.base import Problem, Task


def verifier_score(v: Verification) -> float:
    """A verification's confidence that the solution is correct: 1 for a final CORRECT verdict, plus
    half the share of steps judged correct (so approvals and rejections are each ranked by their steps)."""
    steps = sum(v.steps) / len(v.steps) if v.steps else 0.0
    return float(v.final is True) + 0.5 * steps


def strict_verdict(v: Verification) -> bool | None:
    """The final verdict overruled by any rejected step: a solution is approved only when its final
    verdict and every step verdict approve it (a process verifier's minimum over its verdicts); None
    when the final verdict did not parse. Reported beside the final verdict as `strict/...`."""
    return None if v.final is None else bool(v.final and all(v.steps))


def strict_metrics(parsed: list[Verification], correct: list[bool]) -> dict[str, float]:
    """`strict/balanced_accuracy` and `strict/approve_rate`: `verdict_metrics` of `strict_verdict`."""
    m = verdict_metrics([strict_verdict(v) for v in parsed], correct)
    return {f"strict/{k}": m[k] for k in ("balanced_accuracy", "approve_rate") if k in m}


def caught_by_kind(task: Task, problems: list[Problem], texts: list[str], approved: list[bool | None]) -> dict[str, float]:
    """For tasks that name how a wrong solution fails (`task.error_kind`): per kind, the share of the
    solutions failing that way that the verifier does not approve (`caught/<kind>`) and their count
    (`n/<kind>`); `caught/correct` is the share of correct solutions it approves. Empty otherwise."""
    if not hasattr(task, "error_kind"):
        return {}
    groups: dict[str, list[bool]] = {}
    for p, text, verdict in zip(problems, texts, approved):
        kind = task.error_kind(p, text)
        groups.setdefault(kind or "correct", []).append((verdict is True) == (kind is None))
    out = {}
    for kind, hits in sorted(groups.items()):
        out[f"caught/{kind}"] = sum(hits) / len(hits)
        out[f"n/{kind}"] = float(len(hits))
    return out


def process_localisation(task: Task, problems: list[Problem], texts: list[str], parsed: list[Verification],
                         correct: list[bool]) -> dict[str, float]:
    """Where wrong samples first go wrong, and whether the verifier points there (tasks with process labels).

    Over the wrong samples that have a false step by the task's process labels (`task.step_labels`):
    `process/first_false_not_last`, the share whose first false step is not their last step (where the
    outcome alone cannot say which step failed), and `process/first_rejected_match`, the share whose
    first step the verifier rejects is that step (a verification with another number of step verdicts
    than the sample has steps does not match); `process/after_first_false_false`, the share of the steps
    after a first false step that are false themselves (errors that cascade: a reward summed to the end
    blames the right prefix for each of them); `process/n_failed` counts them, `process/n_failed_clean`
    the wrong samples without a false step (every step right, a wrong end). Empty without process labels.
    """
    if not hasattr(task, "step_labels"):
        return {}
    not_last, match, clean, after = [], [], 0, []
    for p, text, v, ok in zip(problems, texts, parsed, correct):
        if ok:
            continue
        steps = [line for _, line in split_steps(text)]
        labels = list(task.step_labels(p, steps)) if steps else []
        if False not in labels:
            clean += 1
            continue
        first = labels.index(False)
        not_last.append(first != len(labels) - 1)
        after += [not ok for ok in labels[first + 1:]]
        match.append(len(v.steps) == len(labels) and first_error(v.steps) == first)
    out = {"process/n_failed": float(len(not_last)), "process/n_failed_clean": float(clean)}
    if not_last:
        out["process/first_false_not_last"] = sum(not_last) / len(not_last)
        out["process/first_rejected_match"] = sum(match) / len(match)
    if after:
        out["process/after_first_false_false"] = sum(after) / len(after)
    return out


def step_verdicts(task: Task, problems: list[Problem], texts: list[str], parsed: list[Verification]) -> dict[str, float]:
    """The verifier's step verdicts on samples against the task's process labels (`step_verdict_metrics`:
    `approve_right`, `catch_false`, `catch/<kind>`, `first_false_agree`, `usable`), each step judged once,
    by its fault where the task names them (`task.step_kinds`), with `n_false/<kind>`, the false steps of
    each kind counted (in the solutions whose verdicts are usable). Empty without process labels."""
    if not hasattr(task, "step_labels"):
        return {}
    faults = [step_faults(task, p, [line for _, line in split_steps(t)]) for p, t in zip(problems, texts)]
    labels = [[f is None for f in fs] for fs in faults]
    out = step_verdict_metrics([v.steps for v in parsed], labels, faults if hasattr(task, "step_kinds") else None)
    for v, fs in zip(parsed, faults):
        if v.steps is not None and len(v.steps) == len(fs):
            for fault in filter(None, fs):
                out["n_false/" + fault] = out.get("n_false/" + fault, 0.0) + 1
    return out


def step_faults(task: Task, problem: Problem, steps: list[str]) -> list[str | None] | None:
    """Each step's fault by the task's process labels: its kind where the task names them (`task.step_kinds`),
    "step" where it only tells right from false (`task.step_labels`), None for a right step; None for a
    task without process labels."""
    if hasattr(task, "step_kinds"):
        return list(task.step_kinds(problem, steps))
    if hasattr(task, "step_labels"):
        return [None if right else "step" for right in task.step_labels(problem, steps)]
    return None


def verification_records(task: Task, problems: list[Problem], texts: list[str], correct: list[bool],
                         parsed: list[Verification], written: list[str] | None = None,
                         chat: bool = False) -> list[dict]:
    """One record per verified sample, what a verifier's figures are counted from: the problem and its
    answer, the sample and whether it is right, the task's fault of each step where it has process labels
    (`faults`: the fault kind, "step" where the task names none, None for a right step), the verdicts
    read (`final`, `steps`), the verifier's own text (`verification`, None when the verdicts came from
    elsewhere) and the one it was taught to write (`reference`, `reference_verification`). Never raises
    on malformed samples."""
    out = []
    for i, (problem, text, ok, v) in enumerate(zip(problems, texts, correct, parsed)):
        faults = step_faults(task, problem, [line for _, line in split_steps(text)])
        out.append({"problem": problem.question, "answer": problem.answer, "sample": text, "correct": bool(ok),
                    "faults": faults, "final": v.final, "steps": list(v.steps),
                    "verification": written[i] if written is not None and i < len(written) else None,
                    "reference": reference_verification(task, problem, text, chat=chat)})
    return out


def injected_error_set(task: Task, problems: list[Problem], seed: int = EVAL_SEED) -> list[tuple[Problem, str, int | None]]:
    """Balanced held-out solutions for process evaluation: the reference solution of every other problem,
    and for the rest the reference with an error injected at a uniformly drawn step (`task.corrupt`).

    Returns:
        (problem, solution, index of its first wrong step or None) triples: the first step the task's
        process labels mark wrong where it has them (an injected error that leaves every step right, a
        Countdown search failure, has None), else the step drawn. Empty when the task cannot corrupt
        solutions.
    """
    if not hasattr(task, "corrupt"):
        return []
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(problems):
        if not p.steps or not p.solution:
            continue
        if i % 2 == 0:
            out.append((p, p.solution, None))
        else:
            k = rng.randrange(len(p.steps))
            steps, solution = task.corrupt(p, k, rng)
            if hasattr(task, "step_labels"):
                labels = list(task.step_labels(p, list(steps)))
                k = labels.index(False) if False in labels else None
            out.append((p, solution, k))
    return out


def evaluate_on_injected(verifier, tokenizer, task: Task, items: list[tuple[Problem, str, int | None]], *,
                         max_new_tokens: int, batch_size: int = 256, bf16: bool = False) -> dict[str, float]:
    """Greedy verification of error-injected solutions: verdict metrics and earliest-error identification."""
    if not items:
        return {}
    parsed = verify_batched(verifier, tokenizer, [p.question for p, _, _ in items], [s for _, s, _ in items],
                            batch_size=batch_size, greedy=True, max_new_tokens=max_new_tokens, bf16=bf16)
    correct = dist.map_shards(lambda item: task.grade(item[1], item[0]) >= 1, items)
    out = verdict_metrics([v.final for v in parsed], correct, [verifier_score(v) for v in parsed])
    # a verification that approves the solution but flags no step, or rejects it and flags none, is
    # read at face value: its earliest error is the first step it marks wrong, if any
    pred = [first_error(v.steps) if v.steps else None for v in parsed]
    ee = earliest_error_metrics(pred, [k for _, _, k in items])
    out.update({"earliest_" + k if k in ("f1",) else k: v for k, v in ee.items()})
    out.update(caught_by_kind(task, [p for p, _, _ in items], [s for _, s, _ in items], [v.final for v in parsed]))
    out.update(strict_metrics(parsed, correct))
    return out


def evaluate_verifiers(verifiers: dict[str, tuple], generator, gen_tokenizer, task: Task, split: str, *, n: int,
                       k: int, temperature: float, gen_max_new_tokens: int, ver_max_new_tokens: int,
                       batch_size: int = 256, bf16: bool = False,
                       records: dict[str, list[dict]] | None = None) -> dict[str, dict[str, float]]:
    """Evaluate each verifier on the same held-out generator samples of `split`.

    `k` samples of each of `n` problems are drawn from the generator (temperature `temperature`); each
    verifier verifies every sample greedily. Reported per verifier: the verdict metrics over all n*k
    samples, `gap/verifier` (accuracy of the samples it approves minus `mean@k`), and best-of-k
    (`bon@k`) and verifier-weighted voting (`wvote@k`) accuracy per problem next to the generator's own
    `maj@k` and `mean@k` (its sampled accuracy) on the same samples, `gap/majority` = maj@k − mean@k,
    the share of problems whose k samples are all wrong (`all_wrong@k`), each error kind's catch rate
    (`caught_by_kind`), where wrong samples first go wrong (`process_localisation`), the verdicts
    overruled by a rejected step (`strict_metrics`) and the step verdicts by fault (`step/`, `step_verdicts`).

    Args:
        verifiers: {name: (model, tokenizer)}, or {name: judge} with judge(problems, texts, correct) -> the
            verifications, for verdicts that come from elsewhere (the oracle of `verifier.source`).
        records: when given (a dict), each verifier's sample-by-sample record is put in it under its name
            (`verification_records`), what its figures were counted from.

    Returns:
        {name: metrics}.
    """
    problems = task.problems(split, n, seed=EVAL_SEED)
    if not problems:
        return {}
    k = max(k, 1)
    texts, _, _ = _complete(generator, gen_tokenizer, problems, k, greedy=False, temperature=temperature,
                            max_new_tokens=gen_max_new_tokens, batch_size=batch_size, bf16=bf16, seed=EVAL_SEED)
    flat_problems = [p for p in problems for _ in range(k)]
    correct = dist.map_shards(lambda tp: task.grade(*tp) >= 1, list(zip(texts, flat_problems)))
    answers = [task.extract_answer(t) for t in texts]
    equal = getattr(task, "answers_equal", None)
    out = {}
    for name, verifier in verifiers.items():
        written: list[str] = []
        parsed = (verifier(flat_problems, texts, correct) if callable(verifier) else
                  verify_batched(*verifier, [p.question for p in flat_problems], texts, batch_size=batch_size,
                                 greedy=True, max_new_tokens=ver_max_new_tokens, bf16=bf16, texts=written))
        if records is not None:
            chat = not callable(verifier) and uses_chat(verifier[1])
            records[name] = verification_records(task, flat_problems, texts, correct, parsed, written or None, chat)
        scores = [verifier_score(v) for v in parsed]
        m = verdict_metrics([v.final for v in parsed], correct, scores)
        groups = [range(j * k, (j + 1) * k) for j in range(len(problems))]
        if k >= 2:
            m[f"bon@{k}"] = best_of_n([[(scores[i], float(correct[i])) for i in g] for g in groups])
            m[f"wvote@{k}"] = weighted_vote([[(answers[i], scores[i], float(correct[i])) for i in g] for g in groups],
                                            equal)
            m[f"maj@{k}"] = weighted_vote([[(answers[i], 1.0, float(correct[i])) for i in g] for g in groups], equal)
            m[f"mean@{k}"] = sum(correct) / len(correct)
            m[f"all_wrong@{k}"] = sum(not any(correct[i] for i in g) for g in groups) / len(groups)
            m["gap/majority"] = m[f"maj@{k}"] - m[f"mean@{k}"]
        m["gap/verifier"] = verifier_gap([v.final for v in parsed], correct)
        m.update(caught_by_kind(task, flat_problems, texts, [v.final for v in parsed]))
        m.update(process_localisation(task, flat_problems, texts, parsed, correct))
        m.update(strict_metrics(parsed, correct))
        m.update({f"step/{key}": x for key, x in step_verdicts(task, flat_problems, texts, parsed).items()})
        out[name] = m
    return out


def best_of_n_study(verifiers: dict[str, tuple], generator, gen_tokenizer, task: Task, split: str, *, n: int,
                    ns: list[int], temperature: float, gen_max_new_tokens: int, ver_max_new_tokens: int,
                    batch_size: int = 256, bf16: bool = False, votes: int = 200, scorers: dict | None = None) -> dict:
    """Best-of-N against N for each verifier beside a random pick, majority voting and the oracle, on the
    same samples: max(ns) samples of each of `n` problems of `split` are drawn once (temperature
    `temperature`) and every N-subset is weighed alike.

    `verifiers` are generative ({name: (model, tokenizer)}, scored by their verdicts); `scorers` score
    samples any other way ({name: f(questions, texts) -> scores}, e.g. a DPO verifier's implicit reward).

    Returns:
        {"problems", "samples", "rows": {N: {"oracle": pass@N, "random": the mean correctness,
        "majority": maj@N (the mean over `votes` random N-subsets a problem, seeded), <verifier>:
        expected best-of-N (`expected_best_of_n`, ties broken uniformly)}}}.
    """
    from cotrain.eval.metrics import majority_correct, pass_at_k
    from cotrain.eval.verifier_metrics import best_of_n_curve

    k = max(ns)
    problems = task.problems(split, n, seed=EVAL_SEED)
    if not problems:
        return {}
    texts, _, _ = _complete(generator, gen_tokenizer, problems, k, greedy=False, temperature=temperature,
                            max_new_tokens=gen_max_new_tokens, batch_size=batch_size, bf16=bf16, seed=EVAL_SEED)
    flat = [p for p in problems for _ in range(k)]
    correct = dist.map_shards(lambda tp: task.grade(*tp) >= 1, list(zip(texts, flat)))
    answers = [task.extract_answer(t) for t in texts]
    equal = getattr(task, "answers_equal", None)
    groups = [range(j * k, (j + 1) * k) for j in range(len(problems))]
    rng = random.Random(EVAL_SEED)
    rows: dict[int, dict[str, float]] = {}
    for size in ns:
        hits = [sum(correct[i] for i in g) for g in groups]
        votes_at = [sum(majority_correct([answers[g[i]] for i in s], [correct[g[i]] for i in s], equal)
                        for s in (rng.sample(range(k), size) for _ in range(votes))) / votes for g in groups]
        rows[size] = {"oracle": sum(pass_at_k(k, c, size) for c in hits) / len(groups),
                      "random": sum(hits) / len(flat), "majority": sum(votes_at) / len(groups)}
    questions = [p.question for p in flat]
    scored = {name: score(questions, texts) for name, score in (scorers or {}).items()}
    for name, (model, tokenizer) in verifiers.items():
        parsed = verify_batched(model, tokenizer, questions, texts, batch_size=batch_size,
                                greedy=True, max_new_tokens=ver_max_new_tokens, bf16=bf16)
        scored[name] = [verifier_score(v) for v in parsed]
    for name, scores in scored.items():
        curve = best_of_n_curve([([scores[i] for i in g], [correct[i] for i in g]) for g in groups], ns)
        for size, value in curve.items():
            rows[size][name] = value
    return {"problems": len(problems), "samples": k, "rows": rows}
