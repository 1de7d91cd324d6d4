"""Data parallelism: sharding, gradient accumulation, step timing, and `torchrun` runs on CPU (gloo).

Tolerance of the torchrun comparisons: the two processes compute the same rollouts (a group's noise
depends on its seed alone) and their gradients add up to the whole batch's, so the runs differ only by
float summation order, which AdamW's normalisation can amplify in weights whose gradients are near zero.
Every logged float metric must agree within 1e-4 relative or 1e-5 absolute, and every final weight
within 1e-4 absolute (tango's verifier, after 60 AdamW steps at lr 2e-3, drifts by up to 2.5e-5);
integer counts (tokens, problems) must be equal.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from cotrain import dist
from cotrain.config import GrpoConfig, ModelConfig
from cotrain.errors import UserError
from cotrain.models.build import build_model
from cotrain.models.generate import generate
from cotrain.train import compute as compute_module
from cotrain.train.compute import StepTimer
from cotrain.train.update import micro_batches, policy_update, supervised_step
from tests.conftest import nano_config
from tests.test_recipes import _rows

REPO = Path(__file__).resolve().parents[1]
TOL, REL, WEIGHT_TOL = 1e-5, 1e-4, 1e-4


# ---------------------------------------------------------------------- pure pieces


def test_shard_splits_in_contiguous_blocks_lower_ranks_first():
    assert [list(dist.shard(5, r, 2)) for r in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(dist.shard(7, r, 3)) for r in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(dist.shard(1, r, 2)) for r in range(2)] == [[0], []]
    assert list(dist.shard(4)) == [0, 1, 2, 3]  # one process: everything


def test_micro_batches_hold_whole_groups():
    groups = torch.arange(5)
    assert [c.tolist() for c in micro_batches(groups, 4, 8)] == [[0, 1], [2, 3], [4]]
    assert [c.tolist() for c in micro_batches(groups, 4, 3)] == [[0], [1], [2], [3], [4]]  # at least one group
    assert [c.tolist() for c in micro_batches(groups, 4, None)] == [[0, 1, 2, 3, 4]]
    assert micro_batches(torch.arange(0), 4, 8) == []
    # with lengths: chunks of like lengths, in order of length (ties keep their order)
    lengths = torch.tensor([30, 10, 20, 10, 40])
    assert [c.tolist() for c in micro_batches(groups, 4, 8, lengths)] == [[1, 3], [2, 0], [4]]
    assert [c.tolist() for c in micro_batches(groups, 4, None, lengths)] == [[0, 1, 2, 3, 4]]  # one chunk: as is


def test_a_micro_batch_runs_at_its_own_length_with_the_same_logprobs():
    """Log-probs of a chunk of short groups, run without the columns only other groups use, equal those
    of the full-width batch (float64: within 1e-12), and are 0 past the chunk's longest completion."""
    from cotrain.models.generate import group_logprobs
    from cotrain.models.prompts import encode_generator_prompts
    from cotrain.train.update import _logprobs, group_lengths

    model, tok = build_model(ModelConfig(preset="nano"), seed=0)
    model = model.double().eval()
    prompts = encode_generator_prompts(tok, ["1+2", "12+34-56+78-9+10"])
    ro = generate(model, prompts, group_size=2, max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                  temperature=1.0, seed=3)
    ro.completion_mask[:2, 5:] = 0  # the short prompt's group: completions of at most 5 tokens
    g = GrpoConfig(group_size=2, max_new_tokens=12)
    full, _ = group_logprobs(model, ro.prompt_ids[::2], ro.prompt_mask[::2], ro.completion_ids, ro.completion_mask, 2)
    short, rows = _logprobs(model, ro, torch.tensor([0]), g, False)
    assert rows.tolist() == [0, 1] and short.shape == (2, ro.completion_ids.shape[1])
    assert ro.prompt_mask[0].sum() < ro.prompt_mask.shape[1]  # its prompt is padded: the pads are left out
    m = ro.completion_mask[:2].bool()
    assert torch.allclose(short[m], full[:2][m], atol=1e-12, rtol=0) and (short[:, 5:] == 0).all()
    assert group_lengths(ro, 2).tolist() == [int(ro.prompt_mask[0].sum()) + 5,
                                             int(ro.prompt_mask[2].sum() + ro.completion_mask[2:].sum(-1).max())]


