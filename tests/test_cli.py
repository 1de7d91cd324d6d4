"""The CLI: every user error is one line on stderr and exit code 2; eval and plot commands."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cotrain.cli import main
from tests.conftest import nano_config

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, raw: dict, name="cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _fails(argv, capsys, message):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("cotrain: error: ") and message in err, err


@pytest.mark.parametrize("overrides, message", [
    (["train.lrr=1"], "did you mean 'train.lr'?"),                         # unknown key
    (["train.steps=abc"], "train.steps"),                                  # wrong type
    (["grpo.group_size=1"], "group_size must be at least 2"),
    (["train.batch_size=10", "grpo.group_size=4"], "divisible by grpo.group_size"),
    (["task.name=arithmetic"], "did you mean 'arith'"),                    # unknown task
    (["task.n_opz=[1,2]"], "n_ops"),                                       # unknown task option
    (["eval.splits=[]"], "eval.splits"),                                   # nothing to evaluate
    (["model.path=/tmp"], "not a model directory"),                        # a path that is not a model
])
def test_run_user_errors(tmp_path, capsys, overrides, message):
    cfg = _write(tmp_path, nano_config("grpo"))
    _fails(["run", cfg, *overrides, "--out", str(tmp_path / "run")], capsys, message)


def test_missing_data_file(tmp_path, capsys):
    cfg = _write(tmp_path, nano_config("grpo") | {"task": {"name": "gsm8k", "data_dir": "/nonexistent"}})
    _fails(["run", cfg, "--out", str(tmp_path / "run")], capsys, "not found")


def test_bad_yaml_missing_config_and_unwritable_output(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    _fails(["run", str(bad), "--out", str(tmp_path / "r")], capsys, "bad YAML")
    _fails(["run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "r")], capsys, "config file not found")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    cfg = _write(tmp_path, nano_config("grpo"))
    _fails(["run", cfg, "--out", str(blocker / "run")], capsys, "cannot write to run directory")


def test_argument_errors_are_one_line(capsys):
    _fails(["frobnicate"], capsys, "invalid choice")
    _fails(["run"], capsys, "required")
    _fails(["plot", "/nonexistent/run"], capsys, "not a run directory")
    _fails(["eval", "/nonexistent/model", "--task", "arith"], capsys, "no model found")
    _fails(["eval", "/nonexistent/model", "--task", "arith", "--n", "-5"], capsys, "eval.n")


def test_real_process_prints_no_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run([sys.executable, "-m", "cotrain", "run", "missing.yaml", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "cotrain: error: config file not found: missing.yaml"


def test_existing_run_needs_resume(sft_run, tmp_path, capsys):
    start, _ = sft_run
    cfg = _write(tmp_path, nano_config("grpo", init=str(start), train={"steps": 2}, eval={"n": 5, "k": 0}))
    assert main(["run", cfg, "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()  # the first run's own lines
    _fails(["run", cfg, "--out", str(tmp_path / "run")], capsys, "pass --resume")
    # resuming a finished run redoes only the final evaluation, with the same result
    before = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert main(["run", cfg, "--out", str(tmp_path / "run"), "--resume"]) == 0
    assert json.loads((tmp_path / "run" / "eval.json").read_text()) == before


def test_eval_and_plot_commands(sft_run, tmp_path, capsys):
    start, results = sft_run
    out = tmp_path / "eval.json"
    code = main(["eval", str(start), "--task", "arith", "--splits", "test", "--n", "40", "task.n_ops=[1,2]",
                 "task.max_operand=9", "eval.k=4", "eval.n_sampled=10", "--out", str(out),
                 "--outcomes", str(tmp_path / "outcomes.json")])
    assert code == 0
    # the same checkpoint and settings as the run's own final evaluation give the same figures, problem by problem
    got = json.loads(out.read_text())["generator"]["test"]
    assert got["pass@1"] == results["generator"]["test"]["pass@1"] and "outcomes" not in got
    kept = json.loads((tmp_path / "outcomes.json").read_text())["test"]
    assert len(kept["correct"]) == 40 and kept["correct"].count("1") / 40 == got["pass@1"]
    capsys.readouterr()
    assert main(["plot", str(start), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "curves.png").stat().st_size > 10_000


def test_eval_with_a_verifier_reports_the_gaps(sft_run, warm_verifier, tmp_path, capsys):
    """`cotrain eval CKPT --verifier V`: the verifier judges the checkpoint's samples; eval.json and one
    line per split give its accuracy and the generation-verification gaps."""
    start, _ = sft_run
    out = tmp_path / "eval.json"
    code = main(["eval", str(start), "--task", "arith", "--splits", "test", "--n", "10", "--verifier", str(warm_verifier),
                 "task.n_ops=[1,2]", "task.max_operand=9", "eval.k=4", "eval.n_sampled=6", "train.bf16=false",
                 "--out", str(out)])
    assert code == 0
    m = json.loads(out.read_text())["verifier"]["test"]
    assert m["n"] == 24  # 6 problems x 4 samples
    assert m["gap/majority"] == pytest.approx(m["maj@4"] - m["mean@4"])
    assert m["gap/verifier"] == pytest.approx(m["precision"] - m["base_rate"] if m["approve_rate"] else 0.0)
    assert "test: gap/verifier" in capsys.readouterr().err


def test_eval_best_of_n_compares_verifiers_on_the_same_samples(sft_run, warm_verifier, tmp_path, capsys):
    """`--bon 1,2,4` with two verifiers (the warm verifier and the SFT start, which writes no verdicts):
    4 samples of each of 6 problems drawn once; at N = 1 every column is the random pick's mean
    correctness and the oracle equals it; the oracle never falls below a verifier's pick."""
    start, _ = sft_run
    out = tmp_path / "eval.json"
    code = main(["eval", str(start), "--task", "arith", "--splits", "test", "--n", "10", "--bon", "1,2,4",
                 "--verifier", f"warm={warm_verifier}", "--verifier", f"start={start}", "task.n_ops=[1,2]",
                 "task.max_operand=9", "eval.n_sampled=6", "verifier.max_new_tokens=40", "train.bf16=false", "--out", str(out)])
    assert code == 0
    study = json.loads(out.read_text())["best_of_n"]["test"]
    assert study["problems"] == 6 and study["samples"] == 4
    rows = {int(n): row for n, row in study["rows"].items()}
    one = rows[1]
    assert one["oracle"] == pytest.approx(one["random"]) and one["warm"] == pytest.approx(one["random"])
    assert all(rows[n]["oracle"] >= max(rows[n]["warm"], rows[n]["start"]) - 1e-12 for n in (1, 2, 4))
    assert "| N | oracle | random | majority | warm | start |" in capsys.readouterr().err
    assert main(["eval", str(start), "--task", "arith", "--bon", "1,x", "--verifier", str(warm_verifier)]) == 2
    assert "--bon takes sample counts" in capsys.readouterr().err


