"""Sweeps: mean ± 95% CI by hand, cell expansion, up-front validation, the summary, skip/resume, and one
real two-cell sweep through the CLI."""
import csv
import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from cotrain.cli import main
from cotrain.errors import UserError
from cotrain.runs import sweep as sweep_mod
from cotrain.runs.sweep import load_sweep, mean_ci95, plan, run_sweep, select, summarize

REPO = Path(__file__).resolve().parents[1]

NANO_SFT = {
    "recipe": "sft",
    "model": {"preset": "nano"},
    "task": {"name": "arith", "n_ops": [1, 1], "max_operand": 9},
    "train": {"steps": 3, "batch_size": 8, "n_problems": 100},  # n_ops [1, 1] has only 162 distinct problems
    "eval": {"n": 10, "k": 0, "n_sampled": 0, "splits": ["test"]},
    "log": {"progress": False, "tensorboard": False},
    "checkpoint": {"every": 0},
}


def _write_sweep(tmp_path: Path, spec: dict, base: dict | None = NANO_SFT) -> Path:
    """sweeps/s.yaml with its base config one directory up, as in configs/sweeps/."""
    (tmp_path / "sweeps").mkdir(exist_ok=True)
    if base is not None:
        (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
        spec = {"base": "../base.yaml", **spec}
    path = tmp_path / "sweeps" / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _fake_eval(run_dir: Path, pass1: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": pass1, "n": 10}}}))


# ---------------------------------------------------------------- statistics


def test_mean_ci95_two_values():
    """[0.5, 0.7]: mean 0.6; sd = sqrt((0.1² + 0.1²) / 1) = 0.14142; se = sd / sqrt(2) = 0.1;
    df = 1, t = 12.706, half-width = 12.706 * 0.1 = 1.2706."""
    mean, half = mean_ci95([0.5, 0.7])
    assert mean == pytest.approx(0.6)
    assert half == pytest.approx(1.2706)


def test_mean_ci95_four_values():
    """[1, 2, 3, 4]: mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, sd = sqrt(5 / 3) = 1.29099;
    se = 1.29099 / 2 = 0.645497; df = 3, t = 3.182, half-width = 3.182 * 0.645497 = 2.053972."""
    mean, half = mean_ci95([1, 2, 3, 4])
    assert mean == pytest.approx(2.5)
    assert half == pytest.approx(2.053972, abs=1e-6)


def test_mean_ci95_many_values_use_the_normal_quantile():
    """20 zeros and 20 ones: mean 0.5; squared deviations 40 * 0.25 = 10, sd = sqrt(10 / 39) = 0.506370;
    se = 0.506370 / sqrt(40) = 0.0800641; df = 39 > 30, so 1.96: half-width = 0.156926."""
    mean, half = mean_ci95([0.0, 1.0] * 20)
    assert mean == pytest.approx(0.5)
    assert half == pytest.approx(0.156926, abs=1e-6)


def test_mean_ci95_too_few_values():
    mean, half = mean_ci95([0.3])
    assert mean == 0.3 and math.isnan(half)       # one seed: no spread to speak of
    assert all(math.isnan(x) for x in mean_ci95([]))
    assert mean_ci95([0.4, 0.4]) == (0.4, 0.0)    # identical seeds: a zero-width interval


# ---------------------------------------------------------------- cells


def test_a_2x2_grid_with_2_seeds(tmp_path, capsys):
    path = _write_sweep(tmp_path, {
        "overrides": {"train.steps": 2},
        "prepare": {"overrides": {"recipe": "sft", "model.preset": "nano", "train.steps": 7}},
        "grid": {"train.lr": [0.001, "2e-3"], "task.n_ops": [[1, 1], [1, 2]]},
        "seeds": [0, 1],
    })
    sweep = load_sweep(path, ["eval.n=5"])
    assert [c.name for c in sweep.cells] == [
        "train.lr=0.001,task.n_ops=1_1", "train.lr=0.001,task.n_ops=1_2",
        "train.lr=2e-3,task.n_ops=1_1", "train.lr=2e-3,task.n_ops=1_2"]
    last = sweep.cells[-1].configs[1]
    assert (last["train"]["lr"], last["task"]["n_ops"], last["seed"]) == (0.002, [1, 2], 1)
    assert last["train"]["steps"] == 2 and last["eval"]["n"] == 5          # the file's and the command line's
    assert last["model"]["preset"] == "nano" and last["train"]["batch_size"] == 8   # the base config's
    assert sweep.prepare["prepare"]["train"]["steps"] == 7 and sweep.prepare["prepare"]["eval"]["n"] == 5

    runs = plan(sweep, tmp_path / "out")
    assert len(runs) == 1 + 4 * 2
    assert runs[0].run_dir == tmp_path / "out" / "prepare"
    assert runs[2].label == "train.lr=0.001,task.n_ops=1_1 seed1"
    assert runs[2].run_dir == tmp_path / "out" / "train.lr=0.001,task.n_ops=1_1" / "seed1"
    assert runs[2].config["init"] == str(tmp_path / "out" / "prepare")

    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run", "eval.n=5"]) == 0
    printed = capsys.readouterr().out
    assert "4 cells x 2 seeds, 9 runs, plus 1 prepare" in printed and printed.count(" new ") == 9
    assert not (tmp_path / "out").exists()


def test_only_runs_the_named_cells_and_seeds_and_a_name_it_lacks_is_one_line(tmp_path, capsys):
    path = _write_sweep(tmp_path, {"arms": {"grpo": {}, "slow": {"overrides": {"train.lr": 0.002}}}, "seeds": [0, 1, 2]})
    sweep, out = load_sweep(path), tmp_path / "out"
    runs = select(sweep, plan(sweep, out), ["slow/seed2", "grpo"])
    assert [r.label for r in runs] == ["grpo seed0", "grpo seed1", "grpo seed2", "slow seed2"]
    assert select(sweep, plan(sweep, out), None) == plan(sweep, out)
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--only", "slow/seed1"]) == 0
    printed = capsys.readouterr().out
    assert "2 cells x 3 seeds, 1 of its 6 runs (--only)" in printed and "slow seed1" in printed and "grpo seed" not in printed
    _fails(["sweep", str(path), "--out", str(out), "--only", "slow/seed7"], capsys,
           "--only slow/seed7: no such run in s.yaml (its seeds: seed0, seed1, seed2)")
    _fails(["sweep", str(path), "--out", str(out), "--only", "fast"], capsys, "(its cells: grpo, slow)")
    assert not out.exists()


def _fails(argv, capsys, message):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("cotrain: error: ") and message in err, err


@pytest.mark.parametrize("spec, message", [
    ({"grid": {"train.steps": [2, -1]}}, "cell train.steps=-1: invalid config: train.steps"),   # the 2nd cell is bad
    ({"grid": {"train.lrr": [1]}}, "did you mean 'train.lr'?"),
    ({"grid": {"train.lr": []}}, "grid key 'train.lr' has an empty list"),
    ({"grid": {"train.lr": 0.1}}, "needs a list of values"),
    ({"grid": {"train.lr": [0.1]}, "seed": [0, 1]}, "unknown key 'seed' in sweep file"),          # a typo of seeds
    ({"grid": {"seed": [0, 1]}}, "'seed' cannot be a grid key"),
    ({"grid": {"train.lr": [0.1]}, "overrides": {"train.lr": 0.2}}, "'train.lr' is a grid key"),
    ({"grid": {"train.lr": [0.1]}, "seeds": []}, "seeds must be a non-empty list"),
    ({"base": "../nope.yaml"}, "base config not found"),
    ({"prepare": {"config": "nope.yaml"}}, "prepare config not found"),
    ({"prepare": {"overides": {}}}, "unknown key 'overides' in prepare"),
])
def test_sweep_user_errors_before_anything_runs(tmp_path, capsys, monkeypatch, spec, message):
    monkeypatch.setattr(sweep_mod, "launch", lambda *a: pytest.fail("a run was launched"))
    path = _write_sweep(tmp_path, spec)
    _fails(["sweep", str(path), "--out", str(tmp_path / "out")], capsys, message)
    assert not (tmp_path / "out").exists()


def test_sweep_file_errors(tmp_path, capsys):
    _fails(["sweep", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out")], capsys, "sweep file not found")
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {train.lr: [1, 2}\n")
    _fails(["sweep", str(bad), "--out", str(tmp_path / "out")], capsys, "bad YAML")
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [0.1]}})
    _fails(["sweep", str(path), "--out", str(tmp_path / "out"), "seed=3"], capsys, "'seed' in the command line")
    _fails(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "0"], capsys, "--jobs must be at least 1")
    _fails(["sweep", str(path)], capsys, "--out")


# ---------------------------------------------------------------- summary


def test_summarize_fabricated_runs(tmp_path):
    """Cell lr=0.001: pass@1 0.5 and 0.7 -> 0.6 ± 1.2706 (see the first test); cell lr=0.002: one seed of
    0.2 -> no interval. `last:gen/loss` over 20 logged steps with loss = step: the last 10% are steps 19
    and 20 -> 19.5 (a truncated line and rows without the key are skipped)."""
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [0.001, 0.002]}, "seeds": [0, 1],
                                   "metrics": ["generator/test/pass@1", "last:gen/loss"]})
    sweep = load_sweep(path)
    out = tmp_path / "out"
    _fake_eval(out / "train.lr=0.001" / "seed0", 0.5)
    _fake_eval(out / "train.lr=0.001" / "seed1", 0.7)
    _fake_eval(out / "train.lr=0.002" / "seed0", 0.2)
    (out / "train.lr=0.002" / "seed1").mkdir()  # unfinished: no eval.json, not counted
    rows = [{"step": s, "gen/loss": float(s)} for s in range(1, 21)] + [{"step": 20, "eval/test/pass@1": 0.2}]
    (out / "train.lr=0.002" / "seed0" / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 21, "gen/lo')

    summarize(sweep, out)
    got = list(csv.DictReader((out / "summary.csv").open()))
    assert list(got[0]) == ["cell", "train.lr", "n_seeds", "generator/test/pass@1_mean", "generator/test/pass@1_ci95",
                            "last:gen/loss_mean", "last:gen/loss_ci95"]
    assert [(r["cell"], r["train.lr"], r["n_seeds"]) for r in got] == [("train.lr=0.001", "0.001", "2"),
                                                                      ("train.lr=0.002", "0.002", "1")]
    assert float(got[0]["generator/test/pass@1_mean"]) == pytest.approx(0.6)
    assert float(got[0]["generator/test/pass@1_ci95"]) == pytest.approx(1.2706)
    assert got[0]["last:gen/loss_mean"] == ""                                # no metrics.jsonl there
    assert float(got[1]["generator/test/pass@1_mean"]) == pytest.approx(0.2)
    assert got[1]["generator/test/pass@1_ci95"] == ""                        # one seed
    assert float(got[1]["last:gen/loss_mean"]) == pytest.approx(19.5)

    md = (out / "summary.md").read_text().splitlines()
    assert md[:4] == ["| train.lr | n | generator/test/pass@1 | last:gen/loss |",
                      "|---|---:|---:|---:|",
                      "| 0.001 | 2 | 0.600 ± 1.271 | – |",
                      "| 0.002 | 1 | 0.200 ± – | 19.500 ± – |"]
    assert not list(out.glob("*.tmp"))


def test_summary_defaults_to_every_numeric_leaf_but_n(tmp_path):
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [0.001]}})
    out = tmp_path / "out"
    (out / "train.lr=0.001" / "seed0").mkdir(parents=True)
    (out / "train.lr=0.001" / "seed0" / "eval.json").write_text(json.dumps(
        {"generator": {"test": {"pass@1": 0.5, "n": 10, "pass@4": 0.75}, "ood": {"pass@1": 0.25, "n": 10}}}))
    [row] = summarize(load_sweep(path), out)
    assert [k for k in row if k.endswith("_mean")] == [
        "generator/test/pass@1_mean", "generator/test/pass@4_mean", "generator/ood/pass@1_mean"]


