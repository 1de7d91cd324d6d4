"""Models are always `transformers` causal LMs: a Llama built from scratch with a character-level
tokenizer (the tiny world), or any pretrained `AutoModelForCausalLM` (the real world)."""
from __future__ import annotations

import json
import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from cotrain.config import ModelConfig
from cotrain.errors import UserError

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
        return load_model(cfg.path)
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


def _is_local_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def load_model(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a directory (ours or any HF one) or a hub id.

    Self-built char tokenizers are loaded with `PreTrainedTokenizerFast`: `AutoTokenizer` may swap
    them for the architecture's default class.
    """
    p = Path(path)
    looks_local = p.exists() or str(path).startswith((".", "/", "~")) or str(path).count("/") > 1
    if looks_local and not _is_local_model_dir(p):
        raise UserError(f"not a model directory (no config.json): {path}")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path))
        marker = p / "cotrain_tokenizer.json"
        if looks_local and marker.is_file() and json.loads(marker.read_text()).get("kind") == "char":
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
    """`save_pretrained` (safetensors) of weights and tokenizer, loadable by transformers, vLLM, TRL."""
    path = Path(path)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    kind = "char" if tokenizer.unk_token == "<unk>" and len(tokenizer) == len(SPECIALS) + len(CHARS) else "pretrained"
    (path / "cotrain_tokenizer.json").write_text(json.dumps({"kind": kind}))