# The demo's arms at a test's size: decoding steps cost most here, so completions are short
DEMO_SMALL = ["train.steps=2", "train.batch_size=16", "train.n_problems=64", "grpo.group_size=4",
              "grpo.max_new_tokens=16", "verifier.solutions=4", "verifier.max_new_tokens=40", "cotraining.eval_n=8",
              "eval.n=8", "eval.k=2", "eval.n_sampled=4", "eval.every=2", "eval.n_during=8", "checkpoint.every=1",
              "log.progress=false", "log.tensorboard=false"]


def test_demo_contract(tmp_path, capsys, monkeypatch):
    """`cotrain demo --out DIR` runs grpo and tango into DIR/grpo and DIR/tango, both from the committed
    generator start and tango from the committed verifier, writes the demo's figure and prints one screen:
    both arms' pass@1, tango's co-trained verifier on the final generator's samples, and the documented
    multi-seed result read from the committed study; a second call reuses finished stages. Run from
    elsewhere than the repository, it still finds the starts through the package's checkout."""
    from cotrain.cli import demo_stages

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "demo"
    assert main(["demo", "--seed", "3", "--out", str(out), *DEMO_SMALL]) == 0
    starts = demo_stages()["starts"]
    for stage in ("grpo", "tango"):
        assert set(json.loads((out / stage / "eval.json").read_text())["generator"]) == {"test", "ood"}
        cfg = yaml.safe_load((out / stage / "config.yaml").read_text())
        assert cfg["seed"] == 3 and cfg["init"] == str(REPO / starts["generator"])
    assert yaml.safe_load((out / "tango" / "config.yaml").read_text())["verifier"]["init"] == str(REPO / starts["verifier"])
    assert (out / "demo.png").is_file() and (out / "curves.png").is_file() and (out / "report.html").is_file()
    printed = capsys.readouterr().out
    assert "demo results" in printed and "tango − grpo" in printed
    assert "tango's verifier co-trained, greedy verdicts on 8 of the final generator's samples" in printed
    assert "documented (results/sparse," in printed and "greedy pass@1 on test after 100 steps" in printed
    assert "documented (results/sparse_fp32," in printed and "tango_auto − grpo" in printed
    # the report opens with what the demo found: the comparison, its interval, the machine, the README's study
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.index('id="summary"') < html.index("<section class=") and 'id="summary-figure"' in html
    assert 'id="study-2-sparse"' in html  # the headline study the README quotes, not another
    from selenium.webdriver.common.by import By

    from tests.test_report import _browser

    browser = _browser()
    try:
        browser.get((out / "report.html").resolve().as_uri())
        first = browser.find_element(By.CSS_SELECTOR, "body > section")
        assert first.get_attribute("id") == "summary"
        items = [li.text for li in first.find_elements(By.TAG_NAME, "li")]
        assert items[0].startswith("Compared: grpo and tango from one committed start, seed 3, 2 generator steps")
        assert re.match(r"tango − grpo on test: [+-]\d+\.\d points \[[+-]\d+\.\d, [+-]\d+\.\d\]", items[1]), items
        assert any(i.startswith("documented over seeds (results/sparse): tango − grpo") for i in items), items
        assert "family/model" in items[0] and ("bf16 autocast" in items[0] or "fp32" in items[0])  # the machine
    finally:
        browser.quit()
    assert main(["demo", "--seed", "3", "--out", str(out), *DEMO_SMALL]) == 0
    assert "already finished" in capsys.readouterr().out
    # a checkout that carries the starts but not the studies (a GPU machine's copy): the demo's own results
    from cotrain import cli

    spec = cli.demo_stages()
    spec["starts"] = {**spec["starts"], "studies": ["results/sparse/starts", "no/such/study"]}
    monkeypatch.setattr(cli, "demo_stages", lambda: spec)
    assert main(["demo", "--seed", "3", "--out", str(out), *DEMO_SMALL]) == 0
    printed = capsys.readouterr().out
    assert "demo results" in printed and "documented (" not in printed