# ---------------------------------------------------------------- skip, resume, failures


class _Exited:
    """What `launch` returns: a process that has already ended."""

    def __init__(self, returncode: int):
        self.returncode = returncode

    def poll(self):
        return self.returncode

    def terminate(self):
        pass

    def wait(self):
        return self.returncode


def test_finished_runs_are_skipped_and_unfinished_ones_resumed(tmp_path, monkeypatch, capsys):
    launched = {}

    def fake_launch(run, resume, env):
        launched[run.label] = (resume, yaml.safe_load(run.config_path.read_text()))
        _fake_eval(run.run_dir, 0.5)
        return _Exited(0)

    monkeypatch.setattr(sweep_mod, "launch", fake_launch)
    path = _write_sweep(tmp_path, {"prepare": {"overrides": {"model.preset": "nano"}},
                                   "grid": {"train.lr": [0.001]}, "seeds": [0, 1, 2]})
    out = tmp_path / "out"
    _fake_eval(out / "prepare", 0.1)                    # finished: skipped
    _fake_eval(out / "train.lr=0.001" / "seed0", 0.4)   # finished: skipped
    (out / "train.lr=0.001" / "seed1").mkdir()          # started: resumed
    assert run_sweep(load_sweep(path), out, jobs=2) == 0
    assert set(launched) == {"train.lr=0.001 seed1", "train.lr=0.001 seed2"}
    resume, config = launched["train.lr=0.001 seed1"]
    assert resume and config["seed"] == 1 and config["init"] == str(out / "prepare")
    assert launched["train.lr=0.001 seed2"][0] is False
    printed = capsys.readouterr().out
    assert "[1/4] prepare already finished" in printed and "[2/4] train.lr=0.001 seed0 already finished" in printed
    assert "[3/4] train.lr=0.001 seed1 resumed" in printed
    assert "| 0.001 | 3 | 0.467 ± " in printed           # (0.4 + 0.5 + 0.5) / 3


