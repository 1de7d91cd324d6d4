"""GRPO on one generator with outcome rewards: experiment 1.1 of the plan, the single-model baseline.

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
`gen/clip_ratio` and `gen/kl` are over the trained groups.

Run:  cotrain run configs/smoke.yaml --out runs/smoke
"""
from __future__ import annotations

import copy
import time

import torch

from cotrain.config import RunConfig
from cotrain.models.generate import generate, group_logprobs
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.losses import contributing_groups, group_advantages, grpo_loss, masked_mean
from cotrain.runs.session import (
    build_task,
    derive_seed,
    device,
    eval_during_training,
    finish,
    initial_model,
    make_optimizer,
    maybe_checkpoint,
    open_session,
    sample_batch,
    training_pool,
)


def _logprobs(model, ro, groups: torch.Tensor, cfg: RunConfig):
    """Log-probs [b*G, T] of the completions of `groups` (indices of prompts), each prompt run once."""
    g = cfg.grpo.group_size
    rows = (groups[:, None] * g + torch.arange(g)).reshape(-1)                  # [b*G]
    return group_logprobs(model, ro.prompt_ids[groups * g], ro.prompt_mask[groups * g], ro.completion_ids[rows],
                          ro.completion_mask[rows], g, temperature=cfg.grpo.temperature,
                          bf16=cfg.train.bf16), rows


def zero_grads(model: torch.nn.Module) -> None:
    """Zero gradients that exist as tensors even when no backward pass follows: a step that trains no
    group must still step AdamW's moments, exactly as the zero gradient of the full batch would."""
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()


@torch.no_grad()
def _logprobs_no_grad(model, ro, groups: torch.Tensor, cfg: RunConfig) -> torch.Tensor:
    (logp, _), _ = _logprobs(model, ro, groups, cfg)
    return logp


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g = cfg.grpo
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg)
    model, tokenizer = initial_model(cfg)
    model.to(device()).train()
    # The frozen reference is the starting model; none is built when beta == 0.
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if g.beta > 0 else None
    pool, _ = training_pool(task, cfg, cfg.train.n_problems)
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": (model, tokenizer, opt, sched)}
    session = open_session(cfg, run_dir, resume, roles, desc="grpo")
    n_prompts = cfg.train.batch_size // g.group_size

    for step in range(session.start_step + 1, cfg.train.steps + 1):
        t0 = time.time()
        # -------------------------------------------------------------- rollout
        prompt_problems = sample_batch(pool, n_prompts, cfg.seed, step)                # [B]
        problems = [p for p in prompt_problems for _ in range(g.group_size)]          # [B*G], groups contiguous
        prompts = encode_generator_prompts(tokenizer, [p.question for p in prompt_problems])
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "rollout", step))
        ro = generate(model, prompts, group_size=g.group_size, max_new_tokens=g.max_new_tokens,
                      eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, temperature=g.temperature,
                      top_p=g.top_p, generator=gen, bf16=cfg.train.bf16)
        texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        t_gen = time.time() - t0

        # -------------------------------------------------------------- reward and advantage
        rewards = torch.tensor([task.grade(t, p) for t, p in zip(texts, problems)])  # [B*G]
        advantages = group_advantages(rewards, g.group_size, g.scale_rewards)          # [B*G]
        mask = ro.completion_mask.clone()                                              # [B*G, T]
        if g.mask_truncated:
            mask[ro.truncated] = 0

        # -------------------------------------------------------------- loss and update
        # With beta == 0, groups whose rewards are all equal have zero advantage on every token and
        # add exactly zero to the gradient: they are left out of the forward and backward passes,
        # and the loss keeps the normalisers of the whole minibatch, so the update is unchanged.
        t1 = time.time()
        active = set(contributing_groups(advantages, g.group_size, g.beta).tolist())
        minibatches = [[i for i in mb.tolist()] for mb in torch.arange(n_prompts).chunk(g.num_minibatches)]
        trained = [torch.tensor([i for i in mb if i in active], dtype=torch.long) for mb in minibatches]
        reuse = g.num_iterations > 1 or g.num_minibatches > 1
        old_logp = [_logprobs_no_grad(model, ro, t, cfg) if reuse and len(t) else None for t in trained]
        ref_logp = [_logprobs_no_grad(ref_model, ro, t, cfg) if ref_model and len(t) else None for t in trained]
        stats: dict[str, list[float]] = {}
        for _ in range(g.num_iterations):
            for k, (mb, groups) in enumerate(zip(minibatches, trained)):
                mb_rows = [i * g.group_size + j for i in mb for j in range(g.group_size)]
                zero_grads(model)
                st = {"loss": 0.0}
                if len(groups):
                    (logp, _), rows = _logprobs(model, ro, groups, cfg)                     # [b*G, T]
                    loss, st = grpo_loss(
                        logp, old_logp[k] if reuse else logp.detach(), advantages[rows].to(logp.device),
                        mask[rows].to(logp.device),
                        epsilon=g.epsilon, epsilon_high=g.epsilon_high, beta=g.beta, ref_logp=ref_logp[k],
                        loss_type=g.loss_type, num_sequences=len(mb_rows), num_tokens=int(mask[mb_rows].sum()),
                        max_len=g.max_new_tokens)
                    loss.backward()
                    st["loss"] = loss.item()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
                opt.step()
                st["grad_norm"] = grad_norm.item()
                for key, v in st.items():
                    stats.setdefault(key, []).append(v)
        sched.step()
        t_update = time.time() - t1
        for key in ("clip_ratio", "clip_ratio/low", "clip_ratio/high", "kl"):
            stats.setdefault(key, [0.0])  # no group trained this step: nothing clipped, no KL measured

        # -------------------------------------------------------------- log / eval / checkpoint
        grouped = rewards.view(-1, g.group_size)
        metrics = {
            "gen/reward": rewards.mean().item(),
            "gen/reward_std": grouped.std(dim=1).mean().item(),
            "gen/frac_reward_zero_std": (grouped.std(dim=1) == 0).float().mean().item(),
            "gen/acc": (rewards >= 1).float().mean().item(),
            "gen/len_mean": ro.lengths.float().mean().item(),
            "gen/len_clipped_ratio": ro.truncated.float().mean().item(),
            "gen/entropy": masked_mean(ro.entropy, ro.completion_mask).item(),  # of the sampler, all rows
            "gen/frac_groups_trained": len(active) / n_prompts,
            "gen/lr": sched.get_last_lr()[0],
            **{f"gen/{k}": sum(v) / len(v) for k, v in stats.items()},
            "tokens/gen_generated": int(ro.completion_mask.sum()),
            "tokens/gen_trained": sum(int(mask[i * g.group_size:(i + 1) * g.group_size].sum()) for i in active)
            * g.num_iterations,
            "time/gen": t_gen, "time/update": t_update, "time/step": time.time() - t0,
        }
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(cfg, model, tokenizer, task))
        if step % cfg.log.every == 0 or step == cfg.train.steps:
            session.logger.log(step, metrics)
        session.progress.update(step, {"reward": metrics["gen/reward"],
                                       **{k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("eval/")}})
        maybe_checkpoint(cfg, session, step, roles)

    return finish(cfg, session, model, tokenizer, task, cfg.train.steps)
