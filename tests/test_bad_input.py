"""Bad input ends with one line naming what is wrong and exit code 2, never a traceback: broken config
files (encodings, nesting, absurd numbers), a thousand mutations of the shipped configs, and ten
thousand malformed model outputs through every parser. A bug in cotrain still exits 1, and says so."""
from __future__ import annotations

import copy
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cotrain.cli import demo_stages, main
from cotrain.config import build_config, load_config
from cotrain.errors import UserError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "configs").glob("*.yaml")) + sorted((REPO / "configs" / "real").glob("*.yaml"))
BIG = 10**4000

BROKEN_FILES = {  # name: (bytes of the file, what the one line must name)
    "not_utf8.yaml": ("recipe: grpo\n# caf\xe9\n".encode("latin-1"), "not UTF-8"),
    "nested_flow.yaml": (("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested too deeply"),
    "nested_block.yaml": (("".join("  " * i + f"k{i}:\n" for i in range(3000)) + "  " * 3000 + "x: 1\n").encode(),
                          "nested too deeply"),
    "digits.yaml": (("train: {steps: " + "9" * 5001 + "}\n").encode(), "unreadable value"),
    "seed_negative.yaml": (b"seed: -1\n", "seed"),
    "seed_huge.yaml": (f"seed: {BIG}\n".encode(), "seed"),
    "steps_huge.yaml": (f"train: {{steps: {BIG}}}\n".encode(), "train.steps"),
    "batch_huge.yaml": (f"train: {{batch_size: {BIG}}}\n".encode(), "train.batch_size"),
    "tokens_huge.yaml": (f"grpo: {{max_new_tokens: {BIG}}}\n".encode(), "grpo.max_new_tokens"),
    "lr_infinite.yaml": (b"train: {lr: .inf}\n", "train.lr"),
    "lr_nan.yaml": (b"train: {lr: .nan}\n", "train.lr"),
    "n_ops_huge.yaml": (f"task: {{name: arith, n_ops: [1, {BIG}]}}\n".encode(), "task"),
}


@pytest.mark.parametrize("name", list(BROKEN_FILES))
def test_a_broken_config_file_is_one_user_error_naming_the_fault(name, tmp_path):
    data, named = BROKEN_FILES[name]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError) as err:
        load_config(path)
    message = str(err.value)
    assert named in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("override,named", [
    ("train.lr=1e400", "train.lr"), ("seed=-1", "seed"), (f"train.steps={BIG}", "train.steps"),
    ("train.steps=" + "9" * 5001, "train.steps"), ("a.b=" + "[" * 5000, "a.b"), ("eval.k=nan", "eval.k"),
])
def test_a_broken_override_is_one_user_error_naming_the_key(override, named):
    with pytest.raises(UserError) as err:
        build_config({}, [override])
    assert named in str(err.value) and "\n" not in str(err.value), str(err.value)


def _leaves(raw, prefix=()):
    if isinstance(raw, dict) and raw:
        for key, value in raw.items():
            yield from _leaves(value, prefix + (key,))
    else:
        yield prefix