def test_failed_runs_are_reported_and_the_rest_summarised(tmp_path, monkeypatch, capsys):
    def fake_launch(run, resume, env):
        if run.label.endswith("seed0"):
            _fake_eval(run.run_dir, 0.5)
            return _Exited(0)
        run.run_dir.mkdir(parents=True)
        return _Exited(1)

    monkeypatch.setattr(sweep_mod, "launch", fake_launch)
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [0.001]}, "seeds": [0, 1]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "seed1 FAILED (exit 1)" in printed
    assert f"train.lr=0.001 seed1: exit 1, log {out / 'train.lr=0.001' / 'seed1.log'}" in printed
    assert list(csv.DictReader((out / "summary.csv").open()))[0]["n_seeds"] == "1"


def test_a_run_dir_of_another_config_stops_the_sweep(tmp_path, capsys):
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [0.001]}})
    run_dir = tmp_path / "out" / "train.lr=0.001" / "seed0"
    run_dir.mkdir(parents=True)
    config = plan(load_sweep(path, ["train.steps=9"]), tmp_path / "out")[0].config
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    _fails(["sweep", str(path), "--out", str(tmp_path / "out")], capsys, "another config (train.steps: 9 -> 3)")
    # sections added to or removed from the config since the run was made are not a different experiment
    config = plan(load_sweep(path), tmp_path / "out")[0].config
    del config["log"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "retired_section": {"x": 1}}))
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0