def test_the_demos_interval_pairs_the_runs_problem_by_problem_by_hand(tmp_path):
    """grpo right on the first 5 of 10 problems, tango on the first 6: +10 points. Paired problem by problem the
    differences are one 1 and nine 0s, sample variance (0.9^2 + 9 x 0.1^2) / 9 = 0.1, sd over sqrt(10) 0.1,
    half-width 1.96 x 0.1 = 0.196: [-9.6, +29.6]. Without the outcomes, as if the errors were unrelated:
    sqrt((0.25 + 0.24) / 10) = 0.2214, half-width 0.4339: [-33.4, +53.4]."""
    from cotrain.cli import _demo_findings

    for name, right in (("grpo", "1111100000"), ("tango", "1111110000")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "outcomes.json").write_text(json.dumps({"test": {"correct": right, "questions_sha256": "q"}}))
    acc = {"grpo": [0.5], "tango": [0.6]}
    line = _demo_findings(tmp_path / "tango", "grpo", "tango", acc, ["test"], 10, 2, 0)[1]
    assert line.startswith("tango − grpo on test: +10.0 points [-9.6, +29.6] (0.500 → 0.600): neither ahead")
    assert "paired problem by problem" in line
    (tmp_path / "grpo" / "outcomes.json").write_text(json.dumps({"test": {"correct": "1111100000", "questions_sha256": "r"}}))
    line = _demo_findings(tmp_path / "tango", "grpo", "tango", acc, ["test"], 10, 2, 0)[1]  # other problems: unpaired
    assert line.startswith("tango − grpo on test: +10.0 points [-33.4, +53.4]") and "paired" not in line


