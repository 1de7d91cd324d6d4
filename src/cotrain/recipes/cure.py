"""CURE: a coder and a unit tester co-evolving on code, by RL on one another's runs.

One model plays both in two prompts, or two models do.

Wang et al. 2025, "Co-Evolving LLM Coder and Unit Tester via Reinforcement Learning" (Gen-Verse/CURE);
rewards in rl/cure.py, the ground-truth monitors in eval/cure_metrics.py. Untrusted code runs only in
the sandbox.

Algorithm, each step:
  coder    B problems, G = grpo.group_size codes each (the generator prompt).
  tester   M = cure.n_tests tests of each problem (the tester prompt, roles/tester.py), one line each in
           the task's notation (`[1,2,3]>10` in codeworld, `assert add(2, 3) == 5` in humaneval and
           code_jsonl, whose literal assertions are their ground-truth tests).
  execute  every distinct code once in the sandbox on every test input, ground-truth and generated;
           outputs compared in the trusted parent (`sandbox.passed`: the program cannot forge a pass):
           the matrix gt [G][t], gen [G][M].
  rewards  coder: its ground-truth pass rate; tester: +share of wrong codes a test rejects when every
           correct code passes it, else -share of wrong codes it lets through (CURE); each normalised
           within its problem (a problem whose rewards are all equal trains no one).
  update   the coder's and the tester's GRPO losses (rho = 1) on the one model, one optimizer step
           (`cure.train_tester: false` trains the coder alone: GRPO on the same rollouts).

`cure.two_models`: the tester is a model of its own, built as tango builds its verifier (`verifier.model`
from scratch, `verifier.init`, else the run's start), with its own optimizer (train.lr and schedule);
each role's loss steps its own model, and the tester's warm-up teaches it tests alone.

`cure_label_free`: the generated tests stand in for the ground-truth ones (coder: its pass rate on the
parsable generated tests; tester: the same formula with "correct" = passes every generated test).
Training sees `blind` problems; ground truth is read only by the `gt/` metrics and evaluation.

Warm-up (`cure` only): `cure.tester_warmup_steps` SFT steps on ground-truth tests in the task's notation,
half of each batch rehearsing the coder on reference solutions when the model is both (a tester-only
warm-up erased a codeworld coder, 0.70 sampled accuracy to 0.0 in 300 steps).

Deviation: a test line that does not parse is rewarded -1 before normalisation.

Metrics: `gen/*` (the coder: reward, pass rate), `test/*` (reward, parsable, grad), and the ground-truth
monitors `gt/code_acc` (codes passing every hidden test), `gt/bon_acc` (the code Best-of-N by generated
tests picks), `gt/test_accuracy` (generated tests the reference solution passes), `gt/test_discrimination`
(wrong codes such tests reject). eval.json adds `cure/<split>` with the same on fresh samples.

Run:  cotrain run configs/cure_smoke.yaml --out runs/cure
"""
from __future__ import annotations

import random
import time

import torch

from cotrain import sandbox
from cotrain.config import RunConfig
from cotrain.errors import UserError
from cotrain.eval.cure_metrics import matrix_metrics
from cotrain.eval.during import eval_at_start, eval_during_training
from cotrain.models.generate import Rollout, generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_generator_prompts, encode_tester_prompts
from cotrain.rl.cure import Matrix, case_rewards, code_rewards, normalise
from cotrain.roles.tester import parse as parse_test_line
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import list_checkpoints
from cotrain.runs.session import finish, log_step, maybe_checkpoint, open_session
from cotrain.tasks.base import Problem, blind
from cotrain.train.compute import Compute, StepTimer
from cotrain.train.rollout import Sampler, rollout_metrics
from cotrain.train.setup import (
    build_task,
    derive_seed,
    initial_model,
    initial_verifier,
    make_optimizer,
    sample_batch,
    training_pool,
)
from cotrain.train.update import optimizer_step, policy_backward, supervised_step, zero_grads