def test_step_timer_splits_time_and_counts_tokens_per_second(monkeypatch):
    clock = iter([10.0, 12.0, 12.5, 13.0, 14.0])  # start, gen lap, reward lap, update lap, metrics
    monkeypatch.setattr(compute_module.time, "perf_counter", lambda: next(clock))
    timer = StepTimer()
    timer.lap("gen", 100)
    timer.lap("reward")
    timer.lap("update", 30)
    m = timer.metrics()
    assert m["time/gen"] == 2.0 and m["time/reward"] == 0.5 and m["time/update"] == 0.5
    assert m["time/step"] == 4.0 and m["time/sync"] == 0.0
    assert m["throughput/gen_tokens_per_s"] == 50.0 and m["throughput/update_tokens_per_s"] == 60.0
    assert "throughput/reward_tokens_per_s" not in m


# ---------------------------------------------------------------------- gradient accumulation


def _nano_rollout(group_size=4):
    model, tok = build_model(ModelConfig(preset="nano"), seed=0)
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "8*9\n"]]
    ro = generate(model, prompts, group_size=group_size, max_new_tokens=8, eos_id=tok.eos_token_id,
                  pad_id=tok.pad_token_id, temperature=1.5, seed=3)
    return model, tok, ro


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_give_the_whole_batch_update(loss_type):
    """Accumulating the loss over micro-batches of one group gives the update of the whole batch."""
    results = []
    for micro in (None, 4):
        model, _, ro = _nano_rollout()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)  # weights move by the gradient itself
        adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0, 0, 0, 0, 2.0, 0, -1.0, -1.0, 0.3, 0.3, -0.6, 0])  # group 1 all zero
        g = GrpoConfig(group_size=4, max_new_tokens=8, loss_type=loss_type, temperature=1.5, num_iterations=2)
        st = policy_update(model, opt, ro, adv, ro.completion_mask, g, max_grad_norm=1e9, micro_batch_size=micro)
        results.append((st, [p.detach().clone() for p in model.parameters()]))
    (a, wa), (b, wb) = results
    assert a["frac_groups_trained"] == b["frac_groups_trained"] == 0.75
    for key in ("loss", "grad_norm", "clip_ratio", "kl"):
        assert a[key] == pytest.approx(b[key], abs=1e-6), key
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(wa, wb))


def test_a_role_backward_in_micro_batches_of_like_lengths_gives_the_whole_batch_gradient(monkeypatch):
    """policy_backward (a self-play role's loss, no step) chunks its groups by length when micro-batched,
    shortest first, and the accumulated gradient is the whole batch's."""
    from cotrain.train import update

    passes, logprobs = [], update._logprobs
    monkeypatch.setattr(update, "_logprobs", lambda model, ro, groups, *a: passes.append(groups.tolist())
                        or logprobs(model, ro, groups, *a))
    grads = []
    for micro in (None, 4):
        model, _, ro = _nano_rollout()
        ro.completion_mask[8:12, 2:] = 0  # group 2, the shortest prompt, also gets the shortest completions
        adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.2, 0, 0, -0.2, 2.0, 0, -1.0, -1.0, 0.3, 0.3, -0.6, 0])
        g = GrpoConfig(group_size=4, max_new_tokens=8, temperature=1.5)
        model.zero_grad(set_to_none=True)
        update.policy_backward(model, ro, adv, ro.completion_mask, g, micro_batch_size=micro)
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    lengths = update.group_lengths(ro, 4).tolist()
    assert passes[0] == [0, 1, 2, 3] and passes[1:] == [[i] for i in sorted(range(4), key=lambda i: lengths[i])]
    assert passes[1] == [2]
    assert len(grads[0]) == len(grads[1]) and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(*grads))