def test_demo_without_its_starts_says_how_to_make_them(tmp_path, monkeypatch, capsys):
    """Where the committed starts cannot be found (an installed package, elsewhere), one line names them and
    the option that makes them, exit code 2."""
    from cotrain import cli

    spec = cli.demo_stages()
    spec["starts"] = {**spec["starts"], "generator": "no/such/start"}
    monkeypatch.setattr(cli, "demo_stages", lambda: spec)
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no/such/start" in err[0] and "--from-scratch" in err[0]


@pytest.mark.heavy  # kept out of make test's 10 minutes on the slowest 2-core kind: make test-heavy
def test_demo_from_scratch_makes_its_starts(tmp_path, monkeypatch, capsys):
    """`--from-scratch` runs SFT, then the verifier's warm-up (a tango run without generator steps), then
    the arms from the checkpoints the spec names in that directory; the committed study is not quoted."""
    from cotrain import cli

    spec = cli.demo_stages()
    prep = spec["prepare"]
    prep["warm"]["init_from"] = prep["generator"] = "sft/checkpoints/step_1/generator"
    prep["warm"]["verifier_from"] = "sft/checkpoints/step_2/generator"
    small = {"eval": {"n": 8, "k": 2, "n_sampled": 4, "n_during": 8, "every": 2}, "log": {"progress": False},
             "tango": {"eval_n": 8}}
    prep["sft"].update(small, model={"preset": "nano"}, grpo={"max_new_tokens": 8}, checkpoint={"every": 1},
                       train={"steps": 2, "batch_size": 8, "n_problems": 64})
    prep["warm"].update(small, train={"steps": 0, "batch_size": 8, "n_problems": 64}, grpo={"max_new_tokens": 8})
    prep["warm"]["verifier"].update(warmup_sft_steps=2, warmup_samples=8, warmup_batch_size=4, solutions=4,
                                    max_new_tokens=16)
    monkeypatch.setattr(cli, "demo_stages", lambda: spec)
    out = tmp_path / "demo"
    assert main(["demo", "--from-scratch", "--out", str(out), *DEMO_SMALL]) == 0
    assert yaml.safe_load((out / "grpo" / "config.yaml").read_text())["init"] == str(out / prep["generator"])
    assert yaml.safe_load((out / "tango" / "config.yaml").read_text())["verifier"]["init"] == str(out / "warm/final/verifier")
    printed = capsys.readouterr().out
    assert "demo results" in printed and "documented" not in printed


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    from cotrain import registry
    from cotrain.config import load_config

    recipe = load_config(path).recipe
    assert recipe in registry.RECIPES
    assert callable(registry.load(recipe).run)


def test_embedded_demo_stages_validate():
    from cotrain.cli import demo_stages
    from cotrain.config import build_config

    spec = demo_stages()
    raws = [raw for part in ("prepare", "stages") for raw in spec[part].values() if isinstance(raw, dict)]
    stages = [{k: v for k, v in raw.items() if k not in ("init_from", "verifier_from")} for raw in raws]
    assert [build_config(raw).recipe for raw in stages] == ["sft", "tango", "grpo", "tango"]
    starts = spec["starts"]  # the committed starts and the studies quoted beside the demo
    assert all((REPO / path).exists() for path in [starts["generator"], starts["verifier"], *starts["studies"]])


