"""The memory plan (`cotrain.models.memory`): each component by hand, the real configs' plan at Qwen2.5
shapes, the plan against measured peaks on this CPU, and `cotrain check --device-memory`."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cotrain.cli import main
from cotrain.models import memory as m

REPO = Path(__file__).resolve().parents[1]
# L 2, d 4, 2 heads of 2, 1 key/value head (kv 2), f 8, V 10; 1,000 parameters
SHAPES = m.Shapes(params=1000, layers=2, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10)


def test_components_by_hand():
    full = m.Role("generator", SHAPES)
    w32 = m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2)
    w16 = m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2, autocast=True)
    assert (m.weights(full), m.gradients(full), m.optimizer(full)) == (4000, 4000, 8000)
    assert m.autocast_copy(full, w32) == 0 and m.autocast_copy(full, w16) == 2000   # 1,000 x 2 bytes
    assert m.weights(m.Role("g", SHAPES, reference=True)) == 8000                     # the KL's frozen copy
    assert m.weights(m.Role("g", SHAPES, reference=True), w16) == 6000                # held in bf16 under autocast
    # keys and values: 2 x L 2 x kv 2 x 3 rows x 5 positions x 4 bytes (bf16: 2)
    assert m.kv_cache(full, w32, 3, 5) == 480 and m.kv_cache(full, w16, 3, 5) == 240
    # a decode step: 3 rows x V 10 x 30 = 900 > prefill 1 prompt x 5 tokens x (2 f + 2 d = 24) x 4 = 480
    assert m.decode_work(full, 3, 1, 5, w32) == 900
    # a micro-batch of 2 rows, 3 prompt and 4 new tokens: 14 tokens x 2 layers x (40 d + 16 f + 8 kv = 304)
    # + 2 x 4 completion tokens x V 10 x 11 bytes + the prompt positions' logits 2 x 3 x 10 x 4
    assert m.activations(full, w32, 2, 3, 4) == 8512 + 880 + 240
    # one group of 2: the prompt once (11 tokens: 6,688), its keys and values repeated to the second row
    # (1 row x 3 positions x 2 x kv 2 x 4 bytes x 2 layers = 96), the same logits
    assert m.activations(full, w32, 2, 3, 4, group_size=2) == 6688 + 96 + 880
    # checkpointing: each layer's input (4 d = 16 bytes) a layer, one layer's activations: 14 x (32 + 304);
    # a group's rows then run whole, each with its prompt
    ckpt = m.Role("g", SHAPES, checkpointing=True)
    assert m.activations(ckpt, w32, 2, 3, 4) == m.activations(ckpt, w32, 2, 3, 4, group_size=2) == 14 * 336 + 880 + 240
    # LoRA rank 2 on q, k, v, o, gate, up, down: in + out = 8 + 2 x 6 + 8 + 2 x 12 + 12 = 64 a layer, 128 in all
    lora = m.Role("g", SHAPES, lora_r=2)
    assert (lora.trainable, m.gradients(lora), m.optimizer(lora), m.weights(lora)) == (256, 1024, 2048, 4000)
    assert m.Role("g", SHAPES, trains=False).trainable == 0


def test_a_plan_by_hand():
    """One model, no evaluation: the rollout holds weights and AdamW's moments, the KV cache of 3 rows of
    9 positions (864) and the prefill of its 3 prompts (3 x 5 x 24 x 4 = 1,440, over a decode step's
    900); the update adds the gradients and the activations of 2
    rows of 5 + 4 tokens (18 x 608 + 880 + the prompt logits, 400). Held gradients (before they were freed) add 4,000 to the
    rollout."""
    role = m.Role("generator", SHAPES)
    work = m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2)
    peaks = m.peaks(m.plan([role], work))
    assert peaks == {"rollout": 4000 + 8000 + 864 + 1440, "update/generator": 4000 + 8000 + 4000 + 18 * 608 + 880 + 400}
    held = m.peaks(m.plan([role], m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2, grads_held=True)))
    assert held["rollout"] == peaks["rollout"] + 4000
    # under 20,000 bytes only the update is over; a quarter of the micro-batch (1 row: 9 x 608 + 440 + 200) is not enough
    assert m.fixes([role], work, 20_000) == {"update/generator": []}
    assert m.fixes([role], work, 30_000) == {}


def test_a_plan_with_the_optimizer_in_host_memory_by_hand():
    """`offload_optimizer`: AdamW's moments (8,000) leave the rollout and the update, and the optimizer step
    is a phase of its own (weights 4,000 + gradients 4,000 + moments 8,000 + AdamW's temporary, the size of
    the gradients, 4,000). Under 25,000 bytes the update
    (28,224) is over and the offload is one of the options that fix it; its own step phase fits."""
    role = m.Role("generator", SHAPES)
    work = m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2)
    off = m.peaks(m.plan([role], m.Work(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2,
                                        offload_optimizer=True)))
    assert off == {"rollout": 4000 + 864 + 1440, "update/generator": 4000 + 4000 + 12_224,
                   "step/generator": 4000 + 4000 + 8000 + 4000}
    assert m.peaks(m.plan([role], work))["update/generator"] == 28_224
    assert "optimizer states in host memory (train.offload_optimizer=true)" in m.fixes([role], work, 25_000)["update/generator"]
    # under 15,000 the offloaded update is still over, and so would be its step: not offered
    assert not any("optimizer" in o for o in m.fixes([role], work, 15_000)["update/generator"])


def test_the_engine_asleep_is_in_the_rollout_alone():
    """A vLLM engine's share (a quarter of the device): awake, in every phase; with `rollout.sleep`, in the
    rollout alone (verification, the updates and evaluation run without it)."""
    roles = [m.Role("generator", SHAPES), m.Role("verifier", SHAPES)]
    work = dict(rollout_rows=3, prompt_tokens=5, new_tokens=4, micro_batch=2, eval_rows=2, eval_new_tokens=4,
                verify_rows=3, verify_prompt_tokens=9, verify_new_tokens=2, vllm_share=0.25)
    for sleep in (False, True):
        phases = m.with_engine_bytes(m.plan(roles, m.Work(**work, vllm_sleep=sleep)), 40_000)
        assert {p for p, c in phases.items() if c.get("vllm engine") == 10_000} == (
            {"rollout"} if sleep else set(phases)), sleep


def test_the_real_tango_config_at_qwen_shapes_on_an_80_gib_gpu():
    """configs/real/tango.yaml's sizes: at 0.5B every phase fits; at 1.5B both updates are over 80 GiB and
    gradient checkpointing, a quarter of the micro-batch, LoRA or AdamW's moments in host memory each brings
    them under; freeing the gradients takes both models' (2 x 5.75 GiB) off every other phase."""
    sys.path.insert(0, str(REPO / "bench"))
    import memory_plan

    text = "\n".join(memory_plan.real_plans())
    small, large = text.split("## Qwen/Qwen2.5-1.5B-Instruct, before")
    assert "OVER" not in small
    s = m.KNOWN_SHAPES["Qwen/Qwen2.5-1.5B-Instruct"]
    roles = [m.Role("generator", s), m.Role("verifier", s)]
    work = m.Work(rollout_rows=128, prompt_tokens=256, new_tokens=512, micro_batch=16, group_size=8, eval_rows=64,
                  eval_new_tokens=1024, verify_rows=128, verify_prompt_tokens=768, verify_new_tokens=512, verify_group=4,
                  autocast=True)
    gib = 80 * m.GiB
    fixes = m.fixes(roles, work, gib)
    assert set(fixes) == {"update/generator", "update/verifier"}
    for options in fixes.values():
        assert [o.split()[0] for o in options] == ["LoRA", "gradient", "micro-batch", "optimizer"], options
    import dataclasses

    before = m.peaks(m.plan(roles, dataclasses.replace(work, grads_held=True)))
    now = m.peaks(m.plan(roles, work))
    assert before["rollout"] - now["rollout"] == pytest.approx(2 * s.params * 4)
    # full fine-tuning of both models without checkpointing fits with AdamW's moments in host memory
    offloaded = m.peaks(m.plan(roles, dataclasses.replace(work, offload_optimizer=True)))
    assert max(offloaded.values()) < 70 * m.GiB
    assert now["update/verifier"] - offloaded["update/verifier"] == pytest.approx(2 * 2 * s.params * 4)


