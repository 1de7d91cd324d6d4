"""The Python API (cotrain/api.py): the example of docs/api.md runs as written, from another directory."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_documented_example_runs_as_written_from_another_directory(tmp_path):
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    proc = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("refused: ") and "steps" in lines[-1], lines[-1]
    assert (tmp_path / "runs" / "api_grpo" / "eval.json").is_file()


def test_importing_the_package_loads_no_torch_and_names_the_api():
    proc = subprocess.run([sys.executable, "-c", "import sys, cotrain; print('torch' in sys.modules, "
                           "cotrain.run.__module__, cotrain.check.__module__, cotrain.UserError.__name__)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.stdout.split() == ["False", "cotrain.api", "cotrain.api", "UserError"], proc.stdout + proc.stderr


def test_load_run_refuses_what_is_not_a_run(tmp_path):
    import pytest

    import cotrain

    with pytest.raises(cotrain.UserError, match="not a run directory"):
        cotrain.load_run(tmp_path)


DOUBLING = '''
from cotrain.tasks import Problem


class Doubling:
    """Questions "double N", answers 2N, graded on the completion's last number."""
    name = "doubling"
    splits = ("train", "test")

    def __init__(self, top: int = 20):
        self.top = top

    def problems(self, split, n=None, seed=0):
        start = 0 if split == "train" else 1000
        rows = [Problem(question=f"double {i}", answer=str(2 * i)) for i in range(start, start + self.top)]
        return rows[:n] if n else rows

    def extract_answer(self, completion):
        words = [w for w in completion.split() if w.lstrip("-").isdigit()]
        return words[-1] if words else None

    def grade(self, completion, problem):
        return float(self.extract_answer(completion) == problem.answer)
