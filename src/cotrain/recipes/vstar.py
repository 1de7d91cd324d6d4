"""V-STaR: the generator tuned on its correct samples, a verifier trained by DPO on correct over incorrect.

Hosseini et al. 2024, "V-STaR: Training Verifiers for Self-Taught Reasoners" (COLM). Pairs in
rl/preference.py (`correct_incorrect_pairs`), DPO's loss there (`dpo_loss`).

The paper's loop: each iteration the generator samples k solutions per training problem; the correct
ones join the generator's SFT data (STaR/RFT: D_GEN) and every one joins the verifier's (D_VER, labelled
by correctness); the generator is fine-tuned on D_GEN; after the last iteration a verifier, started from
the SFT model, is trained by DPO on (correct, incorrect) pairs of the same problem from D_VER; at test
time it picks the best of N samples.

Here, online, each step:
  sample   B problems, G = grpo.group_size samples each from the current generator.
  label    each sample graded by the task (V-STaR's correctness labels).
  generator one SFT step on the batch's correct samples (none right: no step).
  verifier one DPO step (β `vstar.beta`, the reference its own start, frozen) on up to
           `vstar.pairs_per_problem` (correct, incorrect) pairs of each problem.
  score    a sample's verifier score is DPO's implicit reward, log π_V(y|x) − log π_ref(y|x), summed over
           its tokens: the quantity DPO trains to order chosen above rejected.

Deviations, and why:
  - Online, one step per batch, instead of iterations that sample the whole training set and retrain
    from the base model: the same data (correct samples; pairs of one problem), seen as the generator
    improves, which is how the rest of the lab is compared (equal generator steps and samples).
  - The verifier trains alongside the generator, on each batch's pairs, rather than once at the end on
    all of them; its pairs come from every stage of the generator, as V-STaR's D_VER collects them.
  - The paper's own text was not at hand when this was written: the test-time score as the implicit
    reward is our reading of a DPO verifier, not a quotation.

Evaluation (eval.json `vstar`): best-of-N against N (`vstar.bon`): max(N) samples of each of
`vstar.bon_problems` problems per split drawn once and every N-subset weighed alike, for the V-STaR
verifier beside a random pick, majority voting, the oracle pass@N and any `vstar.bon_verifiers`
(e.g. a tango verifier) on the same samples; keys `bon@N/<picker>`.

Metrics: `gen/acc` (the samples' accuracy), `vstar/sft_samples` and `vstar/sft_loss` (the generator's
step), `ver/pairs`, `ver/dpo_loss`, `ver/dpo_acc` (pairs ordered right), `ver/margin`, `ver/grad_norm`.

Run:  cotrain run configs/vstar_smoke.yaml --out runs/vstar
"""
from __future__ import annotations

import torch

from cotrain import dist
from cotrain.config import RunConfig
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.eval.verifier_eval import best_of_n_study
from cotrain.models.build import load_model, reference_model
from cotrain.models.generate import generate
from cotrain.models.prompts import decode_completions, encode_generator_prompts
from cotrain.rl.preference import correct_incorrect_pairs
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import resolve_model_dir
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import rollout_metrics
from cotrain.train.setup import (
    build_task,
    derive_seed,
    initial_model,
    initial_verifier,
    make_optimizer,
    sample_batch,
    training_pool,
)
from cotrain.train.update import dpo_backward, optimizer_step, sequence_logprobs, supervised_step, zero_grads