def run(cfg: RunConfig, run_dir, resume: bool = False) -> dict:
    g, c = cfg.grpo, cfg.cure
    label_free = cfg.recipe == "cure_label_free"
    # ------------------------------------------------------------------ build
    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    require_unit_tests(task)
    model, tokenizer = initial_model(cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    model.train()
    labelled_pool, _ = training_pool(task, cfg.seed, cfg.train.n_problems)
    labelled_pool = labelled_pool if label_free else with_unit_tests(task, labelled_pool)
    pool = blind(labelled_pool) if label_free else labelled_pool
    truth = {p.question: p for p in labelled_pool}  # labelled copies: the gt/ metrics of cure_label_free read them
    opt, sched = make_optimizer(model, cfg.train, cfg.train.steps)
    roles = {"generator": Policy(model, tokenizer, opt, sched)}
    tp = tester_role(cfg) if c.two_models else roles["generator"]
    tester, ttok, topt, tsched = tp.model, tp.tokenizer, tp.optimizer, tp.scheduler
    if c.two_models:
        roles["tester"] = tp
    trole = "test" if c.two_models else "gen"   # the compute account of the tester's tokens
    warmed = resume and bool(list_checkpoints(run_dir))  # a checkpoint exists only after the warm-up
    session = open_session(cfg.run_settings(), cfg.to_dict(), run_dir, resume, roles, desc=cfg.recipe)
    compute = Compute({"gen": model.num_parameters(), **({"test": tester.num_parameters()} if c.two_models else {})},
                      session.state.get("compute"))
    n_prompts = cfg.train.batch_size // g.group_size
    gt_tester = g.model_copy(update={"group_size": c.n_tests, "max_new_tokens": c.test_max_new_tokens})

    # ------------------------------------------------------------------ warm-up (step 0: the tester's notation)
    if not warmed and c.tester_warmup_steps and not label_free:
        metrics = tester_warm_up(cfg, tester, ttok, pool, task, compute, rehearse=not c.two_models, role=trole)
        maybe_checkpoint(session, 0, roles, force=True, extra={"compute": compute.tokens})
        session.logger.log(0, {**metrics, **compute.metrics()})

    sampler = Sampler(cfg.rollout, cfg.model, cfg.init, cfg.seed, model, tokenizer, session.run_dir)
    eval_at_start(session, model, tokenizer, task)
    for step in range(session.start_step + 1, cfg.train.steps + 1):
        timer, restarts = StepTimer(), sandbox.RETRIES["starts"]
        # -------------------------------------------------------------- codes and tests
        problems = sample_batch(pool, n_prompts, cfg.seed, step)                        # [B]
        questions = [p.question for p in problems]
        ro, codes = sampler.groups(model, tokenizer, questions, g, seed=derive_seed(cfg.seed, "rollout", step),
                                   bf16=cfg.train.bf16)                                  # [B*G]
        tro, tests = sample_tests(cfg, tester, ttok, task, questions, c.n_tests, derive_seed(cfg.seed, "tests", step))
        timer.lap("gen", compute.add_rollout("gen", ro) + compute.add_rollout(trole, tro))

        # -------------------------------------------------------------- execution matrix (sandbox) and rewards
        G, M = g.group_size, c.n_tests
        matrices = execution_matrices(task, [truth[q] for q in questions], [codes[i * G:(i + 1) * G] for i in range(n_prompts)],
                                      [tests[i * M:(i + 1) * M] for i in range(n_prompts)],
                                      truth=[truth[q] for q in questions], use_gt=True)
        timer.lap("execute")
        code_r, code_a, test_r, test_a = [], [], [], []
        for m in matrices:
            # cure_label_free: the parsable generated tests in place of the ground-truth ones
            oracle = [[row[j] for j, p in enumerate(m.parsable) if p] for row in m.gen] if label_free else m.gt
            rc = code_rewards(oracle)
            rt = case_rewards(oracle, m.gen, m.parsable, c.post_stage)
            code_r += rc
            test_r += rt if rt is not None else [0.0] * M
            code_a += normalise(rc) or [0.0] * G
            test_a += (normalise(rt) if rt is not None else None) or [0.0] * M
        timer.lap("reward")

        # -------------------------------------------------------------- the update: the coder's and the tester's losses
        # (one model: both losses, one optimizer step; two models: each role's loss steps its own)
        zero_grads(model)
        if c.two_models:
            zero_grads(tester)
        mask = ro.completion_mask.clone()
        if g.mask_truncated:
            mask[ro.truncated] = 0
        st = policy_backward(model, ro, torch.tensor(code_a), mask, g, bf16=cfg.train.bf16,
                             micro_batch_size=cfg.train.micro_batch_size)
        tst = (policy_backward(tester, tro, torch.tensor(test_a), tro.completion_mask, gt_tester, bf16=cfg.train.bf16,
                               micro_batch_size=cfg.train.micro_batch_size) if c.train_tester else {})
        grad_norm = optimizer_step(model, opt, cfg.train.max_grad_norm)
        sched.step()
        if c.two_models and c.train_tester:
            tst["grad_norm"] = optimizer_step(tester, topt, cfg.train.max_grad_norm)
            tsched.step()
        sampler.after_update(model)
        for role, s in (("gen", st), (trole, tst)):
            compute.add(role, trained=s.get("tokens_trained", 0) + s.get("prompt_tokens_trained", 0))
        trained = sum(s.get("tokens_trained", 0) + s.get("prompt_tokens_trained", 0) for s in (st, tst))
        timer.lap("update", trained)

        # -------------------------------------------------------------- log / eval / checkpoint
        metrics = {
            "gen/reward": sum(code_r) / len(code_r), "test/reward": sum(test_r) / len(test_r),
            "gen/grad_norm": grad_norm, "gen/lr": sched.get_last_lr()[0],
            **{f"gen/{k}": v for k, v in st.items() if "tokens" not in k},
            **{f"test/{k}": v for k, v in tst.items() if "tokens" not in k},
            **rollout_metrics("gen", ro), **rollout_metrics("test", tro),
            **matrix_metrics(matrices, prefix="gt/"),
            "sandbox/retries": sandbox.RETRIES["starts"] - restarts,  # programs the sandbox had to start again
            **compute.metrics(),
        }
        metrics["test/parsable"] = metrics.pop("gt/test_parsable")  # the tester's own output: no label in it
        if cfg.eval.every and step % cfg.eval.every == 0:
            metrics.update(eval_during_training(session, model, tokenizer, task))
            model.train()
            timer.lap("eval")
        metrics.update(timer.metrics())
        log_step(session, step, metrics, {"reward": metrics["gen/reward"], "tests": metrics["test/reward"]})
        maybe_checkpoint(session, step, roles, extra={"compute": compute.tokens})

    # ------------------------------------------------------------------ final evaluation
    results = {"cure": cure_evaluation(cfg, model, tokenizer, task, cfg.eval.splits, tester=(tester, ttok)),
               "compute": compute.summary()}
    return finish(session, model, tokenizer, task, cfg.train.steps, other_results=results,
                  other_models={"tester": (tester, ttok)} if c.two_models else None)


def require_unit_tests(task) -> None:
    """The recipe needs a code task whose tests a model can write (`parse_test`, `tests_of`, `program`)."""
    if not all(hasattr(task, name) for name in ("parse_test", "tests_of", "program", "test_line", "entry_of",
                                                "arguments", "test_notation")):
        raise UserError(f"recipe cure needs a code task with unit tests in a notation a tester can write "
                        f"(task: codeworld, humaneval, code_jsonl); task {task.name} has none")


def with_unit_tests(task, pool: list[Problem]) -> list[Problem]:
    """The problems with a ground-truth test the matrix can run (a literal assertion, in humaneval and
    code_jsonl): the others would train no one. UserError when none has one."""
    kept = [p for p in pool if task.tests_of(p)]
    if not kept:
        raise UserError(f"task {task.name}: no training problem has a test of the form "
                        "`assert f(literal args) == literal` (what the execution matrix runs)")
    return kept


def tester_role(cfg: RunConfig) -> Policy:
    """`cure.two_models`: the tester's `Policy`, the model built as tango builds its verifier (`verifier.model`,
    `verifier.init`, else the run's start), AdamW at train.lr."""
    tester, ttok = initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp)
    tester.train()
    return Policy(tester, ttok, *make_optimizer(tester, cfg.train, cfg.train.steps))