def test_supervised_micro_batches_give_the_whole_batch_update():
    results = []
    for micro in (None, 2):
        model, tok = build_model(ModelConfig(preset="nano"), seed=0)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)  # weights move by the gradient itself
        prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n"]]
        targets = [tok(t)["input_ids"] for t in ["3", "41 and more", "7!"]]
        st = supervised_step(model, opt, prompts, targets, tok.pad_token_id, max_grad_norm=1e9, micro_batch_size=micro)
        results.append((st, [p.detach().clone() for p in model.parameters()]))
    (a, wa), (b, wb) = results
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"], abs=1e-6)
    assert a["tokens_trained"] == b["tokens_trained"] == sum(len(t) for t in targets)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(wa, wb))


# ---------------------------------------------------------------------- torchrun on CPU


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}


def _single(args: list[str]) -> int:
    """A one-process run through the CLI in this process (a process start with its imports costs
    seconds); its exit code."""
    from cotrain.cli import main

    return main(args)


def _torchrun(args: list[str], nproc: int = 2, **kwargs):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "cotrain", *args]
    if kwargs.pop("background", False):
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO,
                                start_new_session=True)
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, cwd=REPO)


def _assert_same_run(a: Path, b: Path, rel: float = REL, weight_tol: float = WEIGHT_TOL) -> None:
    ra, rb = _rows(a), _rows(b)
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        keys = {k for k in x if k != "time" and not k.startswith(("time/", "throughput/"))}
        assert keys == {k for k in y if k != "time" and not k.startswith(("time/", "throughput/"))}
        for k in keys:
            if isinstance(x[k], float) or isinstance(y[k], float):
                assert x[k] == pytest.approx(y[k], rel=rel, abs=TOL), (x["step"], k)
            else:
                assert x[k] == y[k], (x["step"], k)
    ea, eb = (_flat(json.loads((d / "eval.json").read_text())) for d in (a, b))
    assert ea.keys() == eb.keys() and all(ea[k] == pytest.approx(eb[k], rel=rel, abs=TOL) for k in ea)
    for role in [d.name for d in (a / "final").iterdir()]:
        wa, wb = load_file(a / "final" / role / "model.safetensors"), load_file(b / "final" / role / "model.safetensors")
        assert wa.keys() == wb.keys()
        assert all(torch.allclose(wa[k], wb[k], rtol=0, atol=weight_tol) for k in wa), role


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.fixture(scope="module")
def grpo_one(sft_run, tmp_path_factory):
    """A 4-step grpo run of the nano world from the SFT start (so groups train), config and one-process run."""
    root = tmp_path_factory.mktemp("dist")
    start, _ = sft_run
    raw = nano_config("grpo", init=str(start), train={"steps": 4}, checkpoint={"every": 2, "keep_last": 1},
                      eval={"every": 2, "n": 20, "n_during": 10})
    cfg = root / "grpo.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    assert _single(["run", str(cfg), "--out", str(root / "one")]) == 0
    assert any(r.get("gen/frac_groups_trained", 0) > 0 for r in _rows(root / "one")), "no gradient to compare"
    return cfg, root / "one"