PANELS = (  # curves.png panels of this recipe's own metrics (registry.panels): title, y label, metric, in [0, 1]
    ("Verifier's DPO pairs ordered right (vstar)", "share of pairs", "dpo_acc", True),
    ("Correct samples the generator is tuned on (vstar)", "samples per step", "sft_samples", False),
)


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, vs = cfg.grpo, cfg.vstar
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()
    verifier, vtok = initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)  # V-STaR: from the SFT model
    verifier.train()
    ver_ref = reference_model(verifier)                        # DPO's reference: the verifier's start, frozen
    pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    vtrain = cfg.train.model_copy(update={"lr": vs.verifier_lr}) if vs.verifier_lr else cfg.train
    vopt, vsched = make_optimizer(verifier, vtrain, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched), "verifier": Policy(verifier, vtok, vopt, vsched)}
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc="vstar")
    compute = Compute({"gen": model.num_parameters(), "ver": verifier.num_parameters()}, session.state.get("compute"))
    n_prompts = cfg.train.batch_size // g.group_size

    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer = StepTimer()
        # -------------------------------------------------------------- sample: G solutions of each problem
        problems = sample_batch(pool, n_prompts, cfg.seed, step)                                 # [B]
        prompts = encode_generator_prompts(tokenizer, [p.question for p in problems])
        ro = generate(model, prompts, group_size=g.group_size, max_new_tokens=g.max_new_tokens,
                      eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, temperature=g.temperature,
                      top_p=g.top_p, seed=derive_seed(cfg.seed, "rollout", step), bf16=cfg.train.bf16)  # [B*G]
        texts = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        generated = compute.add_rollout("gen", ro)
        timer.lap("gen", generated)

        # -------------------------------------------------------------- label: correctness
        flat = [p for p in problems for _ in range(g.group_size)]                                # [B*G]
        correct = [c >= 1 for c in dist.map_shards(lambda tp: task.grade(*tp), list(zip(texts, flat)))]
        timer.lap("reward")

        # -------------------------------------------------------------- generator: SFT on its correct samples
        right = [i for i, c in enumerate(correct) if c]
        gst = {}
        if right:
            targets = [ro.completion_ids[i][ro.completion_mask[i].bool()].tolist() for i in right]
            gst = supervised_step(model, opt, [prompts[i // g.group_size] for i in right], targets,
                                  tokenizer.pad_token_id, max_grad_norm=cfg.train.max_grad_norm, bf16=cfg.train.bf16,
                                  micro_batch_size=cfg.train.micro_batch_size)
            compute.add("gen", trained=gst["tokens_trained"] + gst["prompt_tokens_trained"])
        sched.step()

        # -------------------------------------------------------------- verifier: DPO on (correct, incorrect) pairs
        pairs = correct_incorrect_pairs(correct, g.group_size, vs.pairs_per_problem)
        vst = _dpo_step(verifier, ver_ref, vtok, vopt, [flat[i].question for i, _ in pairs],
                        [texts[i] for i, _ in pairs], [texts[j] for _, j in pairs], vs.beta, cfg) if pairs else {}
        if pairs:
            compute.add("ver", forward=vst.pop("tokens"), trained=vst["trained"])
        vsched.step()
        timer.lap("update", gst.get("tokens_trained", 0) + vst.get("trained", 0))

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {"gen/acc": sum(correct) / len(correct), "gen/reward": sum(correct) / len(correct),
                   "vstar/sft_samples": float(len(right)), "vstar/sft_loss": gst.get("loss", 0.0),
                   "gen/grad_norm": gst.get("grad_norm", 0.0), "gen/lr": sched.get_last_lr()[0],
                   "ver/pairs": float(len(pairs)), **{f"ver/{k}": v for k, v in vst.items() if k != "trained"},
                   **rollout_metrics("gen", ro), **compute.metrics()}
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"acc": metrics["gen/acc"], "pairs": len(pairs)})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    # ------------------------------------------------------------------ final evaluation: best-of-N against N
    results = {"vstar": _best_of_n(cfg, model, tokenizer, verifier, ver_ref, vtok, task), "compute": compute.summary()}
    return finish(session, model, tokenizer, task, cfg.train.steps, other_results=results,
                  other_models={"verifier": (verifier, vtok)})


def _dpo_step(verifier, ver_ref, vtok, vopt, questions: list[str], chosen: list[str], rejected: list[str],
              beta: float, cfg: RunConfig) -> dict[str, float]:
    """One DPO step of the verifier on the pairs: `dpo_backward`'s figures, its gradient norm, and the
    tokens run forward (the reference's pass) and trained."""
    zero_grads(verifier)
    st = dpo_backward(verifier, ver_ref, vtok, questions, chosen, rejected, beta, bf16=cfg.train.bf16)
    st["grad_norm"] = optimizer_step(verifier, vopt, cfg.train.max_grad_norm)
    st["trained"] = st["tokens"]
    return st


def _best_of_n(cfg: RunConfig, model, tokenizer, verifier, ver_ref, vtok, task) -> dict:
    """{split: {"problems", "samples", "bon@N/<picker>": accuracy}}: the V-STaR verifier's implicit reward
    beside the random pick, majority voting, the oracle and `vstar.bon_verifiers`, on the same samples."""
    e = cfg.eval_settings()
    verifier.eval()

    @torch.no_grad()
    def implicit_reward(questions: list[str], texts: list[str]) -> list[float]:
        out = []
        for i in range(0, len(texts), e["batch_size"]):
            q, t = questions[i:i + e["batch_size"]], texts[i:i + e["batch_size"]]
            out += (sequence_logprobs(verifier, vtok, q, t, bf16=e["bf16"])[0]
                    - sequence_logprobs(ver_ref, vtok, q, t, bf16=e["bf16"])[0]).tolist()
        return out

    others = {name: load_model(resolve_model_dir(path)) for name, path in cfg.vstar.bon_verifiers.items()}
    out = {}
    for split in (s for s in cfg.eval.splits if s in task.splits):
        study = best_of_n_study(others, model, tokenizer, task, split, n=cfg.vstar.bon_problems, ns=cfg.vstar.bon,
                                temperature=e["temperature"], gen_max_new_tokens=e["max_new_tokens"],
                                ver_max_new_tokens=cfg.verifier.max_new_tokens, batch_size=e["batch_size"],
                                bf16=e["bf16"], scorers={"vstar": implicit_reward})
        if study:
            out[split] = {"problems": study["problems"], "samples": study["samples"],
                          **{f"bon@{n}/{name}": v for n, row in study["rows"].items() for name, v in row.items()}}
    verifier.train()
    return out
