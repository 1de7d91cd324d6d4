"""The verifier's side of generator-verifier co-training, shared by tango, frozen_verifier and
consistency: its warm-up (SFT on automatically labelled verifications, then optional RL steps), its RL
step, the verification of the generator's samples and the process advantages read from it, the
co-training monitors, and the final comparison with the warmed-up verifier (formulas in docs/design.md, "RL Tango").
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from cotrain import dist
from cotrain.config import CoTrainingConfig, GrpoConfig, RolloutConfig, RunSettings, TrainConfig, VerifierConfig
from cotrain.errors import UserError
from cotrain.eval.metrics import majority_gap
from cotrain.eval.verifier_eval import evaluate_on_injected, evaluate_verifiers, step_verdicts, verifier_score
from cotrain.eval.verifier_metrics import verdict_metrics, verifier_gap
from cotrain.models.build import load_model, save_model
from cotrain.models.generate import Rollout, generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_generator_prompts, uses_chat
from cotrain.models.verify import encode_pair_prompts, encode_verifier_prompts, step_ends, verify
from cotrain.rl.losses import group_advantages
from cotrain.rl.tango import (
    WITH_FINAL,
    alpha_at,
    class_weights,
    credit_advantages,
    flip_verdicts,
    mixed_mask,
    most_uncertain,
    only_mixed_groups,
    verdict_counts,
    verifier_rewards,
    verifier_trust,
)
from cotrain.roles.verifier import Verification, parse, reference_pair, reference_verification, split_steps
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import Progress, write_jsonl_gz_atomic
from cotrain.runs.session import Session, maybe_checkpoint
from cotrain.train.compute import Compute
from cotrain.train.rollout import (
    computing_lines,
    early_stop_metrics,
    reward_metrics,
    rollout_metrics,
    rollout_tokens,
    step_shape_metrics,
)
from cotrain.train.setup import derive_seed, make_optimizer, sample_batch
from cotrain.train.update import policy_update, supervised_step

Labeller = Callable[[list[str], list, int], list]
"""(solutions, their problems, solutions per prompt) -> each solution's label: True (correct), False, or
None (unlabelled): ground truth, or a label-free recipe's pseudo-label."""


# ---------------------------------------------------------------------- verification of the generator's samples