# ---------------------------------------------------------------- end to end


@pytest.mark.heavy
def test_real_sweep_through_the_cli(tmp_path, monkeypatch, capsys):
    """Two nano SFT runs of 3 steps at once; the second call finds both finished and launches nothing."""
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    path = _write_sweep(tmp_path, {"grid": {"train.lr": [1.0e-3, 2.0e-3]}, "seeds": [0],
                                   "metrics": ["generator/test/pass@1", "last:gen/loss"]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "2"]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert printed.count(" done in ") == 2
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["cell"] for r in rows] == ["train.lr=0.001", "train.lr=0.002"]
    for row in rows:
        assert row["n_seeds"] == "1"
        assert 0 <= float(row["generator/test/pass@1_mean"]) <= 1 and float(row["last:gen/loss_mean"]) > 0
    assert yaml.safe_load((out / "train.lr=0.002" / "seed0" / "config.yaml").read_text())["train"]["lr"] == 0.002
    assert (out / "train.lr=0.001" / "seed0.log").is_file()

    monkeypatch.setattr(sweep_mod, "launch", lambda *a: pytest.fail("a finished run was launched again"))
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "2"]) == 0
    assert capsys.readouterr().out.count("already finished") == 2


def test_arms_each_with_its_overrides_config_and_seeds(tmp_path):
    """Named arms instead of a grid: each arm its own overrides (on the sweep's base), or its own base
    config, and its own seeds if given; runs go to DIR/<arm>/seed<S>."""
    (tmp_path / "base.yaml").write_text("recipe: grpo\ntrain: {steps: 3}\n")
    (tmp_path / "other.yaml").write_text("recipe: tango\ntrain: {steps: 5}\n")
    (tmp_path / "s.yaml").write_text(
        "base: base.yaml\noverrides: {train.lr: 3.0e-4}\nseeds: [0, 1]\n"
        "arms:\n  grpo: {}\n  auto: {config: other.yaml, overrides: {cotraining.alpha: auto}, seeds: [0, 1, 2]}\n")
    sweep = load_sweep(tmp_path / "s.yaml")
    assert [c.name for c in sweep.cells] == ["grpo", "auto"] and sweep.grid == {"arm": ["grpo", "auto"]}
    grpo, auto = sweep.cells
    assert sorted(grpo.configs) == [0, 1] and sorted(auto.configs) == [0, 1, 2]
    assert grpo.configs[1]["recipe"] == "grpo" and grpo.configs[1]["train"]["steps"] == 3
    assert grpo.configs[1]["train"]["lr"] == 3e-4 and grpo.configs[1]["seed"] == 1
    assert auto.configs[2]["recipe"] == "tango" and auto.configs[2]["train"]["steps"] == 5
    assert auto.configs[2]["cotraining"]["alpha_schedule"] == "auto" and auto.configs[2]["train"]["lr"] == 3e-4
    runs = plan(sweep, tmp_path / "out")
    assert [r.run_dir.relative_to(tmp_path / "out").as_posix() for r in runs] == [
        "grpo/seed0", "grpo/seed1", "auto/seed0", "auto/seed1", "auto/seed2"]