def tester_warm_up(cfg: RunConfig, model, tok, pool: list[Problem], task, compute: Compute, *,
                   rehearse: bool = True, role: str = "gen") -> dict[str, float]:
    """SFT of the tester role on ground-truth tests written in the task's notation (labels: `cure` only).

    `rehearse` (the coder and the tester are one model): half of each batch rehearses the coder on
    reference solutions (where the problems have them), without which the warm-up erases it (300
    tester-only steps took a codeworld coder from 0.70 sampled accuracy to 0.0). A separate tester
    model (`cure.two_models`) learns tests alone. `role`: the compute account charged."""
    steps = cfg.cure.tester_warmup_steps
    solved = [p for p in pool if p.solution] if rehearse else []
    opt, sched = make_optimizer(model, cfg.train.model_copy(update={"lr": cfg.verifier.warmup_sft_lr,
                                                                    "warmup_steps": 10, "schedule": "constant"}), steps)
    rng = random.Random(derive_seed(cfg.seed, "tester-warmup"))
    losses = []
    size = cfg.verifier.warmup_batch_size
    for _ in range(steps):
        batch = [rng.choice(pool) for _ in range(size - size // 2 if solved else size)]
        targets = [task.test_line(*rng.choice(task.tests_of(p)), p) for p in batch]
        rehearsed = [rng.choice(solved) for _ in range(size // 2)] if solved else []
        prompts = (encode_tester_prompts(tok, [p.question for p in batch], task.test_notation)
                   + encode_generator_prompts(tok, [p.question for p in rehearsed]))
        completions = [encode_completion(tok, t) for t in targets] + [encode_completion(tok, p.solution) for p in rehearsed]
        st = supervised_step(model, opt, prompts, completions, tok.pad_token_id,
                             max_grad_norm=cfg.train.max_grad_norm, bf16=cfg.train.bf16,
                             micro_batch_size=cfg.train.micro_batch_size)
        sched.step()
        compute.add(role, trained=st["tokens_trained"] + st["prompt_tokens_trained"])
        losses.append(st["loss"])
    tail = losses[-max(1, len(losses) // 10):]
    return {"test/warmup_loss": sum(tail) / len(tail)} if losses else {}


def sample_tests(cfg: RunConfig, model, tok, task, questions: list[str], n_tests: int, seed: int,
                 temperature: float | None = None) -> tuple[Rollout, list[str]]:
    """`n_tests` tester samples per question ([B*M] texts, each question's contiguous), in the task's notation."""
    ro = generate(model, encode_tester_prompts(tok, questions, task.test_notation), group_size=n_tests,
                  max_new_tokens=cfg.cure.test_max_new_tokens, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                  temperature=cfg.grpo.temperature if temperature is None else temperature, seed=seed,
                  bf16=cfg.train.bf16)
    return ro, decode_completions(tok, ro.completion_ids, ro.completion_mask)


def execution_matrices(task, problems: list[Problem], codes: list[list[str]], tests: list[list[str]],
                       truth: list[Problem] | None, use_gt: bool) -> list[Matrix]:
    """Each problem's matrix. `use_gt`: run the ground-truth tests (problems must be labelled); `truth`:
    labelled copies whose reference solution is run too, for the metrics alone (None: not run)."""
    jobs, where = [], []   # one sandbox run per (problem, distinct program)
    plans = []
    for i, problem in enumerate(problems):
        gt = task.tests_of(problem) if use_gt else []
        parsed = [task.parse_test(parse_test_line(t)) for t in tests[i]]
        inputs = [x for x, _ in gt] + [p[0] for p in parsed if p is not None]
        programs = [task.program(c, problem) for c in codes[i]]
        if truth is not None:
            programs.append(task.program(truth[i].solution or "", truth[i]))
        distinct = list(dict.fromkeys(programs))
        for program in distinct:
            jobs.append((program, task.entry_of(problem), [task.arguments(x) for x in inputs]))
            where.append((i, program))
        plans.append((gt, parsed, programs))
    runs = dict(zip(where, sandbox.run_many(jobs, task.limits))) if jobs else {}
    out = []
    for i, (gt, parsed, programs) in enumerate(plans):
        expected = [y for _, y in gt] + [p[1] for p in parsed if p is not None]
        rows = [sandbox.passed(runs[(i, program)], expected) for program in programs]
        t, n = len(gt), len(codes[i])
        columns = [j for j, p in enumerate(parsed) if p is not None]
        gen = [_spread(row[t:], columns, len(parsed)) for row in rows]
        out.append(Matrix(gt=[row[:t] for row in rows[:n]], gen=gen[:n], parsable=[p is not None for p in parsed],
                          reference_gen=gen[n] if truth is not None else []))
    return out


def _spread(verdicts: list[bool], columns: list[int], m: int) -> list[bool]:
    """Verdicts on the parsable tests (at `columns`) spread over all m generated tests (False elsewhere)."""
    at = dict(zip(columns, verdicts))
    return [at.get(j, False) for j in range(m)]


def cure_evaluation(cfg: RunConfig, model, tok, task, splits: list[str], tester: tuple | None = None
                    ) -> dict[str, dict[str, float]]:
    """Per split, on `cure.eval_problems` problems: N = `cure.eval_codes` sampled codes and M =
    `cure.eval_tests` generated tests each; `code_acc` (a sample's accuracy, i.e. pass@1 sampled),
    `bon_acc` (Best-of-N picked by the generated tests, CURE's headline), `test_accuracy`,
    `test_discrimination`, `test_parsable` (see `matrix_metrics`). `tester`: (model, tokenizer) of a
    separate tester (default: the coder in its tester prompt)."""
    c = cfg.cure
    out = {}
    tester_model, ttok = tester or (model, tok)
    modes = [(m, m.training) for m in {id(model): model, id(tester_model): tester_model}.values()]
    for m, _ in modes:
        m.eval()
    for split in splits:
        if split not in task.splits:
            continue
        problems = task.problems(split, c.eval_problems, seed=cfg.seed)
        questions = [p.question for p in problems]
        cro = generate(model, encode_generator_prompts(tok, questions), group_size=c.eval_codes,
                       max_new_tokens=cfg.grpo.max_new_tokens, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                       temperature=cfg.grpo.temperature, seed=derive_seed(cfg.seed, "cure-eval-codes", split),
                       bf16=cfg.train.bf16)
        codes = decode_completions(tok, cro.completion_ids, cro.completion_mask)
        _, tests = sample_tests(cfg, tester_model, ttok, task, questions, c.eval_tests,
                                derive_seed(cfg.seed, "cure-eval-tests", split))
        per_code, per_test = c.eval_codes, c.eval_tests
        matrices = execution_matrices(task, problems, [codes[i * per_code:(i + 1) * per_code] for i in range(len(problems))],
                                      [tests[i * per_test:(i + 1) * per_test] for i in range(len(problems))],
                                      truth=problems, use_gt=True)
        out[split] = {"n": len(problems), **matrix_metrics(matrices)}
    for m, was_training in modes:
        m.train(was_training)
    return out


def check_models(cfg: RunConfig, generator: str, verifier: str) -> dict:
    """The models `cotrain check` builds beside the coder: the tester, where it is a model of its own
    (`cure.two_models`), built as a run builds it; `verifier` names its source."""
    if not cfg.cure.two_models:
        return {}
    return {"tester": (*initial_verifier(cfg.verifier, cfg.model, cfg.init, cfg.seed, cfg.train.fsdp), verifier)}


def check_extra(cfg: RunConfig, task, roles: dict, problem, codes: list[str], say) -> dict:
    """What `cotrain check` adds for this recipe: the tester's first tests and their execution matrix."""
    return {"tests": first_tests(cfg, task, roles, problem, codes, say)}


def first_tests(cfg: RunConfig, task, roles: dict, problem, codes: list[str], say=print,
                sample_chars: int = 300) -> dict:
    """The tester's `cure.n_tests` tests of the first problem, and the execution matrix of the first
    group's codes against them and the problem's ground-truth tests, in the sandbox (`cotrain check`;
    `roles`: {role: (model, tokenizer, source)})."""

    require_unit_tests(task)
    model, tok, _ = roles.get("tester", roles["generator"])
    start = time.perf_counter()
    _, tests = sample_tests(cfg, model, tok, task, [problem.question], cfg.cure.n_tests,
                            derive_seed(cfg.seed, "tests", 1))
    sampled = time.perf_counter() - start
    start = time.perf_counter()
    [m] = execution_matrices(task, [problem], [codes], [tests], truth=None, use_gt=True)
    ran = time.perf_counter() - start
    out = {"parsable": sum(m.parsable), "n": len(tests), "ground_truth_tests": len(m.gt[0]) if m.gt else 0,
           "codes_correct": sum(bool(row) and all(row) for row in m.gt), "codes": len(codes)}
    say(f"tests     {'tester' if 'tester' in roles else 'the generator as tester'}, first problem: "
        f"{out['parsable']}/{out['n']} tests parse ({sampled:.2f} s); execution matrix of {len(codes)} codes x "
        f"({out['ground_truth_tests']} ground-truth + {out['parsable']} generated) tests in the sandbox "
        f"({ran:.2f} s): {out['codes_correct']}/{len(codes)} codes pass every ground-truth test")
    shown = tests[0] if len(tests[0]) <= sample_chars else tests[0][:sample_chars] + " [...]"
    say(f"test      {shown!r}")
    return out
