"""GRPO on one generator with outcome rewards: the single-model baseline.

Algorithm (Shao et al. 2024, with the DAPO / Dr. GRPO options of TRL):
  each step draws B prompts, samples G completions of each (batch_size = B*G), rewards each
  completion 1 if its final answer is right else 0, and computes group advantages
  A_i = (r_i - mean_g) / (std_g + 1e-4). The policy loss is token-level PPO-clip,
  l_t = -min(rho_t A, clip(rho_t, 1-eps, 1+eps_high) A) + beta * k3(pi, ref),
  aggregated by `loss_type`. The batch is reused `num_iterations` times in `num_minibatches`
  optimizer steps each; old log-probs come from a no-grad pass before the first update (or equal
  the current ones when there is one pass and one minibatch, so rho = 1 as in TRL).
Deviations: none from TRL's GRPOTrainer defaults except `beta = 0` (no reference model, as in
DAPO and recent TRL). Two exact savings: each prompt is run once per group (its KV cache is shared
by the G completions, in rollouts and in the training forward), and with beta = 0 the groups whose
rewards are all equal, whose gradient is exactly zero, are not run through the update at all (the
loss keeps the whole batch's normalisers). `gen/entropy` is the sampler's entropy over all rows;
`gen/clip_ratio` and `gen/kl` are over the trained groups. `gap/majority` (maj@G minus one sample's
accuracy, on each step's groups) shows what a majority vote would know beyond one sample.

Curriculum (`curriculum.levels`): the training problems come from the task
built with the current level's options; the level rises by one (`rl.curriculum.next_level`) once the
training accuracy over the last `curriculum.window` steps reaches `curriculum.raise_at`. Evaluation
always uses the task as configured. `curriculum/level` is logged.

Run:  cotrain run configs/smoke.yaml --out runs/smoke
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.eval.metrics import majority_gap
from cotrain.models.build import reference_model
from cotrain.rl.curriculum import next_level
from cotrain.rl.losses import group_advantages
from cotrain.runs.policy import Policy
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks import make_task
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import (
    Sampler,
    complete_solutions,
    early_stop_metrics,
    reward_metrics,
    rollout_metrics,
    step_shape_metrics,
)
from cotrain.train.setup import (build_task, initial_model, make_optimizer, training_pool,
                                 training_reward)
from cotrain.train.update import generator_update


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g = cfg.grpo
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    reward = training_reward(task, cfg.task.options().get("reward"))  # the task's grader, or task.reward's function
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()  # on model.device: initial_model placed it
    # The frozen reference is the starting model (with LoRA: its base, adapters off); none when beta == 0.
    ref_model = reference_model(model, bf16=cfg.train.bf16) if g.beta > 0 else None
    cur = cfg.curriculum
    levels = [make_task(cfg.task.name, **{**cfg.task.options(), **lv}) for lv in cur.levels] or [task]
    pools = [training_pool(t, cfg.seed, cfg.train.n_problems)[0] for t in levels]
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched, reference=ref_model)}
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="grpo")
    sampler = Sampler(cfg.rollout, cfg.model, cfg.init, cfg.seed, model, tokenizer, session.run_dir)
    compute = Compute({"gen": model.num_parameters()}, session.state.get("compute"))
    n_prompts = cfg.train.batch_size // g.group_size
    level, recent = session.state.get("level", 0), list(session.state.get("recent_acc", []))

    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- rollout
        problems, ro, texts, generated = sampler.batch(model, tokenizer, pools[level], n_prompts, g, step, compute, timer,
                                                       seed=cfg.seed, bf16=cfg.train.bf16)  # [B*G], groups contiguous

        # -------------------------------------------------------------- reward and advantage
        # graded once per sample across processes: every rank gets the same rewards, time limits or not
        rewards = torch.tensor(dist.map_shards(lambda tp: reward(*tp), list(zip(texts, problems))))  # [B*G]
        advantages = group_advantages(rewards, g.group_size, g.scale_rewards)          # [B*G]
        timer.lap("reward")

        # -------------------------------------------------------------- loss and update
        stats = generator_update(cfg.grpo, cfg.train, model, opt, sched, ro, advantages, sampler=sampler, ref_model=ref_model)
        trained = stats["tokens_trained"] + stats["prompt_tokens_trained"]
        compute.add("gen", trained=trained)
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {
            **reward_metrics("gen", rewards, g.group_size),
            "gen/acc": (rewards >= 1).float().mean().item(),
            **early_stop_metrics(complete_solutions(task, problems, texts), (rewards >= 1).tolist()),
            **step_shape_metrics(task, texts),
            "gap/majority": majority_gap([task.extract_answer(t) for t in texts], (rewards >= 1).tolist(),
                                         g.group_size, getattr(task, "answers_equal", None)),
            **rollout_metrics("gen", ro),  # the sampler's entropy, over all rows
            "gen/lr": sched.get_last_lr()[0],
            **{f"gen/{k}": v for k, v in stats.items() if "tokens" not in k},
            "tokens/gen_generated": generated,
            "tokens/gen_trained": stats["tokens_trained"],
            **compute.metrics(),
        }
        if cur.levels:
            metrics["curriculum/level"] = level
            recent = (recent + [metrics["gen/acc"]])[-cur.window:]
            if len(recent) == cur.window:
                new = next_level(level, sum(recent) / cur.window, cur.raise_at, len(levels) - 1)
                if new != level:
                    level, recent = new, []
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"reward": metrics["gen/reward"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens, "level": level,
                                                           "recent_acc": recent})

    return finish(session, model, tokenizer, task, cfg.train.steps, other_results={"compute": compute.summary()})
