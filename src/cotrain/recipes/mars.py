"""MARS multi-agent GRPO: a planner and a worker acting in turn, trained together on a shared trajectory reward.

Chen et al. 2025, "MARS: Optimizing Dual-System Deep Research via Multi-Agent Reinforcement Learning"
(arXiv 2510.04935); the grouping of AT-GRPO (PettingLLMs). Formulas in
rl/multi_agent.py, role formats in roles/planner.py and roles/worker.py.

Algorithm, each step:
  plan     B problems, G plans each by the planner (System 2 in MARS: it reasons and plans).
  work     for each plan, the worker (System 1: it handles each planned call) is called once per planned
           operation, in turn; it sees the question, the steps written so far and the operation, and
           writes that step; the steps and the last step's result make the solution the task grades.
           A plan that does not parse ends its trajectory at once (no worker call; the solution is wrong).
  reward   one per trajectory: 1 if the task grades its solution right, else 0; both roles share it.
  advantage the planner's G plans of a problem form a group; the worker's calls of turn k of a
           problem's trajectories form another (AT-GRPO's grouping by agent and turn); each reward is
           normalised within its group: A = (r − mean) / (std + 1e-4).
  balance  the worker's calls (about n−1 per trajectory) are drawn down, or up, to the planner's count,
           with probability ∝ |A| (`mars.balance`), after the advantages are computed; the counts before
           and after are logged.
  update   each role's GRPO loss (rho = 1) on its own tokens only, averaged over its own tokens; one
           model: the two losses summed, one optimizer step; two models (`mars.two_models`): each steps
           its own.

Ablations: `mars.plan: false` (an empty plan: the worker alone, called as many times as the reference
solution has steps, choosing each operation itself, trained as above); and `recipe: grpo`, which writes
plan and execution in one completion (a step line `a OP b=c` is its operation and its result).

Warm-up (`mars.warmup_steps`, step 0): SFT of the two formats on reference solutions, as a verifier's
warm-up reads labels. Evaluation: the planner and worker together (`evaluate_pair`): eval.json's
`generator` section is the pair's, so studies compare it with any generator; `eval/<split>/pass@1`
during training likewise.

Deviations from MARS, and why:
  - MARS's System 1 summarises tool outputs for a deep-research System 2 that may call tools any number
    of times; here the worker carries out each planned arithmetic operation, one call per planned step.
  - The text of MARS we could read describes balancing as a random draw of System 1's samples to System
    2's count after the advantages are computed; the draw here is weighted by |A| (zero-advantage samples,
    which add no gradient, left out first), and sampling up keeps every sample once.
  - MARS's group normalisation is over each system's samples; here the worker's groups are per problem
    and turn, as AT-GRPO groups them, so a later turn is not compared with an earlier one.
  - No bin packing (it batches long tool outputs for System 1's throughput; the steps here are short).
  - Without a plan the number of worker calls is the reference solution's step count (in countdown
    n − 1 for n numbers, given by the rules; in arith one per operator of the question).

Metrics: `gen/reward` (the trajectories' accuracy), `plan/*` (parsed: the share of plans that parse; n_ops, entropy,
loss, clip_ratio, grad_norm), `work/*` (calls, trained, followed: steps whose operation is the planned
one; entropy, loss), `work/calls_before` and `work/calls_after` (the balancing's counts).

Run:  cotrain run configs/mars_smoke.yaml --out runs/mars
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.evaluate import EVAL_SEED
from cotrain.eval.metrics import pass_at_k, wilson_interval
from cotrain.models.generate import Rollout, concat_rollouts, generate, select_rows
from cotrain.models.prompts import decode_completions, encode_completion, encode_planner_prompts, encode_worker_prompts
from cotrain.rl.losses import group_advantages
from cotrain.rl.multi_agent import balanced_indices, grouped_advantages
from cotrain.roles import planner, worker
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import list_checkpoints
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import Problem, Task
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_metrics
from cotrain.train.setup import build_task, derive_seed, initial_model, make_optimizer, sample_batch, training_pool
from cotrain.train.update import optimizer_step, policy_backward, supervised_step, zero_grads

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("Worker steps that follow the plan (mars)", "share of steps", "followed", True),
    ("Plans that parse (mars)", "share of plans", "parsed", True),
    ("Worker calls per step, before balancing (mars)", "calls", "calls_before", False),
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, m = cfg.grpo, cfg.mars
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)  # the worker (and the planner, with one model)
    model.train()
    pool = [p for p in training_pool(task, cfg.seed, cfg.train.n_problems)[0] if p.steps or m.plan]
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched)}
    planner_model, popt, psched = model, opt, sched
    if m.two_models:
        planner_model, _ = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
        planner_model.train()
        popt, psched = make_optimizer(planner_model, cfg.train, cfg.train.steps)
        roles["planner"] = Policy(planner_model, tokenizer, popt, psched)
    prole = "plan" if m.two_models else "gen"                   # the compute account of the planner's tokens
    warmed = resume and bool(list_checkpoints(run_dir))         # a checkpoint exists only after the warm-up
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="mars")
    compute = Compute({"gen": model.num_parameters(), **({"plan": planner_model.num_parameters()} if m.two_models else {})},
                      session.state.get("compute"))
    n_prompts = cfg.train.batch_size // g.group_size
    play_kw = dict(use_plan=m.plan, plan_tokens=g.max_new_tokens, step_tokens=m.worker_max_new_tokens,
                   bf16=cfg.train.bf16)
    e = cfg.eval_settings()

    def evaluate(splits, n, k=0):
        return evaluate_pair(planner_model, model, tokenizer, task, splits, n=n, k=k, n_sampled=e["n_sampled"],
                             temperature=e["temperature"], batch_size=e["batch_size"], seed=EVAL_SEED, **play_kw)

    def eval_during() -> dict[str, float]:
        split = cfg.eval.splits[0]
        return {f"eval/{split}/pass@1": evaluate([split], cfg.eval.n_during).get(split, {}).get("pass@1", 0.0)}

    # ------------------------------------------------------------------ warm-up (step 0: the roles' formats)
    if not warmed and m.warmup_steps:
        metrics = warm_up(planner_model, model, tokenizer, pool, steps=m.warmup_steps, batch_size=m.warmup_batch_size,
                          lr=m.warmup_lr, use_plan=m.plan, train_cfg=cfg.train, seed=cfg.seed, bf16=cfg.train.bf16,
                          micro_batch_size=cfg.train.micro_batch_size, compute=compute, roles=(prole, "gen"))
        maybe_checkpoint(session, 0, roles, force=True, extra={"compute": compute.tokens})
        session.logger.log(0, {**metrics, **compute.metrics()})
    if cfg.eval.at_start and session.start_step == 0:
        session.logger.log(0, eval_during())

    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- trajectories: plans, then one worker call per planned step
        problems = sample_batch(pool, n_prompts, cfg.seed, step)                               # [B]
        ep = play(planner_model, model, tokenizer, problems, group_size=g.group_size, temperature=g.temperature,
                  seed=derive_seed(cfg.seed, "rollout", step), **play_kw)                      # N = B*G trajectories
        tokens = episode_tokens(ep)
        for role, (forward, generated) in tokens.items():
            compute.add(prole if role == "plan" else "gen", forward=forward, generated=generated)
        timer.lap("gen", sum(t[1] for t in tokens.values()))

        # -------------------------------------------------------------- the shared reward and each role's advantages
        traj_problems = [p for p in problems for _ in range(g.group_size)]                     # [N]
        rewards = torch.tensor(dist.map_shards(lambda tp: task.grade(*tp), list(zip(ep.solutions, traj_problems))))
        plan_adv = group_advantages(rewards, g.group_size) if m.plan else None                 # [N]
        call_rewards = rewards[ep.call_traj] if ep.call_traj else torch.zeros(0)               # [M]
        call_adv = grouped_advantages(call_rewards, [(i // g.group_size, k) for i, k in zip(ep.call_traj, ep.call_turn)])
        # -------------------------------------------------------------- balance: the worker's calls drawn to the trajectories' count
        before = len(ep.call_traj)
        if m.balance and before:
            keep = balanced_indices(call_adv, len(traj_problems), torch.Generator().manual_seed(
                derive_seed(cfg.seed, "balance", step)))
        else:
            keep = torch.arange(before)
        work_ro, work_adv = select_rows(ep.worker_ro, keep.tolist()), call_adv[keep]           # [M'] calls trained
        timer.lap("reward")

        # -------------------------------------------------------------- update: each role's loss on its own tokens
        pst, wst, grad_norm = _update(model, opt, planner_model, popt, ep.plan_ro if m.plan else None, plan_adv,
                                      work_ro, work_adv, g, cfg.train)
        sched.step()
        if m.two_models:
            psched.step()
        for role, s in ((prole, pst), ("gen", wst)):
            compute.add(role, trained=s.get("tokens_trained", 0) + s.get("prompt_tokens_trained", 0))
        trained = sum(s.get("tokens_trained", 0) + s.get("prompt_tokens_trained", 0) for s in (pst, wst))
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        n_ops = [len(p) for p, ok in zip(ep.plans, ep.plan_ok) if ok]
        metrics = {
            "gen/reward": rewards.mean().item(), "gen/acc": (rewards >= 1).float().mean().item(),
            "gen/grad_norm": grad_norm, "gen/lr": sched.get_last_lr()[0],
            "work/calls_before": float(before), "work/calls_after": float(len(keep)),
            "work/followed": followed(ep) if m.plan else 0.0,
            **{f"work/{k}": v for k, v in wst.items() if "tokens" not in k},
            **(rollout_metrics("work", ep.worker_ro) if before else {}),
            **compute.metrics(),
        }
        if m.plan:
            metrics.update({"plan/parsed": sum(ep.plan_ok) / len(ep.plan_ok),
                            "plan/n_ops": sum(n_ops) / len(n_ops) if n_ops else 0.0,
                            **{f"plan/{k}": v for k, v in pst.items() if "tokens" not in k},
                            **rollout_metrics("plan", ep.plan_ro)})
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during())
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"reward": metrics["gen/reward"], "calls": metrics["work/calls_after"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    # ------------------------------------------------------------------ final evaluation: the pair, in place of the generator alone
    pair = evaluate(cfg.eval.splits, cfg.eval.n, k=e["k"])
    return finish(session, model, tokenizer, task, cfg.train.steps, generator_results=pair,
                  other_results={"compute": compute.summary()},
                  other_models={"planner": (planner_model, tokenizer)} if m.two_models else None)


def _update(model, opt, planner_model, popt, plan_ro, plan_adv, work_ro, work_adv, g, train) -> tuple[dict, dict, float]:
    """Each role's GRPO loss (rho = 1) on its own tokens, averaged over its own tokens: with one model
    both losses add up before one optimizer step; with two, each model steps on its own. Returns the
    planner's and the worker's loss statistics and the worker model's gradient norm (the planner's, with
    two models, is in its statistics)."""
    two = planner_model is not model
    zero_grads(model)
    if two:
        zero_grads(planner_model)
    pst, wst = {}, {}
    if plan_ro is not None:
        pmask = plan_ro.completion_mask.clone()
        if g.mask_truncated:
            pmask[plan_ro.truncated] = 0
        pst = policy_backward(planner_model, plan_ro, plan_adv, pmask, g, bf16=train.bf16,
                              micro_batch_size=train.micro_batch_size)
    if work_ro.completion_ids.shape[0]:
        wmask = work_ro.completion_mask.clone()
        if g.mask_truncated:
            wmask[work_ro.truncated] = 0
        one = g.model_copy(update={"group_size": 1})  # a worker call's prompt is its own (no shared group prompt)
        wst = policy_backward(model, work_ro, work_adv, wmask, one, bf16=train.bf16,
                              micro_batch_size=train.micro_batch_size)
    grad_norm = optimizer_step(model, opt, train.max_grad_norm)
    if two:
        pst["grad_norm"] = optimizer_step(planner_model, popt, train.max_grad_norm)
    return pst, wst, grad_norm


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
    """G trajectories of each problem (the module docstring's plan and work); sampled at `temperature`, or
    greedy.

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


def check_models(cfg: RunConfig, generator: str, verifier: str) -> dict:
    """The models `cotrain check` builds beside the worker: the planner, where it is a model of its own
    (`mars.two_models`), a second copy of the run's start as a run builds it."""
    if not cfg.mars.two_models:
        return {}
    return {"planner": (*initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp), generator + ", a second copy")}


def check_evaluation(counts: dict[str, int]) -> dict[str, int]:
    """The generator's evaluations `cotrain check` counts for mars (`check.eval_sequences`): a problem's plan and
    its worker's steps count as one sequence (together about one solution's tokens), and mars writes no larger
    evaluation (`eval.larger_n`: its pair is not one model's final evaluation)."""
    return {**counts, "larger": 0}
