"""Stand-ins of real architectures (qwen2, llama, nanochat) built offline: they reload through the
pretrained-model path with their chat template, and every recipe runs on them through `model.path`
(on nanochat grpo here; the others, and prime, spin, mars, vstar and self_rewarding on every
stand-in, in `make test-heavy`).

The stand-ins are random: these tests check that the chat path runs end to end (templates, special
tokens, byte-level BPE pieces, save and reload), not that anything is learned.
"""
import math
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.models.build import build_standin, load_model
from cotrain.models.prompts import encode_generator_prompts, encode_proposer_prompts, uses_chat
from cotrain.models.verify import encode_verifier_prompts
from cotrain.recipes import grpo, sft
from cotrain.roles import generator, proposer, verifier
from cotrain.tasks.arith import ArithTask
from tests.conftest import nano_config, run_recipe

ARCHS = ("qwen2", "llama", "nanochat")
# What a stand-in's tokenizer writes around a generator prompt (its chat template's markers).
GENERATION_PROMPT = {"qwen2": "<|im_start|>assistant\n", "llama": "<|start_header_id|>assistant<|end_header_id|>\n\n",
                     "nanochat": "<|assistant_start|>"}
MODEL_CLASS = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "nanochat": "NanoChatForCausalLM"}
SAMPLE = "12+34=46\n46-5=41\n#### 41"


def standin_corpus() -> list[str]:
    """Arithmetic questions and solutions, and every role's chat prompt and verification vocabulary."""
    task = ArithTask()
    problems = task.problems("train", 2000)
    corpus = [p.question for p in problems] + [p.solution for p in problems]
    for p in problems[:200]:
        corpus.append(generator.CHAT_INSTRUCTION.format(question=p.question))
        corpus.append(verifier.chat_messages(p.question, p.solution)[0]["content"])
        corpus.append(verifier.reference_verification(task, p, p.solution, chat=True))
        corpus.append(proposer.CHAT_INSTRUCTION.format(example=p.question))
    return corpus


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> dict[str, Path]:
    corpus = standin_corpus()
    return {arch: build_standin(arch, tmp_path_factory.mktemp(f"standin_{arch}"), corpus=corpus) for arch in ARCHS}


# ---------------------------------------------------------------------- the stand-ins themselves


@pytest.mark.parametrize("arch", ARCHS)
def test_standin_reloads_with_its_chat_template_and_left_padding(standins, arch):
    model, tok = load_model(standins[arch])
    assert type(model).__name__ == MODEL_CLASS[arch]
    # the very tokenizer that was built: AutoTokenizer would rebuild a qwen2 pre-tokenizer and change the ids
    built = Tokenizer.from_file(str(standins[arch] / "tokenizer.json"))
    assert tok.get_vocab() == built.get_vocab()
    assert tok(SAMPLE, add_special_tokens=False)["input_ids"] == built.encode(SAMPLE, add_special_tokens=False).ids
    assert len(tok) == model.config.vocab_size == 512
    assert uses_chat(tok) and tok.padding_side == "left"
    assert (tok.eos_token_id, tok.pad_token_id) == (model.config.eos_token_id, model.config.pad_token_id)
    assert tok.pad_token_id != tok.eos_token_id

    question = "12+34-5"
    ids = encode_generator_prompts(tok, [question])[0]
    text = tok.decode(ids)
    assert f"Problem: {question}" in text and text.endswith(GENERATION_PROMPT[arch])
    assert tok.decode(ids, skip_special_tokens=True).count(question) == 1
    if arch in ("llama", "nanochat"):  # the template writes bos once; apply_chat_template must not add a second
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    else:
        assert tok.bos_token_id is None
    for prompt in (encode_verifier_prompts(tok, [question], ["12+34=46\n46-5=41\n#41"])[0],
                   encode_proposer_prompts(tok, [question])[0]):
        assert tok.decode(prompt).endswith(GENERATION_PROMPT[arch])

    batch = tok(["1+2", "12+34-5 and more text"], padding=True)
    short, long_ = batch["attention_mask"]
    assert short[0] == 0 and short[-1] == 1 and all(long_)        # padding on the left
    assert batch["input_ids"][0][0] == tok.pad_token_id


