"""The test world: a nano Llama with the char tokenizer on one-step single-digit arithmetic.

The world computes in float64, and the recipes' tests start from two stored checkpoints,
`tests/assets/nano_sft` (the nano model after 300 SFT steps: sometimes right, so GRPO sees groups with
mixed rewards) and `tests/assets/nano_verifier` (a verifier warmed up on its samples), which
`python tests/assets/build.py` rebuilds. Why stored: float kernels differ between CPUs (AVX-512, AVX2,
plain C++) in the last bits, and training at a useful learning rate is chaotic: a 1e-16 difference
grows about 11% a step and turned a 300-step SFT run into a different model (measured: the SFT loss
differed by 2e-7 at step 100, 3e-3 at step 200). Started from a stored model, the recipes' short runs
(4-6 steps) keep such differences some 1e-13 deep, far below any gap a sampled token could fall into,
so fixed-seed goldens and two-process comparisons hold on any x86-64 CPU (`make test-portable` forces
the kernels down to check). SFT's own learning is tested by running it (`test_sft_learns_the_easy_world`).
"""
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on the two cores: each, and every process it starts, computes on one
    # thread (two workers of two threads each would oversubscribe the cores, many times slower)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:  # pinned, so a run's thread choice (cotrain.threads) never samples the machine inside a test
    os.environ.setdefault("OMP_NUM_THREADS", str(min(2, os.cpu_count() or 1)))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

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
        "log": {"progress": False, "tensorboard": False, "plots": False},  # plots: tests/test_plot.py
    }
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


ASSETS = Path(__file__).resolve().parent / "assets"
# The SFT run behind tests/assets/nano_sft (and test_sft_learns_the_easy_world).
SFT_START = {"train": {"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20}, "checkpoint": {"every": 0}}


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory):
    """(run dir, eval results) of the stored nano SFT model: a run directory whose `final/generator` is it."""
    out = tmp_path_factory.mktemp("sft")
    shutil.copytree(ASSETS / "nano_sft" / "generator", out / "final" / "generator")
    for name in ("eval.json", "metrics.jsonl", "config.yaml"):
        shutil.copy(ASSETS / "nano_sft" / name, out / name)
    return out, json.loads((out / "eval.json").read_text())


@pytest.fixture(scope="session")
def warm_verifier():
    """The stored verifier: the nano SFT model warmed up (labelled SFT) on its own samples."""
    return ASSETS / "nano_verifier"


def run_recipe(cfg, run_dir, resume: bool = False) -> dict:
    """Run the recipe `cfg.recipe` names, as `cotrain run` does (through the registry, the plots drawn after it
    returns with `log.plots`)."""
    from cotrain import registry
    from cotrain.analysis.plot import plot_finished

    results = registry.load(cfg.recipe).run(cfg, run_dir, resume=resume)
    if cfg.log.plots:
        plot_finished(run_dir)
    return results
