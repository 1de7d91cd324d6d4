"""Precision that fits the hardware (`train.bf16: auto`), the machine record `env.json`, and the GPU check's
dry run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cotrain import precision
from cotrain.config import build_config
from cotrain.errors import UserError
from cotrain.models.generate import autocast
from cotrain.recipes import sft
from tests.conftest import nano_config

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("setting,native,on,says", [
    ("auto", True, True, "precision: bf16 autocast on (train.bf16=auto"),     # native: auto turns it on
    ("auto", False, False, "precision: bf16 autocast off (train.bf16=auto"),  # emulated: auto keeps fp32
    (True, True, True, "precision: bf16 autocast on (train.bf16=true)"),      # asked for, native: no warning
    (True, False, True, "warning: train.bf16=true but"),           # asked for, emulated: on, with a warning
    (False, True, False, "precision: bf16 autocast off (train.bf16=false)"),  # asked off: off everywhere
])
def test_resolve_bf16(monkeypatch, setting, native, on, says):
    monkeypatch.setattr(precision, "native_bf16", lambda device: (native, "why"))
    got, line = precision.resolve_bf16(setting, ["cpu"])
    assert got is on and line.startswith(says), line


def test_auto_is_off_unless_every_device_is_native(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda device: (str(device) == "cuda:0", str(device)))
    assert precision.resolve_bf16("auto", ["cuda:0"])[0] is True
    assert precision.resolve_bf16("auto", ["cuda:0", "cpu"])[0] is False


def test_kernels_held_at_avx2_or_below_are_not_native_bf16():
    """What `auto` decides on an AVX2-only CPU, on any CPU: its kernels forced down to AVX2 (or plain C++)."""
    code = "from cotrain.precision import native_bf16; ok, why = native_bf16('cpu'); print(ok, '|', why)"
    for level in ("avx2", "default"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": level, "PYTHONPATH": str(REPO / "src")}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        assert out.startswith("False |"), out


def test_slow_weight_dtypes_warn(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda device: (False, "this CPU (AVX2) has no native bf16"))
    assert "emulated" in precision.dtype_warning("bfloat16", "cpu")
    assert precision.dtype_warning("float32", "cpu") is None and precision.dtype_warning("float64", "cpu") is None


def test_bf16_config_values():
    assert build_config({}).train.bf16 == "auto"  # the default
    assert build_config({}, ["train.bf16=auto"]).train.bf16 == "auto"
    assert build_config({}, ["train.bf16=true"]).train.bf16 is True
    with pytest.raises(UserError, match="bf16"):
        build_config({}, ["train.bf16=sometimes"])


def test_autocast_refuses_an_unsettled_setting():
    with pytest.raises(AssertionError, match="settled"):
        autocast("auto")


def test_a_run_says_its_precision_once_and_records_its_machine(tmp_path, capsys):
    cfg = build_config(nano_config("sft", train={"steps": 2, "bf16": "auto"}, checkpoint={"every": 0},
                                   eval={"n": 4, "k": 0}))
    sft.run(cfg, tmp_path)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("precision:")]
    assert len(said) == 1 and "train.bf16=auto" in said[0], said
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["torch"] == torch.__version__ and env["threads"] == torch.get_num_threads()
    assert env["precision"]["train.bf16"] == "auto"
    assert env["precision"]["bf16_autocast"] is precision.native_bf16("cpu")[0]
    assert env["precision"]["model.dtype"] == "float64"


def test_gpu_check_without_cuda_says_so_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check would run")
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")}, cwd=REPO)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("gpu_check: no CUDA GPU here"), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# Every case adds one option to `grpo bf16` (the check's real GPU run has them all): `make test-heavy` runs
# the two that reach the most code apart (two models; torchrun with FSDP2), each case a process start of
# 10-15 s on a 2-core CPU, and the whole list; `make test` runs the GPU smoke check's dry run below instead
# (torchrun with FSDP2 is tested in tests/test_dist.py; tango on a stand-in is started by tests/test_real_configs.py). (LoRA and checkpointing have tests of their
# own in tests/test_memory.py.)
QUICK_CASES = ["grpo FSDP2 torchrun", "tango bf16"]
ALL_CASES = ["sft bf16", "grpo bf16", "grpo FSDP2 torchrun", "grpo LoRA", "grpo checkpointing", "grpo compiled",
             "tango bf16"]


@pytest.mark.slow
@pytest.mark.parametrize("cases", [pytest.param(QUICK_CASES, marks=pytest.mark.heavy),
                                   pytest.param(ALL_CASES, marks=pytest.mark.heavy)], ids=["quick", "every-case"])
def test_gpu_check_dry_run(tmp_path, cases):
    """The GPU check's whole path (stand-in build, bf16, LoRA, checkpointing, tango, torchrun with FSDP2)
    on a nano stand-in on the CPU, so that it cannot rot before a GPU comes."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--cpu-dry-run", "--steps", "1",
                           "--cases", ",".join(cases), "--out", str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"},
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    from cotrain.dist import fsdp_on_cpu

    assert [r["case"] for r in results] == [c for c in cases if fsdp_on_cpu() or "FSDP2" not in c]
    for r in results:
        assert r["steps"] == 1 and r["step_s"] > 0, r
        assert (r["update_s"] > 0) if r["case"] == "sft bf16" else (r["rollout_tok_s"] > 0), r  # sft: no rollout
        assert r["env"]["precision"]["bf16_autocast"] is True  # train.bf16=true, as on the GPU
    assert all(r["env"]["processes"] == 1 for r in results)  # torchrun --nproc_per_node 1 included