def _set(raw: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(raw)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


MUTATIONS = ["x", -1, 0, BIG, -BIG, math.inf, math.nan, None, True, [1, [2, [3]]], {"deep": {"er": 1}}, "", 1e-320]


def test_a_thousand_mutated_configs_give_user_errors_or_valid_configs(tmp_path):
    """Every leaf of every shipped config (and the demo's stages) replaced by values of the wrong type,
    sign or size, and unknown keys added to every section: each either validates or raises one
    UserError naming the key or section it is about; nothing else escapes."""
    spec = demo_stages()
    demo = [raw for part in ("prepare", "stages") for raw in spec[part].values() if isinstance(raw, dict)]
    configs = [yaml.safe_load(p.read_text()) for p in SHIPPED] + demo
    tried, refused, t0 = 0, 0, time.perf_counter()
    for raw in configs:
        for key in ("init", "init_from", "verifier_from"):
            raw.pop(key, None)
        cases = [(path, _set(raw, path, value)) for path in _leaves(raw) if path for value in MUTATIONS]
        cases += [((section, "bogus_key"), _set(raw, (section, "bogus_key"), 1)) for section, v in raw.items()
                  if isinstance(v, dict)]
        for path, mutated in cases:
            tried += 1
            try:
                build_config(mutated)
            except UserError as err:
                refused += 1
                message = str(err)
                assert "\n" not in message and any(part in message for part in path), (path, message)
    elapsed = time.perf_counter() - t0
    assert tried >= 1000 and refused >= tried // 2, (tried, refused)
    assert elapsed < 60, elapsed
    print(f"{tried} mutated configs, {refused} refused with one line, {elapsed:.1f} s")


def test_the_real_cli_answers_a_broken_config_at_once_in_one_line(tmp_path):
    """Through the real process: exit 2, one line, no traceback, and before torch is imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    for name, (data, named) in BROKEN_FILES.items():
        path = tmp_path / name
        path.write_bytes(data)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cotrain", "run", str(path), "--out", str(tmp_path / "run")],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
        elapsed = time.perf_counter() - t0
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and named in lines[0], (name, proc.stderr[-500:])
        assert elapsed < 10, (name, elapsed)  # about 0.2 s here: torch is never imported
    assert not (tmp_path / "run").exists()


def test_a_bug_exits_1_and_says_it_is_a_bug(monkeypatch, capsys):
    import cotrain.cli as cli

    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "cmd_recipes", broken)
    assert main(["recipes"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "a bug in cotrain" in err.splitlines()[-1]


# ---------------------------------------------------------------------- malformed model outputs


def _hostile_texts(n: int, seed: int = 0) -> list[str]:
    """n strings a broken model could write: fragments of every format, numbers of any length, unicode,
    control characters, unbalanced braces, in random order and length."""
    rng = random.Random(seed)
    pieces = ["#", "####", "\n", " ", "=", "+", "-", "*", "/", "ok", "no", "#ok", "#no", "@check", "\\boxed{", "}",
              "{", "Answer:", "The answer is", "<answer>", "</answer>", "Q:", "?", "1", "-7", "3.5", "1/2",
              "9" * 400, "é", "\x00", "\t", "\u202e", "𝟘", "step", "</step>", "\\frac{1}{2}", "$", "((", "))"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))) for _ in range(n)]


def test_ten_thousand_malformed_outputs_through_every_parser():
    from cotrain.roles import proposer, verifier
    from cotrain.tasks.arith import ArithTask, extract_answer, parse_steps
    from cotrain.tasks.mathdata import extract_gsm8k_answer, extract_math_answer, extract_word_answer, last_number
    from cotrain.tasks.rg import extract_answer as rg_extract

    arith = ArithTask()
    parsers = {
        "verifier.parse": lambda t: verifier.parse(t, 3), "verifier.split_steps": verifier.split_steps,
        "proposer.parse": proposer.parse, "proposer.parse(chat)": lambda t: proposer.parse(t, chat=True),
        "arith.extract_answer": extract_answer, "arith.parse_steps": parse_steps,
        "arith.check_question": arith.check_question, "arith.size": arith.size, "arith.problem_of": arith.problem_of,
        "gsm8k.extract": extract_gsm8k_answer, "math.extract": extract_math_answer, "last_number": last_number,
        "jsonl.extract": extract_word_answer,
        "rg.extract": rg_extract,
    }
    texts = _hostile_texts(10_000)
    for name, parse in parsers.items():
        for text in texts:
            try:
                parse(text)
            except Exception as err:  # noqa: BLE001 - the point: nothing may escape
                pytest.fail(f"{name} raised {type(err).__name__}: {err} on {text[:80]!r}")


def test_evaluation_splits_are_checked_before_the_first_step(tmp_path, capsys):
    """A split named in eval.splits that the task lacks, or one whose file has a broken line, is refused by
    `check` and `run` in one line (exit 2) before anything trains: no run directory is written. The
    default splits a task lacks (ood of a jsonl task) are skipped as before."""
    (tmp_path / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2", "answer": "4"}\n')
    (tmp_path / "test.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2", "ans\n')
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"recipe": "grpo", "model": {"preset": "nano"}, "train": {"steps": 1},
                                      "task": {"name": "jsonl", "splits": {"train": str(tmp_path / "train.jsonl"),
                                                                           "test": str(tmp_path / "test.jsonl")}}}))
    base = [str(config)]
    for command, extra, named in ((["check"], ["eval.splits=[tset]"], "'tset'"),
                                  (["run", "--out", str(tmp_path / "run")], ["eval.splits=[tset]"], "did you mean 'test'"),
                                  (["run", "--out", str(tmp_path / "run")], [], "test.jsonl:2: not valid JSON")):
        assert main([*command, *base, *extra]) == 2
        err = [line for line in capsys.readouterr().err.strip().splitlines() if "error" in line]  # (and the data read)
        assert len(err) == 1 and named in err[0], err
        assert not (tmp_path / "run").exists()


def test_a_user_error_after_checkpoints_says_the_run_can_be_resumed(tmp_path, monkeypatch, capsys):
    """A run that fails on bad input after it has saved a checkpoint says its checkpoints are kept and
    --resume goes on from them."""
    from cotrain import registry
    from cotrain.recipes import grpo

    def failing(cfg, run_dir, resume=False):
        (Path(run_dir) / "checkpoints" / "step_1").mkdir(parents=True)
        raise UserError("eval split 'test': broken")

    monkeypatch.setattr(grpo, "run", failing)
    assert registry.load("grpo") is grpo
    assert main(["run", str(REPO / "configs" / "smoke.yaml"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoints are kept" in err[0] and "--resume" in err[0], err


def test_a_checkpoint_the_disk_cannot_hold_is_one_line_and_keeps_the_one_before(tmp_path, monkeypatch, capsys):
    """torch's writer on a full disk raises "unexpected pos"; the run says so in one line with the free
    space, removes the partial checkpoint, keeps the earlier one, and exits 2 saying --resume goes on."""
    import torch

    from cotrain import registry
    from cotrain.config import ModelConfig
    from cotrain.models.build import build_model
    from cotrain.recipes import grpo
    from cotrain.runs import rundir
    from cotrain.runs.policy import Policy

    model, tok = build_model(ModelConfig(preset="nano"), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    roles = {"generator": Policy(model, tok, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))}
    real = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if "step_2" in str(path) and Path(path).name == "state.pt":
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 453142080 vs 453141972")
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(rundir.torch, "save", full_disk)

    def two_checkpoints(cfg, run_dir, resume=False):
        rundir.prepare_run_dir(run_dir)
        for step in (1, 2):
            rundir.save_checkpoint(Path(run_dir), step, roles, {}, keep_last=2)

    monkeypatch.setattr(grpo, "run", two_checkpoints)
    assert registry.load("grpo") is grpo
    assert main(["run", str(REPO / "configs" / "smoke.yaml"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not write checkpoint step_2" in err[0] and "GiB free" in err[0], err
    assert "unexpected pos" in err[0] and "--resume" in err[0]
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step_1"]
    assert rundir.list_checkpoints(tmp_path / "run")[-1].name == "step_1"

    def broken(obj, path, *args, **kwargs):
        raise RuntimeError("a bug while saving")

    monkeypatch.setattr(rundir.torch, "save", broken)  # any other failure stays a bug, with its traceback
    with pytest.raises(RuntimeError, match="a bug while saving"):
        rundir.save_checkpoint(tmp_path / "run", 3, roles, {}, keep_last=2)
