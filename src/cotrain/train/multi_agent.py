"""`mars`'s trajectories: a planner's plans, a worker called once per planned operation, the solutions
they make; the roles' SFT warm-up; and the evaluation of the two together.

A trajectory of question q: the planner writes a plan (roles/planner.py); for each planned operation
in turn the worker sees q, the steps written so far and the operation, and writes one step
(roles/worker.py); the steps and the last step's result make the solution the task grades. Without a
plan (`mars.plan: false`) the worker is called as many times as the problem's reference solution has
steps, the operation left blank. A plan that does not parse ends the trajectory at once (no worker
call; the solution is wrong).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from cotrain import dist
from cotrain.eval.metrics import pass_at_k, wilson_interval
from cotrain.models.generate import Rollout, concat_rollouts, generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_planner_prompts, encode_worker_prompts
from cotrain.roles import planner, worker
from cotrain.tasks.base import Problem, Task
from cotrain.train.compute import Compute
from cotrain.train.setup import derive_seed, make_optimizer
from cotrain.train.update import supervised_step


@dataclass
class Episode:
    """One batch of trajectories: N = B*G of them (a question's G contiguous), M worker calls."""

    plan_ro: Rollout | None     # [N] the planner's samples (None without a plan)
    plans: list[list[str]]      # [N] planned operations ([] for a malformed plan, or without a plan)
    plan_ok: list[bool]         # [N] the plan parsed
    worker_ro: Rollout          # [M] every worker call, turn by turn (turn 0 of every trajectory, then turn 1, ...)
    call_traj: list[int]        # [M] the trajectory of each call
    call_turn: list[int]        # [M] its turn
    steps: list[list[str]]      # [N] the worker's steps
    solutions: list[str]        # [N] the solutions the steps make


def play(planner_model, worker_model, tokenizer, problems: list[Problem], *, group_size: int, use_plan: bool,
         plan_tokens: int, step_tokens: int, temperature: float, greedy: bool = False, seed: int | None = None,
         bf16: bool = False) -> Episode:
    """G trajectories of each problem (module docstring); sampled at `temperature`, or greedy.

    Args:
        problems: the B problems (only their questions are read, and, without a plan, the number of
            their reference steps).
        plan_tokens, step_tokens: length limits of a plan and of one worker step.
        seed: the planner's samples use derive_seed(seed, "plan"), turn k's worker calls derive_seed(seed,
            "work", k).
    """
    gen = dict(eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, temperature=temperature,
               greedy=greedy, bf16=bf16)
    questions = [p.question for p in problems for _ in range(group_size)]                  # [N]
    if use_plan:
        plan_ro = generate(planner_model, encode_planner_prompts(tokenizer, [p.question for p in problems]),
                           group_size=group_size, max_new_tokens=plan_tokens,
                           seed=None if seed is None else derive_seed(seed, "plan"), **gen)
        parsed = [planner.parse(t) for t in decode_completions(tokenizer, plan_ro.completion_ids, plan_ro.completion_mask)]
        plans, plan_ok = [p or [] for p in parsed], [p is not None for p in parsed]
        turns = [len(p) for p in plans]
    else:
        plan_ro, plan_ok = None, [True] * len(questions)
        turns = [len(p.steps) for p in problems for _ in range(group_size)]
        plans = [[""] * n for n in turns]
    steps: list[list[str]] = [[] for _ in questions]
    parts, call_traj, call_turn = [], [], []
    for k in range(max(turns, default=0)):
        live = [i for i, n in enumerate(turns) if n > k]
        calls = [(questions[i], steps[i], plans[i][k]) for i in live]
        ro = generate(worker_model, encode_worker_prompts(tokenizer, calls), max_new_tokens=step_tokens,
                      seed=None if seed is None else derive_seed(seed, "work", k), **gen)
        for i, text in zip(live, decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)):
            steps[i] = steps[i] + [worker.parse(text)]
        parts.append(ro)
        call_traj += live
        call_turn += [k] * len(live)
    return Episode(plan_ro, plans, plan_ok, concat_rollouts(parts, tokenizer.pad_token_id), call_traj, call_turn,
                   steps, [worker.assemble(s) for s in steps])


def episode_tokens(ep: Episode) -> dict[str, tuple[int, int]]:
    """(prompt tokens run forward, tokens generated) of each role's calls."""
    out = {}
    for role, ro in (("plan", ep.plan_ro), ("work", ep.worker_ro)):
        if ro is not None and ro.prompt_ids.shape[0]:
            out[role] = (int(ro.prompt_mask.sum()), int(ro.completion_mask.sum()))
    return out


def followed(ep: Episode) -> float:
    """The share of the worker's steps whose operation is the planned one (no label read)."""
    calls = [(planner.operation(s), ep.plans[i][k]) for i, s_all in enumerate(ep.steps)
             for k, s in enumerate(s_all) if k < len(ep.plans[i]) and ep.plans[i][k]]
    return sum(a == b for a, b in calls) / len(calls) if calls else 0.0


