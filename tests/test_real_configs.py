"""The real-model configs (configs/real/) and `cotrain check`, which validates a config and starts it.

Every config validates and names its model in one line; `cotrain check` loads the data and every model
of a recipe and runs and grades the first rollout on offline stand-ins of Qwen2 and Llama (random
weights: it checks the path, not answers); bad configs and paths end in one line and exit code 2. Also
the gsm8k task's MATH-500 `ood` split and how GSM8K and MATH answers are read from the outputs of
instruction-tuned models.
"""
import json
import re
from pathlib import Path

import pytest

from cotrain.preflight import check
from cotrain.cli import main
from cotrain.config import load_config
from cotrain.errors import UserError
from cotrain.eval.metrics import majority_answer
from cotrain.models.build import build_standin
from cotrain.roles import generator, proposer, verifier
from cotrain.tasks import Problem, make_task
from cotrain.tasks.mathdata import Gsm8kTask, JsonlTask, Math500Task, extract_gsm8k_answer, shipped_data_dir

REAL = Path(__file__).resolve().parents[1] / "configs" / "real"
CODE_CONFIGS = [REAL / "cure.yaml"]  # code co-training: a HumanEval-format file the user brings, then HumanEval
CONFIGS = sorted(p for p in REAL.glob("*.yaml")
                 if not p.stem.startswith(("smollm2_", "nanochat_")) and p not in CODE_CONFIGS)  # one per recipe, on GSM8K
CPU_CONFIGS = sorted(REAL.glob("smollm2_*.yaml"))  # the real SmolLM2 sized for a CPU: tests/test_real_model.py
DATA = shipped_data_dir()  # GSM8K, MATH-500 and HumanEval, gzipped in the package
FAST = ["--prompts", "1", "--max-new-tokens", "16"]  # a check's rollout on one thread in about a second


# ---------------------------------------------------------------------- the configs


def test_every_recipe_has_a_real_config():
    assert {c.stem for c in CONFIGS} == {"sft", "grpo", "frozen_verifier", "tango", "consistency", "triad",
                                         "reliability", "prime", "spin", "mars", "vstar", "self_rewarding"}
    assert all(p.is_file() for p in CODE_CONFIGS)


def test_the_cure_config_names_its_model_in_one_line_and_tests_on_humaneval():
    path = REAL / "cure.yaml"
    cfg = load_config(path)
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    named = [line for line in lines if re.search(r"\bpath:", line)]
    assert len(named) == 1 and named[0].startswith("model:") and cfg.model.path in named[0]
    assert cfg.recipe == "cure" and cfg.task.name == "code_jsonl" and cfg.train.bf16 is True
    assert cfg.task.options()["splits"]["test"] == "data:humaneval.jsonl.gz"  # the copy shipped with cotrain
    # the training file is the user's: one override
    train = load_config(path, ["task.splits.train=/data/mine.jsonl"]).task.options()["splits"]["train"]
    assert train == "/data/mine.jsonl"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_real_config_validates_and_names_its_model_in_one_line(path):
    cfg = load_config(path)
    assert cfg.recipe == path.stem
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    named = [line for line in lines if re.search(r"\bpath:", line)]
    assert len(named) == 1 and named[0].startswith("model:"), named       # the one line to edit
    assert cfg.model.path and cfg.model.path in named[0]
    # every other role starts from that model: nothing else names a checkpoint
    assert (cfg.init, cfg.verifier.init, cfg.verifier.model, cfg.selfplay.proposer_init) == (None, None, None, None)
    # GSM8K train -> GSM8K test, with MATH-500 as the out-of-distribution split of the same run
    assert cfg.task.name == "gsm8k" and cfg.task.options() == {"ood": "math500"}
    assert cfg.eval.splits == ["test", "ood"]
    assert cfg.train.bf16 is True and cfg.model.dtype == "float32"  # bf16 compute, float32 weights keep lr 1e-6 updates
    # the one-line switch to a local checkpoint
    assert load_config(path, ["model.path=/models/local"]).model.path == "/models/local"


def test_real_rl_configs_share_the_generator_settings():
    """The recipes compare at equal generator settings (a reliability step samples its own candidates)."""
    def generator_settings(name):
        cfg = load_config(REAL / f"{name}.yaml")
        return (cfg.model.path, cfg.grpo.group_size, cfg.grpo.max_new_tokens, cfg.grpo.temperature, cfg.grpo.beta,
                cfg.train.lr, cfg.train.steps, cfg.eval.model_dump())

    grpo = generator_settings("grpo")
    assert grpo[1:3] == (8, 512) and grpo[5] == 1e-6
    for name in ("tango", "frozen_verifier", "consistency", "triad"):
        assert generator_settings(name) == grpo, name
        assert load_config(REAL / f"{name}.yaml").train.batch_size == load_config(REAL / "grpo.yaml").train.batch_size