def verify_samples(verifier, vtok, questions: list[str], texts: list[str], v: VerifierConfig, *, seed: int,
                   bf16: bool, rollout: Rollout | None = None, needed: list[bool] | None = None
                   ) -> tuple[Rollout | None, list[Verification], float]:
    """The verifier's verdicts on each sample: (its rollout, None where nothing was verified; the parsed
    verification of each sample; the share of (question, sample) pairs verified). Greedy verification of
    a repeated pair gives the same verdicts, so each distinct pair is verified once (a group often repeats
    its correct solutions). Given `needed` (a flag per sample), only the pairs of samples flagged are
    verified. With `v.verify_share` < 1 and the samples' `rollout`, only that share of them is verified,
    those of highest mean token entropy. The others get the verification of an empty text (no verdict)."""
    pairs = list(zip(questions, texts))
    distinct = list(dict.fromkeys(pairs)) if v.greedy_verdicts else pairs
    first = {}
    for i, pair in enumerate(pairs):
        first.setdefault(pair, i)                              # a pair's copies sampled alike: its first
    rows = [first[pair] for pair in distinct] if v.greedy_verdicts else list(range(len(pairs)))
    keep = list(range(len(distinct)))
    if needed is not None:
        wanted = {pair for pair, flag in zip(pairs, needed, strict=True) if flag}
        keep = [i for i in keep if (distinct[i] in wanted if v.greedy_verdicts else needed[i])]
    if v.verify_share < 1 and rollout is not None and keep:
        mask = rollout.completion_mask.to(rollout.entropy.dtype)
        entropy = ((rollout.entropy * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()    # [N]
        keep = [keep[j] for j in most_uncertain([entropy[rows[i]] for i in keep], v.verify_share)]
    vro, parsed_kept = None, []
    if keep:
        vro, _, parsed_kept = verify(verifier, vtok, [distinct[i][0] for i in keep], [distinct[i][1] for i in keep],
                                     greedy=v.greedy_verdicts, temperature=v.temperature,
                                     max_new_tokens=v.max_new_tokens, seed=seed, bf16=bf16,
                                     draft_tokens=v.draft_tokens, compiled=v.compile)
    kept = dict(zip(keep, parsed_kept))
    parsed_distinct = [kept[i] if i in kept else parse("", len(split_steps(t)))                # unverified: no verdict
                       for i, (_, t) in enumerate(distinct)]
    index = {pair: i for i, pair in enumerate(distinct)}
    parsed = [parsed_distinct[index[pair]] for pair in pairs] if v.greedy_verdicts else parsed_distinct
    return vro, parsed, len(keep) / len(pairs)


def verdicts_on_samples(verifier: tuple | None, task, problems: list, texts: list[str], correct: list[bool],
                        v: VerifierConfig, *, rollout: Rollout, seed: int, bf16: bool, needed: list[bool] | None = None
                        ) -> tuple[Rollout | None, list[Verification], float]:
    """The step and final verdicts on the generator's samples from where `verifier.source` says: the
    verifier (model, tokenizer) through `verify_samples` (only the samples `needed` flags, given it), or,
    with `verifier` None, the task's own (`oracle_verifications`, every sample: they cost nothing, and a
    noisy oracle's draws stay in order). Returns (the verifier's rollout or None, the verifications, the
    share of samples verified)."""
    if verifier is None:
        return None, oracle_verifications(task, problems, texts, correct, v, seed), 1.0
    return verify_samples(*verifier, [p.question for p in problems], texts, v, rollout=rollout, seed=seed, bf16=bf16,
                          needed=needed)


def mixed_groups(correct: list[bool], group_size: int) -> list[bool]:
    """Per sample: whether its group holds both a right and a wrong sample (the groups `only_mixed_groups`
    keeps, through the same `mixed_mask`)."""
    return mixed_mask(torch.tensor(correct, dtype=torch.float32), group_size).tolist()


def process_term(tg: CoTrainingConfig, tokenizer, task, ro: Rollout, texts: list[str], parsed: list[Verification],
                 rewards: torch.Tensor, complete: list[bool], group_size: int) -> tuple[list[list[float] | None], torch.Tensor]:
    """The generator's process advantages [N, T] under `cotraining.credit` (`verdict_process_advantages`, the
    lines that compute read from the task under final_compute), set to 0 in every group whose outcome rewards
    [N] are all equal under `process_groups: mixed` (`only_mixed_groups`); and each sample's step rewards."""
    computes = computing_lines(task, texts) if tg.credit == "final_compute" else None
    s_rewards, process_adv = verdict_process_advantages(tokenizer, ro, texts, parsed, group_size, tg.credit, complete, computes)
    if tg.process_groups == "mixed":  # all-right and all-wrong groups: untrained, as under GRPO
        process_adv = only_mixed_groups(process_adv, rewards, group_size)
    return s_rewards, process_adv


def scheduled_alpha(tg: CoTrainingConfig, step: int, total: int, parsed: list[Verification] | None, correct: list[bool],
                    window: list[tuple], trust: float) -> tuple[float, list[tuple], float, float]:
    """The process advantage's weight at generator step `step` of `total` (rl/tango.py `alpha_at`): under
    `alpha_schedule: auto` times the verifier's measured trust over the verdict counts of the last 5 steps
    (`verifier_trust`; a solution with any rejected step counts as rejected). Returns (alpha, the window, the
    trust, the balanced accuracy behind it: nan unless auto)."""
    alpha = alpha_at(step, total, tg.alpha, tg.alpha_schedule)
    if tg.alpha_schedule != "auto":
        return alpha, window, trust, math.nan
    window = [*window, verdict_counts([x.final is True and all(x.steps) for x in parsed], correct)][-5:]
    trust, trust_ba, _ = verifier_trust(window, trust)
    return alpha * trust, window, trust, trust_ba


def verdict_process_advantages(tokenizer, ro: Rollout, texts: list[str], parsed: list[Verification],
                               group_size: int, credit: str = "to_go", complete: list[bool] | None = None,
                               computes: list[list[bool]] | None = None
                               ) -> tuple[list[list[float] | None], torch.Tensor]:
    """Each sample's step rewards and the process advantages [N, T] they give under `credit`
    (rl/tango.py `credit_advantages`), the steps' and the answer's end tokens read from the rollout."""
    ends = step_ends(tokenizer, ro.completion_ids, ro.completion_mask, texts, answer=credit in WITH_FINAL)
    return credit_advantages(credit, [x.steps for x in parsed], [x.final for x in parsed], complete, ends, group_size,
                             ro.completion_ids.shape[1], computes)


def require_process_labels(task, source: str, name: str) -> None:
    """Refuse `verifier.source: oracle` or `noisy` on a task without process labels (`step_labels`).

    Raises:
        UserError: one line naming the tasks that have them.
    """
    if source in ("oracle", "noisy") and not hasattr(task, "step_labels"):
        raise UserError(f"verifier.source: {source} reads the task's process labels; task {name} has none "
                        "(tasks with them: countdown, arith, wordproblems)")


def oracle_verifications(task, problems: list, texts: list[str], correct: list[bool], v: VerifierConfig,
                         seed: int) -> list[Verification]:
    """What a perfect verifier would say of each sample (`verifier.source: oracle`): each step's verdict
    from the task's process labels, the final verdict from the ground truth; with `verifier.source: noisy`,
    flipped at `noise_fp` (false steps and wrong solutions approved) and `noise_fn` (right steps and
    correct solutions rejected), the final verdicts at `noise_final_fp` / `noise_final_fn` where they are
    set, from a generator seeded with `seed` (one draw per verdict whatever the rates). With
    `final_strict`, a final verdict approves only where every step verdict given approves too."""
    rng = random.Random(seed)
    out = []
    for p, text, ok in zip(problems, texts, correct, strict=True):
        labels = [bool(x) for x in task.step_labels(p, [line for _, line in split_steps(text)])]
        final = bool(ok)
        if v.source == "noisy":
            labels = flip_verdicts(labels, v.noise_fp, v.noise_fn, rng)
            final = flip_verdicts([final], *final_noise(v), rng)[0]
        out.append(Verification(steps=labels, final=final and (all(labels) or not v.final_strict), format=1.0))
    return out


def final_noise(v: VerifierConfig) -> tuple[float, float]:
    """The noisy oracle's final-verdict rates (approve a wrong solution, reject a correct one): its
    `noise_final_fp` / `noise_final_fn`, the step rates where those are unset."""
    return (v.noise_fp if v.noise_final_fp is None else v.noise_final_fp,
            v.noise_fn if v.noise_final_fn is None else v.noise_final_fn)


def step_monitors(task, problems: list, texts: list[str], parsed: list[Verification],
                  complete: list[bool], correct: list[bool]) -> dict[str, float]:
    """The verifier's step verdicts on the generator's samples against the task's process labels (read by
    these metrics alone): `cotrain/step_approve_right`, `cotrain/step_catch` and `cotrain/step_catch/<kind>`
    (its catch of false steps, by fault where the task names them), `cotrain/first_false_agree`; and
    `gen/early_stop` and `gen/early_stop_right` (`early_stop_metrics`), with the solutions' layout
    (`step_shape_metrics`)."""
    out = {**early_stop_metrics(complete, correct), **step_shape_metrics(task, texts)}
    m = step_verdicts(task, problems, texts, parsed)
    names = {"approve_right": "step_approve_right", "catch_false": "step_catch", "first_false_agree": "first_false_agree"}
    out.update({f"cotrain/{names.get(k, k.replace('catch/', 'step_catch/'))}": x for k, x in m.items()
                if k != "usable" and not k.startswith("n_false/")})
    return out


def cotrain_monitors(parsed: list[Verification], correct: list[bool], answers: list[str | None],
                     group_size: int, equal=None) -> dict[str, float]:
    """How the verifier's verdicts on the generator's samples match their ground truth (read by these
    metrics alone): gen/acc, cotrain/agree (accuracy), agree_balanced, auroc (of `verifier_score`,
    when both classes are present), hack_gap (approval rate minus accuracy), approve_rate; and the
    generation-verification gaps on these samples: gap/verifier (accuracy of the approved minus
    accuracy of all) and gap/majority (maj@G minus the samples' accuracy, over each prompt's group)."""
    approved = [x.final for x in parsed]
    health = verdict_metrics(approved, correct, [verifier_score(x) for x in parsed])
    return {"gen/acc": sum(correct) / len(correct), "cotrain/agree": health["accuracy"],
            "cotrain/agree_balanced": health["balanced_accuracy"],
            **({"cotrain/auroc": health["auroc"]} if "auroc" in health else {}),
            "cotrain/hack_gap": health["approve_rate"] - health["base_rate"],
            "cotrain/approve_rate": health["approve_rate"],
            "gap/verifier": verifier_gap(approved, correct),
            "gap/majority": majority_gap(answers, correct, group_size, equal)}


def verdict_monitors(task, problems: list, texts: list[str], parsed: list[Verification], complete: list[bool],
                     correct: list[bool], group_size: int, judged: list[bool] | None = None) -> dict[str, float]:
    """A step's `cotrain_monitors`, `step_monitors` and `cotrain/format` (the share of verifications that
    parse), over every sample; given `judged` (the samples a verifier judged, whole groups), the verifier's
    (`cotrain/*`, `gap/verifier`) over those alone, and left out where none was judged."""
    def read(idx: list[int]) -> dict[str, float]:
        p, t, c = [problems[i] for i in idx], [texts[i] for i in idx], [correct[i] for i in idx]
        v = [parsed[i] for i in idx]
        return {**cotrain_monitors(v, c, [task.extract_answer(x) for x in t], group_size,
                                   getattr(task, "answers_equal", None)),
                **step_monitors(task, p, t, v, [complete[i] for i in idx], c),
                "cotrain/format": sum(x.format for x in v) / len(v)}

    every = read(list(range(len(texts))))
    if judged is None:
        return every
    chosen = [i for i, flag in enumerate(judged) if flag]
    mine = read(chosen) if chosen else {}                  # none judged: the verifier's keys left out
    return {**{k: x for k, x in every.items() if not _of_verifier(k)}, **{k: x for k, x in mine.items() if _of_verifier(k)}}


def _of_verifier(key: str) -> bool:
    return key.startswith("cotrain/") or key == "gap/verifier"


def mean_metrics(rows: list[dict]) -> dict[str, float]:
    """Each key's mean over the rows that hold it (several verifier steps logged as one row)."""
    out = {}
    for key in dict.fromkeys(k for m in rows for k in m):
        values = [m[key] for m in rows if key in m]
        out[key] = sum(values) / len(values)
    return out


def build_verifier(built: tuple, v: VerifierConfig, tg: CoTrainingConfig, t: TrainConfig, frozen: bool) -> Policy:
    """The verifier's `Policy` in a co-training run: the (model, tokenizer) `initial_verifier` built, in
    train mode, with an AdamW over its RL steps (its warm-up's and, unless `frozen`, one round's
    `cotraining.ver_steps` per `cotraining.gen_steps` of the run's `train.steps`) at `verifier.lr`."""
    verifier, vtok = built
    verifier.train()
    ver_rl_steps = v.warmup_rl_steps + (0 if frozen else t.steps // tg.gen_steps * tg.ver_steps)
    vopt, vsched = make_optimizer(verifier, t.model_copy(update={"lr": v.lr, "warmup_steps": 0}),
                                  max(ver_rl_steps, 1))
    return Policy(verifier, vtok, vopt, vsched)


# ---------------------------------------------------------------------- the verifier's RL step


@dataclass
class VerifierBatch:
    """The solutions one verifier step trains on: their problems, texts and labels (those labelled), the
    share of the drawn solutions labelled, and their ground truth where the labels are not it (metrics)."""

    problems: list
    solutions: list[str]
    labels: list[bool]
    labelled: float
    truth: list[bool]


@dataclass
class VerifierRL:
    """The verifier's RL step, in four phases a recipe's loop calls in order (`step` calls them all):

      sample      fresh solutions of `verifier.solutions / per_prompt` training prompts from the current
                  generator, labelled by `labels` (those left unlabelled are dropped)
      verify      `verifier.group_size` sampled verifications of each (its GRPO group)
      advantages  reward 1[final verdict == label] + w_format * format (+ w_catch for a caught error with
                  `cotraining.adversarial`), group advantages reweighted by class (1/sqrt of the EMA
                  count of each label, mean 1)
      update      GRPO's update of the verifier, its schedule stepped

    then `metrics`. The phases are timed as time/ver_solutions, time/ver_verify and time/ver_policy.
    `labels` gives the labels; with `truth` (a label-free run) the ground truth is read for the `gt/`
    metrics alone. `state()` is what a checkpoint keeps for resume. The settings are the run's sections:
    `g` the generator's (its sampling; its clip and loss type for the verifier too), `v` the verifier's,
    `tg` co-training's, `train` (clip norm, bf16, micro-batches), `rollout` (the solutions' decoding).
    """

    seed: int
    g: GrpoConfig
    v: VerifierConfig
    tg: CoTrainingConfig
    train: TrainConfig
    rollout: RolloutConfig
    pool: list
    generator: tuple        # (model, tokenizer): writes the solutions
    verifier: Policy        # trained by this step
    compute: Compute
    labels: Labeller
    truth: Callable | None = None
    per_prompt: int = 1     # solutions per prompt
    ema: tuple | None = None
    step_count: int = 0
    vg: object = field(init=False)
    times: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        # its own group size, length and temperature; the generator's clip and loss type
        self.vg = self.g.model_copy(update={"group_size": self.v.group_size, "max_new_tokens": self.v.max_new_tokens,
                                            "temperature": self.v.temperature, "beta": 0.0, "num_iterations": 1,
                                            "num_minibatches": 1})

    def state(self) -> dict:
        return {"class_ema": self.ema, "ver_step": self.step_count}

    def sample(self) -> VerifierBatch:
        """Phase 1: the step's solutions from the current generator, labelled (counts the step)."""
        g, v, (model, tokenizer) = self.g, self.v, self.generator
        self.step_count += 1
        t0 = time.perf_counter()
        prompt_problems = sample_batch(self.pool, max(1, v.solutions // self.per_prompt),
                                       derive_seed(self.seed, "verifier"), self.step_count)
        sro = generate(model, encode_generator_prompts(tokenizer, [p.question for p in prompt_problems]),
                       group_size=self.per_prompt, max_new_tokens=g.max_new_tokens, eos_id=tokenizer.eos_token_id,
                       pad_id=tokenizer.pad_token_id, temperature=g.temperature, top_p=g.top_p,
                       seed=derive_seed(self.seed, "verifier-rollout", self.step_count), bf16=self.train.bf16,
                       draft_tokens=self.rollout.draft_tokens, compiled=self.rollout.compile)
        self.compute.add("gen", forward=rollout_tokens(sro)[0])  # these samples train no one: not "generated"
        solutions = decode_completions(tokenizer, sro.completion_ids, sro.completion_mask)
        problems = [p for p in prompt_problems for _ in range(self.per_prompt)]
        labels = self.labels(solutions, problems, self.per_prompt)
        keep = [i for i, lab in enumerate(labels) if lab is not None]
        solutions, problems = [solutions[i] for i in keep], [problems[i] for i in keep]
        truth = self.truth(solutions, problems) if self.truth and keep else []  # ground truth: metrics only
        self.times = {"solutions": time.perf_counter() - t0}
        return VerifierBatch(problems, solutions, [labels[i] for i in keep], len(keep) / len(labels), truth)

    def verify(self, batch: VerifierBatch) -> tuple[Rollout, list[Verification]]:
        """Phase 2: `verifier.group_size` sampled verifications of each solution (groups contiguous)."""
        v, vp, t0 = self.v, self.verifier, time.perf_counter()
        vro, _, parsed = verify(vp.model, vp.tokenizer, [p.question for p in batch.problems], batch.solutions,
                                group_size=v.group_size, temperature=v.temperature, max_new_tokens=v.max_new_tokens,
                                seed=derive_seed(self.seed, "verifier-verify", self.step_count), bf16=self.train.bf16,
                                draft_tokens=v.draft_tokens, compiled=v.compile)
        self.times["verify"] = time.perf_counter() - t0
        return vro, parsed

    def advantages(self, batch: VerifierBatch, parsed: list[Verification]) -> tuple[torch.Tensor, torch.Tensor]:
        """Phase 3: (rewards [S*Gv], advantages [S*Gv]) of the verifications; the class EMA moves."""
        v, t0 = self.v, time.perf_counter()
        labels = [c for c in batch.labels for _ in range(v.group_size)]                 # [S*Gv]
        rewards = verifier_rewards([x.final for x in parsed], labels, [x.format for x in parsed], v.w_format,
                                   self.tg.adversarial, self.tg.w_catch)                 # [S*Gv]
        advantages = group_advantages(rewards, v.group_size, self.vg.scale_rewards)        # [S*Gv]
        if v.reweight:
            weights, self.ema = class_weights(batch.labels, self.ema, v.class_decay)     # [S]
            advantages = advantages * weights.repeat_interleave(v.group_size)
        self.times["verify"] += time.perf_counter() - t0
        return rewards, advantages

    def update(self, vro: Rollout, advantages: torch.Tensor) -> dict[str, float]:
        """Phase 4: the verifier's GRPO update on its verifications; its schedule stepped."""
        vp, t0 = self.verifier, time.perf_counter()
        st = policy_update(vp.model, vp.optimizer, vro, advantages, vro.completion_mask, self.vg,
                           max_grad_norm=self.train.max_grad_norm, bf16=self.train.bf16,
                           micro_batch_size=self.train.micro_batch_size)
        vp.scheduler.step()
        forward, generated = rollout_tokens(vro)
        self.compute.add("ver", forward=forward, generated=generated,
                         trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        self.times["policy"] = time.perf_counter() - t0
        return st

    def metrics(self, batch: VerifierBatch, vro: Rollout, parsed: list[Verification], rewards: torch.Tensor,
                st: dict) -> dict[str, float]:
        """The step's `ver/*` metrics (and `gt/*` with `truth`), its phases' times."""
        v, finals = self.v, [x.final for x in parsed]
        labels = [c for c in batch.labels for _ in range(v.group_size)]
        times = {"time/ver_solutions": self.times["solutions"], "time/ver_verify": self.times["verify"],
                 "time/ver_policy": self.times["policy"]}
        m = verdict_metrics(finals, labels)
        monitors = {}
        if self.truth:  # ground truth: metrics only
            gt = verdict_metrics(finals, [c for c in batch.truth for _ in range(v.group_size)])
            monitors = {"ver/labelled": batch.labelled, "gt/ver_acc": gt["accuracy"],
                        "gt/ver_balanced_acc": gt["balanced_accuracy"],
                        "gt/ver_pseudo_label_acc": sum(a == b for a, b in zip(batch.labels, batch.truth))
                        / len(batch.labels)}
        return {**monitors, **times, **reward_metrics("ver", rewards, v.group_size), "ver/acc": m["accuracy"],
                "ver/balanced_acc": m["balanced_accuracy"], "ver/format": sum(x.format for x in parsed) / len(parsed),
                "ver/approve_rate": m["approve_rate"], "ver/base_rate": m["base_rate"], **rollout_metrics("ver", vro),
                "ver/lr": self.verifier.scheduler.get_last_lr()[0],
                **{f"ver/{k}": x for k, x in st.items() if "tokens" not in k}}

    def step(self) -> dict[str, float]:
        """One whole step: sample, verify, advantages, update; its metrics."""
        batch = self.sample()
        if not batch.solutions:
            return {"ver/labelled": 0.0}
        vro, parsed = self.verify(batch)
        rewards, advantages = self.advantages(batch, parsed)
        return self.metrics(batch, vro, parsed, rewards, self.update(vro, advantages))


# ---------------------------------------------------------------------- warm-up (step 0)


def warm_up(session: Session, roles: dict, task, pool: list, ver_rl: VerifierRL,
            eval_verifier: Callable[[], dict]) -> None:
    """Step 0: the verifier's SFT warm-up (`warmup_verifier`), then `verifier.warmup_rl_steps` RL steps,
    each followed by the held-out evaluation; the warmed-up verifier is kept in `warmup/verifier` for
    the final comparison, and the run is checkpointed before the row is logged (a run killed in
    between resumes after the warm-up without its row, never with the row twice)."""
    s, t0 = session.settings, time.time()
    (model, tokenizer), verifier, vtok = ver_rl.generator, ver_rl.verifier.model, ver_rl.verifier.tokenizer
    metrics = warmup_verifier(ver_rl.v, s.train, task, pool, model, tokenizer, verifier, vtok, ver_rl.compute,
                              seed=ver_rl.seed, progress=s.log.progress, batch_size=s.eval.batch_size,
                              max_new_tokens=ver_rl.g.max_new_tokens)
    metrics.update(eval_verifier())
    rl = [ver_rl.step() for _ in range(ver_rl.v.warmup_rl_steps)]
    metrics.update(mean_metrics(rl))
    if rl:
        metrics.update({f"{k}_after_rl": x for k, x in eval_verifier().items()})
    dist.on_main(save_model, dist.plain_copy(verifier), vtok, session.run_dir / "warmup" / "verifier")
    metrics.update(ver_rl.compute.metrics())
    metrics["time/warmup"] = time.time() - t0
    maybe_checkpoint(session, 0, roles, force=True, extra={"compute": ver_rl.compute.tokens, **ver_rl.state()})
    session.logger.log(0, metrics)


def warmup_examples(v: VerifierConfig, task, pool, model, tokenizer, compute: Compute, *, seed: int, bf16: bool,
                    progress: bool, batch_size: int, max_new_tokens: int) -> list[tuple]:
    """(problem, solution) pairs for the verifier's SFT warm-up.

    `verifier.warmup_samples` in all: a `warmup_corrupt_frac` share of reference solutions with a wrong
    result injected at a uniformly drawn step (tasks with `corrupt`), a `warmup_clean_frac` share of
    reference solutions as they are, and the rest the generator's own samples (temperature 1, `batch_size`
    at a time, up to `max_new_tokens`) of training problems.
    """
    rng = random.Random(derive_seed(seed, "warmup"))
    n_corrupt = int(v.warmup_samples * v.warmup_corrupt_frac) if hasattr(task, "corrupt") else 0
    n_clean = int(v.warmup_samples * v.warmup_clean_frac) if hasattr(task, "corrupt") else 0
    problems = [pool[i] for i in (rng.randrange(len(pool)) for _ in range(v.warmup_samples))]
    pairs = []
    for p in problems[:n_corrupt]:
        if p.steps:
            first = rng.randrange(len(p.steps))
            wrong = [first] + [i for i in range(len(p.steps)) if i != first and rng.random() < v.warmup_error_rate]
            pairs.append((p, task.corrupt(p, wrong, rng)[1]))
    pairs += [(p, p.solution) for p in problems[n_corrupt:n_corrupt + n_clean] if p.solution]
    sampled = problems[n_corrupt + n_clean:]
    model.eval()
    bar = Progress(len(sampled), enabled=progress and dist.is_main(), desc="verifier warm-up (samples)")
    for i in range(0, len(sampled), batch_size):
        chunk = sampled[i:i + batch_size]
        ro = generate(model, encode_generator_prompts(tokenizer, [p.question for p in chunk]),
                      max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
                      pad_id=tokenizer.pad_token_id, temperature=1.0, seed=derive_seed(seed, "warmup-samples", i),
                      bf16=bf16)
        compute.add("gen", forward=rollout_tokens(ro)[0])
        pairs += zip(chunk, decode_completions(tokenizer, ro.completion_ids, ro.completion_mask))
        bar.update(i + len(chunk))
    bar.close()
    model.train()
    return pairs


def pair_example(task, problem, solution: str, rng: random.Random, chat: bool = False) -> tuple[str, str, str, str]:
    """A pairwise warm-up example: (question, first, second, target). The warm-up example `solution`
    stands beside a second solution of its problem: the reference, or (half the time, for tasks with
    `corrupt`) the reference with an error injected at one step; their order is drawn. Where the problem
    has no reference, the solution stands beside itself. The target is `reference_pair`."""
    other = problem.solution or solution
    if problem.steps and hasattr(task, "corrupt") and rng.random() < 0.5:
        other = task.corrupt(problem, rng.randrange(len(problem.steps)), rng)[1]
    first, second = (solution, other) if rng.random() < 0.5 else (other, solution)
    return problem.question, first, second, reference_pair(task, problem, first, second, chat=chat)


def warmup_verifier(v: VerifierConfig, t: TrainConfig, task, pool, model, tokenizer, verifier, vtok, compute: Compute,
                    *, seed: int, progress: bool, batch_size: int, max_new_tokens: int,
                    rehearse: float = 0.0) -> dict[str, float]:
    """SFT of the verifier on `warmup_examples`, each labelled by `reference_verification`: a verdict
    per step and a final one, from the task's process labels (which step an error was injected at).
    This is the one place co-training reads process labels, a stated exception to "the verifier's RL
    reward never uses process labels" (RL Tango warms up by RL on outcomes alone:
    `verifier.warmup_sft_steps: 0`, `warmup_rl_steps: 40`). With `verifier.warmup_pair_frac` a share of
    each batch is pairwise judgments instead (`pair_example`). `rehearse`: the share of each batch that
    rehearses the generator on reference solutions, for a verifier that is the generator too (a
    judge-only warm-up erases a generator: see recipes/cure.py). `t` is the run's training section; the
    generator's samples are drawn `batch_size` at a time, up to `max_new_tokens`."""
    if v.warmup_sft_steps == 0:
        return {}
    pairs = warmup_examples(v, task, pool, model, tokenizer, compute, seed=seed, bf16=t.bf16, progress=progress,
                            batch_size=batch_size, max_new_tokens=max_new_tokens)
    chat = uses_chat(vtok)
    targets = [reference_verification(task, p, s, chat=chat) for p, s in pairs]
    opt, sched = make_optimizer(verifier, t.model_copy(update={"lr": v.warmup_sft_lr, "warmup_steps": 20,
                                                                "schedule": "constant"}), v.warmup_sft_steps)
    losses = []
    rng = random.Random(derive_seed(seed, "warmup-order"))
    pair_rng = random.Random(derive_seed(seed, "warmup-pairs"))
    n_pairs = round(v.warmup_batch_size * v.warmup_pair_frac)
    solved = [p for p in pool if p.solution] if rehearse else []
    n_rehearsed = round(v.warmup_batch_size * rehearse) if solved else 0
    bar = Progress(v.warmup_sft_steps, enabled=progress and dist.is_main(), desc="verifier warm-up (sft)")
    for step in range(1, v.warmup_sft_steps + 1):
        idx = [rng.randrange(len(pairs)) for _ in range(v.warmup_batch_size - n_pairs - n_rehearsed)]
        prompts = encode_verifier_prompts(vtok, [pairs[i][0].question for i in idx], [pairs[i][1] for i in idx])
        completions = [encode_completion(vtok, targets[i]) for i in idx]
        judged = [pair_example(task, *pairs[pair_rng.randrange(len(pairs))], pair_rng, chat) for _ in range(n_pairs)]
        if judged:
            prompts += encode_pair_prompts(vtok, *map(list, zip(*[j[:3] for j in judged])))
            completions += [encode_completion(vtok, j[3]) for j in judged]
        rehearsed = [solved[pair_rng.randrange(len(solved))] for _ in range(n_rehearsed)]
        if rehearsed:
            prompts += encode_generator_prompts(vtok, [p.question for p in rehearsed])
            completions += [encode_completion(vtok, p.solution) for p in rehearsed]
        st = supervised_step(verifier, opt, prompts, completions,
                             vtok.pad_token_id, max_grad_norm=t.max_grad_norm, bf16=t.bf16,
                             micro_batch_size=t.micro_batch_size)
        sched.step()
        compute.add("ver", trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        losses.append(st["loss"])
        bar.update(step, {"loss": st["loss"]})
    bar.close()
    tail = losses[-max(1, len(losses) // 10):]
    correct = sum(task.grade(s, p) >= 1 for p, s in pairs) / len(pairs)
    return {"ver/warmup_loss": sum(tail) / len(tail), "ver/warmup_examples": len(pairs),
            "ver/warmup_base_rate": correct}


# ---------------------------------------------------------------------- final evaluation


def oracle_results(s: RunSettings, v: VerifierConfig, seed: int, task, generator: tuple) -> dict:
    """The world the final generator faces, measured through the oracle's verdicts (eval.json `oracle`): on
    `eval.n_sampled` problems of the first eval split, k samples each (`eval.k`, 8 where it is under 2: with
    `eval.k: 0` the generator's own evaluation samples nothing more), the share of all-wrong groups
    (`all_wrong@k`), where failed samples first go wrong (`process/first_false_not_last`), and what
    `evaluate_verifiers` reports of the verdicts (noisy: at its rates). A run with `train.steps: 0` so
    measures a start for `cotrain study --worlds` at the cost of the samples alone. With `eval.n_sampled: 0`
    nothing is measured, nor for a task without process labels (it had fallen back to `cotraining.eval_n`
    problems x 8 samples: 1,600 SmolLM2 solutions, longer than the run's own evaluation, at the end of every
    ceiling run)."""
    split, ekw = s.eval.splits[0], s.eval_settings()
    if split not in task.splits or not s.eval.n_sampled or not hasattr(task, "step_labels"):
        return {}

    def judge(problems, texts, correct):
        return oracle_verifications(task, problems, texts, correct, v, derive_seed(seed, "oracle-eval"))

    scored = evaluate_verifiers({"oracle": judge}, *generator, task, split, n=s.eval.n_sampled,
                                k=s.eval.k if s.eval.k >= 2 else 8, temperature=s.eval.temperature,
                                gen_max_new_tokens=ekw["max_new_tokens"],
                                ver_max_new_tokens=v.max_new_tokens, batch_size=ekw["batch_size"],
                                bf16=s.train.bf16)
    return {name: {split: m} for name, m in scored.items()}


def final_verifier_results(session: Session, task, generator: tuple, verifier: tuple,
                           heldout: list, eval_n: int, trained: bool = True) -> dict:
    """The trained and the warmed-up verifier side by side (eval.json entries `verifier` and
    `verifier_warmup`): on the final generator's samples of the first eval split, and on its held-out
    injected errors. A verifier that was never trained (`trained=False`, or a run without generator
    steps) is the warmed-up one: it is evaluated once and reported under both names. What each wrote of
    the generator's samples, beside what it was taught to write, goes to
    `verifications/<name>_<split>.jsonl.gz` (`verification_records`); without `eval.n_sampled`, `eval_n`
    (`cotraining.eval_n`) problems."""
    s = session.settings
    (model, tokenizer), (ver, vtok) = generator, verifier
    ekw = s.eval_settings()
    ver.eval()
    results = {}
    split = s.eval.splits[0]
    if split not in task.splits:
        return results
    trained = trained and bool(s.train.steps)
    if trained:
        warm, wtok = load_model(session.run_dir / "warmup" / "verifier")
        warm.to(next(ver.parameters()).device).eval()
        both = {"verifier": (ver, vtok), "verifier_warmup": (warm, wtok)}
    else:
        both = {"verifier_warmup": (ver, vtok)}
    records: dict[str, list[dict]] = {}
    scored = evaluate_verifiers(both, model, tokenizer, task, split, n=s.eval.n_sampled or eval_n,
                                k=s.eval.k if s.eval.k >= 2 else 8, temperature=s.eval.temperature,
                                gen_max_new_tokens=ekw["max_new_tokens"], ver_max_new_tokens=s.verifier_max_new_tokens,
                                batch_size=ekw["batch_size"], bf16=s.train.bf16, records=records)
    for name, m in scored.items():
        results[name] = {split: m}
        if dist.is_main() and name in records:
            write_jsonl_gz_atomic(session.run_dir / "verifications" / f"{name}_{split}.jsonl.gz", records[name])
    for name, (m, tok) in both.items():
        injected = evaluate_on_injected(m, tok, task, heldout, max_new_tokens=s.verifier_max_new_tokens,
                                        batch_size=ekw["batch_size"], bf16=s.train.bf16)
        if injected:
            results.setdefault(name, {})[f"{split}_injected"] = injected
    if not trained:
        results["verifier"] = results.get("verifier_warmup", {})
    return results