'''
SMALL = {"model": {"preset": "nano"}, "train": {"steps": 2, "batch_size": 16, "n_problems": 20},
         "grpo": {"group_size": 4, "max_new_tokens": 8}, "eval": {"splits": ["test"], "n": 5, "k": 0, "every": 0},
         "checkpoint": {"every": 0}, "log": {"plots": False, "tensorboard": False}}


def test_a_task_of_ones_own_trains_by_file_and_by_registration_and_is_evaluated_from_elsewhere(tmp_path, monkeypatch,
                                                                                            capsys):
    """A task class in the user's own file, outside src/: named by `task.module` through `cotrain run`, and
    registered from Python through `cotrain.run`, where config.yaml records it as `task.module`; a later
    `cotrain eval` of either run from another directory rebuilds it (in this process: what a later process
    needs lives in the run directory)."""
    import importlib
    import json

    import cotrain
    from cotrain import tasks
    from cotrain.cli import main

    mine, elsewhere = tmp_path / "mine", tmp_path / "elsewhere"
    mine.mkdir(), elsewhere.mkdir()
    (mine / "mytask.py").write_text(DOUBLING)
    monkeypatch.setattr(tasks, "USER_TASKS", {})
    monkeypatch.syspath_prepend(str(mine))
    monkeypatch.chdir(mine)
    smoke = str(REPO / "configs" / "smoke.yaml")
    flags = ["model.preset=nano", "train.steps=2", "train.batch_size=16", "train.n_problems=20", "grpo.group_size=4",
             "grpo.max_new_tokens=8", "eval.splits=[test]", "eval.n=5", "eval.k=0", "eval.every=0", "checkpoint.every=0",
             "log.plots=false", "log.tensorboard=false"]
    assert main(["run", smoke, "task={name: doubling, module: mytask.py:Doubling, top: 30}", *flags, "--out", "run_file"]) == 0
    mytask = importlib.import_module("mytask")
    module = cotrain.register_task("doubling", mytask.Doubling)
    assert module == f"{(mine / 'mytask.py').resolve()}:Doubling", module
    cotrain.run(smoke, out="run_registered", overrides=["task={name: doubling, top: 30}", *flags])
    assert f"module: {module}" in (mine / "run_registered" / "config.yaml").read_text()
    monkeypatch.setattr(tasks, "USER_TASKS", {})  # a later process knows nothing of the registration
    monkeypatch.chdir(elsewhere)
    for run in ("run_file", "run_registered"):
        capsys.readouterr()
        assert main(["eval", str(mine / run), "--n", "3"]) == 0
        assert json.loads(capsys.readouterr().out)["generator"]["test"]["n"] == 3


def test_a_task_module_that_does_not_load_is_one_line(tmp_path):
    import pytest

    import cotrain
    from cotrain.tasks import make_task

    (tmp_path / "broken.py").write_text("raise RuntimeError('oops')\n")
    for spec, message in ((f"{tmp_path}/broken.py:X", "does not load: RuntimeError: oops"),
                          (f"{tmp_path}/none.py:X", "file not found"), ("no_colon", "expected path/to/file.py:Name"),
                          ("json:NoSuchThing", "has no 'NoSuchThing'"), ("json:dumps", "is not a task class"),
                          ("json:JSONDecoder", "is not a task: it has no name, splits, problems")):
        with pytest.raises(cotrain.UserError, match=message):
            make_task("mine", module=spec)


def test_a_reward_function_of_ones_own_sets_grpo_s_training_reward_only(tmp_path, capsys):
    """`task.reward: file.py:function`: grpo trains on it (here: 1 for any completion holding a digit, a reward the
    grader never gives an untrained model), evaluation keeps the task's grader; a function that raises on a
    completion scores it 0 with one warning; a recipe that reads its task's grader refuses the key in one line."""
    import json

    import pytest

    import cotrain
    from cotrain.config import build_config

    (tmp_path / "rewards.py").write_text("def has_digit(completion, problem):\n"
                                         "    return float(any(c.isdigit() for c in completion))\n\n"
                                         "def broken(completion, problem):\n    raise KeyError('oops')\n")
    base = {**SMALL, "recipe": "grpo", "task": {"name": "arith", "n_ops": [1, 2], "max_operand": 9}}
    base["train"] = {**SMALL["train"], "n_problems": 200}
    graded = cotrain.run(base, out=tmp_path / "graded")
    mine = cotrain.run({**base, "task": {**base["task"], "reward": f"{tmp_path}/rewards.py:has_digit"}}, out=tmp_path / "mine")
    rows = [json.loads(line) for line in (tmp_path / "mine" / "metrics.jsonl").read_text().splitlines() if '"gen/reward"' in line]
    graded_rows = [json.loads(line) for line in (tmp_path / "graded" / "metrics.jsonl").read_text().splitlines()
                   if '"gen/reward"' in line]
    assert rows[0]["gen/reward"] != graded_rows[0]["gen/reward"], (rows[0], graded_rows[0])  # the same samples, rewarded otherwise
    assert mine["generator"]["test"]["n"] == graded["generator"]["test"]["n"] == 5  # evaluated by the grader, as before
    capsys.readouterr()
    cotrain.run({**base, "task": {**base["task"], "reward": f"{tmp_path}/rewards.py:broken"}}, out=tmp_path / "broken")
    err = capsys.readouterr().err
    assert err.count("warning: task.reward") == 1 and "KeyError" in err
    with pytest.raises(cotrain.UserError, match="task.reward sets grpo's training reward; recipe tango reads its task's grader"):
        build_config({**base, "recipe": "tango", "task": {**base["task"], "reward": "x.py:f"}})


def _own_recipe(tmp_path) -> Path:
    """docs/new_recipe.md's recipe of one's own, written as the user's file `mine/rft.py`."""
    text = (REPO / "docs" / "new_recipe.md").read_text(encoding="utf-8")
    section = text.split("## A recipe of one's own", 1)[1].split("\n## ", 1)[0]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "rft.py").write_text(re.findall(r"```python\n(.*?)```", section, flags=re.S)[0])
    return mine


def _forget_own_recipes():
    """What a later process knows of recipes registered in this one: nothing."""
    from cotrain import registry

    for name in registry.USER_RECIPES:
        registry.RECIPES.pop(name, None)
    registry.USER_RECIPES.clear()
    registry.USER_SECTIONS.clear()
    registry._OWNERS.clear()


def test_a_recipe_of_ones_own_trains_by_file_and_by_registration_and_is_evaluated_from_elsewhere(
        tmp_path, monkeypatch, capsys, sft_run):
    """docs/new_recipe.md's rejection-sampling recipe, in the user's own file outside src/: named by `recipe_module`
    through `cotrain run`, and registered from Python through `cotrain.run`; its own section (`rft.keep`) is a config
    key, config.yaml records the file's absolute path, and `cotrain eval` of either run from another directory (in a
    state that knows nothing of the recipe) finds it again. From the SFT start some samples are right, so it trains."""
    import importlib
    import json

    import yaml

    import cotrain
    from cotrain.cli import main
    from tests.conftest import nano_config

    mine = _own_recipe(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.syspath_prepend(str(mine))
    monkeypatch.chdir(mine)
    raw = nano_config("rft", init=str(sft_run[0]), train={"steps": 2}, eval={"n": 5, "k": 0}, checkpoint={"every": 0})
    try:
        (mine / "cfg.yaml").write_text(yaml.safe_dump({**raw, "recipe_module": "rft.py", "rft": {"keep": 2}}))
        assert main(["run", "cfg.yaml", "--out", "run_file"]) == 0
        _forget_own_recipes()
        assert cotrain.register_recipe(importlib.import_module("rft")) == str((mine / "rft.py").resolve())
        cotrain.run(raw, out="run_registered")
        for run in ("run_file", "run_registered"):
            written = yaml.safe_load((mine / run / "config.yaml").read_text())
            assert written["recipe_module"] == str((mine / "rft.py").resolve()), run
            assert written["rft"]["keep"] == (2 if run == "run_file" else 1), run
            rows = [r for r in cotrain.load_run(mine / run).metrics if "gen/acc" in r]
            assert [r["step"] for r in rows] == [1, 2] and max(r["gen/kept"] for r in rows) > 0, rows
            assert any("gen/loss" in r for r in rows), rows
        _forget_own_recipes()
        monkeypatch.chdir(tmp_path / "elsewhere")
        for run in ("run_file", "run_registered"):
            capsys.readouterr()
            assert main(["eval", str(mine / run), "--n", "3"]) == 0
            assert json.loads(capsys.readouterr().out)["generator"]["test"]["n"] == 3
    finally:
        _forget_own_recipes()


def test_a_recipe_module_that_is_not_one_is_one_line(tmp_path):
    import pytest

    import cotrain
    from cotrain.config import build_config

    files = {"broken.py": ("raise RuntimeError('oops')\n", "does not load: RuntimeError: oops"),
             "empty.py": ("x = 1\n", "declares no recipe"),
             "norun.py": ("from cotrain.declare import Recipe\nRECIPES = {'mine': Recipe('mine')}\n", "has no run"),
             "taken.py": ("from cotrain.declare import Recipe\nRECIPES = {'grpo': Recipe('grpo')}\ndef run(c, d, r): 0\n",
                          "recipe 'grpo' is taken"),
             "section.py": ("from cotrain.declare import Recipe, Section\nRECIPES = {'mine2': Recipe('mine2')}\n"
                            "SECTIONS = {'train': Section}\ndef run(c, d, r): 0\n", "section 'train' is taken")}
    try:
        for name, (source, message) in files.items():
            (tmp_path / name).write_text(source)
            with pytest.raises(cotrain.UserError, match=message):
                build_config({"recipe": "mine", "recipe_module": str(tmp_path / name)})
        with pytest.raises(cotrain.UserError, match="file not found"):
            build_config({"recipe": "mine", "recipe_module": str(tmp_path / "none.py")})
        # one file registered as a module, then named by its path: the same recipe, not a name taken twice
        mine = _own_recipe(tmp_path)
        import importlib.util

        spec = importlib.util.spec_from_file_location("rft_imported", mine / "rft.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        where = cotrain.register_recipe(module)
        assert build_config({"recipe": "rft", "recipe_module": where}).recipe_module == where
    finally:
        _forget_own_recipes()


def test_no_recipe_section_may_take_a_shared_key():
    from cotrain import registry
    from cotrain.config import _RunConfig

    assert set(registry.SHARED_SECTIONS) == set(_RunConfig.model_fields)