def test_readme_covers_every_real_config():
    readme = (REAL / "README.md").read_text()
    for path in CONFIGS + CPU_CONFIGS + CODE_CONFIGS:
        assert f"{path.stem}.yaml" in readme, path.stem
    for needle in ("model.path=", "torchrun --nproc_per_node", "--rdzv_backend c10d", "--rdzv_endpoint"):
        assert needle in readme, needle


# ---------------------------------------------------------------------- gsm8k with MATH-500 as its ood split


def test_gsm8k_ood_split_is_math500_read_and_graded_as_math500():
    task = make_task("gsm8k", ood="math500")  # what `task: {name: gsm8k, ood: math500}` builds
    assert task.splits == ("train", "test", "ood")
    ood, math = task.problems("ood"), Math500Task().problems("test")
    assert len(ood) == 500
    assert [(p.question, p.answer, p.solution) for p in ood] == [(p.question, p.answer, p.solution) for p in math]
    assert all(p.meta["source"] == "math500" and "subject" in p.meta for p in ood)
    for problem in ood[:20]:  # reference solutions end in \boxed{}: graded by the MATH rule, all correct
        assert task.grade(problem.solution, problem) == 1.0, problem.answer
    assert Gsm8kTask().splits == ("train", "test")  # no ood split unless asked
    assert len(task.problems("test")) == 1319


def test_gsm8k_rejects_an_unknown_ood_source():
    with pytest.raises(UserError, match="task.ood must be one of math500"):
        make_task("gsm8k", ood="math")


GSM8K_OUTPUTS = [  # (instruction-model output, GSM8K answer, grade)
    ("Janet has 16 - 3 - 4 = 9 eggs left.\nShe makes 9 * 2 = 18 dollars.\nso the answer is \\boxed{18}.", "18", 1.0),
    ("Step 1: 5 * 200 = 1,000\n#### 1,000", "1000", 1.0),  # thousands separator after the mark
    ("**Final answer:** #### $18", "18", 1.0),  # markdown and currency
    ("#### 18.00", "18", 1.0),  # trailing zeros
    ("The answer is $\\boxed{\\$18}$.", "18", 1.0),  # an escaped dollar inside \boxed
    ("#### \\$1,000", "1000", 1.0),  # LaTeX after the mark
    ("#### 18 \\text{ dollars}", "18", 1.0),  # a LaTeX unit: math-verify drops it
    ("#### 18\n\nI hope this helps! Let me know if you have 2 more questions.", "18", 1.0),  # chatter after the answer
    ("Step 1: 3 * 4 = 12\nStep 2: 12 + 6 = 18\nThe final answer is 18", "18", 1.0),  # no mark: the last number
    ("She makes 9 * 2 = 18 dollars.\n#### 20", "18", 0.0),  # the marked answer counts, not the work
    ("I am not sure how to solve this.", "18", 0.0),  # no number at all
]


@pytest.mark.parametrize("text, answer, grade", GSM8K_OUTPUTS)
def test_gsm8k_grades_instruction_model_outputs(text, answer, grade):
    assert Gsm8kTask().grade(text, Problem(question="q", answer=answer)) == grade


MATH_OUTPUTS = [  # (output on a MATH-500 problem of the ood split, answer, grade)
    ("Simplifying, we get $\\frac{28}{6}$, so the answer is \\boxed{\\dfrac{14}{3}}.", "\\frac{14}{3}", 1.0),
    ("The answer follows:\n#### \\frac{14}{3}", "\\frac{14}{3}", 1.0),  # LaTeX after the mark the prompt asks for
    ("#### $(3, \\frac{\\pi}{2})$.", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),  # a tuple in dollars
    ("#### 14", "\\frac{14}{3}", 0.0),  # a different value
    ("so it is 14/3", "\\frac{14}{3}", 0.0),  # no boxed answer and no mark: MATH grading finds none
]


@pytest.mark.parametrize("text, answer, grade", MATH_OUTPUTS)
def test_ood_problems_are_graded_by_the_math_rule(text, answer, grade):
    problem = Problem(question="q", answer=answer, meta={"source": "math500"})
    assert Gsm8kTask(ood="math500").grade(text, problem) == grade


