"""Models are always `transformers` causal LMs: a Llama built from scratch with a character-level
tokenizer (the tiny world), any pretrained `AutoModelForCausalLM` (the real world), or a small
stand-in of a real architecture built offline (`build_standin`)."""
from __future__ import annotations

import copy
import json
import os
import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    NanoChatConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
)
from transformers.utils import logging as hf_logging

from cotrain.config import ModelConfig
from cotrain.errors import UserError
from cotrain.hub import is_local_path, require_hub
from cotrain.models import gguf_source
from cotrain.models.lora import AdapterOff, apply_lora, is_lora, load_adapter, save_lora

# Size presets of the from-scratch Llama: (hidden, layers, heads, intermediate).
PRESETS = {
    "nano": (64, 2, 2, 256),      # tests: builds and steps in milliseconds
    "tiny": (128, 4, 4, 512),     # the demo: ~0.8M parameters, learns 2-3-step arithmetic in minutes
    "small": (256, 6, 8, 1024),
    "base": (512, 8, 8, 2048),
}

hf_logging.disable_progress_bar()  # our own progress line is the only one on stderr

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Printable ASCII and newline: enough for every role's text (verdicts, proposed questions, rg tasks).
CHARS = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
SELF_CONTAINED = ("char", "fast")
"""Tokenizer kinds in `cotrain_tokenizer.json` that load with `PreTrainedTokenizerFast`, not `AutoTokenizer`."""


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per character, <bos> prepended, left padding."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    # BPE without merges splits text into characters; no pre-tokenizer keeps spaces and newlines.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])])
    # padding_side must be given here: set later, it is not saved with the tokenizer.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)