def warm_up(planner_model, worker_model, tokenizer, pool: list[Problem], *, steps: int, batch_size: int, lr: float,
            use_plan: bool, train_cfg, seed: int, bf16: bool, micro_batch_size: int | None,
            compute: Compute, roles: tuple[str, str]) -> dict[str, float]:
    """SFT of the two roles' formats on reference solutions (labels): half of each batch plans a problem
    (its reference steps' operations), half carries out one step of one (the steps before it written,
    the operation given, blank without a plan). With one model both halves make one step; with two,
    each model takes its half. `roles`: the compute accounts of the planner and the worker."""
    solved = [p for p in pool if p.steps]
    if not steps or not solved:
        return {}
    one_model = planner_model is worker_model
    warm_cfg = train_cfg.model_copy(update={"lr": lr, "warmup_steps": 10, "schedule": "constant"})
    opts = {id(m): make_optimizer(m, warm_cfg, steps) for m in {id(planner_model): planner_model,
                                                               id(worker_model): worker_model}.values()}
    rng = random.Random(derive_seed(seed, "mars-warmup"))
    losses = []
    for _ in range(steps):
        n_plan = batch_size // 2 if use_plan else 0
        planned = [rng.choice(solved) for _ in range(n_plan)]
        worked = [rng.choice(solved) for _ in range(batch_size - n_plan)]
        turns = [rng.randrange(len(p.steps)) for p in worked]
        plan_p = encode_planner_prompts(tokenizer, [p.question for p in planned])
        plan_t = [encode_completion(tokenizer, planner.render(planner.plan_of(p.steps))) for p in planned]
        work_p = encode_worker_prompts(tokenizer, [(p.question, list(p.steps[:k]), planner.operation(p.steps[k]) if use_plan else "")
                                                   for p, k in zip(worked, turns)])
        work_t = [encode_completion(tokenizer, p.steps[k]) for p, k in zip(worked, turns)]
        batches = ([(worker_model, plan_p + work_p, plan_t + work_t, roles[1])] if one_model else
                   [(planner_model, plan_p, plan_t, roles[0]), (worker_model, work_p, work_t, roles[1])])
        for model, prompts, targets, role in batches:
            if not prompts:
                continue
            opt, sched = opts[id(model)]
            st = supervised_step(model, opt, prompts, targets, tokenizer.pad_token_id, max_grad_norm=train_cfg.max_grad_norm,
                                 bf16=bf16, micro_batch_size=micro_batch_size)
            sched.step()
            compute.add(role, trained=st["tokens_trained"] + st["prompt_tokens_trained"])
            losses.append(st["loss"])
    tail = losses[-max(1, len(losses) // 10):]
    return {"mars/warmup_loss": sum(tail) / len(tail)}


def evaluate_pair(planner_model, worker_model, tokenizer, task: Task, splits: list[str], *, n: int, k: int,
                  n_sampled: int, temperature: float, use_plan: bool, plan_tokens: int, step_tokens: int,
                  batch_size: int, bf16: bool, seed: int) -> dict[str, dict[str, float]]:
    """{split: metrics} of the planner and worker together, as `evaluate_split` reports a generator's:
    greedy pass@1 with its 95% Wilson interval, the share of plans that parse (`plan_format`), the mean
    number of worker calls, and, with k >= 2, pass@k and the samples' accuracy from k sampled
    trajectories of each of n_sampled problems."""
    was = [m.training for m in (planner_model, worker_model)]
    planner_model.eval(), worker_model.eval()
    out = {}
    for split in (s for s in splits if s in task.splits):
        problems = task.problems(split, n, seed=seed)
        if not problems:
            continue
        right, ok, calls = [], [], []
        for i in range(0, len(problems), batch_size):
            chunk = problems[i:i + batch_size]
            ep = play(planner_model, worker_model, tokenizer, chunk, group_size=1, use_plan=use_plan,
                      plan_tokens=plan_tokens, step_tokens=step_tokens, temperature=1.0, greedy=True, bf16=bf16)
            right += dist.map_shards(lambda tp: task.grade(*tp), list(zip(ep.solutions, chunk)))
            ok += ep.plan_ok
            calls += [len(s) for s in ep.steps]
        lo, hi = wilson_interval(int(sum(r >= 1 for r in right)), len(problems))
        m = {"pass@1": sum(right) / len(problems), "n": len(problems), "pass@1_ci95_lo": lo, "pass@1_ci95_hi": hi,
             "plan_format": sum(ok) / len(ok), "worker_calls": sum(calls) / len(calls)}
        if k >= 2 and n_sampled > 0:
            sub = problems[:n_sampled]
            scores = []
            for i in range(0, len(sub), max(1, batch_size // k)):
                chunk = sub[i:i + max(1, batch_size // k)]
                ep = play(planner_model, worker_model, tokenizer, chunk, group_size=k, use_plan=use_plan,
                          plan_tokens=plan_tokens, step_tokens=step_tokens, temperature=temperature,
                          seed=derive_seed(seed, split, i), bf16=bf16)
                scores += [task.grade(t, p) for t, p in zip(ep.solutions, [p for p in chunk for _ in range(k)])]
            per = [scores[j * k:(j + 1) * k] for j in range(len(sub))]
            m[f"pass@{k}"] = sum(pass_at_k(k, int(sum(s >= 1 for s in g)), k) for g in per) / len(sub)
            m["sampled_acc"] = sum(sum(g) / k for g in per) / len(sub)
        out[split] = m
    for model, training in zip((planner_model, worker_model), was):
        model.train(training)
    return out
