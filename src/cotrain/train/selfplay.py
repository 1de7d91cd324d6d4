"""The proposer-solver-judge loop's shared pieces, used by triad and reliability: the setup both run before
their loops (`open_selfplay`: the three roles' models, one shared model or three, and their optimizers, the
session, the safeguard, the state a checkpoint keeps), the seed questions, the proposer's step and
warm-up, judging, one optimizer step per model, and the ground-truth monitors (formulas in docs/design.md, "Label-free recipes").
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from cotrain import dist
from cotrain.config import (
    GrpoConfig,
    ModelConfig,
    RunSettings,
    SafeguardConfig,
    SelfPlayConfig,
    TrainConfig,
    VerifierConfig,
)
from cotrain.eval.during import eval_during_training
from cotrain.eval.metrics import majority_gap
from cotrain.eval.verifier_metrics import verifier_gap
from cotrain.models.build import load_model, load_weights, prepare_for_training, save_model
from cotrain.models.generate import Rollout, concat_rollouts, generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_proposer_prompts, uses_chat
from cotrain.models.verify import prefer, verify
from cotrain.rl.mae import agreement_round, decided_scores, judge_score, role_advantages
from cotrain.roles import proposer as proposer_role
from cotrain.roles.verifier import Verification
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import Progress, list_checkpoints, resolve_model_dir
from cotrain.runs.session import Session, finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import blind
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_metrics, rollout_tokens
from cotrain.train.safeguard import Safeguard
from cotrain.train.setup import derive_seed, initial_model, initial_verifier, make_optimizer, training_pool
from cotrain.train.update import optimizer_step, policy_backward, supervised_step, zero_grads


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ---------------------------------------------------------------------- the three roles' models


@dataclass
class SelfPlayModels:
    """The solver (the generator), proposer and judge: one model in all three roles
    (`selfplay.shared_model`) or three; `roles` as checkpoints save them, one optimizer per model."""

    solver: tuple       # (model, tokenizer)
    proposer: tuple
    judge: tuple
    roles: dict = field(default_factory=dict)
    optimizers: dict = field(default_factory=dict)  # id(model): (optimizer, scheduler)

    @property
    def models(self) -> list:
        """Each distinct model once."""
        return list({id(m): m for m, _ in (self.solver, self.proposer, self.judge)}.values())

    def n_params(self) -> dict[str, int]:
        return {"prop": self.proposer[0].num_parameters(), "gen": self.solver[0].num_parameters(),
                "judge": self.judge[0].num_parameters()}


def add_optimizers(sp: SelfPlayConfig, t: TrainConfig, judge_lr: float, m: SelfPlayModels) -> None:
    """One AdamW per model (the solver at `train.lr`, the proposer at `selfplay.proposer_lr`, the judge at
    `judge_lr`: the verifier's)."""
    (solver, tok), (proposer, ptok), (judge, jtok) = m.solver, m.proposer, m.judge
    opt, sched = make_optimizer(solver, t, t.steps)
    m.roles = {"generator": Policy(solver, tok, opt, sched)}
    m.optimizers = {id(solver): (opt, sched)}
    if not sp.shared_model:
        popt, psched = make_optimizer(proposer, t.model_copy(update={"lr": sp.proposer_lr or t.lr}), t.steps)
        jopt, jsched = make_optimizer(judge, t.model_copy(update={"lr": judge_lr, "warmup_steps": 0}), t.steps)
        m.roles.update({"proposer": Policy(proposer, ptok, popt, psched), "judge": Policy(judge, jtok, jopt, jsched)})
        m.optimizers.update({id(proposer): (popt, psched), id(judge): (jopt, jsched)})


@dataclass
class SelfPlayRun:
    """What a self-play recipe builds before its loop and keeps across checkpoints: the three roles' models,
    the session, the seed questions and their hidden truth, the solver's frozen start (None where nothing reads
    it), the compute ledger, the buffer of proposed questions, the safeguard, and every sampling call's seed and
    precision (`at`)."""

    m: SelfPlayModels
    session: Session
    seeds: list[str]
    truth_of: Callable
    older: torch.nn.Module | None
    compute: Compute
    buffer: list[str]
    safeguard: Safeguard
    at: dict
    buffer_size: int

    def state(self) -> dict:
        """The run state a checkpoint keeps beside the weights."""
        return {"compute": self.compute.tokens, "buffer": self.buffer[-self.buffer_size:], **self.safeguard.state()}

    def questions(self, sp: SelfPlayConfig, task, n: int, step: int, timer: StepTimer) -> tuple[Proposals, list[str]]:
        """The proposer's step (from one seed question drawn for this step) and the step's `n` questions: its
        fresh proposals, filled up from the buffer."""
        rng = random.Random(derive_seed(self.at["seed"], "questions", step))
        props = propose(sp, task, self.m.proposer, rng.choice(self.seeds), self.compute, step, timer, **self.at)
        return props, props.fresh + [rng.choice(self.buffer) for _ in range(max(0, n - len(props.fresh)))]

    def end_step(self, step: int, metrics: dict, timer: StepTimer, task, eval_every: int) -> None:
        """A step's last phase: the solver's evaluation when due (every `eval_every` steps), the step's timings, its
        row logged (the progress line: the proposer's valid share, the solver's judge score) and checkpointed
        when due."""
        solver, tok = self.m.solver
        if eval_every and step % eval_every == 0:
            metrics.update(eval_during_training(self.session, solver, tok, task))
            solver.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(self.session, step, metrics, {"valid": metrics["prop/valid"], "judge": metrics["gen/judge_score"]})
        maybe_checkpoint(self.session, step, self.m.roles, extra=self.state())

    def finish(self, task, step: int) -> dict:
        """The run's end (`runs.session.finish`): the solver saved and evaluated, the proposer and the judge saved
        beside it where they are models of their own, the compute ledger in eval.json."""
        others = {role: getattr(self.m, role) for role in ("proposer", "judge") if role in self.m.roles}
        return finish(self.session, *self.m.solver, task, step, other_models=others,
                      other_results={"compute": self.compute.summary()})


def open_selfplay(sp: SelfPlayConfig, v: VerifierConfig, guard: SafeguardConfig, mcfg: ModelConfig, init: str | None,
                  seed: int, max_new_tokens: int, settings: RunSettings, config: dict, run_dir, resume: bool, task,
                  desc: str, older_wanted: bool) -> SelfPlayRun:
    """The three roles' models in train mode, with their optimizers (the judge from `verifier.init`, the proposer
    from `selfplay.proposer_init` or as the solver: each built from the model config `mcfg` or the start `init`),
    the solver's frozen start where `older_wanted` or the safeguard (`guard`) measures a KL (with one shared model
    a resumed run reloads the copy saved after the proposer's warm-up), the session (`open_session` of `settings`
    and `config`, restored on resume), the safeguard's probe (answers of `max_new_tokens`), and on a fresh run the
    proposer's warm-up at step 0."""
    t = settings.train
    solver, tok = initial_model(mcfg, init, seed, t.fsdp)
    if sp.shared_model:
        proposer, ptok, judge_model, jtok = solver, tok, solver, tok
    else:
        if sp.proposer_init:
            proposer, ptok = load_model(resolve_model_dir(sp.proposer_init), dtype=mcfg.dtype)
            proposer = prepare_for_training(proposer, mcfg, dist.device())
        else:
            proposer, ptok = initial_model(mcfg, init, seed, t.fsdp)
        judge_model, jtok = initial_verifier(v, mcfg, init, seed, t.fsdp)
    m = SelfPlayModels((solver, tok), (proposer, ptok), (judge_model, jtok))
    for model in m.models:
        model.train()  # each on its model config's device: placed when built
    seeds, truth = seed_questions(task, seed, sp.seed_questions)  # truth: for the gt/ metrics alone
    truth_of = truth_lookup(task, truth)
    add_optimizers(sp, t, v.lr, m)
    older = None
    if older_wanted or guard.measures_kl:
        older, _ = initial_model(mcfg, init, seed, t.fsdp)
        if resume and bool(list_checkpoints(run_dir)) and start_path(run_dir).is_dir():
            load_weights(older, start_path(run_dir))
        older = older.eval().requires_grad_(False)
    warmed = resume and bool(list_checkpoints(run_dir))
    session = open_session(settings, config, run_dir, resume, m.roles, desc=desc)
    at = {"seed": seed, "bf16": t.bf16}  # every sampling call's seed and (resolved) precision
    buffer: list[str] = list(session.state.get("buffer", seeds))
    compute = Compute(m.n_params(), session.state.get("compute"))
    safeguard = Safeguard(guard, t, seed, max_new_tokens, seeds, m.solver, older if guard.measures_kl else None,
                          probe_judge(sp, v, m.judge, compute, **at), compute, session.state.get("safeguard"))
    run = SelfPlayRun(m, session, seeds, truth_of, older, compute, buffer, safeguard, at, sp.buffer_size)
    if not warmed and sp.proposer_warmup_steps:  # step 0: no answers
        proposer_warm_up(session, sp, v, seed, m, seeds, compute, older, run.state())
    return run


def start_path(run_dir) -> Path:
    return Path(run_dir) / "warmup" / "start"


def seed_questions(task, seed: int, n: int | None) -> tuple[list[str], dict]:
    """`n` questions of the train split (`selfplay.seed_questions`) with their answers hidden (`blind`), and
    {question: problem} of their ground truth, which only the gt/ metrics read."""
    labelled, _ = training_pool(task, seed, n)
    return [p.question for p in blind(labelled)], {p.question: p for p in labelled}


# ---------------------------------------------------------------------- the proposer


@dataclass
class Proposals:
    rollout: Rollout
    questions: list[str | None]        # parsed, None when unparsable
    checks: list[tuple[bool, bool]]    # (parsable, valid) of each
    fresh: list[str]                   # the distinct valid questions, in order


def check_question(task, question: str | None, max_ops: int | None, max_operand: int | None,
                   solvable: bool = True) -> tuple[bool, bool]:
    """(parsable, valid) of a proposed question: the task's own check where it has one (with
    `solvable`, its exact solver's too where it has one), else any non-empty question is both."""
    if question is None:
        return False, False
    if hasattr(task, "check_question"):
        return task.check_question(question, max_ops=max_ops, max_operand=max_operand, solvable=solvable)
    return True, True


def propose(sp: SelfPlayConfig, task, proposer: tuple, example: str, compute: Compute, step: int,
            timer: StepTimer, *, seed: int, bf16: bool) -> Proposals:
    """`selfplay.proposals` questions from one prompt (showing `example`, a seed question): its group."""
    model, ptok = proposer
    pro = generate(model, encode_proposer_prompts(ptok, [example]), group_size=sp.proposals,
                   max_new_tokens=sp.question_max_new_tokens, eos_id=ptok.eos_token_id, pad_id=ptok.pad_token_id,
                   temperature=sp.proposer_temperature, seed=derive_seed(seed, "propose", step), bf16=bf16)
    compute.add("prop", forward=rollout_tokens(pro)[0], generated=rollout_tokens(pro)[1])
    timer.lap("propose", rollout_tokens(pro)[1])
    chat = uses_chat(ptok)
    proposed = [proposer_role.parse(t, chat=chat) for t in decode_completions(ptok, pro.completion_ids,
                                                                               pro.completion_mask)]
    checks = [check_question(task, q, sp.max_ops, sp.max_operand, sp.check_solvable) for q in proposed]
    fresh = list(dict.fromkeys(q for q, (_, valid) in zip(proposed, checks) if valid))
    return Proposals(pro, proposed, checks, fresh)


def proposer_backward(sp: SelfPlayConfig, g: GrpoConfig, t: TrainConfig, proposer: tuple, props: Proposals,
                      rewards: torch.Tensor, compute: Compute) -> dict:
    """Add the proposer's GRPO loss (advantages normalised over its batch) to its model's gradients: the
    solver's GRPO settings at the proposer's group size, length and temperature, no KL term."""
    gp = g.model_copy(update={"group_size": sp.proposals, "max_new_tokens": sp.question_max_new_tokens,
                              "temperature": sp.proposer_temperature, "beta": 0.0})
    st = policy_backward(proposer[0], props.rollout, role_advantages(rewards, ["prop"] * len(rewards)),
                         props.rollout.completion_mask, gp, bf16=t.bf16, micro_batch_size=t.micro_batch_size)
    compute.add("prop", trained=st["tokens_trained"] + st["prompt_tokens_trained"])
    return st


def proposer_metrics(task, props: Proposals, rewards: torch.Tensor, stats: dict, grad_norm: float) -> dict:
    """prop/*: reward, parsable, valid, distinct, the size of the proposed questions (n_ops,
    max_operand), length, entropy, and the update's statistics; and gt/proposed_solvable, the share of
    the valid proposals the task can solve (a metric: below 1 only where validity leaves the solver out)."""
    sizes = [task.size(q) for q in props.questions if q is not None] if hasattr(task, "size") else []
    sizes = [s for s in sizes if s]
    solvable = ({"gt/proposed_solvable": mean([float(task.problem_of(q) is not None) for q in props.fresh])}
                if props.fresh and hasattr(task, "problem_of") else {})
    return {"prop/reward": rewards.mean().item(), "prop/reward_std": rewards.std().item(),
            "prop/parsable": mean([float(p) for p, _ in props.checks]),
            "prop/valid": mean([float(ok) for _, ok in props.checks]),
            "prop/distinct": len(props.fresh) / len(props.questions),
            **{k: x for k, x in rollout_metrics("prop", props.rollout).items() if k != "prop/len_clipped_ratio"},
            "prop/grad_norm": grad_norm,
            **{f"prop/{k}": mean([s[k] for s in sizes]) for k in ("n_ops", "max_operand") if sizes},
            **{f"prop/{k}": x for k, x in stats.items() if "tokens" not in k}, **solvable}


def proposer_warm_up(session: Session, sp: SelfPlayConfig, v: VerifierConfig, seed: int, m: SelfPlayModels,
                     seeds: list[str], compute: Compute, older, extra: dict) -> None:
    """Step 0: the proposer's SFT warm-up (at the verifier's warm-up settings, `v`); with one shared model the
    solver's start copy follows it (and is saved for resume). Checkpointed before its row is logged."""
    s = session.settings
    metrics = warmup_proposer(sp, v, s.train, *m.proposer, seeds, compute, seed=seed, progress=s.log.progress)
    if sp.shared_model and older is not None:
        older.load_state_dict(m.solver[0].state_dict())
        dist.on_main(save_model, *m.solver, start_path(session.run_dir))
    metrics.update(compute.metrics())
    maybe_checkpoint(session, 0, m.roles, force=True, extra=extra)
    session.logger.log(0, metrics)


def warmup_proposer(sp: SelfPlayConfig, v: VerifierConfig, t: TrainConfig, proposer, ptok, seeds: list[str],
                    compute: Compute, *, seed: int, progress: bool) -> dict[str, float]:
    """SFT of the proposer on the task's own questions (answers never seen): it learns the notation. At the
    verifier's warm-up learning rate and batch size (`v`), `selfplay.proposer_warmup_steps` steps."""
    opt, sched = make_optimizer(proposer, t.model_copy(update={"lr": v.warmup_sft_lr,
                                                                        "warmup_steps": 10, "schedule": "constant"}),
                                sp.proposer_warmup_steps)
    rng = random.Random(derive_seed(seed, "proposer-warmup"))
    bar = Progress(sp.proposer_warmup_steps, enabled=progress and dist.is_main(), desc="proposer warm-up (sft)")
    losses = []
    for step in range(1, sp.proposer_warmup_steps + 1):
        batch = [rng.choice(seeds) for _ in range(v.warmup_batch_size)]
        examples = [rng.choice(seeds) for _ in batch]
        st = supervised_step(proposer, opt, encode_proposer_prompts(ptok, examples),
                             [encode_completion(ptok, q) for q in batch], ptok.pad_token_id,
                             max_grad_norm=t.max_grad_norm, bf16=t.bf16, micro_batch_size=t.micro_batch_size)
        sched.step()
        compute.add("prop", trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        losses.append(st["loss"])
        bar.update(step, {"loss": st["loss"]})
    bar.close()
    tail = losses[-max(1, len(losses) // 10):]
    return {"prop/warmup_loss": sum(tail) / len(tail)}


# ---------------------------------------------------------------------- the judge


class Judgement(NamedTuple):
    """A round of judging: N answers, P passes each, of which the judge sampled D * P (D distinct pairs;
    fewer with `selfplay.judge_early_stop`)."""

    rollout: Rollout                # the sampled passes, D * P rows or fewer (the judge's training rows)
    sampled: list[Verification]     # their parsed verdicts, aligned with `rollout`
    parsed: list[Verification]      # each answer's P verdicts, N * P (copies of a pair share its verdicts)
    scores: torch.Tensor            # [N, P]: 1 approve, 0 reject, 0.5 unparsable
    distinct: float                 # D / N
    drawn: float                    # passes drawn / (D * P): 1 unless judging stopped early


def judge(sp: SelfPlayConfig, v: VerifierConfig, judge: tuple, questions: list[str], answers: list[str],
          compute: Compute, step: int, timer: StepTimer | None, *, seed: int, bf16: bool,
          label: str = "judge") -> Judgement:
    """`selfplay.judge_passes` sampled verifications of each answer, each scored 1 (approve), 0 (reject)
    or 0.5 (unparsable). With `selfplay.judge_distinct` each distinct (question, answer) pair is judged
    once and its copies share its passes: every answer's score is still the mean of P passes drawn
    for it alone, but a group's repeated answers (common once a solver is sure) are not judged again
    and the judge does not train on repeats. With `selfplay.judge_early_stop` a pair's passes stop once
    the first `agreement_round(P)` agree: the missing passes count as that verdict in `scores` and
    `parsed`; `rollout` and `sampled` hold the passes drawn, the first round's then the rest's. `label`
    names the sampling seed's purpose (the safeguard's probe judges with its own); the verifier's sampling
    settings (`v`: temperature, length, drafted or compiled decoding) apply."""
    passes = sp.judge_passes
    model, jtok = judge
    pairs = list(zip(questions, answers))
    distinct = list(dict.fromkeys(pairs)) if sp.judge_distinct else pairs
    first = agreement_round(passes) if sp.judge_early_stop else passes

    def draw(subset: list[tuple[str, str]], n: int, purpose: str):
        return verify(model, jtok, [q for q, _ in subset], [a for _, a in subset], group_size=n,
                      temperature=v.temperature, max_new_tokens=v.max_new_tokens,
                      seed=derive_seed(seed, purpose, step), bf16=bf16, draft_tokens=v.draft_tokens, compiled=v.compile)

    jro, _, sampled = draw(distinct, first, label)
    of_pair = [sampled[i * first:(i + 1) * first] for i in range(len(distinct))]   # each pair's passes
    if first < passes:
        decided = [decided_scores([judge_score([x.final]) for x in v], passes) for v in of_pair]
        rest = [i for i, d in enumerate(decided) if d is None]
        if rest:
            more_ro, _, more = draw([distinct[i] for i in rest], passes - first, label + "/rest")
            k = passes - first
            for j, i in enumerate(rest):
                of_pair[i] = of_pair[i] + more[j * k:(j + 1) * k]
            jro, sampled = concat_rollouts([jro, more_ro], jtok.pad_token_id), sampled + more
        of_pair = [v + [v[0]] * (passes - len(v)) for v in of_pair]                  # decided: the verdict again
    forward, generated = rollout_tokens(jro)
    compute.add("judge", forward=forward, generated=generated)
    if timer is not None:
        timer.lap("verify", generated)
    if sp.judge_distinct:
        row_of = {pair: i for i, pair in enumerate(distinct)}
        rows = [row_of[pair] for pair in pairs]
    else:
        rows = range(len(pairs))
    parsed = [x for r in rows for x in of_pair[r]]
    scores = torch.tensor([[judge_score([x.final]) for x in parsed[i * passes:(i + 1) * passes]]
                           for i in range(len(answers))]).view(len(answers), passes)     # [N, P]
    return Judgement(jro, sampled, parsed, scores, len(distinct) / max(1, len(pairs)),
                     len(sampled) / max(1, len(distinct) * passes))


def probe_judge(sp: SelfPlayConfig, v: VerifierConfig, judge_role: tuple, compute: Compute, *, seed: int, bf16: bool):
    """The safeguard's probe of the judge: (questions, answers, step) -> each answer's mean score over
    `selfplay.judge_passes` passes, sampled with a seed of its own (not the training judge's)."""
    def probe(questions: list[str], answers: list[str], step: int) -> list[float]:
        return judge(sp, v, judge_role, questions, answers, compute, step, None, seed=seed, bf16=bf16,
                     label="safeguard-judge").scores.mean(dim=1).tolist()
    return probe


# ---------------------------------------------------------------------- pairwise judgments (reliability)

UNSTATED = 2.0
"""A pairwise judgment without a preference line: a value of its own, never a pair's modal preference."""


def judge_preferences(passes: int, pairs_per_question: int, v: VerifierConfig, judge: tuple, questions: list[str],
                      texts: list[list[str]], compute: Compute, step: int, timer: StepTimer, *, seed: int,
                      bf16: bool) -> tuple[list[torch.Tensor], list[list[tuple[int, int]]]]:
    """`selfplay.judge_passes` pairwise judgments (roles/verifier.py) of candidate pairs of each question:
    every pair i < j of its C candidates, or `pairs_per_question` of them drawn at random (0: every pair),
    sampled at the verifier's temperature (`v`).

    Returns:
        Per question, its preferences [n_pairs, P] (1: the pair's first candidate preferred, -1: the
        second, 0: neither, UNSTATED: no preference line), and its pairs (i, j).
    """
    model, jtok = judge
    rng = random.Random(derive_seed(seed, "pairs", step))
    every = [(i, j) for i in range(len(texts[0])) for j in range(i + 1, len(texts[0]))]
    chosen = [sorted(rng.sample(every, min(pairs_per_question, len(every)))) if pairs_per_question else every
              for _ in questions]
    asked = [(q, row[i], row[j]) for q, row, pairs in zip(questions, texts, chosen) for i, j in pairs]
    ro, prefs = prefer(model, jtok, *map(list, zip(*asked)), group_size=passes, temperature=v.temperature,
                       max_new_tokens=2 * v.max_new_tokens + 16, seed=derive_seed(seed, "prefer", step), bf16=bf16)
    forward, generated = rollout_tokens(ro)
    compute.add("judge", forward=forward, generated=generated)
    timer.lap("prefer", generated)
    values = torch.tensor([UNSTATED if p is None else float(p) for p in prefs]).view(len(asked), passes)
    bounds = [0]
    for pairs in chosen:
        bounds.append(bounds[-1] + len(pairs))
    return [values[a:b] for a, b in zip(bounds, bounds[1:])], chosen


def preference_metrics(prefs: list[torch.Tensor], chosen: list[list[tuple[int, int]]],
                       correct: list[bool | None], n_candidates: int) -> dict[str, float]:
    """judge/pair_stated, the share of pairwise judgments with a preference; and gt/pair_agree (ground
    truth: metrics only), the share of the judgments of pairs with one right and one wrong candidate
    that prefer the right one."""
    stated = torch.cat(prefs) != UNSTATED if prefs else torch.zeros(0, dtype=torch.bool)
    agree = []
    for q, (values, pairs) in enumerate(zip(prefs, chosen)):
        for row, (i, j) in zip(values.tolist(), pairs):
            a, b = correct[q * n_candidates + i], correct[q * n_candidates + j]
            if a is not None and b is not None and a != b:
                agree += [float(v == (1.0 if a else -1.0)) for v in row]
    return {"judge/pair_stated": stated.float().mean().item() if stated.numel() else 0.0,
            **({"gt/pair_agree": mean(agree)} if agree else {})}


# ---------------------------------------------------------------------- update and monitors


def step_models(cfg: TrainConfig, m: SelfPlayModels, solver_scale: float = 1.0) -> dict[int, float]:
    """One optimizer step per model on the gradients its roles accumulated; {id(model): grad norm}. The
    solver's model steps with its learning rate times `solver_scale` (the safeguard's; with one shared
    model, every role's update is scaled)."""
    grad_norms = {}
    for model in m.models:
        opt, sched = m.optimizers[id(model)]
        scale = solver_scale if model is m.solver[0] else 1.0
        grad_norms[id(model)] = optimizer_step(model, opt, cfg.max_grad_norm, scale)
        sched.step()
    return grad_norms


def zero_all(m: SelfPlayModels) -> None:
    for model in m.models:
        zero_grads(model)


def gt_correct(task, truth_of, questions: list[str], answers: list[str]) -> list[bool | None]:
    """Ground-truth correctness of each answer (None: the question's truth is unknown); metrics only."""
    out = []
    for q, a in zip(questions, answers):
        problem = truth_of(q)
        out.append(None if problem is None else task.grade(a, problem) >= 1)
    return out


def judge_agreement(parsed, passes: int, correct: list[bool | None]) -> float:
    """The share of judging passes whose verdict equals the ground truth (answers of known truth only)."""
    pairs = [(x.final, c) for i, c in enumerate(correct) if c is not None for x in parsed[i * passes:(i + 1) * passes]]
    return mean([float(f is c) for f, c in pairs])


def judge_gaps(answers: list[str | None], correct: list[bool | None], judged: list[float], group_size: int,
               equal=None) -> dict[str, float]:
    """The generation-verification gaps of a round, over the questions whose ground truth is known
    (metrics only): gap/judge, the accuracy of the answers the judge approves (mean score over its passes
    above 0.5) minus the accuracy of all, and gap/majority, maj over each question's `group_size`
    answers minus their accuracy. Empty when no question's truth is known."""
    idx = [i + j for i in range(0, len(answers), group_size) if correct[i] is not None for j in range(group_size)]
    if not idx:
        return {}
    known = [bool(correct[k]) for k in idx]
    return {"gap/judge": verifier_gap([judged[k] > 0.5 for k in idx], known),
            "gap/majority": majority_gap([answers[k] for k in idx], known, group_size, equal)}


def truth_lookup(task, truth: dict):
    """question -> its ground-truth problem (a seed question's, or the task's own reading of a proposed
    one; None when unknown), for the metrics alone."""
    def truth_of(question: str):
        if question in truth:
            return truth[question]
        return task.problem_of(question) if hasattr(task, "problem_of") else None
    return truth_of
