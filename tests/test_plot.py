"""Tests of cotrain.analysis.plot on synthetic run directories (no training needed)."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from cotrain.analysis.plot import _run_names, load_eval, load_metrics, moving_average, plot_runs, read_recipe

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N_STEPS = 60


def _row(step: int, rng: np.random.Generator, roles=("gen", "ver")) -> dict:
    row = {"step": step, "time": 12.3 * step, "time/step": 12.3, "tokens/gen": 4000 + step}
    for role in roles:
        acc = min(1.0, 0.2 + step / N_STEPS * 0.6 + rng.normal(0, 0.05))
        row |= {f"{role}/reward": acc, f"{role}/acc": acc, f"{role}/kl": 0.001 * step,
                f"{role}/entropy": 1.5 - step / N_STEPS, f"{role}/len_mean": 30 + step / 2,
                f"{role}/loss": 0.05 * rng.normal()}
    if step % 10 == 0:
        row |= {"eval/test/pass@1": 0.3 + step / 200, "eval/ood/pass@1": 0.2 + step / 300}
    return row


def _write_run(run_dir: Path, rows: list[dict], tail: str = "", recipe: str | None = None) -> Path:
    run_dir.mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) + tail
    (run_dir / "metrics.jsonl").write_text(text)
    if recipe:
        (run_dir / "config.yaml").write_text(f"recipe: {recipe}\nlr: [1e-5\n")  # not valid YAML on purpose
    return run_dir


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    """Run a: 60 full steps plus a truncated 61st line, an eval.json. Run b: 60 steps, gen role only,
    some keys missing or null, a NaN, no eval.json."""
    rng = np.random.default_rng(0)
    rows_a = [_row(s, rng) for s in range(1, N_STEPS + 1)]
    truncated = json.dumps(_row(N_STEPS + 1, rng))[:40]  # a run killed mid-write
    a = _write_run(tmp_path / "a", rows_a, tail=truncated, recipe="grpo")
    (a / "eval.json").write_text(json.dumps({
        "generator": {"test": {"pass@1": 0.61, "pass@8": 0.8, "maj@8": 0.7}, "ood": {"pass@1": 0.42}}}))

    rows_b = [_row(s, rng, roles=("gen",)) for s in range(1, N_STEPS + 1)]
    for row in rows_b[::7]:
        del row["gen/kl"]
    rows_b[3]["gen/reward"] = None
    rows_b[4]["gen/acc"] = float("nan")  # json.dumps writes NaN, which json.loads reads back
    b = _write_run(tmp_path / "b", rows_b, recipe="sft")
    return [a, b]


def _assert_png(path: Path) -> None:
    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert path.stat().st_size > 20_000, f"{path} is suspiciously small ({path.stat().st_size} bytes)"


def test_load_metrics_skips_truncated_line(two_runs):
    rows = load_metrics(two_runs[0])
    assert len(rows) == N_STEPS  # the 61st, truncated line is dropped
    assert rows[-1]["step"] == N_STEPS


def test_load_metrics_skips_junk_and_missing_file(tmp_path):
    run = _write_run(tmp_path / "r", [{"step": 1, "gen/acc": 0.5}], tail='[1, 2]\nnot json\n\n{"step": 2}\n')
    assert [r["step"] for r in load_metrics(run)] == [1, 2]  # a JSON list is not a row either
    assert load_metrics(tmp_path / "missing") == []


def test_plot_runs_writes_pngs(two_runs, tmp_path):
    paths = plot_runs(two_runs)
    assert paths == [tmp_path / "curves.png", tmp_path / "eval.png"]  # default: the common parent
    for path in paths:
        _assert_png(path)


def test_plot_runs_single_run_defaults_to_its_dir_and_skips_eval_without_eval_json(two_runs, tmp_path):
    paths = plot_runs([two_runs[1]], smooth=1)
    assert paths == [two_runs[1] / "curves.png"]
    _assert_png(paths[0])


def test_plot_runs_explicit_out_dir_and_window(two_runs, tmp_path):
    out = tmp_path / "plots" / "here"
    paths = plot_runs(two_runs, out_dir=out, smooth=5)
    assert {p.name for p in paths} == {"curves.png", "eval.png"}
    assert all(p.parent == out for p in paths)


def test_plot_runs_empty_run_is_skipped_with_warning(two_runs, tmp_path, caplog):
    empty = _write_run(tmp_path / "empty", [])
    with caplog.at_level(logging.WARNING, logger="cotrain.analysis.plot"):
        paths = plot_runs([*two_runs, empty])
    _assert_png(paths[0])
    assert any("empty" in r.getMessage() for r in caplog.records)


def test_plot_runs_raises_when_no_run_has_data(tmp_path):
    empty = _write_run(tmp_path / "empty", [], tail='{"step": 1, "gen/acc"')  # only a truncated line
    only_time = _write_run(tmp_path / "only_time", [{"step": 1, "time": 1.0, "gen/acc": None}])
    with pytest.raises(ValueError, match="no metrics to plot in: .*empty.*only_time"):
        plot_runs([empty, only_time, tmp_path / "missing"])
    with pytest.raises(ValueError, match="at least one"):
        plot_runs([])
    with pytest.raises(ValueError, match="smooth"):
        plot_runs([empty], smooth=-1)


def test_moving_average_by_hand():
    """window 3 is centered (one point each side); at the ends it averages the points that exist:
    [1, 2, 3, 4, 10] -> [(1+2)/2, (1+2+3)/3, (2+3+4)/3, (3+4+10)/3, (4+10)/2] = [1.5, 2, 3, 17/3, 7].
    window 2 takes the point and the next one: [1.5, 2.5, 3.5, 7, 10]."""
    y = np.array([1, 2, 3, 4, 10])
    np.testing.assert_allclose(moving_average(y, 3), [1.5, 2, 3, 17 / 3, 7])
    np.testing.assert_allclose(moving_average(y, 2), [1.5, 2.5, 3.5, 7, 10])
    np.testing.assert_allclose(moving_average(y, 1), y)
    np.testing.assert_allclose(moving_average(y, 100), [4] * 5)  # window wider than the data: the mean


def test_run_names_disambiguate_shared_basenames(tmp_path):
    dirs = [tmp_path / "sft" / "seed0", tmp_path / "grpo" / "seed0", tmp_path / "grpo" / "other"]
    assert _run_names(dirs) == ["sft/seed0", "grpo/seed0", "other"]


def test_read_recipe_without_parsing_yaml(two_runs, tmp_path):
    assert read_recipe(two_runs[0]) == "grpo"  # its config.yaml is not valid YAML
    assert read_recipe(tmp_path) is None
    (tmp_path / "config.yaml").write_text("model:\n  recipe: nested\nrecipe: 'sft'  # comment\n")
    assert read_recipe(tmp_path) == "sft"


def test_load_eval_flattens_splits(two_runs, tmp_path):
    evals = load_eval(two_runs[0])
    assert evals[("test", "pass@1")] == 0.61 and evals[("ood", "pass@1")] == 0.42
    assert set(evals) == {("test", "pass@1"), ("test", "pass@8"), ("test", "maj@8"), ("ood", "pass@1")}
    (tmp_path / "eval.json").write_text('{"generator": {"test": {"pass@1": 0.5, "n": 100')  # truncated
    assert load_eval(tmp_path) == {}
    assert not any(math.isnan(v) for v in evals.values())


# ----------------------------------------------------------------------------- co-training figure

# A tango run: the verifier trains on even steps (ver/* keys only there), evals every 4 steps, the last line
# cut off by a kill. The generator and the verifier improve together and the hacking gap closes.
TANGO_ROWS = [
    {"step": 1, "gen/acc": 0.30, "cotrain/agree": 0.55, "cotrain/agree_balanced": 0.50, "cotrain/hack_gap": 0.25},
    {"step": 2, "gen/acc": 0.32, "cotrain/agree": 0.60, "cotrain/agree_balanced": 0.56, "cotrain/hack_gap": 0.20,
     "ver/acc": 0.60, "ver/reward": 0.95, "ver/format": 0.70, "ver/approve_rate": 0.52},
    {"step": 3, "gen/acc": 0.38, "cotrain/agree": 0.62, "cotrain/hack_gap": 0.18},  # agree_balanced missing
    {"step": 4, "gen/acc": 0.41, "cotrain/agree": 0.66, "cotrain/agree_balanced": 0.63, "cotrain/hack_gap": 0.12,
     "ver/acc": 0.66, "ver/reward": 1.05, "ver/format": 0.80, "ver/approve_rate": 0.53,
     "eval/test/pass@1": 0.35, "eval/verifier/accuracy": 0.64},
    {"step": 5, "gen/acc": 0.47, "cotrain/agree": None, "cotrain/hack_gap": 0.10},  # a null
    {"step": 6, "gen/acc": 0.50, "cotrain/agree": 0.72, "cotrain/agree_balanced": 0.70, "cotrain/hack_gap": 0.06,
     "ver/acc": 0.72, "ver/reward": 1.15, "ver/format": 0.90, "ver/approve_rate": 0.56},
    {"step": 7, "gen/acc": 0.55, "cotrain/agree": 0.75, "cotrain/agree_balanced": 0.74, "cotrain/hack_gap": 0.04},
    {"step": 8, "gen/acc": 0.58, "cotrain/agree": 0.78, "cotrain/agree_balanced": 0.77, "cotrain/hack_gap": 0.02,
     "ver/acc": 0.78, "ver/reward": 1.25, "ver/format": 0.95, "ver/approve_rate": 0.60,
     "eval/test/pass@1": 0.52, "eval/verifier/accuracy": 0.75},
]
# A frozen-verifier run: no ver/* training keys; agreement stalls while the generator learns to fool the
# verifier, so the gap grows. Its verifier eval is missing at step 4.
FROZEN_ROWS = [
    {"step": 1, "gen/acc": 0.30, "cotrain/agree": 0.55, "cotrain/hack_gap": 0.25},
    {"step": 2, "gen/acc": 0.33, "cotrain/agree": 0.55, "cotrain/hack_gap": 0.28},
    {"step": 3, "gen/acc": 0.35, "cotrain/hack_gap": 0.31},  # agree missing
    {"step": 4, "gen/acc": 0.36, "cotrain/agree": 0.53, "cotrain/hack_gap": 0.35, "eval/test/pass@1": 0.31},
    {"step": 5, "gen/acc": 0.36, "cotrain/agree": 0.52, "cotrain/hack_gap": float("nan")},
    {"step": 6, "gen/acc": 0.37, "cotrain/agree": 0.50, "cotrain/hack_gap": 0.41},
    {"step": 7, "cotrain/agree": 0.49, "cotrain/hack_gap": 0.44},  # gen/acc missing
    {"step": 8, "gen/acc": 0.37, "cotrain/agree": 0.48, "cotrain/hack_gap": 0.47,
     "eval/test/pass@1": 0.33, "eval/verifier/accuracy": 0.55},
]


@pytest.fixture
def cotrain_runs(tmp_path: Path) -> list[Path]:
    tango = _write_run(tmp_path / "tango", TANGO_ROWS, tail='{"step": 9, "gen/acc": 0.6, "cotr', recipe="tango")
    frozen = _write_run(tmp_path / "frozen_verifier", FROZEN_ROWS, tail='{"step": 9, "gen/a')
    return [tango, frozen]


@pytest.fixture
def figures(monkeypatch) -> dict[str, object]:
    """Records every figure plot_runs saves, by file name, so tests can look at the drawn lines."""
    import cotrain.analysis.plot as plot

    saved, save = {}, plot._save

    def record(fig, path):
        saved[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(plot, "_save", record)
    return saved


def test_plot_runs_writes_cotrain_png(cotrain_runs, tmp_path, figures):
    paths = plot_runs(cotrain_runs)
    assert paths == [tmp_path / "curves.png", tmp_path / "cotrain.png"]
    for path in paths:
        _assert_png(path)
    acc, gap = figures["cotrain.png"].axes
    assert acc.get_title() == "Generator and verifier accuracy"
    assert gap.get_title() == "Reward hacking gap and generation-verification gaps"
    # 8 points per curve: no automatic smoothing, one line per (run, key) present, plus the zero line
    # tango: gen/acc, agree, test pass@1, verifier accuracy; frozen: the same four
    assert len(acc.get_lines()) == 8
    assert len(gap.get_lines()) == 3
    # the truncated 9th line is dropped; the null and NaN values are skipped
    tango_gen = acc.get_lines()[0]
    np.testing.assert_array_equal(tango_gen.get_xdata(), np.arange(1, 9))
    frozen_gap = gap.get_lines()[1]
    np.testing.assert_array_equal(frozen_gap.get_xdata(), [1, 2, 3, 4, 6, 7, 8])
    assert list(gap.get_lines()[2].get_ydata()) == [0, 0]  # axhline at 0


def test_plot_runs_cotrain_smooth_and_chain(cotrain_runs, tmp_path, figures):
    """smooth=3 draws a faint raw line under each smoothed training curve (evals stay raw); chain shifts
    the second run's steps to start after the first run's last step (8)."""
    plot_runs(cotrain_runs, smooth=3, chain=True)
    acc, gap = figures["cotrain.png"].axes
    # per run: 2 training curves x (raw + smoothed) + 2 evals = 6
    assert len(acc.get_lines()) == 12
    raw, smoothed = acc.get_lines()[:2]  # tango gen/acc
    np.testing.assert_allclose(smoothed.get_ydata(), moving_average(raw.get_ydata(), 3))
    frozen_gap_raw = gap.get_lines()[2]
    assert frozen_gap_raw.get_xdata()[0] == 8 + 1
    assert "moving average over 3" in figures["cotrain.png"].get_suptitle()


def test_plot_runs_without_cotrain_keys_writes_no_cotrain_png(two_runs, tmp_path):
    paths = plot_runs(two_runs)
    assert all(p.name != "cotrain.png" for p in paths)
    assert not (tmp_path / "cotrain.png").exists()


def test_cotrain_png_with_a_plain_baseline_run(cotrain_runs, two_runs, tmp_path, figures):
    """A run without cotrain keys next to a co-training run still shows in cotrain.png as a generator baseline."""
    paths = plot_runs([cotrain_runs[0], two_runs[1]], out_dir=tmp_path / "mixed")
    assert [p.name for p in paths] == ["curves.png", "cotrain.png"]
    acc, gap = figures["cotrain.png"].axes
    assert len(gap.get_lines()) == 2  # only tango has a hack gap, and the zero line
    # tango's 4; the baseline's gen/acc raw + smoothed (60 points: automatic window) and its eval pass@1
    assert len(acc.get_lines()) == 4 + 2 + 1


def test_cotrain_png_draws_the_generation_verification_gaps(tmp_path, figures):
    """gap/verifier (dashed) and gap/majority (dotted) share the right panel with the hacking gap (solid)."""
    rows = [{"step": s, "gen/acc": 0.5, "cotrain/agree": 0.6, "cotrain/hack_gap": 0.1, "gap/verifier": 0.02 * s,
             "gap/majority": -0.01 * s} for s in range(1, 5)]
    run = _write_run(tmp_path / "gaps", rows, recipe="tango")
    plot_runs([run])
    _, gap = figures["cotrain.png"].axes
    lines = gap.get_lines()
    assert [line.get_linestyle() for line in lines[:3]] == ["-", "--", ":"]
    np.testing.assert_allclose(lines[1].get_ydata(), [0.02, 0.04, 0.06, 0.08])
    np.testing.assert_allclose(lines[2].get_ydata(), [-0.01, -0.02, -0.03, -0.04])
    labels = [t.get_text() for t in figures["cotrain.png"].legends[0].get_texts()]
    assert any(label.startswith("gap/verifier") for label in labels)
    assert any(label.startswith("gap/majority") for label in labels)


def test_cotrain_keys_are_not_a_role(tmp_path, figures):
    """cotrain/* never makes a role in curves.png; ver/* does. A run with only cotrain keys is still plotted."""
    only_cotrain = _write_run(tmp_path / "only_cotrain", [{"step": s, "cotrain/acc": 0.5, "cotrain/reward": 0.1,
                                                           "cotrain/hack_gap": 0.1 * s} for s in range(1, 4)])
    assert plot_runs([only_cotrain]) == [only_cotrain / "cotrain.png"]
    _assert_png(only_cotrain / "cotrain.png")

    with_ver = _write_run(tmp_path / "with_ver", [{"step": s, "ver/acc": 0.5, "cotrain/acc": 0.4} for s in range(1, 4)])
    plot_runs([with_ver])
    legend = [t.get_text() for t in figures["curves.png"].legends[0].get_texts()]
    assert "role: ver" in legend and "role: cotrain" not in legend


def test_an_alarm_is_marked_on_every_panel_at_its_step(tmp_path, monkeypatch):
    """A run that logged `alarm/reward_hacking` at step 4: every curves.png panel gets a dotted line at 4."""
    from matplotlib.axes import Axes

    from cotrain.analysis import plot

    rows = [{"step": s, "gen/reward": 0.1 * s, "gen/entropy": 1.0} for s in range(1, 9)]
    rows[3]["alarm/reward_hacking"] = 1.0
    run = _write_run(tmp_path / "r", rows)
    lines = []
    original = Axes.axvline
    monkeypatch.setattr(Axes, "axvline", lambda self, x=0, *a, **k: lines.append(x) or original(self, x, *a, **k))
    plot.plot_runs([run])
    assert lines == [4.0, 4.0]  # the reward panel and the entropy panel


def test_eval_bars_are_the_generator_s_alone(tmp_path):
    """eval.png's categories are the generator's splits alone (a verifier's maj@k on the same samples would
    stand as empty categories beside them)."""
    import json

    from cotrain.analysis.plot import load_eval

    (tmp_path / "eval.json").write_text(json.dumps({
        "generator": {"test": {"pass@1": 0.15, "pass@8": 0.4}, "ood": {"pass@1": 0.05}},
        "verifier": {"test": {"maj@8": 0.3, "balanced_accuracy": 0.9}}}))
    assert load_eval(tmp_path) == {("test", "pass@1"): 0.15, ("test", "pass@8"): 0.4, ("ood", "pass@1"): 0.05}


def test_roles_ten_times_apart_share_a_panel_on_two_axes(tmp_path, monkeypatch):
    """A generator's loss near 0.01 and a verifier's near 1 (100 times apart) are drawn on two y axes of
    the loss panel (the verifier's on the right); losses of one scale share one axis."""
    from matplotlib.axes import Axes

    from cotrain.analysis import plot

    twins = []
    original = Axes.twinx
    monkeypatch.setattr(Axes, "twinx", lambda self: twins.append(self.get_title()) or original(self))
    rows = [{"step": s, "gen/loss": 0.01 + 0.001 * s, "ver/loss": 1.0 + 0.1 * s} for s in range(1, 9)]
    plot.plot_runs([_write_run(tmp_path / "apart", rows)])
    assert twins == ["Training loss"]
    rows = [{"step": s, "gen/loss": 0.5 + 0.01 * s, "ver/loss": 1.0 + 0.1 * s} for s in range(1, 9)]
    plot.plot_runs([_write_run(tmp_path / "close", rows)])
    assert twins == ["Training loss"]  # no second one