def build_model(cfg: ModelConfig, seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model from the config: a from-scratch preset or a pretrained path / hub id."""
    if cfg.path is not None:
        return load_model(cfg.path, dtype=cfg.dtype)
    tokenizer = build_char_tokenizer()
    hidden, layers, heads, inter = PRESETS[cfg.preset]
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=inter,
        max_position_embeddings=cfg.max_length, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, rms_norm_eps=1e-5)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model, tokenizer


# ----------------------------------------------------------------------------- stand-ins of real architectures

# Per architecture: special tokens (bos, eos, pad and the chat markers), and a chat template in the
# style of its instruction-tuned releases. Qwen2 writes ChatML and has no bos; Llama writes the
# Llama-3 header format and its tokenizer prepends bos to plain text (the template writes it itself).
_STANDINS = {
    "qwen2": {
        "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>", "config_bos": "<|endoftext|>",
        "template": (
            "{% for message in messages %}"
            "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
            "{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    },
    "llama": {
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                     "<|eot_id|>", "<|finetune_right_pad_id|>"],
        "bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": "<|finetune_right_pad_id|>",
        "config_bos": "<|begin_of_text|>",
        "template": (
            "{{ bos_token }}"
            "{% for message in messages %}"
            "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
            "{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    },
    # nanochat (karpathy/nanochat): its tokenizer's nine specials, conversations as
    # <|bos|><|user_start|>...<|user_end|><|assistant_start|>...<|assistant_end|>; no pad token of its own
    # (bos pads, masked, on the left).
    "nanochat": {
        "specials": ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                     "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"],
        "bos": "<|bos|>", "eos": "<|assistant_end|>", "pad": "<|bos|>", "config_bos": "<|bos|>",
        "template": (
            "{{ bos_token }}"
            "{% for message in messages %}"
            "{% if message['role'] == 'user' %}{{ '<|user_start|>' + message['content'] + '<|user_end|>' }}"
            "{% else %}{{ '<|assistant_start|>' + message['content'] + '<|assistant_end|>' }}{% endif %}"
            "{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant_start|>' }}{% endif %}"),
    },
}


def build_standin(arch: str, out_dir: str | Path, *, corpus: list[str], vocab_size: int = 512, hidden_size: int = 64,
                  layers: int = 2, heads: int = 4, seed: int = 0, kv_heads: int | None = None,
                  intermediate_size: int | None = None, model_vocab_size: int | None = None) -> Path:
    """Build and save a small, randomly initialised stand-in of a real architecture, entirely offline.

    It is what the pretrained-model path (`model.path`, `init`) is exercised with when no hub is
    reachable: a `Qwen2ForCausalLM` or `LlamaForCausalLM` from `AutoModelForCausalLM.from_config`, with a
    byte-level BPE tokenizer trained on `corpus`, the architecture's chat special tokens (bos, eos, pad)
    and a chat template in the style of its instruction-tuned releases (ChatML for qwen2, Llama-3
    headers for llama, nanochat's user/assistant markers for nanochat), so prompts go through `apply_chat_template` exactly as with a real checkpoint.
    It is saved with `save_model` and loads back with `load_model` (same vocabulary, chat template,
    left padding). Its weights are random: it exercises code paths, it does not solve anything.

    Args:
        arch: "qwen2", "llama" or "nanochat".
        out_dir: directory to write (created).
        corpus: texts the BPE merges are learned from (e.g. task questions, solutions, role prompts).
        vocab_size: target vocabulary size (256 bytes + special tokens + merges).
        hidden_size, layers, heads: model size; key/value heads are half the heads (grouped-query
            attention, as in the real models) when `heads` is even, unless `kv_heads` is given.
        seed: seed of the weight initialisation.
        intermediate_size: MLP width (default 4 x hidden_size).
        model_vocab_size: rows of the embedding when larger than the tokenizer's vocabulary (real
            checkpoints pad it, e.g. Qwen2.5's 151,936), so that a stand-in has the real model's shapes.

    Returns:
        out_dir, as a Path.
    """
    if arch not in _STANDINS:
        raise ValueError(f"unknown stand-in architecture {arch!r} (valid: {', '.join(_STANDINS)})")
    spec = _STANDINS[arch]
    # ---- tokenizer: byte-level BPE (every string encodes; no unknown token), specials first
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=spec["specials"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    if spec["bos"] is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos_id = tok.token_to_id(spec["bos"])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec['bos']} $A", pair=f"{spec['bos']} $A $B", special_tokens=[(spec["bos"], bos_id)])
    # padding_side must be given here: set later, it is not saved with the tokenizer.
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=spec["bos"], eos_token=spec["eos"], pad_token=spec["pad"],
        padding_side="left", clean_up_tokenization_spaces=False, chat_template=spec["template"])
    # ---- model
    config_class = {"qwen2": Qwen2Config, "llama": LlamaConfig, "nanochat": NanoChatConfig}[arch]
    config = config_class(
        vocab_size=max(len(tokenizer), model_vocab_size or 0), hidden_size=hidden_size, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads or (heads // 2 if heads % 2 == 0 else heads),
        intermediate_size=intermediate_size or 4 * hidden_size,
        max_position_embeddings=2048, rms_norm_eps=1e-6,
        tie_word_embeddings=arch != "nanochat",  # nanochat unties its head (and uses relu², logits softcapped at 15)
        bos_token_id=tok.token_to_id(spec["config_bos"]), eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    out_dir = Path(out_dir)
    save_model(model, tokenizer, out_dir)
    return out_dir


def _is_local_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def load_model(path: str | Path, dtype: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a directory (ours or any HF one), a GGUF source
    (`gguf_source`: a `.gguf` file or a short name such as `smollm2`) or a hub id, with its weights
    in `dtype` ("float32", "bfloat16", "float16"; default: the dtype they were saved in).

    Self-built tokenizers (the char tokenizer, a stand-in's BPE; marked in `cotrain_tokenizer.json`
    by `save_model`) are loaded with `PreTrainedTokenizerFast`: `AutoTokenizer` may swap them for the
    architecture's default class (on a qwen2 directory it rebuilds the pre-tokenizer and changes the ids).
    """
    path = gguf_source.resolve(path)  # a GGUF file: its converted directory
    p = Path(path)
    looks_local = is_local_path(path)
    if looks_local and not _is_local_model_dir(p):
        raise UserError(f"not a model directory (no config.json): {path}")
    if not looks_local:
        require_hub(str(path))
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype) if dtype else "auto")
        marker = p / "cotrain_tokenizer.json"
        if looks_local and marker.is_file() and json.loads(marker.read_text()).get("kind") in SELF_CONTAINED:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path), padding_side="left")
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(path), padding_side="left")
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot load model '{path}': {first}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> None:
    """`save_pretrained` (safetensors) of weights and tokenizer, loadable by transformers, vLLM, TRL.

    A LoRA (peft) model is written as the plain model with its adapter merged, plus the adapter alone
    in `adapter/` (`load_weights` restores it on resume).
    """
    path = Path(path)
    if is_lora(model):
        save_lora(model, path)
    else:
        model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    if tokenizer.unk_token == "<unk>" and len(tokenizer) == len(SPECIALS) + len(CHARS):
        kind = "char"
    elif type(tokenizer) is PreTrainedTokenizerFast:  # the generic class: tokenizer.json is the whole tokenizer
        kind = "fast"
    else:
        kind = "pretrained"
    (path / "cotrain_tokenizer.json").write_text(json.dumps({"kind": kind}))