@pytest.mark.parametrize("arms, message", [
    ("arms: {a: {overrides: {seed: 3}}}", "'seed' in arm 'a'"),
    ("arms: {a b: {}}", "arm name 'a b'"),
    ("arms: {a: {bogus: 1}}", "unknown key 'bogus' in arm 'a'"),
    ("arms: {a: {}}\ngrid: {train.lr: [1.0e-4]}", "either a grid or arms"),
    ("arms: []", "arms must be a mapping"),
])
def test_bad_arms_are_one_clear_line(tmp_path, arms, message):
    (tmp_path / "s.yaml").write_text(arms + "\n")
    with pytest.raises(UserError, match=message):
        load_sweep(tmp_path / "s.yaml")


def test_named_prepare_stages_run_in_order_and_the_runs_after_them_name_them(tmp_path, monkeypatch, capsys):
    """Two preparation stages (SFT, then a warm-up from it): each runs alone, in order, into DIR/<stage>;
    `{prepare.<stage>}` in any later run's overrides becomes that stage's directory, and nothing sets the
    cells' init for them. A failed stage stops everything after it."""
    (tmp_path / "sft.yaml").write_text("recipe: sft\ntrain: {steps: 3}\n")
    (tmp_path / "s.yaml").write_text(
        "prepare:\n"
        "  - {name: sft, config: sft.yaml}\n"
        "  - {name: warm, overrides: {recipe: tango, train.steps: 0, init: '{prepare.sft}/checkpoints/step_2/generator'}}\n"
        "overrides: {init: '{prepare.sft}/final', verifier.init: '{prepare.warm}/final/verifier'}\n"
        "arms: {grpo: {overrides: {recipe: grpo}}, tango: {overrides: {recipe: tango}}}\n")
    sweep = load_sweep(tmp_path / "s.yaml")
    assert list(sweep.prepare) == ["sft", "warm"] and not sweep.auto_init
    out = tmp_path / "out"
    runs = plan(sweep, out)
    assert [r.label for r in runs] == ["sft", "warm", "grpo seed0", "tango seed0"]
    assert runs[1].config["init"] == f"{out / 'sft'}/checkpoints/step_2/generator"
    assert runs[3].config["init"] == f"{out / 'sft'}/final"
    assert runs[3].config["verifier"]["init"] == f"{out / 'warm'}/final/verifier"

    order = []

    def fake_launch(run, resume, env):
        order.append(run.label)
        if run.label == "warm" and fail:
            return _Exited(1)
        _fake_eval(run.run_dir, 0.5)
        return _Exited(0)

    monkeypatch.setattr(sweep_mod, "launch", fake_launch)
    fail = True
    assert run_sweep(sweep, out, jobs=2) == 1
    assert order == ["sft", "warm"] and "the prepare run 'warm' failed" in capsys.readouterr().out
    fail, order[:] = False, []
    assert run_sweep(sweep, out, jobs=2) == 0
    assert order == ["warm", "grpo seed0", "tango seed0"]   # sft finished: skipped