def test_standin_rejects_unknown_architectures(tmp_path):
    with pytest.raises(ValueError, match="qwen2, llama, nanochat"):
        build_standin("gpt2", tmp_path, corpus=["1+2"])


# ---------------------------------------------------------------------- every recipe on every stand-in

SMOKE = {
    "train": {"steps": 2, "batch_size": 8, "n_problems": 200},
    "grpo": {"group_size": 4, "max_new_tokens": 16},
    "verifier": {"solutions": 4, "group_size": 2, "max_new_tokens": 16},
    "tango": {"gen_steps": 1, "eval_n": 4},
    "selfplay": {"proposals": 4, "judge_passes": 1, "seed_questions": 16, "question_max_new_tokens": 12},
    "reliability": {"n_strong": 1, "n_weak": 1, "n_old": 1},
    "eval": {"splits": ["test"], "n": 8, "k": 2, "n_sampled": 2, "every": 0},
    "checkpoint": {"every": 0},
}
WARMUP = {"warmup_sft_steps": 3, "warmup_samples": 8, "warmup_batch_size": 4}
RUNS = {  # (run function, overrides of SMOKE)
    "sft": (sft.run, {}),
    "grpo": (grpo.run, {}),
    "tango": (run_recipe, {"verifier": WARMUP}),
    "frozen_verifier": (run_recipe, {"verifier": WARMUP}),
    "consistency": (run_recipe, {}),
    "triad_shared": (run_recipe, {"selfplay": {"shared_model": True}}),
    "triad_separate": (run_recipe, {"selfplay": {"shared_model": False}}),
    "reliability": (run_recipe, {}),
    "prime": (run_recipe, {"prime": {"filter": False}}),
    "spin": (run_recipe, {"spin": {"iteration_steps": 1}}),
    "mars": (run_recipe, {"mars": {"worker_max_new_tokens": 8}}),
    "vstar": (run_recipe, {"vstar": {"bon": [1, 2], "bon_problems": 2}}),
    "self_rewarding": (run_recipe, {"verifier": {"warmup_sft_steps": 0}}),
}
NEWER = {"prime", "spin", "mars", "vstar", "self_rewarding"}  # on every stand-in in `make test-heavy` only


# every recipe on qwen2 and llama; on nanochat grpo here and the rest in `make test-heavy`
CASES = [pytest.param(arch, name, marks=[pytest.mark.heavy] if (arch == "nanochat" and name != "grpo") or name in NEWER
                      else []) for arch in ARCHS for name in RUNS]


@pytest.mark.parametrize("arch, name", CASES)
def test_recipe_runs_on_standin(standins, arch, name, tmp_path):
    run, overrides = RUNS[name]
    raw = nano_config(name.split("_")[0] if name.startswith("triad") else name, **SMOKE)
    for key, value in overrides.items():
        raw[key] = {**raw.get(key, {}), **value}
    raw["model"] = {"path": str(standins[arch])}
    results = run(build_config(raw), tmp_path / "run")

    assert math.isfinite(results["generator"]["test"]["pass@1"])
    model, tok = load_model(tmp_path / "run" / "final" / "generator")
    _, built = load_model(standins[arch])
    assert type(model).__name__ == MODEL_CLASS[arch]
    assert tok.get_vocab() == built.get_vocab() and tok.chat_template == built.chat_template
    assert tok(SAMPLE)["input_ids"] == built(SAMPLE)["input_ids"]
    assert tok.padding_side == "left"


def test_load_model_error_is_a_user_error_for_a_tokenizerless_standin(standins, tmp_path):
    """A model directory without its tokenizer fails with one clear line, not a traceback."""
    broken = tmp_path / "no_tokenizer"
    shutil.copytree(standins["qwen2"], broken)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (broken / name).unlink()
    with pytest.raises(UserError, match="cannot load model"):
        load_model(broken)
