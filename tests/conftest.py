"""The test world: a nano Llama with the char tokenizer on one-step single-digit arithmetic.

One SFT run (a few seconds) is shared by every test that needs a model that is sometimes right,
so that GRPO sees groups with mixed rewards.

The world computes in float64. Float kernels differ between CPUs (AVX-512, AVX2, plain) in the last
bits; in float32 such a difference flips a sampled token now and then, and from there a fixed-seed run
takes another path. In float64 the differences stay some 1e-13 deep, far below any gap between a
uniform and a CDF boundary that a sampled token could fall into, so fixed-seed goldens and
two-process comparisons hold on any x86-64 CPU (`make test-portable` checks this with the kernels
forced down).
"""
import os

import pytest
import torch

from cotrain.config import build_config

torch.set_num_threads(min(2, os.cpu_count() or 1))

EASY_TASK = {"name": "arith", "n_ops": [1, 2], "max_operand": 9}


def nano_config(recipe: str, **overrides) -> dict:
    """Raw config of a fast run in the test world; `overrides` are merged one section deep."""
    raw = {
        "recipe": recipe, "seed": 0,
        "model": {"preset": "nano", "dtype": "float64"},
        "task": dict(EASY_TASK),
        "train": {"steps": 6, "batch_size": 16, "lr": 1e-3, "bf16": False, "n_problems": 2000},
        "grpo": {"group_size": 4, "max_new_tokens": 24},
        "eval": {"splits": ["test"], "n": 40, "k": 4, "n_sampled": 10, "batch_size": 64},
        "checkpoint": {"every": 3, "keep_last": 2},
        "log": {"progress": False, "tensorboard": False},
    }
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory):
    """A nano model fine-tuned until it answers part of the easy problems correctly."""
    from cotrain.recipes import sft

    out = tmp_path_factory.mktemp("sft")
    cfg = build_config(nano_config("sft", train={"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20},
                                   checkpoint={"every": 0}))
    results = sft.run(cfg, out)
    return out, results