@pytest.mark.heavy
def test_the_plan_within_a_fifth_of_measured_peaks_on_this_cpu():
    """bench/memory_plan.py at the tiny shape (2M parameters; float32 and bf16 autocast, a group and
    single rows): each rollout's and update's planned bytes within 20% of the measured peak."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "memory_plan.py"), "--shapes", "tiny"],
                          capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 3, proc.stdout + proc.stderr[-2000:]
    for row in rows:
        assert row["update_measured_mib"] > 100 and abs(row["update_error"]) <= 0.2, row
        assert row["rollout_measured_mib"] > 5 and abs(row["rollout_error"]) <= 0.2, row


@pytest.mark.heavy
def test_check_plans_for_a_named_device(capsys):
    """`cotrain check --device-memory`: the plan for a device of that size, each phase that does not fit
    named with its fixes. (make test checks the plan's lines on the real configs' stand-ins.)"""
    fast = ["--prompts", "1", "--max-new-tokens", "8"]
    assert main(["check", str(REPO / "configs" / "tango_smoke.yaml"), *fast, "--device-memory", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "plan      estimated peak of each phase on 0.01 GiB (--device-memory)" in out
    assert "OVER by" in out and "\nfix       update/generator: " in out


def test_check_refuses_a_device_size_that_is_not_one(capsys):
    """`cotrain check --device-memory` with a size that is not one: one line, exit 2, before any model."""
    for bad in ("-1", "nan", "1e9"):
        assert main(["check", str(REPO / "configs" / "tango_smoke.yaml"), "--device-memory", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--device-memory" in err[0]


def test_check_without_a_rollout_and_a_verifier_that_writes_no_verdict(capsys):
    """`--no-rollout` stops after the models and prompts (nothing sampled); with the rollout, tango's verifier
    built fresh writes no verdict, and check names the consequence in a warning line, then still passes."""
    config = str(REPO / "configs" / "tango_smoke.yaml")
    fast = ["model.preset=nano", "--prompts", "1", "--max-new-tokens", "8"]
    assert main(["check", config, *fast, "--no-rollout"]) == 0
    out = capsys.readouterr().out
    assert "rollout   skipped (--no-rollout)" in out and out.rstrip().endswith("ok")
    assert "\nreward" not in out and "\nverify" not in out and "\nplan" not in out
    assert main(["check", config, *fast]) == 0
    out = capsys.readouterr().out
    assert "final verdict none" in out, out
    assert "\nwarning   the verifier's first verification ends in no verdict" in out and "trains as GRPO" in out