@pytest.mark.parametrize("spec, message", [
    ("prepare: [{name: a, overrides: {init: '{prepare.b}'}}, {name: b}]\n",
     "prepare stage 'a' refers to {prepare.b}: a stage runs only after"),
    ("prepare: [{name: a}]\noverrides: {init: '{prepare.c}'}\n", "refers to {prepare.c}: no such prepare stage"),
    ("prepare: [{name: base}]\n", "'base' names both a prepare stage and a cell"),
    ("prepare: [{name: a b}]\n", "prepare[0]: its name 'a b' must be"),
    ("prepare: [{config: x.yaml}]\n", "prepare[0]: its name None must be"),
    ("prepare: [{name: a}, {name: a}]\n", "prepare[1]: two prepare stages are named 'a'"),
    ("prepare: [3]\n", "prepare[0] must be a mapping"),
    ("prepare: [{name: a, overides: {}}]\n", "unknown key 'overides' in prepare[0]"),
    ("prepare: []\n", "prepare must be a mapping"),
])
def test_bad_prepare_stages_are_one_clear_line(tmp_path, spec, message):
    (tmp_path / "s.yaml").write_text(spec)
    with pytest.raises(UserError, match=re.escape(message)):
        load_sweep(tmp_path / "s.yaml")


def test_a_sweep_its_study_and_its_report_read_from_another_directory(tmp_path, monkeypatch, capsys):
    """A sweep started in one directory, its base config naming data files relative to it: from another directory
    the sweep finds its run finished (its config is not another experiment for being read from elsewhere), and
    `cotrain study` and `cotrain report` of its directory write their tables and page."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    rows = "".join(f'{{"question": "{a}+{b}", "answer": "{a + b}"}}\n' for a in range(4) for b in range(4))
    (home / "train.jsonl").write_text(rows), (home / "test.jsonl").write_text(rows)
    base = {"recipe": "grpo", "model": {"preset": "nano"}, "task": {"name": "jsonl", "splits": {
        "train": "train.jsonl", "test": "test.jsonl"}}, "train": {"steps": 1, "batch_size": 8, "n_problems": 16},
        "grpo": {"group_size": 4, "max_new_tokens": 8}, "eval": {"splits": ["test"], "n": 4, "k": 0, "every": 0},
        "checkpoint": {"every": 0}, "log": {"plots": False, "tensorboard": False}}
    (home / "base.yaml").write_text(yaml.safe_dump(base))
    (home / "s.yaml").write_text("base: base.yaml\narms:\n  grpo: {}\n")
    monkeypatch.chdir(home)
    (run,) = plan(load_sweep(home / "s.yaml"), home / "out")
    run.run_dir.parent.mkdir(parents=True)
    (run.run_dir.parent / "seed0.yaml").write_text(yaml.safe_dump(run.config))
    assert main(["run", str(run.run_dir.parent / "seed0.yaml"), "--out", str(run.run_dir)]) == 0  # what its job runs
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sweep_mod, "launch", lambda *a: pytest.fail("a finished run was launched again"))
    capsys.readouterr()
    assert main(["sweep", str(home / "s.yaml"), "--out", str(home / "out")]) == 0, capsys.readouterr().err
    assert "already finished" in capsys.readouterr().out
    assert main(["study", str(home / "out")]) == 0
    assert "| grpo |" in (home / "out" / "table.md").read_text()
    assert main(["report", str(home / "out"), str(run.run_dir), "--out", "page.html"]) == 0
    assert "grpo" in (elsewhere / "page.html").read_text(encoding="utf-8")