@pytest.mark.parametrize("text, expected", [
    ("#### \\frac{14}{3}", "\\frac{14}{3}"),  # LaTeX after the mark: the whole answer, not its first number
    ("#### $\\dfrac{1}{2}$.", "\\dfrac{1}{2}"),  # dollars and the final period removed
    ("#### \\boxed{18}", "18"),  # a box after the mark
    ("#### 10^{10}", "10^{10}"),  # braces without a backslash are LaTeX too
    ("#### 1,000 apples", "1000"),  # plain text after the mark: the first number, as before
])
def test_extract_gsm8k_answer_reads_latex_after_the_mark(text, expected):
    assert extract_gsm8k_answer(text) == expected


@pytest.mark.parametrize("task", [Gsm8kTask(), Math500Task(), JsonlTask(path="unused.jsonl")],
                         ids=["gsm8k", "math500", "jsonl"])
def test_file_tasks_vote_by_mathematical_equivalence(task):
    """maj@k groups "1/2", "0.5" and "\\frac{1}{2}" as one answer on every file-backed task."""
    assert task.answers_equal("\\frac{1}{2}", "0.5") and not task.answers_equal("\\frac{1}{3}", "0.5")
    assert majority_answer(["3", "\\frac{1}{2}", "0.5", "3", "1/2"], task.answers_equal) == "\\frac{1}{2}"


# ---------------------------------------------------------------------- cotrain check on stand-ins


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> dict[str, Path]:
    """Offline Qwen2 and Llama stand-ins whose BPE is learned on GSM8K and MATH-500 text and the role
    prompts, so that digits, LaTeX and the chat markers are covered."""
    task = make_task("gsm8k", ood="math500")
    problems = task.problems("train", 300, seed=0) + task.problems("ood", 100, seed=0)
    corpus = [p.question for p in problems] + [p.solution for p in problems]
    corpus += [generator.CHAT_INSTRUCTION, verifier.CHAT_INSTRUCTION, proposer.CHAT_INSTRUCTION,
               "Step 1: CORRECT\nStep 2: INCORRECT\nFinal: INCORRECT"]
    return {arch: build_standin(arch, tmp_path_factory.mktemp(f"standin_{arch}"), corpus=corpus)
            for arch in ("qwen2", "llama", "nanochat")}


RUNS = [  # (config, stand-in, class, roles reported besides the generator)
    ("grpo", "qwen2", "Qwen2ForCausalLM", []),
    ("tango", "qwen2", "Qwen2ForCausalLM", ["verifier"]),
    ("consistency", "qwen2", "Qwen2ForCausalLM", ["verifier"]),
    ("sft", "qwen2", "Qwen2ForCausalLM", []),
    ("frozen_verifier", "llama", "LlamaForCausalLM", ["verifier"]),
    ("triad", "llama", "LlamaForCausalLM", []),
    ("reliability", "llama", "LlamaForCausalLM", []),
]


