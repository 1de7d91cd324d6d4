"""The label-free recipes' safeguard: a probe of the judge and the solver, and the scale of the solver's updates.

Every `safeguard.every` steps (and before the first update) the probe samples strong (low-temperature)
and weak (high-temperature) answers of the current solver to a fixed set of blinded training
questions, has the recipe's own judge score them, and measures the solver's KL to its start and its
entropy over the answers' positions. rl/safeguard.py turns these label-free signals into the scale of
the solver's learning rate until the next probe. No ground truth is read.

Metrics (every step, the latest probe's values): `safe/scale`, `safe/sep` (this probe), `safe/sep_ema`
(the smoothed separation the gate uses), `safe/judge_strong`, `safe/judge_weak`, `safe/kl`,
`safe/entropy`, `safe/entropy_ratio`, `safe/factor/{sep,kl,entropy}`, and the shares of the steps so
far whose update was skipped (`safe/skipped_share`) or shrunk (`safe/shrunk_share`). Each time the
action (skip, shrink, full) or the signals behind it change, one line on stderr says which signals hold
the update back and why.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

from cotrain import dist
from cotrain.config import SafeguardConfig, TrainConfig, VerifierConfig
from cotrain.models.generate import Rollout, completion_log_softmax, generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.safeguard import smooth, trust_scale, why_held
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_tokens
from cotrain.train.setup import derive_seed
from cotrain.train.verifier import verify_samples

JudgeFn = Callable[[list[str], list[str], int], list[float]]
"""(questions, answers, step) -> the judge's score in [0, 1] of each answer."""

_CHUNK = 16  # rows per forward pass of the KL: the [rows, T, V] distributions stay small for a real vocabulary


def kl_and_entropy(model, start, ro: Rollout, bf16: bool) -> tuple[float | None, float]:
    """Mean per-token KL(model || start) (None without a start: one forward pass, not two) and mean
    entropy of `model` (temperature 1, nats) over the completion positions of `ro`."""
    kl_sum = ent_sum = tokens = 0.0
    for i in range(0, ro.completion_ids.shape[0], _CHUNK):
        part = slice(i, i + _CHUNK)
        args = (ro.prompt_ids[part], ro.prompt_mask[part], ro.completion_ids[part], ro.completion_mask[part])
        lp = completion_log_softmax(model, *args, bf16=bf16)                     # [n, T, V]
        mask = ro.completion_mask[part].to(lp.device).float()                    # [n, T]
        p = lp.exp()
        if start is not None:
            lq = completion_log_softmax(start, *args, bf16=bf16).to(lp.device)  # [n, T, V]
            kl_sum += float(((p * (lp - lq)).sum(-1) * mask).sum())
        ent_sum += float((-(p * lp).sum(-1) * mask).sum())
        tokens += float(mask.sum())
    tokens = max(tokens, 1.0)
    return (kl_sum / tokens if start is not None else None), ent_sum / tokens