DRY_PHASES = "versions,update_0.5b,update_1.5b,decode,checkpoint,lora,vllm,offload_1.5b"
"""`bench/gpu_smoke.py --cpu-dry-run` in `make test`: every phase but `compiled`, whose first torch.compile
call costs a minute or more on a 2-core CPU, and `recipes` (a demo, a killed-then-resumed run: about a
minute); `make test-heavy` runs both (tests/test_models.py checks compiled decoding itself)."""


@pytest.mark.slow
@pytest.mark.parametrize("phases", [DRY_PHASES, pytest.param(DRY_PHASES + ",compiled,recipes,decode_tiny", marks=pytest.mark.heavy)],
                         ids=["make-test", "every-phase"])
def test_gpu_smoke_dry_run(tmp_path, phases):
    """The GPU smoke check at nano shapes on the CPU, so that it cannot rot before a GPU comes: every phase
    passes (vLLM: skipped without it), a JSON row each; both models learn from their forced advantages;
    the checkpoint round trip and the merged LoRA model are exact; without CUDA and without the flag, one
    line and exit 2."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_smoke.py"), "--cpu-dry-run", "--phases", phases,
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["phase"]: r for r in map(json.loads, (tmp_path / "rows.jsonl").read_text().splitlines())}
    assert list(rows) == phases.split(",")
    assert all(r["status"] == "PASS" for name, r in rows.items() if name != "vllm"), rows
    assert rows["vllm"]["status"] in ("PASS", "SKIP")
    for role in ("generator", "verifier"):
        f = rows["update_0.5b"]["figures"][role]
        assert f["gap_after"] > f["gap_before"], f
        # AdamW's moments in host memory: the same steps, the same gaps
        on_host, resident = rows["offload_1.5b"]["figures"][role], rows["update_1.5b"]["figures"][role]
        assert on_host["gap_after"] == resident["gap_after"] and on_host["grad_norm"] == resident["grad_norm"]
    assert rows["decode"]["figures"]["compaction_equal"] == 1.0 and rows["lora"]["figures"]["max_logit_diff"] < 1e-4
    if "recipes" in rows:  # both demo arms trained their generator; the killed run resumed to its last step
        f = rows["recipes"]["figures"]
        assert f["demo_grpo"]["tokens_trained"]["gen"] > 0 and f["demo_tango"]["tokens_trained"]["gen"] > 0, f
        assert f["killed_then_resumed"]["steps"] == 2 and f["killed_then_resumed"]["devices"] == ["cpu"], f
    if not torch.cuda.is_available():
        bare = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_smoke.py")], capture_output=True, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        assert bare.returncode == 2 and bare.stderr.strip().splitlines()[-1].startswith("gpu_smoke: no CUDA GPU here")