@pytest.mark.parametrize("name, arch, cls, others", RUNS, ids=[r[0] for r in RUNS])
def test_check_starts_real_config_on_standin(standins, capsys, name, arch, cls, others):
    code = main(["check", str(REAL / f"{name}.yaml"), f"model.path={standins[arch]}", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"cotrain check {REAL / name}.yaml" and lines[-1] == "ok"
    report = dict(line.split(None, 1) for line in lines[1:-1] if not line.startswith(" "))  # {first word: rest}
    assert report["generator"].startswith(cls) and "chat template yes" in report["generator"]
    assert f"from {standins[arch]} (model.path)" in report["generator"]
    for role in others:
        assert report[role].startswith(cls), role
    assert re.search(r"max_new_tokens 16 \(config \d+\): \d+ tokens in [\d.]+ s = [\d,]+ tokens/s", report["rollout"])
    assert re.match(r"mean \d\.\d{3} over \d+", report["reward"])
    assert report["sample"].startswith(("'", '"')) and "peak" in report["memory"]
    after_plan = lines[lines.index(next(x for x in lines if x.startswith("plan"))) + 1:]
    phases = [line.split()[0] for line in after_plan if line.startswith("          ") and ("GiB" in line or "MiB" in line)]
    assert "rollout" in phases and "update/generator" in phases and ("update/verifier" in phases) == ("verifier" in others)
    assert ("verify" in report) == (name not in ("grpo", "sft"))  # a verifier or judge checks the first sample
    pool = 512 if name in ("triad", "reliability") else 7473  # self-play reads selfplay.seed_questions of them
    assert f"training pool {pool} problems; evaluation test 1319, ood 500" in report["task"]


def test_the_nanochat_config_reproduces_chat_rl_and_checks_on_a_nanochat_standin(standins, capsys):
    """configs/real/nanochat_grpo.yaml holds chat_rl.py's settings (no KL, on-policy, token-level loss,
    mean-centred advantages, 16 x 16 samples, 256 tokens, temperature 1, top-k 50) and `cotrain check`
    starts it on a NanoChatForCausalLM stand-in, sampling at top-k 50."""
    path = REAL / "nanochat_grpo.yaml"
    cfg = load_config(path)
    g = cfg.grpo
    assert (cfg.recipe, g.beta, g.num_iterations, g.loss_type, g.scale_rewards) == ("grpo", 0.0, 1, "dapo", "none")
    assert (cfg.train.batch_size // g.group_size, g.group_size, g.max_new_tokens, g.temperature, g.top_k) == (16, 16, 256, 1.0, 50)
    assert cfg.train.schedule == "linear" and cfg.train.steps * 16 <= 7473 < (cfg.train.steps + 1) * 16  # one epoch
    named = [line for line in path.read_text().splitlines() if re.search(r"\bpath:", line) and not line.lstrip().startswith("#")]
    assert len(named) == 1  # the one line to switch to a converted checkpoint
    code = main(["check", str(path), f"model.path={standins['nanochat']}", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = dict(line.split(None, 1) for line in out.splitlines()[1:-1] if not line.startswith(" "))
    assert report["generator"].startswith("NanoChatForCausalLM") and "chat template yes" in report["generator"]
    assert "top-k 50" in report["rollout"]


def test_check_starts_the_cure_config_on_a_standin(standins, capsys, tmp_path):
    """The code config on a stand-in: codes and tests sampled, the first group's execution matrix run in the
    sandbox against the problem's literal assertions."""
    import gzip

    train = tmp_path / "train.jsonl"
    train.write_text("".join(gzip.open(DATA / "humaneval.jsonl.gz", "rt").readlines()[:5]))
    code = main(["check", str(REAL / "cure.yaml"), f"model.path={standins['qwen2']}", f"task.splits.train={train}",
                 "cure.n_tests=2", "cure.test_max_new_tokens=8", *FAST])  # the test split: the config's data:humaneval
    out, err = capsys.readouterr()
    assert code == 0, err
    report = dict(line.split(None, 1) for line in out.splitlines()[1:-1] if not line.startswith(" "))
    assert "training pool 5 problems; evaluation test 164" in report["task"]
    assert re.search(r"first problem: \d/2 tests parse .*execution matrix of 16 codes x \(\d+ ground-truth", report["tests"])


def test_one_run_evaluates_gsm8k_test_and_math500(standins, tmp_path, capsys):
    """The shipped grpo config, shrunk to one step, ends with both splits in eval.json."""
    tiny = ["train.steps=1", "train.batch_size=16", "grpo.max_new_tokens=8", "eval.n=4", "eval.k=2",
            "eval.n_sampled=2", "eval.max_new_tokens=8", "eval.every=0", "checkpoint.every=0", "log.progress=false",
            "log.tensorboard=false"]
    assert main(["run", str(REAL / "grpo.yaml"), f"model.path={standins['llama']}", *tiny, "--out",
                 str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "eval.json").read_text())["generator"]
    assert set(results) == {"test", "ood"} and results["ood"]["n"] == results["test"]["n"] == 4


def test_check_returns_the_first_rollouts_numbers(standins):
    cfg = load_config(REAL / "grpo.yaml", [f"model.path={standins['qwen2']}"])
    lines = []
    report = check(cfg, prompts=2, max_new_tokens=8, say=lines.append)
    assert len(report["prompt_tokens"]) == 2 and len(report["completion_tokens"]) == 2 * 8   # 2 prompts x G = 8
    assert all(1 <= n <= 8 for n in report["completion_tokens"])
    assert 0.0 <= report["reward_mean"] <= 1.0 and report["tokens_per_s"] > 0 and report["peak_memory_bytes"] > 0
    info = report["roles"]["generator"]
    assert info["class"] == "Qwen2ForCausalLM" and info["chat"] and info["dtype"] == "float32"
    assert info["parameters"] == info["trainable"] > 0 and info["device"] == "cpu"
    assert lines[-1] == "ok"


def test_check_honours_verifier_init_and_separate_selfplay_models(standins, capsys):
    assert main(["check", str(REAL / "tango.yaml"), f"model.path={standins['qwen2']}",
                 f"verifier.init={standins['llama']}", "--prompts", "1", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^verifier  LlamaForCausalLM.*\(verifier\.init\)$", out, re.M)
    assert main(["check", str(REAL / "triad.yaml"), f"model.path={standins['llama']}", "selfplay.shared_model=false",
                 "--prompts", "1", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^proposer  LlamaForCausalLM", out, re.M) and re.search(r"^judge     LlamaForCausalLM", out, re.M)


def test_check_builds_the_models_a_recipe_keeps_of_its_own(standins, capsys, tmp_path):
    """A recipe's `check_models`: mars's planner and cure's tester, each a model of its own, are built and
    reported; with one shared model neither appears."""
    for two, present in (("true", True), ("false", False)):
        assert main(["check", str(REAL / "mars.yaml"), f"model.path={standins['llama']}", f"mars.two_models={two}",
                     "--prompts", "1", "--max-new-tokens", "4"]) == 0
        out = capsys.readouterr().out
        assert bool(re.search(r"^planner   LlamaForCausalLM.*\(model\.path\), a second copy$", out, re.M)) is present
    import gzip

    train = tmp_path / "train.jsonl"
    train.write_text("".join(gzip.open(DATA / "humaneval.jsonl.gz", "rt").readlines()[:5]))
    assert main(["check", str(REAL / "cure.yaml"), f"model.path={standins['qwen2']}", f"task.splits.train={train}",
                 f"verifier.init={standins['llama']}", "cure.two_models=true", "cure.n_tests=2",
                 "cure.test_max_new_tokens=4", "--prompts", "1", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^tester    LlamaForCausalLM.*\(verifier\.init\)$", out, re.M)


def test_check_warns_when_16_bit_weights_cannot_take_the_learning_rate(standins, capsys):
    assert main(["check", str(REAL / "grpo.yaml"), f"model.path={standins['qwen2']}", "model.dtype=bfloat16",
                 "--prompts", "1", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^note      generator: trainable weights are bfloat16: a step of lr=1e-06 cannot change any "
                     r"weight with \|w\| >= 0\.00051 \(\d+\.\d% of them\)", out, re.M)


@pytest.mark.parametrize("args, message", [
    # models are loaded after the data is read: these two need the data files
    (["model.path=/nonexistent/model"], "not a model directory"),  # no such directory
    (["init=/nonexistent/run"], "no model found at /nonexistent/run"),  # before loading
    (["trian.steps=3"], "unknown config key 'trian'"),  # a typo in an override
    (["task.ood=math"], "task.ood must be one of math500"),  # a bad task option
    (["--prompts", "0"], "--prompts must be at least 1"),
    (["--max-new-tokens", "x"], "invalid int value"),
])
def test_check_bad_input_is_one_line_and_exit_code_2(capsys, args, message):
    code = main(["check", str(REAL / "grpo.yaml"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("cotrain: error: ") and message in err, err


def test_check_of_a_missing_config_is_one_line(capsys, tmp_path):
    assert main(["check", str(tmp_path / "nothere.yaml")]) == 2
    assert capsys.readouterr().err.startswith("cotrain: error: config file not found")


SHIPPED_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: p.name)
def test_check_passes_every_shipped_config(path, capsys):
    """Every config in configs/ (configs/real/ on stand-ins above). The self-play smoke configs once
    failed `check` (sized by train.n_problems, not selfplay.seed_questions)."""
    assert main(["check", str(path), "--prompts", "1", "--max-new-tokens", "8"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip().endswith("ok")


# ---------------------------------------------------------------------- hub ids offline


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


@pytest.mark.parametrize("env", [{"HF_ENDPOINT": "http://127.0.0.1:9"}, {"HF_HUB_OFFLINE": "1"}],
                         ids=["unreachable", "offline"])
@pytest.mark.parametrize("command", ["check", "run"])
def test_an_unreachable_hub_id_fails_at_once_in_one_line(empty_hub_cache, monkeypatch, capsys, tmp_path, env, command):
    """No retry storm: a hub id neither cached nor reachable ends in one line naming the way out."""
    import time

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    start = time.perf_counter()
    args = [command, str(REAL / "grpo.yaml")] + (["--out", str(tmp_path / "run")] if command == "run" else [])
    assert main(args) == 2
    assert time.perf_counter() - start < 5.0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model 'Qwen/Qwen2.5-0.5B-Instruct' is not a local directory" in err
    assert "--local-dir DIR) and set model.path=DIR" in err
    assert not (tmp_path / "run").exists(), "nothing is written for a run that cannot start"


def test_a_cached_hub_id_passes_the_hub_check_offline(empty_hub_cache, monkeypatch):
    from cotrain.hub import require_hub

    snapshot = empty_hub_cache / "models--Org--Model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (empty_hub_cache / "models--Org--Model" / "refs").mkdir()
    (empty_hub_cache / "models--Org--Model" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    require_hub("Org/Model")  # cached: no error, no network
    with pytest.raises(UserError, match="HF_HUB_OFFLINE is set"):
        require_hub("Org/Other")