class Safeguard:
    """The probe and the gate of one run; inert (scale 1, no metrics) unless `safeguard.enabled`.

    Args:
        s: the run's `safeguard` section; t: its `train` section (the probe computes in its precision).
        seed: the run's seed; max_new_tokens: the probe's answers' length (`grpo.max_new_tokens`).
        questions: blinded training questions; the first `safeguard.questions` are the probe's.
        solver: (model, tokenizer) of the role whose updates are scaled.
        start: the solver's frozen start (for the KL), or None without a KL limit.
        judge_fn: the recipe's judge (see JudgeFn).
        state: the checkpointed state of a resumed run.
    """

    def __init__(self, s: SafeguardConfig, t: TrainConfig, seed: int, max_new_tokens: int, questions: list[str],
                 solver: tuple, start, judge_fn: JudgeFn, compute: Compute, state: dict | None = None):
        self.s, self.t, self.seed, self.max_new_tokens = s, t, seed, max_new_tokens
        self.questions = list(dict.fromkeys(questions))[:self.s.questions]
        self.solver, self.start, self.judge_fn, self.compute = solver, start, judge_fn, compute
        st = state or {}
        self.scale = st.get("scale", 1.0)
        self.sep_ema = st.get("sep_ema")
        self.entropy_start = st.get("entropy_start")
        self.last: dict[str, float] = st.get("last", {})
        self.reason = st.get("reason", "full")
        self.counts = st.get("counts", {"steps": 0, "skipped": 0, "shrunk": 0})

    @property
    def enabled(self) -> bool:
        return self.s.enabled

    def step_scale(self, step: int, timer: StepTimer | None = None) -> float:
        """The scale of this step's solver update: a fresh probe on the first step and every
        `safeguard.every` steps after it, else the last probe's scale. Counts the step."""
        if not self.enabled:
            return 1.0
        if (step - 1) % self.s.every == 0:
            self._probe(step)
            if timer is not None:
                timer.lap("safeguard")
        self.counts["steps"] += 1
        self.counts["skipped"] += self.scale == 0
        self.counts["shrunk"] += 0 < self.scale < 1
        return self.scale

    def _probe(self, step: int) -> None:
        s = self.s
        model, tok = self.solver
        prompts = encode_generator_prompts(tok, self.questions)
        judged, rollouts = {}, []
        for name, n, temperature in (("strong", s.n_strong, s.strong_temperature),
                                     ("weak", s.n_weak, s.weak_temperature)):
            ro = generate(model, prompts, group_size=n, max_new_tokens=self.max_new_tokens,
                          eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=temperature,
                          seed=derive_seed(self.seed, "safeguard", name, step), bf16=self.t.bf16)
            forward, generated = rollout_tokens(ro)
            self.compute.add("gen", forward=forward, generated=generated)
            answers = decode_completions(tok, ro.completion_ids, ro.completion_mask)
            scores = self.judge_fn([q for q in self.questions for _ in range(n)], answers, step)
            judged[name] = sum(scores) / max(len(scores), 1)
            rollouts.append(ro)
        separation = judged["strong"] - judged["weak"]
        self.sep_ema = smooth(self.sep_ema, separation, s.ema)
        kl = entropy = None
        if self.start is not None or s.min_entropy_ratio is not None:
            sums = [0.0, 0.0, 0.0]
            for ro in rollouts:
                k, e = kl_and_entropy(model, self.start, ro, self.t.bf16)
                n_tok = float(ro.completion_mask.sum())
                sums = [sums[0] + (k or 0.0) * n_tok, sums[1] + e * n_tok, sums[2] + n_tok]
                self.compute.add("gen", forward=(1 if self.start is None else 2) * rollout_tokens(ro)[0])
            kl = sums[0] / max(sums[2], 1.0) if self.start is not None else None
            entropy = sums[1] / max(sums[2], 1.0)
            if self.entropy_start is None:
                self.entropy_start = entropy
        ratio = None if entropy is None else entropy / max(self.entropy_start, 1e-8)
        self.scale, factors = trust_scale(self.sep_ema, kl, ratio, min_separation=s.min_separation,
                                          full_separation=s.full_separation, kl_max=s.kl_max,
                                          min_entropy_ratio=s.min_entropy_ratio)
        self.last = {"sep": separation, "sep_ema": self.sep_ema, "judge_strong": judged["strong"],
                     "judge_weak": judged["weak"], **({"kl": kl} if kl is not None else {}),
                     **({"entropy": entropy, "entropy_ratio": ratio} if entropy is not None else {}),
                     **{f"factor/{k}": v for k, v in factors.items()}}
        reason = why_held(factors, self.sep_ema, kl, ratio, s.min_separation, s.kl_max, s.min_entropy_ratio)
        action = "skips" if self.scale == 0 else f"scales by {self.scale:.2f}"
        state = " ".join(["skip" if self.scale == 0 else "shrink" if self.scale < 1 else "full",
                          *sorted(k for k, f in factors.items() if f < 1)])
        if state != self.reason and dist.is_main():  # a new action or new reasons: one line
            line = (f"safeguard: step {step}: {action} the solver's updates: {reason}" if reason
                    else f"safeguard: step {step}: the solver's updates run at full scale again")
            print(line, file=sys.stderr, flush=True)
        self.reason = state

    def metrics(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        n = max(self.counts["steps"], 1)
        return {"safe/scale": self.scale, **{f"safe/{k}": v for k, v in self.last.items()},
                "safe/skipped_share": self.counts["skipped"] / n, "safe/shrunk_share": self.counts["shrunk"] / n}

    def state(self) -> dict:
        """What a checkpoint keeps, so that a resumed run gates exactly as an unbroken one."""
        if not self.enabled:
            return {}
        return {"safeguard": {"scale": self.scale, "sep_ema": self.sep_ema, "entropy_start": self.entropy_start,
                              "last": dict(self.last), "reason": self.reason, "counts": dict(self.counts)}}


def verifier_judge(v: VerifierConfig, t: TrainConfig, seed: int, verifier: tuple, compute: Compute) -> JudgeFn:
    """The co-training recipes' judge for the probe: the verifier's verdict on each answer (greedy when
    `verifier.greedy_verdicts`), approve 1, reject 0, unparsable 0.5, in the run's precision (`t.bf16`); its
    compute counted as the verifier's."""
    def scores(questions: list[str], answers: list[str], step: int) -> list[float]:
        vro, parsed, _ = verify_samples(*verifier, questions, answers, v,
                                        seed=derive_seed(seed, "safeguard-verify", step), bf16=t.bf16)
        compute.add("ver", forward=rollout_tokens(vro)[0])
        return [0.5 if x.final is None else float(x.final) for x in parsed]
    return scores