def load_weights(model, path: str | Path) -> None:
    """Restore in place the trained weights `save_model` wrote to `path` (resume): every weight of a
    plain model; the adapter of a LoRA model, whose frozen base is the one the run rebuilt."""
    from cotrain import dist

    if is_lora(model):
        load_adapter(model, Path(path))
        return
    saved, _ = load_model(path)
    if dist.is_sharded(model):
        dist.load_full_state_dict(model, saved.state_dict())
    else:
        model.load_state_dict(saved.state_dict())


# ----------------------------------------------------------------------------- memory options


def resolve_device(name: str | torch.device | None) -> torch.device:
    """A device that exists on this machine: `name`, or cuda when available, else cpu (None)."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.index is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError(f"device {str(name)!r}: under torchrun each process uses its own GPU (LOCAL_RANK); leave "
                        "model.device / verifier.device unset or name a kind (cuda, cpu)")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise UserError(f"device {str(name)!r} is not available: this machine has {torch.cuda.device_count()} CUDA "
                        "device(s); set model.device / verifier.device to one it has, or leave it unset")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device {str(name)!r} is not available on this machine; set model.device / verifier.device "
                        "to one it has, or leave it unset")
    return dev


def prepare_for_training(model: PreTrainedModel, cfg: ModelConfig, device: str | torch.device | None = None):
    """Apply a model config's memory options to a freshly built or loaded model, in this order: weight
    dtype, device, gradient checkpointing, LoRA adapters (created on the model's device).

    Args:
        cfg: the role's model config (dtype, device, gradient_checkpointing, lora_*).
        device: where the model goes when `cfg.device` is unset (default: cuda if available, else cpu).

    Returns:
        The model, or with `cfg.lora_r > 0` a peft model wrapping it (only its adapters train).
    """
    dtype = getattr(torch, cfg.dtype)
    if model.dtype != dtype:  # a preset, or a model loaded without a dtype (from_pretrained applied it otherwise)
        # parameters only: buffers (the rotary frequencies) stay float32, as from_pretrained(dtype=...) leaves them
        for p in model.parameters():
            p.data = p.data.to(dtype)
    model.to(resolve_device(cfg.device or device))
    if cfg.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.x
            model.activation_checkpointing_enable(kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if cfg.lora_r > 0:
        model = apply_lora(model, cfg)
        if cfg.lora_init:
            load_adapter(model, Path(cfg.lora_init))
    return model


def reference_model(model, bf16: bool = False):
    """The frozen reference of a KL penalty: a copy of `model` in eval mode without gradients (its linear
    layers held in bf16 under bf16 autocast: `in_compute_dtype`), or for a LoRA model its base with the
    adapters switched off (no copy)."""
    from cotrain import dist

    if is_lora(model):
        return AdapterOff(model)
    if dist.is_sharded(model):  # a plain copy of the start's weights on each process
        return in_compute_dtype(copy.deepcopy(dist.plain_copy(model)).eval().requires_grad_(False), bf16)
    return in_compute_dtype(copy.deepcopy(model).eval().requires_grad_(False), bf16)


def in_compute_dtype(model, bf16: bool):
    """A frozen model whose forward passes run under bf16 autocast, its float32 linear layers held in bf16:
    autocast casts each of their weights and biases to bf16 on every forward anyway, so the products are
    bit for bit the same, and the float32 copy and autocast's copy give way to one bf16 copy. The embedding
    (autocast runs it in its own dtype), a head tied to it and the norms (float32 under autocast) stay as
    they are. Unchanged unless `bf16` is True."""
    if bf16 is not True:
        return model
    tied = model.get_input_embeddings().weight
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float32 and module.weight is not tied:
            module.to(torch.bfloat16)
    return model