def test_smoke_config_runs_and_resumes(tmp_path):
    args = ["run", str(REPO / "configs" / "smoke.yaml"), "--out", str(tmp_path), "train.steps=3",
            "checkpoint.every=2", "eval.n=8", "eval.n_during=8", "eval.every=2", "log.progress=false"]
    assert main(args) == 0
    assert main(args + ["--resume"]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["generator"].keys() == {"test", "ood"}


SMOKE_CONFIGS = sorted((REPO / "configs").glob("*_smoke.yaml"))


@pytest.mark.heavy
@pytest.mark.parametrize("path", SMOKE_CONFIGS, ids=lambda p: p.stem)
def test_every_recipe_smoke_config_runs_to_eval_json_and_resumes(path, tmp_path):
    """Each recipe's shipped smoke config, as shipped, runs to its eval.json; `--resume` of the finished
    run leaves it as it was (make test-heavy: up to two minutes each on a 2-core CPU)."""
    args = ["run", str(path), "--out", str(tmp_path / "run"), "log.progress=false"]
    assert main(args) == 0
    done = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert done["generator"]["test"]["n"] > 0
    assert main(args + ["--resume"]) == 0
    assert json.loads((tmp_path / "run" / "eval.json").read_text()) == done


def test_the_cli_explains_itself(capsys):
    """`--version` prints the package's version; a bare `cotrain` prints the help (exit 0); a missing
    argument names only what is missing; every subcommand's every argument has a line of help; `run` and
    `check` lead to the config keys, `sweep --help` holds the sweep format; `cotrain keys` lists a section's
    keys with defaults and descriptions and refuses a section it does not have in one line."""
    import argparse
    from importlib.metadata import version

    from cotrain.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"cotrain {version('cotrain')}"
    assert main([]) == 0 and "COMMAND" in capsys.readouterr().out
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert "required: config " in err and "overrides" not in err and "key.sub" not in err
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {a.dest}" for name, p in sub.choices.items() for a in p._actions
            if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not bare, bare
    assert "cotrain keys" in sub.choices["run"].format_help() and "cotrain keys" in sub.choices["check"].format_help()
    assert "named arms" in sub.choices["sweep"].format_help().replace("\n", " ")
    assert main(["keys", "tango"]) == 0
    out = capsys.readouterr().out
    assert "cotraining.credit = 'to_go'" in out and "process advantage" in out and "grpo." not in out
    assert main(["keys", "tang"]) == 2 and "did you mean 'tango'" in capsys.readouterr().err


def test_eval_reads_the_task_from_the_run_and_resume_of_a_finished_run_does_nothing(tmp_path, capsys):
    """`cotrain eval RUN` without --task evaluates on the task (and options) the run recorded, in its evaluation
    settings; `--resume` on a finished run prints its results and returns at once, evaluating nothing again."""
    import time

    raw = nano_config("sft", train={"steps": 2, "batch_size": 8}, eval={"splits": ["test"], "n": 8, "k": 0},
                      checkpoint={"every": 0})
    cfg = _write(tmp_path, raw)
    assert main(["run", cfg, "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    before = (tmp_path / "run" / "eval.json").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert main(["run", cfg, "--out", str(tmp_path / "run"), "--resume"]) == 0
    assert time.perf_counter() - t0 < 5 and (tmp_path / "run" / "eval.json").stat().st_mtime_ns == before
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "run" / "final" / "generator"), "--n", "8", "eval.k=0"]) == 0
    assert json.loads(capsys.readouterr().out)["generator"]["test"]["n"] == 8
    # without flags, as the run evaluates (its splits, n 8, no samples: k 0), not by the defaults (test and ood, 500, k 8)
    assert main(["eval", str(tmp_path / "run")]) == 0
    got = json.loads(capsys.readouterr().out)["generator"]
    assert list(got) == ["test"] and got["test"]["n"] == 8 and "pass@8" not in got["test"] and "maj@8" not in got["test"]
    assert got["test"]["pass@1"] == json.loads((tmp_path / "run" / "eval.json").read_text())["generator"]["test"]["pass@1"]
    assert main(["eval", str(tmp_path), "--n", "8"]) == 2 and "pass --task" in capsys.readouterr().err


