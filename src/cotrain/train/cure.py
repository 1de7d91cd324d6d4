"""Code co-training's shared pieces: the tester's rollout, the execution matrix run in the sandbox, the
tester's warm-up, and the CURE evaluation (Best-of-N with generated tests, unit-test accuracy).

The execution matrix of one problem runs each distinct code once, in the sandbox, on every test input
(ground-truth and generated) and compares its outputs with the expected ones in the trusted parent
(`sandbox.passed`): the program cannot forge a pass.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from cotrain import sandbox
from cotrain.config import RunConfig
from cotrain.errors import UserError
from cotrain.models.generate import Rollout, generate
from cotrain.models.prompts import decode_completions, encode_completion, encode_generator_prompts, encode_tester_prompts
from cotrain.rl.cure import best_of_n
from cotrain.roles import tester
from cotrain.tasks.base import Problem
from cotrain.train.compute import Compute
from cotrain.train.setup import derive_seed, initial_verifier, make_optimizer
from cotrain.train.update import supervised_step


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


def tester_role(cfg: RunConfig) -> tuple:
    """`cure.two_models`: the tester's (model, tokenizer, optimizer, scheduler), the model built as tango
    builds its verifier (`verifier.model`, `verifier.init`, else the run's start), AdamW at train.lr."""
    tester, ttok = initial_verifier(cfg)
    tester.train()
    return (tester, ttok, *make_optimizer(tester, cfg.train, cfg.train.steps))


@dataclass
class Matrix:
    """One problem's execution results: codes x tests."""

    gt: list[list[bool]]        # [n][t] code i passes ground-truth test k (empty rows without labels)
    gen: list[list[bool]]       # [n][m] code i passes generated test j (False where j does not parse)
    parsable: list[bool]        # [m]
    reference_gen: list[bool]   # [m] the reference solution passes generated test j (metrics only; [] without)


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
        parsed = [task.parse_test(tester.parse(t)) for t in tests[i]]
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


def matrix_metrics(matrices: list[Matrix], prefix: str = "") -> dict[str, float]:
    """Ground-truth monitors of a batch of matrices: codes passing every ground-truth test, the code
    Best-of-N by generated tests picks, generated tests the reference solution passes (unit-test
    accuracy), and the share of wrong codes those right tests reject (discrimination)."""
    codes = [all(row) for m in matrices for row in m.gt if row]
    bon = [all(m.gt[best_of_n(m.gen)]) for m in matrices if m.gt and m.gt[0]]
    parsable = [p for m in matrices for p in m.parsable]
    right = [r for m in matrices for r, p in zip(m.reference_gen, m.parsable) if p]
    rejected = []
    for m in matrices:
        wrong = [i for i, row in enumerate(m.gt) if row and not all(row)]
        for j, (r, p) in enumerate(zip(m.reference_gen, m.parsable)):
            if p and r and wrong:
                rejected.append(sum(not m.gen[i][j] for i in wrong) / len(wrong))

    def mean(xs):
        return sum(map(float, xs)) / len(xs) if xs else 0.0
    return {f"{prefix}code_acc": mean(codes), f"{prefix}bon_acc": mean(bon), f"{prefix}test_parsable": mean(parsable),
            f"{prefix}test_accuracy": mean(right), f"{prefix}test_discrimination": mean(rejected)}


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