def _killed_and_resumed(args: list[str], out: Path) -> subprocess.CompletedProcess:
    """A two-process run killed with SIGKILL (launcher and workers) after its step-2 checkpoint, then
    resumed; the resumed run's process."""
    victim = _torchrun([*args, "--out", str(out)], background=True)
    deadline = time.time() + 300
    while not (out / "checkpoints" / "step_2").exists():
        assert victim.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (out / "eval.json").exists(), "killed too late to test resume"
    resumed = _torchrun([*args, "--out", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return resumed


# FSDP2 on the CPU needs torch >= 2.7; the lowest torch cotrain accepts (2.6) runs it on GPUs only, and
# refuses it on the CPU in one line (test_fsdp_on_the_cpu_of_an_old_torch_is_refused_in_one_line).
NEEDS_CPU_FSDP = pytest.mark.skipif(not dist.fsdp_on_cpu(), reason=f"FSDP2 on the CPU needs torch >= 2.7 ({torch.__version__})")


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [pytest.param(False, marks=pytest.mark.heavy), pytest.param(True, marks=NEEDS_CPU_FSDP)],
                         ids=["ddp", "fsdp"])  # ddp in make test-heavy: make test keeps within its 10 minutes
def test_two_processes_equal_one_then_resume_after_sigkill(grpo_one, tmp_path, fsdp):
    """`torchrun --nproc_per_node 2 -m cotrain run`, with gradients averaged over processes or with FSDP2
    sharding, killed after its step-2 checkpoint and resumed, logs the metrics, evaluation and final
    weights of the one-process run; only rank 0 prints results. (An uninterrupted two-process run is
    test_two_process_tango_completes_and_equals_one_process.)"""
    cfg, one = grpo_one
    args = ["run", str(cfg), f"train.fsdp={str(fsdp).lower()}"]
    resumed = _killed_and_resumed(args, tmp_path / "killed")
    assert resumed.stdout.count("generator/test:") == 1  # one writer
    if fsdp:  # each process holds about half of every parameter, not a replica
        shares = re.search(r"sharded over 2 processes: each holds ([\d.]+)%, ([\d.]+)% of its", resumed.stdout)
        assert shares and all(40 <= float(x) <= 60 for x in shares.groups()), resumed.stdout[-2000:]
        assert sum(float(x) for x in shares.groups()) == pytest.approx(100, abs=1)
    _assert_same_run(one, tmp_path / "killed")
    rows = [r for r in _rows(tmp_path / "killed") if "gen/reward" in r]
    assert all(r["time/sync"] > 0 and r["throughput/gen_tokens_per_s"] > 0 for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("fsdps", [pytest.param(["false"], marks=pytest.mark.heavy),
                                   pytest.param(["false", "true"], marks=[pytest.mark.heavy, NEEDS_CPU_FSDP])],
                         ids=["ddp", "ddp-and-fsdp"])  # both in make test-heavy (make test: the grpo ones above)
def test_two_process_tango_completes_and_equals_one_process(sft_run, tmp_path, fsdps):
    """tango with two processes, gradients averaged or (make test-heavy) FSDP2-sharded, generator and
    verifier, equals the one-process run. (`make test` runs FSDP2 under torchrun on grpo: a process
    start of two workers costs some 20 s on a 2-core CPU.)"""
    from tests.test_tango import tango_config

    start, _ = sft_run
    raw = tango_config(start, train={"steps": 3}, eval={"k": 0, "n": 20, "every": 0})
    path = tmp_path / "tango.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert _single(["run", str(path), "--out", str(tmp_path / "one")]) == 0
    for fsdp in fsdps:
        two = _torchrun(["run", str(path), f"train.fsdp={fsdp}", "--out", str(tmp_path / f"two-{fsdp}")])
        assert two.returncode == 0, two.stderr[-3000:]
        _assert_same_run(tmp_path / "one", tmp_path / f"two-{fsdp}")
        assert (tmp_path / f"two-{fsdp}" / "final" / "verifier").is_dir()


@pytest.mark.slow
@pytest.mark.heavy  # two process starts (about 9 s); make test keeps its 10 minutes on the slowest CPU kind
def test_a_user_error_on_rank_0_reaches_every_rank(grpo_one):
    """A refused run directory (rank 0 checks it) ends both processes with the one-line error."""
    cfg, one = grpo_one
    again = _torchrun(["run", str(cfg), "--out", str(one)])
    assert again.returncode != 0
    assert again.stderr.count("cotrain: error: run directory") == 2, again.stderr[-3000:]
    assert "Traceback" not in again.stderr.split("cotrain: error")[0]


@pytest.mark.heavy
@pytest.mark.parametrize("recipe", ["sft", "frozen_verifier", "consistency", "triad", "reliability"])
def test_every_other_recipe_on_two_processes_equals_one(recipe, tmp_path):
    """The remaining recipes' shipped configs, 3 steps, on two processes and on one (make test-heavy).
    These start from scratch at lr 1e-3, where AdamW's first steps amplify float differences most
    (sft's gradient norm differs by 1e-5 relative at step 1 and 2e-4 at step 3, a weight by 1.2e-4):
    metrics within 1e-3 relative, weights within 1e-3."""
    config = REPO / "configs" / (f"{recipe}_smoke.yaml" if (REPO / "configs" / f"{recipe}_smoke.yaml").exists()
                                 else f"{recipe}.yaml")
    # float64 without autocast: in fp32 (or bf16) a sum of gradients reduced over two processes rounds
    # otherwise than over one, and a sampled token could flip (triad did, at step 2, in fp32)
    args = ["run", str(config), "train.steps=3", "log.progress=false", "eval.n=20", "eval.every=0",
            "train.bf16=false", "model.dtype=float64"]
    assert _single([*args, "--out", str(tmp_path / "one")]) == 0
    two = _torchrun([*args, "--out", str(tmp_path / "two")])
    assert two.returncode == 0, two.stderr[-3000:]
    _assert_same_run(tmp_path / "one", tmp_path / "two", rel=1e-3, weight_tol=1e-3)


@pytest.mark.parametrize("overrides,message", [
    (["rollout.engine=vllm", "train.fsdp=true"], "vllm with train.fsdp"),
    (["rollout.engine=vllm", "grpo.top_p=0.9"], "set grpo.top_p: 1"),
    (["recipe=triad", "train.fsdp=true"], "train.fsdp is not supported by recipe triad"),
    (["train.fsdp=true", "model.lora_r=8"], "train.fsdp with LoRA"),
])
def test_unsupported_combinations_are_one_line_errors(overrides, message):
    from cotrain.config import build_config
    from cotrain.errors import UserError

    with pytest.raises(UserError, match=message):
        build_config({}, overrides)


def test_a_named_gpu_index_is_refused_under_torchrun(monkeypatch):
    from cotrain.errors import UserError
    from cotrain.models.build import resolve_device

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="each process uses its own GPU"):
        resolve_device("cuda:1")
    assert resolve_device("cpu").type == "cpu"


def test_map_shards_is_the_plain_map_in_one_process():
    assert dist.map_shards(lambda x: x * x, [1, 2, 3]) == [1, 4, 9]
    assert dist.map_shards(lambda x: x, []) == []


def test_fsdp_on_the_cpu_of_an_old_torch_is_refused_in_one_line(monkeypatch):
    model, _ = build_model(ModelConfig(preset="nano"), seed=0)
    monkeypatch.setattr(dist, "fsdp_on_cpu", lambda: False)
    with pytest.raises(UserError, match="train.fsdp on the CPU needs torch >= 2.7"):
        dist.shard_model(model)


def test_a_resume_loads_each_role_s_optimizer_onto_the_device_its_model_is_on(tmp_path, monkeypatch):
    """A plain model's optimizer states are loaded onto the host (`map_location` cpu: torch's
    `load_state_dict` then moves each moment onto its parameter's device and keeps AdamW's step counts on the
    host, as a fresh optimizer has them; a load onto the GPU put them there, a sync a step, found on an
    H200), the run state onto the host too: never the device they were saved from, where under torchrun
    every rank's states would land on cuda:0. The loaded states equal the saved ones."""
    import torch

    from cotrain.config import ModelConfig
    from cotrain.models.build import build_model
    from cotrain.runs import rundir
    from cotrain.runs.policy import Policy

    model, tok = build_model(ModelConfig(preset="nano"), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    roles = {"generator": Policy(model, tok, opt, sched)}
    ckpt = rundir.save_checkpoint(tmp_path, 1, roles, {"step": 1, "rng": rundir.rng_state()}, keep_last=1)
    saved = {k: v.clone() for k, v in opt.state_dict()["state"][0].items() if torch.is_tensor(v)}
    seen, real = [], torch.load

    def recording(path, *args, **kwargs):
        seen.append((Path(path).name, kwargs.get("map_location")))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(rundir.torch, "load", recording)
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rundir.load_checkpoint_state(ckpt, {"generator": Policy(model, tok, opt2, torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0))})
    assert seen == [("optim.pt", "cpu"), ("state.pt", "cpu")]
    assert all(torch.equal(opt2.state_dict()["state"][0][k], v) for k, v in saved.items())