def test_what_a_run_will_cost_by_hand(capsys):
    """A step's rollout of 2 s taken as 2/3 of a step: 3 s a step, 180 s for 60 steps. One trained model of
    100 parameters: a checkpoint holds 400 bytes of weights and 800 of AdamW's two fp32 states, 1,200;
    with one kept and the final model's 400, 1,600 on disk. 60 steps x 4 prompts over 15 problems: 16
    passes. `cotrain check` prints these lines.

    Its evaluation (eval every 20 steps of 60, n_during 10, at_start: 4 x 10 = 40 during; test holds 50 problems
    and ood 30, n 40, k 4 of n_sampled 20: test 40 + 80, ood 30 + 80, 230 final; larger_n 50: 50 + 30 = 80) at
    the rollout's 2 s for 4 prompts x G 2 = 8 sequences of 64 tokens, evaluated with 32: 0.125 s a sequence,
    350 x 0.125 = 43.75 s, 10 s of it the larger evaluation's. With n_sampled 60 over n 40, k samples the 40
    problems evaluated (40 + 160, 30 + 120); at_start with no evaluation in training is one during (10)."""
    from cotrain.preflight import cost_line, eval_sequences, evaluation_pace, run_cost
    from cotrain.config import EvalConfig

    ev = EvalConfig(every=20, n_during=10, at_start=True, n=40, k=4, n_sampled=20, larger_n=50)
    held = {"test": 50, "ood": 30}
    assert eval_sequences(ev, 60, held) == {"during": 40, "final": 230, "larger": 80}
    assert eval_sequences(EvalConfig(n=40, k=4, n_sampled=60, n_during=10, at_start=True), 60, held) == {
        "during": 10, "final": 350, "larger": 0}
    assert eval_sequences(EvalConfig(n=40, k=1), 60, {"test": 50}) == {"during": 0, "final": 40, "larger": 0}
    # an 8-problem test split evaluated every 20 steps with n_during 300: 8 a time, not 300 (4 x 8 = 32)
    assert eval_sequences(EvalConfig(every=20, n_during=300, at_start=True, n=500, k=1), 60, {"test": 8})["during"] == 32
    assert evaluation_pace(2.0, 8, 64, 32) == pytest.approx(0.125)
    cost = run_cost(2.0, 60, 4, 15, 1, {"generator": {"parameters": 100, "trainable": 100}},
                    eval_sequences(ev, 60, held), 0.125)
    assert cost == pytest.approx({"step_s": 3.0, "total_s": 180.0, "checkpoint_bytes": 1200.0, "disk_bytes": 1600.0,
                                  "epochs": 16.0, "eval_s": 43.75, "larger_s": 10.0})
    line = cost_line(cost, 60, 4)
    assert "about 3 s a step" in line and "3 min for 60 steps" in line and "16 passes over the training" in line
    assert "evaluation about 44 s more (10 s of it eval.larger_n's)" in line
    repo = Path(__file__).resolve().parents[1]
    assert main(["check", str(repo / "configs" / "smoke.yaml"), "model.preset=nano", "--prompts", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"cost      about [\d.]+ (s|min|h) a step .* for 20 steps", out), out
    assert re.search(r"disk: [\d.]+ MiB a checkpoint", out), out


def test_keys_heads_each_section_with_whole_sentences_and_recipes_in_plain_words(capsys):
    """`cotrain keys`: each section's header is its whole first paragraph, ending a sentence; `cotrain recipes`:
    no summary points at the plan's numbering."""
    from cotrain.cli import main

    assert main(["keys"]) == 0
    out = capsys.readouterr().out
    blocks = out.split("\n\n[")[1:]
    assert len(blocks) >= 20
    for block in blocks:
        head = block.split("\n" + block.split("]")[0] + ".")[0]  # the lines before the section's first key
        assert head.rstrip().endswith("."), head
    assert main(["recipes"]) == 0
    listing = capsys.readouterr().out
    assert "experiment" not in listing and "research" not in listing, listing


def test_a_run_is_evaluated_and_resumed_from_another_directory(tmp_path, monkeypatch):
    """A run started in one directory with data paths relative to it: `cotrain eval` and `--resume` from another
    directory find its files (config.yaml keeps the paths as typed, env.json the directory they are relative to)."""
    from cotrain.cli import main, rebase_paths

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    rows = "".join(f'{{"question": "{a}+{b}", "answer": "{a + b}"}}\n' for a in range(4) for b in range(4))
    (home / "train.jsonl").write_text(rows), (home / "test.jsonl").write_text(rows)
    smoke = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")
    small = ["task={name: jsonl, splits: {train: train.jsonl, test: test.jsonl}}", "model.preset=nano", "train.steps=2",
             "train.n_problems=16", "eval.n=4", "eval.k=0", "eval.every=0", "eval.splits=[test]", "checkpoint.every=1",
             "log.plots=false"]
    monkeypatch.chdir(home)
    assert main(["run", smoke, *small, "--out", "run"]) == 0
    monkeypatch.chdir(elsewhere)
    assert main(["eval", str(home / "run"), "--n", "4", "--out", "again.json"]) == 0
    assert json.loads((elsewhere / "again.json").read_text())["generator"]["test"]["n"] == 4
    (home / "run" / "eval.json").unlink()
    assert main(["run", str(home / "run" / "config.yaml"), "train.steps=3", "--out", str(home / "run"), "--resume"]) == 0
    assert json.loads((home / "run" / "eval.json").read_text())["generator"]["test"]["n"] == 4
    steps = [json.loads(line)["step"] for line in (home / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 3 and steps.count(1) == 1, steps  # resumed at step 3, steps 1-2 not run again
    # the pure part: only a relative path that names something there is rebased
    raw = {"init": "missing/dir", "model": {"path": "org/hub-model"}, "task": {"splits": {"train": "train.jsonl",
           "test": {"path": "test.jsonl"}, "ood": "data:x.jsonl"}}}
    out = rebase_paths(raw, home)
    assert out["task"]["splits"] == {"train": str(home / "train.jsonl"), "test": {"path": str(home / "test.jsonl")},
                                     "ood": "data:x.jsonl"}
    assert out["init"] == "missing/dir" and out["model"]["path"] == "org/hub-model" and raw["task"]["splits"]["train"] == "train.jsonl"


def test_results_print_rates_to_three_places_and_flops_as_powers_of_ten(capsys):
    from cotrain.cli import _print_results

    _print_results("r", {"generator": {"test": {"pass@1": 0.4375, "n": 16}},
                         "compute": {"gen": {"flops": 27404722176.0}}})
    assert capsys.readouterr().out.splitlines() == ["r  generator/test: pass@1=0.438", "r  compute/gen: flops=2.7e10"]
    from cotrain.cli import _number

    assert _number(61678485504.0) == "6.2e10" and _number(62e6) == "6.2e7" and _number(0.0625) == "0.062"


def test_an_out_that_holds_a_run_is_one_sentence_before_anything_loads(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints" / "step_1").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    assert main(["run", str(REPO / "configs" / "smoke.yaml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"cotrain: error: run directory {out} already holds a run: pass --resume to continue it, or choose another --out"
