"""Alarms while training (runs/alarms.py): each rule against rows worked out by hand, once a run, and
the plumbing through log_step, metrics.jsonl and a resume."""
import json

from cotrain.config import AlarmConfig, build_config
from cotrain.runs.alarms import alarms_due

W2 = AlarmConfig(window=2)


def _fire(rows, settings=W2, label_free=False):
    """Feed the rows one by one as log_step does; {step index: [names fired there]}."""
    history, out = [], {}
    for i, row in enumerate(rows):
        history.append(dict(row))
        due = alarms_due(history, settings, label_free)
        for name in due:
            history[-1][f"alarm/{name}"] = 1.0
        if due:
            out[i] = sorted(due)
    return out


def test_reward_hacking_fires_once_when_the_gap_s_mean_passes_the_threshold():
    """Gaps 0.1, 0.3, 0.3, 0.4: the means of two are 0.2 (not above 0.2), 0.3 (above: fires), 0.35 (fired)."""
    assert _fire([{"cotrain/hack_gap": g} for g in (0.1, 0.3, 0.3, 0.4)]) == {2: ["reward_hacking"]}


def test_collapse_waits_for_two_windows_and_compares_with_the_start():
    """Entropy 1, 1, 0.2, 0.2: at the fourth row the last two average 0.2 < 0.25 · 1. Length 10, 10, 5, 5:
    5 is not under 2.5."""
    rows = [{"gen/entropy": e, "gen/len_mean": n} for e, n in ((1, 10), (1, 10), (0.2, 5), (0.2, 5))]
    assert _fire(rows) == {3: ["entropy_collapse"]}


def test_a_verifier_at_chance_and_a_drifting_judge():
    """Balanced accuracy 0.9, 0.52, 0.49: the last two average 0.505, within 0.05 of chance. Judge
    agreement 0.9, 0.9, 0.6, 0.6: 0.6 < 0.9 − 0.2; in a label-free run the message says it is ground truth."""
    assert _fire([{"ver/balanced_acc": b} for b in (0.9, 0.52, 0.49)]) == {2: ["verifier_at_chance"]}
    history = [{"gt/judge_agree": a} for a in (0.9, 0.9, 0.6, 0.6)]
    due = alarms_due(history, W2, label_free=True)
    assert list(due) == ["judge_drift"] and due["judge_drift"].endswith("(ground truth: shown, never trained on)")
    assert alarms_due(history, AlarmConfig(window=2, enabled=False)) == {}


def test_a_verifier_that_writes_no_verdict():
    """Format rates 0.5, 0.1, 0.05: the last two average 0.075 < 0.1; 0.5 and 0.1 average 0.3, no alarm."""
    assert _fire([{"ver/format": f} for f in (0.5, 0.1, 0.05)]) == {2: ["verifier_silent"]}
    assert _fire([{"ver/format": f} for f in (0.5, 0.1, 0.3)]) == {}


def test_accuracy_dropping_over_the_in_training_evaluations():
    """Evaluations 0.38, 0.40, 0.33, 0.27, 0.21 (reliability without its safeguard, rounded), one every
    other row: the first two average 0.39; the last two 0.30 at the fourth (not below 0.29), 0.24 at the
    fifth (below: fires there). Rows without an evaluation count for nothing; 0.38, 0.40, 0.35, 0.36 never
    fire; in a label-free run the message says it reads ground truth."""
    rows = []
    for acc in (0.38, 0.40, 0.33, 0.27, 0.21):
        rows += [{"gen/loss": 1.0}, {"eval/test/pass@1": acc}]
    assert _fire(rows) == {9: ["accuracy_drop"]}
    assert _fire([{"eval/test/pass@1": a} for a in (0.38, 0.40, 0.35, 0.36)]) == {}
    due = alarms_due([{"eval/test/pass@1": a} for a in (0.38, 0.40, 0.27, 0.21)], W2, label_free=True)
    assert list(due) == ["accuracy_drop"] and due["accuracy_drop"].endswith("(ground truth: shown, never trained on)")


def test_samples_stopping_early_more_and_more():
    """Early-stop shares 0.0, 0.1, 0.2, 0.35: the first two average 0.05, the last two 0.275 > 0.05 + 0.2:
    fires at the fourth row. 0.0, 0.1, 0.2, 0.2 (0.2 is not above 0.25) never fires."""
    assert _fire([{"gen/early_stop": x} for x in (0.0, 0.1, 0.2, 0.35)]) == {3: ["early_stopping"]}
    assert _fire([{"gen/early_stop": x} for x in (0.0, 0.1, 0.2, 0.2)]) == {}


def test_log_step_writes_the_alarm_once_prints_it_and_a_resume_does_not_raise_it_again(tmp_path, capsys):
    from cotrain.runs.rundir import MetricsLogger, Progress
    from cotrain.runs.session import Session, _alarm_history, log_step

    cfg = build_config({"recipe": "tango", "train": {"steps": 4}, "alarms": {"window": 1, "hack_gap": 0.1},
                        "log": {"progress": False, "tensorboard": False}})
    session = Session(cfg.run_settings(), tmp_path, MetricsLogger(tmp_path, tensorboard=False), Progress(4, enabled=False), 0)
    for step, gap in ((1, 0.0), (2, 0.5), (3, 0.6)):
        log_step(session, step, {"cotrain/hack_gap": gap}, {})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("alarm/reward_hacking") for r in rows] == [None, 1.0, None]
    assert capsys.readouterr().err.count("alarm at step 2: reward hacking") == 1
    resumed = Session(cfg.run_settings(), tmp_path, MetricsLogger(tmp_path, tensorboard=False, resume_step=3),
                      Progress(4, enabled=False), 3,
                      history=_alarm_history(tmp_path / "metrics.jsonl"))
    log_step(resumed, 4, {"cotrain/hack_gap": 0.7}, {})
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 4 and "alarm/reward_hacking" not in last and "alarm" not in capsys.readouterr().err


def test_a_results_directory_s_alarms_are_replayed_from_its_runs_rows(tmp_path):
    """A study with one arm whose hacking gap rises to 0.3 from step 6 and one that stays healthy: the
    replay finds reward_hacking at step 9, the first whose last 5 values average above 0.2 (step 8:
    (0.3 * 3 + 0.05 * 2) / 5 = 0.2, not above; step 9: (0.3 * 4 + 0.05) / 5 = 0.25), in seed 0 of tango."""
    import gzip

    from cotrain.runs.alarms import alarm_table, replay_alarms

    def run(path, gaps):
        path.mkdir(parents=True)
        (path / "eval.json").write_text("{}")
        (path / "config.yaml").write_text("recipe: tango\n")
        with gzip.open(path / "metrics.jsonl.gz", "wt") as f:
            f.writelines(json.dumps({"step": i + 1, "cotrain/hack_gap": g}) + "\n" for i, g in enumerate(gaps))
    run(tmp_path / "study" / "tango" / "seed0", [0.05] * 5 + [0.3] * 10)
    run(tmp_path / "study" / "grpo" / "seed0", [0.0] * 15)
    assert replay_alarms(tmp_path / "study" / "tango" / "seed0") == [(9, "reward_hacking")]
    table = alarm_table(tmp_path)
    assert "| study | tango | reward_hacking | 0 (9) |" in table and "No alarm fired in: study/grpo." in table


def test_the_progress_line_shows_the_recipe_s_figures_and_the_latest_test_pass1_within_120_columns(tmp_path, capsys):
    """A tango step's metrics carry every evaluation figure (pass@k, intervals, ood): the line shows the two the
    recipe chose and the test split's greedy pass@1, which stays shown until the next evaluation."""
    from cotrain.runs.rundir import MetricsLogger, Progress
    from cotrain.runs.session import Session, log_step

    cfg = build_config({"recipe": "tango", "train": {"steps": 1000}, "log": {"progress": True, "tensorboard": False}})
    progress = Progress(1000, enabled=True, desc="tango")
    progress.tty = False
    session = Session(cfg.run_settings(), tmp_path, MetricsLogger(tmp_path, tensorboard=False), progress, 0)
    evals = {f"eval/{split}/{m}": 0.123456 for split in ("test", "ood") for m in
             ("pass@1", "pass@1_ci95_lo", "pass@1_ci95_hi", "pass@8", "maj@8", "pass@1_sampled", "mean_len")}
    log_step(session, 100, {"gen/reward": 0.0625, **evals}, {"reward": 0.0625, "agree": 0.75})
    progress.last_print = 0.0
    log_step(session, 101, {"gen/reward": 0.125}, {"reward": 0.125, "agree": 0.5})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(len(line) <= 120 for line in lines), lines
    assert lines[0].endswith("reward=0.0625 agree=0.75 test/pass@1=0.123"), lines[0]
    assert lines[1].endswith("reward=0.125 agree=0.5 test/pass@1=0.123"), lines[1]
    assert Progress.WIDTH == 120
    long = Progress(10, desc="x" * 200)
    long.tty = False
    long.update(1)
    assert len(capsys.readouterr().err.rstrip("\n")) == 120
