"""results/<study>/: archiving runs and starts, and the study table and curves built from them, against
numbers worked out by hand."""
import gzip
import json

import pytest

from cotrain.lab.pairing import difference_rows, kinds_table, larger_table, resolution
from cotrain.lab.runs import build_start, load_study, mean_curve, steps_to_reach
from cotrain.lab.table import build_study, study_criteria
from cotrain.cli import main
from cotrain.runs.archive import archive_run
from cotrain.runs.rundir import write_jsonl_gz_atomic


def _fake_run(d, test, ood, curve, flops_per_step=1e9, warmup=0.0, alpha=None, config="recipe: grpo\n",
              sampled_per_step=None, agree=None):
    """A finished run directory: eval.json, a metrics.jsonl whose rows at steps 0, 10, 20 hold the
    in-training accuracy `curve`, cumulative FLOPs (warm-up, then flops_per_step a step) and, given
    `alpha` (a function of the step), gen/alpha at every step; given `sampled_per_step`, the cumulative
    tokens the generator sampled; given `agree` (a function of the step), gt/judge_agree at every step."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(config)
    (d / "env.json").write_text(json.dumps({"cpu": "AMD EPYC", "cpu_capability": "AVX512"}))
    (d / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": test}, "ood": {"pass@1": ood}}}))
    rows = [{"step": 0, "flops/total": warmup, "eval/test/pass@1": curve[0]}]
    for step in range(1, 21):
        row = {"step": step, "flops/total": warmup + step * flops_per_step}
        if alpha is not None:
            row["gen/alpha"] = alpha(step)
        if sampled_per_step is not None:
            row["tokens/gen_generated_total"] = step * sampled_per_step
        if agree is not None:
            row["gt/judge_agree"] = agree(step)
        if step % 10 == 0:
            row["eval/test/pass@1"] = curve[step // 10]
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_archive_keeps_results_gzipped_and_a_start_without_its_optimizer(tmp_path):
    run = _fake_run(tmp_path / "run", 0.5, 0.1, [0.1, 0.2, 0.3])
    model = run / "final" / "generator"
    model.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "optim.pt", "tokenizer.json"):
        (model / name).write_text(name)
    write_jsonl_gz_atomic(run / "verifications" / "verifier_test.jsonl.gz", [{"correct": True, "final": False}])
    (run / "outcomes.json").write_text('{"test": {"correct": "0110", "questions_sha256": "0123456789abcdef"}}')
    archive_run(run, tmp_path / "a", command="cotrain run x.yaml", model=model)
    archive_run(run, tmp_path / "b")
    kept = sorted(p.name for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert kept == ["COMMAND", "config.json", "config.yaml", "env.json", "eval.json", "metrics.jsonl.gz",
                    "model.safetensors", "outcomes.json", "tokenizer.json", "verifier_test.jsonl.gz"]
    assert (tmp_path / "a" / "outcomes.json").read_bytes() == (run / "outcomes.json").read_bytes()
    assert gzip.decompress((tmp_path / "a" / "verifications" / "verifier_test.jsonl.gz").read_bytes()) == (
        b'{"correct": true, "final": false}\n')
    assert gzip.decompress((tmp_path / "a" / "metrics.jsonl.gz").read_bytes()) == (run / "metrics.jsonl").read_bytes()
    # the same file gives the same bytes (no name or time in the gzip header)
    assert (tmp_path / "a" / "metrics.jsonl.gz").read_bytes() == (tmp_path / "b" / "metrics.jsonl.gz").read_bytes()


def test_archive_keeps_a_larger_evaluation_of_the_same_final_model_and_drops_one_of_another(tmp_path):
    run = _fake_run(tmp_path / "run", 0.5, 0.1, [0.1, 0.2, 0.3])
    (run / "larger").mkdir()
    for name in ("eval.json", "outcomes.json", "COMMAND"):
        (run / "larger" / name).write_text(name)
    archive_run(run, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a" / "larger").iterdir()) == ["COMMAND", "eval.json", "outcomes.json"]
    (run / "larger" / "COMMAND").unlink()  # a larger evaluation written again, with no COMMAND: none of the old stays
    archive_run(run, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a" / "larger").iterdir()) == ["eval.json", "outcomes.json"]
    for name in ("eval.json", "outcomes.json"):
        (run / "larger" / name).unlink()
    archive_run(run, tmp_path / "a")  # the same run archived again: its final model is the one evaluated
    assert (tmp_path / "a" / "larger" / "eval.json").read_text() == "eval.json"
    (run / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": 0.4}}}))
    archive_run(run, tmp_path / "a")  # another final evaluation: the larger one evaluated another model
    assert not (tmp_path / "a" / "larger").exists()


def test_archive_of_a_directory_that_is_no_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["archive", str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a run directory" in err[0]


def test_archive_of_an_unfinished_run_says_so(tmp_path, capsys):
    """A run still going (no eval.json) is kept as it stands, with one warning line: a study of it reads rows alone."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("recipe: grpo\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    assert main(["archive", str(run), str(tmp_path / "kept")]) == 0
    assert f"warning: {run} has no eval.json (not finished)" in capsys.readouterr().err
    assert (tmp_path / "kept" / "metrics.jsonl.gz").is_file() and not (tmp_path / "kept" / "eval.json").exists()


@pytest.mark.parametrize("name, content, said", [
    ("outcomes.json", b"[1, 0]", "must hold a JSON object"),
    ("outcomes.json", b'{"test": {"correct": "01", ', "is not JSON"),
    ("outcomes.json", b'{"test": "caf\xe9"}', "not UTF-8"),
    ("outcomes.json", b"[" * 100_000 + b"]" * 100_000, "is not JSON"),
    ("eval.json", b"", "is not JSON"),
    ("env.json", b'"x"', "must hold a JSON object"),
])
def test_a_study_with_an_unreadable_run_file_is_one_line_and_exit_2(tmp_path, capsys, name, content, said):
    _write_runs(tmp_path, [("grpo", 0, 0.2, "recipe: grpo\n", BF16)], 0.2)
    (tmp_path / "grpo" / "seed0" / name).write_bytes(content)
    assert main(["study", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and name in err[0], err


def test_steps_to_reach():
    assert steps_to_reach([0, 10, 20], [0.1, 0.3, 0.5], 0.3) == 10
    assert steps_to_reach([0, 10, 20], [0.1, 0.3, 0.5], 0.6) is None


def test_study_table_pairs_each_arm_with_grpo_by_seed(tmp_path):
    """grpo seeds 0-2 end at test 0.40, 0.50, 0.45; tango at 0.47, 0.56, 0.53: differences 7, 6, 8
    points, mean 7, sd 1, half-width 4.303 / sqrt(3) = 2.484 -> +7.0 [+4.5, +9.5]: minimum and good hold.
    ood: grpo 0.10, 0.10, 0.10, tango 0.11, 0.12, 0.10 -> +1.0 [-1.5, +3.5]: great does not hold.
    Curves: grpo's mean reaches 0.30 at step 20 (its final); tango's mean is 0.30 at step 10."""
    study = tmp_path / "study"
    for s, (t, c) in enumerate([(0.40, 0.28), (0.50, 0.32), (0.45, 0.30)]):
        _fake_run(study / "grpo" / f"seed{s}", t, 0.10, [0.1, 0.2, c])
    for s, t in enumerate([0.47, 0.56, 0.53]):
        _fake_run(study / "tango" / f"seed{s}", t, [0.11, 0.12, 0.10][s], [0.1, 0.3, 0.4], 3e9, warmup=5e9,
                  alpha=lambda step: 0.1 if step <= 10 else 0.0, config="recipe: tango\n")  # 10 of 20 at 0.1: mean 0.05
        _fake_run(study / "grpo_g16" / f"seed{s}", t, 0.1, [0.1, 0.3, 0.4], 2e9)  # a compute control: no criteria
    (study / "starts" / "sft").mkdir(parents=True)
    (study / "starts" / "sft" / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": 0.2}}}))
    arms = load_study(study)
    assert list(arms) == ["grpo", "grpo_g16", "tango"] and sorted(arms["tango"]) == [0, 1, 2]
    steps, acc, half, flops = mean_curve(arms["tango"])
    assert steps == [0, 10, 20] and acc == pytest.approx([0.1, 0.3, 0.4]) and half == pytest.approx([0.0, 0.0, 0.0])
    assert flops == [5e9, 3.5e10, 6.5e10]
    text = build_study(study)
    row = next(line for line in text.splitlines() if line.startswith("| tango"))
    assert "+7.0 [+4.5, +9.5] (n=3)" in row and "+1.0 [-1.5, +3.5] (n=3)" in row
    assert "| 10 |" in row and "6.50e+10 (5.0e+09)" in row and "AMD EPYC (AVX512)" in row
    assert "| – | 0.0500 |" in row  # no grpo_long arm: no equal-compute reading; the mean α
    # over the start's 0.2: +27, +36, +33 points, mean 32, sd 4.583, half-width 11.38 -> +32.0 [+20.6, +43.4]
    assert "| +32.0 [+20.6, +43.4] (n=3) |" in row
    assert "tango, **minimum** (paired test lower bound >= -2): holds" in text
    assert "tango, **good** (paired test mean >= +5 and lower bound > 0): holds" in text
    assert "tango, **great** (paired ood lower bound > 0): does not hold" in text
    assert "tango, **excellent** (label-free gain excludes 0 and paired (label-free - tango) lower bound >= -3): " \
           "cannot say; not run" in text  # no label-free arm in this study
    assert "grpo_g16, **" not in text and "| grpo_g16 | 0,1,2 |" in text  # grpo given more compute is a control
    assert (study / "table.md").read_text().strip() == text.strip()
    assert (study / "curves.png").stat().st_size > 1000


def test_the_start_is_the_sft_one_else_the_published_model(tmp_path):
    """`build_start` reads starts/sft/eval.json; a study that trains a published model keeps its start as
    starts/model/eval.json; with neither there is none."""
    assert build_start(tmp_path) is None
    for name, acc in (("model", 0.09), ("sft", 0.2)):
        (tmp_path / "starts" / name).mkdir(parents=True)
        (tmp_path / "starts" / name / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": acc}}}))
        assert build_start(tmp_path) == acc
    assert build_start(tmp_path, "model") == 0.09


def test_world_table_marks_each_goal_missed(tmp_path, capsys):
    """Two worlds: one meeting every goal; one whose failures sit in the last step (0.1 not last), whose
    verifier misses a kind (0.75 of `operand`) and that has too few right samples (80)."""
    good = {"all_wrong@8": 0.6, "process/n_failed": 900.0, "process/first_false_not_last": 0.8,
            "process/first_rejected_match": 0.75, "balanced_accuracy": 0.93, "n/correct": 150.0, "caught/correct": 0.95,
            "n/step": 500.0, "caught/step": 0.9, "n/target": 400.0, "caught/target": 0.85, "n/format": 3.0,
            "caught/format": 0.0}
    bad = {**good, "process/first_false_not_last": 0.1, "caught/operand": 0.75, "n/operand": 50.0, "n/correct": 80.0}
    for name, m in (("a_good", good), ("b_bad", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps({"verifier_warmup": {"test": m}}))
    assert main(["study", str(tmp_path), "--worlds"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # format (3 samples) is left out of the weakest catch; 903 wrong samples
    assert lines[2] == "| a_good | 0.600 | 900 | 0.800 | 0.750 | 0.930 | 903 | 150 | 0.850 (target) | yes |"
    assert lines[3] == "| b_bad | 0.600 | 900 | 0.100 ✗ | 0.750 | 0.930 | 953 | 80 ✗ | 0.750 (operand) ✗ | no |"
    assert (tmp_path / "table.md").is_file()


def test_warmup_table_reads_each_start_against_the_target(tmp_path, capsys):
    """Three warm-ups: one meeting both goals (its 4-step `format` kind left out of the weakest); one whose
    whole verdicts pass and whose `operation` steps are caught at 0.75; an older one without step verdicts
    by fault, whose whole verdicts miss (0.65): no. One more, an older one that passes its whole verdicts,
    cannot say."""
    good = {"n": 256.0, "balanced_accuracy": 0.9, "auroc": 0.95, "strict/balanced_accuracy": 0.91,
            "step/approve_right": 0.96, "step/catch_false": 0.88, "step/catch/arithmetic": 0.95, "step/n_false/arithmetic": 40.0,
            "step/catch/operation": 0.82, "step/n_false/operation": 30.0, "step/catch/format": 0.0, "step/n_false/format": 4.0}
    weak_kind = {**good, "step/catch/operation": 0.75}
    old = {"n": 256.0, "balanced_accuracy": 0.65, "auroc": 0.76}
    for name, m in (("a_good", good), ("b_kind", weak_kind), ("c_old", old), ("d_old_pass", {**old, "balanced_accuracy": 0.86})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps({"verifier_warmup": {
            "test": m, "test_injected": {"balanced_accuracy": 0.781}}}))
    assert main(["study", str(tmp_path), "--warmups"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2] == "| a_good | 256 | 0.900 | 0.950 | 0.910 | 0.960 | 0.880 | 0.820 (operation) | 0.781 | holds |"
    assert lines[3] == "| b_kind | 256 | 0.900 | 0.950 | 0.910 | 0.960 | 0.880 | 0.750 ✗ (operation) | 0.781 | does not hold |"
    assert lines[4] == "| c_old | 256 | 0.650 ✗ | 0.760 | – | – | – | – | 0.781 | does not hold |"
    assert lines[5].endswith("| – | 0.781 | cannot say |") and (tmp_path / "table.md").is_file()
    assert len(lines) == 6  # no warm-up kept its verifications


def test_warmup_table_says_where_the_whole_verdicts_go_wrong(tmp_path, capsys):
    """A warm-up that kept its verifications: of its two right samples it rejects, one with its final line
    as taught (and a step rejected: the task's false step, the only right answer reached through one), one whose line counts the shown steps wrong; the wrong sample it
    approves copies another answer; the right sample it approves is no error. Counted sound (the right
    answer through a false step as wrong): one of two sound answers approved, one of two others rejected, 0.5."""
    taught = "Step 1: CORRECT\nFinal: needs 1, shows 1; story 7 + 5 is 12; answer 12 CORRECT"
    wrong = "Step 1: INCORRECT\nFinal: needs 1, shows 1; story 7 + 5 is 12; answer 13 INCORRECT"
    rows = [{"correct": True, "final": False, "steps": [False], "reference": taught, "faults": ["operand"],
             "verification": "Step 1: INCORRECT\nFinal: needs 1, shows 1; story 7 + 5 is 12; answer 12 INCORRECT"},
            {"correct": True, "final": False, "steps": [True], "reference": taught, "faults": [None],
             "verification": "Step 1: CORRECT\nFinal: needs 1, shows 0; story 7 + 5 is 12; answer 12 INCORRECT"},
            {"correct": False, "final": True, "steps": [True], "reference": wrong,
             "verification": "Step 1: CORRECT\nFinal: needs 1, shows 1; story 7 + 5 is 12; answer 12 CORRECT"},
            {"correct": True, "final": True, "steps": [True], "reference": taught, "verification": taught}]
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "eval.json").write_text(json.dumps({"verifier_warmup": {"test": {"n": 4.0, "balanced_accuracy": 0.5}}}))
    write_jsonl_gz_atomic(tmp_path / "w" / "verifications" / "verifier_warmup_test.jsonl.gz", rows)
    assert main(["study", str(tmp_path), "--warmups"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-6] == ("| warm-up | side | samples | a step rejected too | right answers through a false step | "
                         "differs at answer | differs at shows | line as taught |")
    assert lines[-4] == "| w | right, rejected | 2 | 1 | 1 of 1 | 0 | 1 | 1 |"
    assert lines[-3] == "| w | wrong, not rejected | 1 | – | – | 1 | 0 | 0 |"
    assert lines[-1] == "Balanced accuracy with a right answer reached through a false step counted wrong: w 0.500."
    (tmp_path / "w" / "verifications" / "verifier_warmup_test.jsonl.gz").write_bytes(b"not gzip")
    assert main(["study", str(tmp_path), "--warmups"]) == 2
    assert "not gzipped JSON lines" in capsys.readouterr().err
    (tmp_path / "w" / "verifications" / "verifier_warmup_test.jsonl.gz").write_bytes(gzip.compress(b"[1, 2]\n"))
    assert main(["study", str(tmp_path), "--warmups"]) == 2
    assert "a line is not a JSON object" in capsys.readouterr().err


def test_at_flops_and_the_equal_compute_column(tmp_path):
    """grpo_long evaluated at 0, 10, 20 steps of 4e9 FLOPs each: at 0, 4e10, 8e10 FLOPs, accuracy 0.1, 0.35,
    0.5. Tango's final FLOPs 6.5e10 (5e9 of warm-up): grpo_long at 6.5e10 -> its 4e10 point, 0.35; at
    6.0e10 without the warm-up, 0.35 too."""
    from cotrain.lab.runs import at_flops

    assert at_flops([0, 4e10, 8e10], [0.1, 0.35, 0.5], 6.5e10) == 0.35
    assert at_flops([0, 4e10, 8e10], [0.1, 0.35, 0.5], 9e10) is None      # past the curve's end
    assert at_flops([1e10, 4e10], [0.1, 0.35], 5e9) is None                # before its first point
    study = tmp_path / "study"
    _fake_run(study / "grpo" / "seed0", 0.4, 0.1, [0.1, 0.2, 0.3])
    _fake_run(study / "grpo_long" / "seed0", 0.5, 0.1, [0.1, 0.35, 0.5], 4e9)
    _fake_run(study / "tango" / "seed0", 0.45, 0.1, [0.1, 0.3, 0.4], 3e9, warmup=5e9, config="recipe: tango\n")
    text = build_study(study)
    row = next(line for line in text.splitlines() if line.startswith("| tango"))
    assert "| 0.350 (0.350) |" in row
    assert "tango, **minimum**" in text and "grpo_long, **" not in text  # GRPO run on is no co-training arm


def test_documented_reads_the_paired_result_of_an_arm_against_grpo(tmp_path):
    """grpo ends at test 0.40, 0.50, 0.45 (sd 0.05, half-width 4.303 * 0.05 / sqrt(3) = 0.124) and tango at
    0.47, 0.56, 0.53 (sd sqrt(0.0042 / 2) = 0.0458, half-width 0.114): paired +7.0 [+4.5, +9.5], as above; at
    step 10 their curves stand at 0.20, 0.30, 0.25 and 0.22, 0.33, 0.25: differences 2, 3, 0 points, mean
    5/3 = 1.67, sd sqrt(((1/3)^2 + (4/3)^2 + (5/3)^2) / 2) = 1.528, half-width 4.303 * 1.528 / sqrt(3) = 3.795
    -> +1.7 [-2.1, +5.5]. ood: every seed 0.10 against 0.10 -> +0.0 [+0.0, +0.0]. A study without the arm
    gives nothing."""
    from cotrain.lab.table import documented

    for seed, (g, t, gc, tc) in enumerate([(0.40, 0.47, 0.20, 0.22), (0.50, 0.56, 0.30, 0.33),
                                           (0.45, 0.53, 0.25, 0.25)]):
        _fake_run(tmp_path / "grpo" / f"seed{seed}", g, 0.1, [0.1, gc, g])
        _fake_run(tmp_path / "tango" / f"seed{seed}", t, 0.1, [0.1, tc, t])
    lines = documented(tmp_path, "tango", step=10)
    assert lines[0] == ("tango − grpo, greedy pass@1 on test after 20 steps: +7.0 [+4.5, +9.5] (n=3) points, "
                        "0.450 ± 0.124 → 0.520 ± 0.114")
    assert lines[1].startswith("tango − grpo, greedy pass@1 on ood after 20 steps: +0.0 [+0.0, +0.0] (n=3)")
    assert lines[2] == "tango − grpo, in-training pass@1 on test at step 10: +1.7 [-2.1, +5.5] (n=3) points"
    assert lines[3] == "ran on AMD EPYC (AVX512)"
    assert documented(tmp_path, "gar") == []
    assert len(documented(tmp_path, "tango", step=15)) == 3   # no evaluation at step 15


def test_a_committed_verifier_warm_up_counts_in_the_runs_that_start_from_it(tmp_path):
    """starts/warm logged 2e11 FLOPs. Tango's verifier starts from it: its 6.5e10 FLOPs (5e9 warm-up of its
    own) become 2.65e11 (2.05e11 of warm-up); grpo's, whose config names no verifier, stay as they are.
    grpo_long (4e9 FLOPs a step, 20 steps, 8e10 FLOPs) cannot reach 2.65e11: it would need 2.65e11 / 4e9 =
    66 steps; without the warm-up, 6e10 reads its 4e10 point, 0.35."""
    study = tmp_path / "study"
    # grpo's config names the verifier too (a sweep's shared overrides), but grpo has none: not counted
    _fake_run(study / "grpo" / "seed0", 0.4, 0.1, [0.1, 0.2, 0.3],
              config="recipe: grpo\nverifier: {init: results/x/starts/warm/verifier}\n")
    _fake_run(study / "grpo_long" / "seed0", 0.5, 0.1, [0.1, 0.35, 0.5], 4e9)
    _fake_run(study / "tango" / "seed0", 0.45, 0.1, [0.1, 0.3, 0.4], 3e9, warmup=5e9,
              config="recipe: tango\nverifier: {init: results/x/starts/warm/verifier}\n")
    (study / "starts" / "warm").mkdir(parents=True)
    (study / "starts" / "warm" / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "eval/compute/total/flops": 2e11}) + "\n")
    text = build_study(study)
    tango = next(line for line in text.splitlines() if line.startswith("| tango"))
    grpo = next(line for line in text.splitlines() if line.startswith("| grpo |"))
    assert "| 2.65e+11 (2.0e+11) | past its end: ≈66 steps (0.350) |" in tango
    assert "| 2.00e+10 (0.0e+00) |" in grpo


def test_gains_across_settings_read_x_from_each_measurement_and_pair_by_seed(tmp_path, capsys):
    """Two settings. `sparse`: pass@8 0.25 at its start, so x = 1 − 0.25 = 0.75; grpo 0.10, 0.20 and tango
    0.14, 0.22: differences 4 and 2 points, mean 3, sd sqrt(2), half-width 12.706 * sqrt(2) / sqrt(2) =
    12.7 -> +3.0 [-9.7, +15.7]; its label-free arm ends at 0.25, 0.27 against the start's 0.20: +6.0
    [-6.7, +18.7]. `dense`: x = 1 − 0.75 = 0.25, one seed, tango 0.50 against 0.49: +1.0 (n=1)."""
    for name, p8, grpo, tango in (("sparse", 0.25, [0.10, 0.20], [0.14, 0.22]), ("dense", 0.75, [0.49], [0.50])):
        study = tmp_path / name
        for s, (g, t) in enumerate(zip(grpo, tango)):
            _fake_run(study / "grpo" / f"seed{s}", g, 0.0, [0.1, 0.1, 0.1])
            _fake_run(study / "tango" / f"seed{s}", t, 0.0, [0.1, 0.1, 0.1])
        (tmp_path / f"{name}.json").write_text(json.dumps({"generator": {"test": {"pass@8": p8}}}))
    for s, v in enumerate([0.25, 0.27]):
        _fake_run(tmp_path / "sparse" / "labelfree" / f"seed{s}", v, 0.0, [0.1, 0.1, 0.1])
    (tmp_path / "sparse" / "starts" / "sft").mkdir(parents=True)
    (tmp_path / "sparse" / "starts" / "sft" / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": 0.2}}}))
    spec = tmp_path / "sparsity.yaml"
    spec.write_text("x: {label: all-wrong groups, key: generator/test/pass@8, one_minus: true}\n"
                    "settings:\n  - {name: sparse start, runs: sparse, measured: sparse.json}\n"
                    "  - {name: dense start, runs: dense, measured: dense.json}\n")
    assert main(["study", "--gains", str(spec)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2].startswith("| sparse start | 0.750 | 0,1 | 0.150 ± 0.635 | 0.180 ± 0.508 | +3.0 [-9.7, +15.7] (n=2) | "
                               "+6.0 [-6.7, +18.7] (n=2) |")
    assert lines[3].startswith("| dense start | 0.250 | 0 | 0.490 | 0.500 | +1.0 (n=1) | – |")
    assert (tmp_path / "sparsity.md").is_file() and (tmp_path / "sparsity.png").stat().st_size > 1000
    # a metric name holding slashes is found whole
    from cotrain.lab.gains import _lookup
    assert _lookup({"v": {"test": {"gap/verifier": 0.5}}}, "v/test/gap/verifier") == 0.5
    # a measurement without the number is one line and exit code 2
    (tmp_path / "dense.json").write_text("{}")
    assert main(["study", "--gains", str(spec)]) == 2
    assert "has no number at 'generator/test/pass@8'" in capsys.readouterr().err


def test_verifier_table_pairs_the_co_trained_verifier_with_its_warm_up_by_seed(tmp_path, capsys):
    """Two seeds of tango; on the generator's samples the warm-up verifier scores 0.90 and 0.92, the
    co-trained one 0.93 and 0.92: differences 3 and 0 points, mean 1.5, sd 2.121, half-width 12.706 *
    2.121 / sqrt(2) = 19.06 -> +1.5 [-17.6, +20.6]. caught/step 0.5 -> 0.6 on both seeds: +10.0 [+10.0,
    +10.0]. grpo has no verifier: no row."""
    study = tmp_path / "study"
    for s, (w, c) in enumerate([(0.90, 0.93), (0.92, 0.92)]):
        d = _fake_run(study / "tango" / f"seed{s}", 0.4, 0.1, [0.1, 0.2, 0.3])
        ev = json.loads((d / "eval.json").read_text())
        ev["verifier_warmup"] = {"test": {"n": 1024, "balanced_accuracy": w, "caught/step": 0.5, "n/step": 40}}
        ev["verifier"] = {"test": {"n": 1024, "balanced_accuracy": c, "caught/step": 0.6, "n/step": 40}}
        (d / "eval.json").write_text(json.dumps(ev))
        _fake_run(study / "grpo" / f"seed{s}", 0.4, 0.1, [0.1, 0.2, 0.3])
    assert main(["study", str(study), "--verifiers"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2] == ("| tango | the final generator's samples | balanced_accuracy | 1024 | 0.910 ± 0.127 | "
                        "0.925 ± 0.064 | +1.5 [-17.6, +20.6] (n=2) |")
    assert lines[3] == ("| tango | the final generator's samples | caught/step | 40 | 0.500 ± 0.000 | 0.600 ± 0.000 | "
                        "+10.0 [+10.0, +10.0] (n=2) |")
    assert len(lines) == 4 and (study / "verifiers.md").is_file()


def test_auto_is_safe_and_useful_by_its_two_rules(tmp_path):
    """tango_auto on 3 seeds ends at grpo's 0.40, 0.50, 0.45 plus 1, −1 and 3 points: mean +1.0, sd 2,
    half-width 4.303 · 2 / sqrt(3) = 4.97 -> [-4.0, +6.0]: lower bound below −2, not safe. Its α is 0.02
    on every step against the schedule arm's 0.05: 0.02 < 0.025, not useful. With two seeds, safe
    cannot be said."""
    study = tmp_path / "study"
    for s, (g, d) in enumerate([(0.40, 0.01), (0.50, -0.01), (0.45, 0.03)]):
        _fake_run(study / "grpo" / f"seed{s}", g, 0.1, [0.1, 0.2, 0.3])
        _fake_run(study / "tango_auto" / f"seed{s}", g + d, 0.1, [0.1, 0.2, 0.3], alpha=lambda step: 0.02,
                  config="recipe: tango\n")
        _fake_run(study / "tango" / f"seed{s}", g, 0.1, [0.1, 0.2, 0.3], alpha=lambda step: 0.05, config="recipe: tango\n")
    text = build_study(study)
    assert "tango_auto, **auto safe** (paired (auto - grpo) test lower bound >= -2 over >= 3 seeds): does not hold; " \
           "+1.0 [-4.0, +6.0] (n=3)" in text
    assert "tango_auto, **auto useful** (mean α at least half the schedule's): does not hold; mean α 0.0200 against " \
           "the schedule's 0.0500" in text
    assert "tango, **auto" not in text
    from cotrain.stats import Paired, auto_criteria
    two = auto_criteria(Paired(1.0, 0.5, 1.5, 2, (0, 1)), 0.03, 0.05)
    assert [c.holds for c in two] == [None, True]


def test_role_compute_gives_each_roles_mean_flops_and_tokens(tmp_path):
    """Two seeds of a two-role arm: gen 1e12 and 3e12 FLOPs (mean 2.0e+12) over 100k and 300k tokens run
    forward plus 50k trained on in each (mean 250k); ver 4e12 over 1,000k in one seed, 6e12 over 2,000k
    in the other (5.0e+12, 1,500k); `total` is no role. An arm with no compute record gives "–"."""
    from cotrain.lab.table import role_compute

    for s, (g, gt, v, vt) in enumerate([(1e12, 1e5, 4e12, 1e6), (3e12, 3e5, 6e12, 2e6)]):
        d = _fake_run(tmp_path / "tango" / f"seed{s}", 0.5, 0.1, [0.1, 0.2, 0.3])
        ev = json.loads((d / "eval.json").read_text())
        ev["compute"] = {"gen": {"flops": g, "tokens_forward": gt, "tokens_trained": 5e4},
                         "ver": {"flops": v, "tokens_forward": vt},
                         "total": {"flops": g + v}}
        (d / "eval.json").write_text(json.dumps(ev))
    _fake_run(tmp_path / "grpo" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3])
    arms = load_study(tmp_path)
    assert role_compute(arms["tango"]) == "gen 2.0e+12 (250k); ver 5.0e+12 (1,500k)"
    assert role_compute(arms["grpo"]) == "–"


def test_committed_warm_ups_count_in_the_runs_that_start_from_them(tmp_path):
    """A study keeping two warm-ups, the verifier's (starts/warm, 5e9 FLOPs) and a self-rewarding judge's
    (starts/judge, 7e9): tango (verifier.init names the first) gains 5e9 at every point of its FLOPs curve,
    self_rewarding (init names the second, or the final model of the run its COMMAND made) 7e9, grpo (init
    the SFT start) nothing. A third, a larger verifier's warm-up (starts/warm_small, 3e9), counts in the arm
    whose verifier.init names it; a start of another name (starts/other) counts nowhere."""
    from cotrain.lab.runs import add_shared_warmups

    for name, flops in (("warm", 5e9), ("judge", 7e9), ("warm_small", 3e9), ("other", 1e9)):
        (tmp_path / "starts" / name).mkdir(parents=True)
        (tmp_path / "starts" / name / "metrics.jsonl").write_text(json.dumps({"step": 1, "flops/total": flops}) + "\n")
    _fake_run(tmp_path / "grpo" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3],
              config="recipe: grpo\ninit: results/s/starts/sft/generator\n")
    _fake_run(tmp_path / "tango" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3], config=(
        "recipe: tango\ninit: results/s/starts/sft/generator\nverifier: {init: results/s/starts/warm/verifier}\n"))
    _fake_run(tmp_path / "self_rewarding" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3],
              config="recipe: self_rewarding\ninit: results/s/starts/judge/generator\n")
    # a run started before the judge was committed names the model in the run that made it
    (tmp_path / "starts" / "judge" / "COMMAND").write_text("cotrain run j.yaml train.steps=0 --out runs/judge\n")
    _fake_run(tmp_path / "self_rewarding" / "seed1", 0.5, 0.1, [0.1, 0.2, 0.3],
              config="recipe: self_rewarding\ninit: runs/judge/final/generator\n")
    _fake_run(tmp_path / "self_rewarding" / "seed2", 0.5, 0.1, [0.1, 0.2, 0.3],  # another model of that run: no
              config="recipe: self_rewarding\ninit: runs/judge/checkpoints/step_5/generator\n")
    _fake_run(tmp_path / "ver_small" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3], config=(
        "recipe: tango\ninit: results/s/starts/sft/generator\nverifier: {init: results/s/starts/warm_small/verifier}\n"))
    arms = load_study(tmp_path)
    add_shared_warmups(arms, tmp_path)
    assert arms["ver_small"][0].warmup_flops == 3e9 and arms["grpo"][0].warmup_flops == 0.0
    assert arms["self_rewarding"][1].warmup_flops == 7e9 and arms["self_rewarding"][2].warmup_flops == 0.0
    # the judge's generator is where those runs start: their gain is read against its 0.3, the rest's
    # against the SFT start's 0.2 (final 0.5 each: +20 and +30 points)
    for name, acc in (("sft", 0.2), ("judge", 0.3)):
        (tmp_path / "starts" / name).mkdir(exist_ok=True)
        (tmp_path / "starts" / name / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": acc}}}))
    text = build_study(tmp_path)
    # +20, +20, +30: mean 23.3, sd 5.774, half-width 4.303 · 5.774 / sqrt(3) = 14.3
    assert "| self_rewarding | 0,1,2 |" in text and "| +23.3 [+9.0, +37.7] (n=3) |" in text
    assert "| tango | 0 |" in text and "| +30.0 (n=1) |" in text
    assert arms["grpo"][0].flops == [0.0, 1e10, 2e10] and arms["grpo"][0].warmup_flops == 0.0
    assert arms["tango"][0].flops == [5e9, 1.5e10, 2.5e10] and arms["tango"][0].warmup_flops == 5e9
    assert arms["self_rewarding"][0].flops == [7e9, 1.7e10, 2.7e10] and arms["self_rewarding"][0].warmup_flops == 7e9


def test_best_of_n_table_and_figure_of_a_vstar_arm(tmp_path):
    """V-STaR's pick among 4 on three seeds: 0.4, 0.5, 0.6 -> mean 0.5, sd 0.1, half-width 4.303 · 0.1 /
    sqrt(3) = 0.248; the random pick 0.3 on every seed -> 0.300 ± 0.000; a named verifier ("tango") at N = 1
    only. An arm without best-of-N gives no row."""
    from cotrain.lab.judges import best_of_n

    study = tmp_path / "study"
    for s, v in enumerate([0.4, 0.5, 0.6]):
        _fake_run(study / "grpo" / f"seed{s}", 0.4, 0.1, [0.1, 0.2, 0.3])
        d = _fake_run(study / "vstar" / f"seed{s}", 0.4, 0.1, [0.1, 0.2, 0.3], config="recipe: vstar\n")
        ev = json.loads((d / "eval.json").read_text())
        ev["vstar"] = {"test": {"bon@4/vstar": v, "bon@4/random": 0.3, "bon@1/tango": 0.2, "bon@4/note": "x"}}
        (d / "eval.json").write_text(json.dumps(ev))
    picks = best_of_n(load_study(study)["vstar"])
    assert picks == {"vstar": {4: [0.4, 0.5, 0.6]}, "random": {4: [0.3] * 3}, "tango": {1: [0.2] * 3}}
    assert best_of_n(load_study(study)["grpo"]) == {}
    text = build_study(study)
    assert "| arm | selector | seeds | N = 1 | N = 4 |" in text
    assert "| vstar | random pick | 3 | – | 0.300 ± 0.000 |" in text
    assert "| vstar | V-STaR verifier | 3 | – | 0.500 ± 0.248 |" in text
    assert "| vstar | tango verifier | 3 | 0.200 ± 0.000 | – |" in text
    bon = text.split("Best of N")[1]
    assert bon.index("random pick") < bon.index("V-STaR verifier") < bon.index("tango verifier")
    assert "| grpo | " not in bon
    assert (study / "bon.png").stat().st_size > 1000


def test_equal_samples_reads_grpo_where_it_had_sampled_as_many_tokens(tmp_path):
    """GRPO samples 1,000 tokens a step: 0, 10k, 20k tokens at its evaluations (steps 0, 10, 20) with
    accuracy 0.1, 0.2, 0.3. An arm that sampled 500 a step (10k by its end) is read against GRPO's 0.2;
    one that sampled 1,500 a step (30k) lies past GRPO's end; one that logged no count shows "–". Each arm's
    own last in-training accuracy (0.4) stands beside GRPO's."""
    from cotrain.lab.runs import at_equal_samples

    _fake_run(tmp_path / "grpo" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3], sampled_per_step=1000)
    _fake_run(tmp_path / "spin" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.4], sampled_per_step=500)
    _fake_run(tmp_path / "prime" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3], sampled_per_step=1500)
    _fake_run(tmp_path / "old" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3])
    arms = load_study(tmp_path)
    assert at_equal_samples(arms, "spin") == "0.01M (grpo 0.200, this arm 0.400)"
    assert at_equal_samples(arms, "prime") == "0.03M (grpo: past its end)"
    assert at_equal_samples(arms, "grpo") == "0.02M"
    assert at_equal_samples(arms, "old") == "–"
    assert "0.01M (grpo 0.200, this arm 0.400)" in build_study(tmp_path)


def test_step_seconds_is_the_mean_over_seeds_of_each_runs_median(tmp_path):
    """Seed 0's steps take 1, 2, 9 s (median 2), seed 1's 3, 4, 5 (median 4): 3.0 s a step; none logged: "–"."""
    from cotrain.lab.runs import step_seconds

    for s, times in enumerate([(1, 9, 2), (3, 4, 5)]):
        d = tmp_path / "tango" / f"seed{s}"
        _fake_run(d, 0.5, 0.1, [0.1, 0.2, 0.3])
        with open(d / "metrics.jsonl", "a") as f:
            f.writelines(json.dumps({"step": 21 + i, "time/step": t}) + "\n" for i, t in enumerate(times))
    _fake_run(tmp_path / "grpo" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3])
    arms = load_study(tmp_path)
    assert step_seconds(arms["tango"]) == "3.0" and step_seconds(arms["grpo"]) == "–"


def test_judge_agreement_windows_and_its_paired_change(tmp_path):
    """Seed 0's judge agrees 0.5 over steps 1-10 and 0.7 over 11-20, seed 1's 0.6 throughout: windows
    [0.5, 0.6] (mean 0.55) and [0.7, 0.6] (0.65); the change per seed +20 and 0 points, mean +10, 95% CI
    ± t(0.975, 1) × sd / √2 = 12.706 × 14.142 / 1.414 = ±127.1. An arm that logs no agreement gets no row,
    and the study writes judge.png beside its table."""
    from cotrain.lab.judges import judge_agreement, judge_table

    _fake_run(tmp_path / "grpo" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3])
    _fake_run(tmp_path / "self_rewarding" / "seed0", 0.5, 0.1, [0.1, 0.2, 0.3], agree=lambda s: 0.5 if s <= 10 else 0.7)
    _fake_run(tmp_path / "self_rewarding" / "seed1", 0.5, 0.1, [0.1, 0.2, 0.3], agree=lambda s: 0.6)
    arms = load_study(tmp_path)
    windows = judge_agreement(arms["self_rewarding"])
    assert [w[0] for w in windows] == [10, 20]
    assert windows[0][1] == pytest.approx([0.5, 0.6]) and windows[1][1] == pytest.approx([0.7, 0.6])
    table = judge_table({"self_rewarding": arms["self_rewarding"]})
    assert "| self_rewarding | 0,1 | 0.550 ± 0.635 | 0.650 ± 0.635 | +10.0 [-117.1, +137.1] (n=2) |" in table
    text = build_study(tmp_path)
    assert "| grpo | 0 |" not in text.split("agreement with the truth")[1]
    assert (tmp_path / "judge.png").stat().st_size > 1000


def test_the_second_half_of_an_in_training_curve_by_hand():
    """Evaluations at steps 0, 10, 20, 30, 40 with accuracies 0.1 ... 0.5: past the middle (step 20) are
    steps 30 and 40, mean 0.45; a run without evaluations has none."""
    from cotrain.lab.runs import Run

    run = Run({}, steps=[0, 10, 20, 30, 40], acc=[0.1, 0.2, 0.3, 0.4, 0.5])
    assert run.second_half() == pytest.approx(0.45)
    assert Run({}).second_half() is None


def test_each_verifier_arm_is_read_against_the_oracle_of_its_own_construction(tmp_path):
    """grpo ends at 0.10, 0.20, 0.30; the oracle under to_go at α 0.3 at +4, +2, +3 points; the learned
    verifier's tango with the same process term at +2, +1, +3: share 2/3 [-0.32, 2.38] (stats:
    test_ceiling_share_by_hand). A tango arm under another construction (final) has no oracle of its own in
    the study, so no share; the oracle is no arm to read against itself."""
    study = tmp_path / "study"
    process = "recipe: tango\nverifier: {{source: {src}}}\ncotraining: {{credit: {credit}, alpha: 0.3, alpha_schedule: constant}}\n"
    for s, t in enumerate([0.10, 0.20, 0.30]):
        _fake_run(study / "grpo" / f"seed{s}", t, 0.1, [0.1, 0.1, t])
        _fake_run(study / "oracle" / f"seed{s}", t + [0.04, 0.02, 0.03][s], 0.1, [0.1, 0.1, t],
                  config=process.format(src="oracle", credit="to_go"))
        _fake_run(study / "learned" / f"seed{s}", t + [0.02, 0.01, 0.03][s], 0.1, [0.1, 0.1, t],
                  config=process.format(src="model", credit="to_go"))
        _fake_run(study / "learned_final" / f"seed{s}", t + 0.01, 0.1, [0.1, 0.1, t],
                  config=process.format(src="model", credit="final"))
    text = build_study(study)
    shares = text[text.index("The share of its ceiling"):].split("\n\n")[1].splitlines()
    rows = [line for line in shares if line.startswith("| ") and not line.startswith("| arm")]
    assert rows == ["| learned | oracle | +2.0 [-0.5, +4.5] (n=3) | +3.0 [+0.5, +5.5] (n=3) | 0.67 [-0.32, 2.38] (n=3) |"]


BF16 = {"cpu": "AMD EPYC", "cpu_family_model": "25/17", "cpu_capability": "AVX512", "precision": {"bf16_autocast": True}}
FP32 = {**BF16, "cpu_family_model": "25/1", "cpu_capability": "AVX2", "precision": {"bf16_autocast": False}}


def _write_runs(study, runs, middle):
    """Each (arm, seed, final test pass@1, config, env.json) as a fake run whose curve reads 0.1, `middle`, final."""
    for arm, s, test, config, env in runs:
        _fake_run(study / arm / f"seed{s}", test, 0.1, [0.1, middle, test], config=config)
        (study / arm / f"seed{s}" / "env.json").write_text(json.dumps(env))


def test_the_share_of_the_ceiling_pairs_the_three_runs_of_a_seed_on_one_machine_kind(tmp_path):
    """grpo and the oracle ran seeds 0-2 in bf16 (grpo 0.10, 0.20, 0.30; the oracle +4, +2, +3 points); GRPO ran
    again in fp32 on the AVX2 machine (`grpo_fp32`, 0.05, 0.15, 0.25). `learned` ran seeds 0-1 in bf16 (+2, +1
    over grpo) and seed 2 in fp32 (0.30, +5 over grpo_fp32), where the oracle has no run: its share reads seeds
    0-1 alone, arm +1.5 (sd 0.707, t(1) 12.706 × 0.707 / √2 = 6.35), ceiling +3.0 (sd 1.414, 12.71), a ceiling
    not told from zero. `elsewhere` ran every seed in fp32: no seed of the three on one machine kind."""
    study = tmp_path / "study"
    process = "recipe: tango\nverifier: {{source: {src}}}\ncotraining: {{credit: to_go, alpha: 0.3, alpha_schedule: constant}}\n"
    runs = []
    for s, t in enumerate([0.10, 0.20, 0.30]):
        runs += [("grpo", s, t, "recipe: grpo\n", BF16), ("grpo_fp32", s, t - 0.05, "recipe: grpo\ntrain: {bf16: false}\n", FP32),
                 ("oracle", s, t + [0.04, 0.02, 0.03][s], process.format(src="oracle"), BF16),
                 ("elsewhere", s, t, process.format(src="model"), FP32)]
    runs += [("learned", 0, 0.12, process.format(src="model"), BF16), ("learned", 1, 0.21, process.format(src="model"), BF16),
             ("learned", 2, 0.30, process.format(src="model"), FP32)]
    _write_runs(study, runs, 0.1)
    text = build_study(study)
    shares = text[text.index("The share of its ceiling"):].split("\n\n")[1].splitlines()
    rows = [line for line in shares if line.startswith("| ") and not line.startswith("| arm")]
    assert rows == ["| elsewhere | oracle | no seed of the three on one machine kind | | |",
                    "| learned | oracle | +1.5 [-4.9, +7.9] (n=2) | +3.0 [-9.7, +15.7] (n=2) | "
                    "0.50 [unbounded: the ceiling's lead is not told from 0] (n=2) |"]


def test_each_seed_is_read_against_the_ceiling_run_on_its_own_machine_kind(tmp_path):
    """grpo and `oracle` ran seeds 0-2 in bf16, `grpo_fp32` and `oracle_fp32` (the same oracle in fp32) on the
    AVX2 machine. `learned` ran in fp32 at +2, +1, +3 points over grpo_fp32, oracle_fp32 at +4, +2, +3: share
    2/3 [-0.32, 2.38] (stats: test_ceiling_share_by_hand), read against oracle_fp32 alone, though the bf16
    oracle has runs of the same seeds; `learned_bf16`, at the same leads over grpo in bf16, against the bf16
    oracle (+4, +2, +3 there) alone. Both oracles have one process term: one arm of it per machine kind."""
    study = tmp_path / "study"
    process = "recipe: tango\nverifier: {{source: {src}}}\ncotraining: {{credit: to_go, alpha: 0.3, alpha_schedule: constant}}\n"
    runs = []
    for s, t in enumerate([0.10, 0.20, 0.30]):
        lead, ceiling = [0.02, 0.01, 0.03][s], [0.04, 0.02, 0.03][s]
        runs += [("grpo", s, t, "recipe: grpo\n", BF16), ("grpo_fp32", s, t - 0.05, "recipe: grpo\ntrain: {bf16: false}\n", FP32),
                 ("oracle", s, t + ceiling, process.format(src="oracle"), BF16),
                 ("oracle_fp32", s, t - 0.05 + ceiling, process.format(src="oracle"), FP32),
                 ("learned", s, t - 0.05 + lead, process.format(src="model"), FP32),
                 ("learned_bf16", s, t + lead, process.format(src="model"), BF16)]
    _write_runs(study, runs, 0.1)
    text = build_study(study)
    shares = text[text.index("The share of its ceiling"):].split("\n\n")[1].splitlines()
    rows = [line for line in shares if line.startswith("| ") and not line.startswith("| arm")]
    assert rows == ["| learned | oracle_fp32 | +2.0 [-0.5, +4.5] (n=3) | +3.0 [+0.5, +5.5] (n=3) | 0.67 [-0.32, 2.38] (n=3) |",
                    "| learned_bf16 | oracle | +2.0 [-0.5, +4.5] (n=3) | +3.0 [+0.5, +5.5] (n=3) | 0.67 [-0.32, 2.38] (n=3) |"]


def test_a_pair_across_machine_kinds_is_named_below_the_table(tmp_path):
    """Seed 1 of one arm ran in fp32 on an AVX2 machine, grpo's seed 1 under bf16 autocast on an AVX-512 one: the
    study names that pair alone; an arm whose seeds all ran where grpo's did gets no line."""
    study = tmp_path / "study"
    for s in (0, 1):
        for arm in ("grpo", "same", "apart"):
            _fake_run(study / arm / f"seed{s}", 0.3, 0.1, [0.1, 0.2, 0.3])
    env = {"cpu": "AMD EPYC", "cpu_family_model": "25/17", "cpu_capability": "AVX512", "precision": {"bf16_autocast": True}}
    for arm in ("grpo", "same", "apart"):
        for s in (0, 1):
            (study / arm / f"seed{s}" / "env.json").write_text(json.dumps(env))
    (study / "apart" / "seed1" / "env.json").write_text(json.dumps(
        {**env, "cpu_family_model": "25/1", "cpu_capability": "AVX2", "precision": {"bf16_autocast": False}}))
    text = build_study(study)
    assert ("- apart: seed 1 ran on AMD EPYC 25/1 (AVX2, fp32), grpo's on AMD EPYC 25/17 (AVX512, bf16 autocast): "
            "paired across machine kinds") in text
    assert "- same:" not in text and text.count("paired across machine kinds") == 1
    assert "own machine kind" not in text  # GRPO never ran on the AVX2 machine


def test_a_seed_across_machine_kinds_is_paired_with_grpo_run_on_its_own(tmp_path):
    """GRPO's seed 1 ran again in fp32 on the AVX2 machine (`grpo_fp32`: grpo's setting but its precision); an
    arm of the grpo recipe with another setting (a curriculum) is no such twin. The arm's seed 0 ran where grpo's
    did (0.30 − 0.30 = 0), its seed 1 on the AVX2 machine (0.25 − 0.20 = +5 against grpo_fp32, not −5 against
    grpo): mean +2.5, sd 3.536, t(1) 12.706 × 3.536 / √2 = 31.8. The table reads that pairing (marked ‡, as
    the criteria do) and the line below it the one it leaves out, against grpo alone: 0 and −5, −2.5 ± 31.8."""
    study = tmp_path / "study"
    runs = [("grpo", 0, 0.30, "recipe: grpo\n", BF16), ("grpo", 1, 0.30, "recipe: grpo\n", BF16),
            ("arm", 0, 0.30, "recipe: grpo\ngrpo: {group_size: 4}\n", BF16),
            ("arm", 1, 0.25, "recipe: grpo\ngrpo: {group_size: 4}\n", FP32),
            ("grpo_fp32", 1, 0.20, "recipe: grpo\ntrain: {bf16: false}\nout_dir: elsewhere\n", FP32),
            ("curriculum", 1, 0.10, "recipe: grpo\ncurriculum: {levels: [{n_steps: [1, 1]}, {}]}\n", FP32)]
    _write_runs(study, runs, 0.2)
    text = build_study(study)
    table = text[:text.index("\n\n")].splitlines()  # the first table: arm, seeds, test, ood, paired test, ...
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in table}
    assert rows["arm"][4] == "+2.5 [-29.3, +34.3] (n=2) ‡" and rows["arm"][7] == "+2.5 [-29.3, +34.3] (n=2) ‡"
    assert rows["curriculum"][4] == "-10.0 (n=1) ‡"  # 0.10 against grpo_fp32's 0.20
    # steps to GRPO's final in-training accuracy on each seed's own machine kind: the arm's mean curve (0.1, 0.2,
    # 0.275) reaches grpo seed 0's and grpo_fp32 seed 1's (0.30 and 0.20: 0.25) at step 20, never grpo's 0.30;
    # the curriculum's (0.1, 0.2, 0.1) reaches grpo_fp32's 0.20 at step 10
    assert (rows["arm"][6], rows["curriculum"][6], rows["grpo_fp32"][6]) == ("20 ‡", "10 ‡", "not reached")
    assert rows["grpo_fp32"][4] == "-10.0 (n=1)"  # the twin is read against grpo alone, never against itself
    assert ("  - arm in the table against GRPO on each seed's own machine kind (seed 0 grpo; seed 1 grpo_fp32); "
            "against grpo alone, test (points): -2.5 [-34.3, +29.3] (n=2)") in text
    assert "- grpo_fp32: seed 1 ran on" in text  # the twin's own pair is named, and read against nothing else
    assert ("  - curriculum in the table against GRPO on each seed's own machine kind (seed 1 grpo_fp32); against grpo "
            "alone, test (points): -20.0 (n=1)") in text
    assert text.count("‡ against GRPO on each seed's own machine kind: ") == 1
    # the figure's rows: against grpo seed 1 is 0.25 − 0.30 = −5, so −2.5 over both; on its own machine +2.5 as above
    rows = {arm: (d.text(), {s: round(x, 6) for s, x in seeds.items()}, home and home.text())
            for arm, d, seeds, home in difference_rows(load_study(study))}
    assert rows == {"arm": ("-2.5 [-34.3, +29.3] (n=2)", {0: 0.0, 1: -5.0}, "+2.5 [-29.3, +34.3] (n=2)"),
                    "curriculum": ("-20.0 (n=1)", {1: -20.0}, "-10.0 (n=1)")}  # grpo_fp32, grpo's twin, is no row
    assert (study / "differences.png").stat().st_size > 0


def test_the_criteria_read_grpo_on_each_seeds_own_machine_kind_where_it_ran_there(tmp_path):
    """grpo ran seeds 0-2 in bf16 (0.30 each), grpo_fp32 seeds 1-2 on the AVX2 machine (0.20, 0.22). `tango` ran
    seed 0 beside grpo's (0.32) and seeds 1-2 on the AVX2 machine (0.24, 0.25): on each seed's own machine kind
    +2, +4, +3, mean 3, sd 1, t(2) 4.303 × 1 / √3 = 2.5, so [+0.5, +5.5] and the minimum holds (against grpo
    alone +2, −6, −5 would not). `partial`'s seed 0 ran on the AVX2 machine, where GRPO has no seed 0: its
    criteria keep the plain pairing (+1 and −5: mean −2, sd 4.243, t(1) 12.706 × 4.243 / √2 = 38.1, no note).
    The label-free arm ran two seeds on the AVX2 machine."""
    study = tmp_path / "study"
    runs = [*[("grpo", s, 0.30, "recipe: grpo\n", BF16) for s in (0, 1, 2)],
            ("grpo_fp32", 1, 0.20, "recipe: grpo\ntrain: {bf16: false}\n", FP32),
            ("grpo_fp32", 2, 0.22, "recipe: grpo\ntrain: {bf16: false}\n", FP32),
            ("tango", 0, 0.32, "recipe: tango\n", BF16), ("tango", 1, 0.24, "recipe: tango\n", FP32),
            ("tango", 2, 0.25, "recipe: tango\n", FP32),
            ("partial", 0, 0.31, "recipe: tango\n", FP32), ("partial", 1, 0.25, "recipe: tango\n", BF16),
            ("labelfree", 0, 0.30, "recipe: consistency\n", FP32), ("labelfree", 1, 0.27, "recipe: consistency\n", FP32),
            ("apart", 0, 0.33, "recipe: tango\n", BF16)]
    _write_runs(study, runs, 0.2)
    crit = {(arm, c.name): (c.holds, c.figures) for arm, c in study_criteria(load_study(study), start=0.2)}
    home = " (against GRPO on each seed's own machine kind)"
    assert crit["tango", "minimum"] == (True, "+3.0 [+0.5, +5.5] (n=3)" + home)
    assert crit["tango", "good"] == (False, "+3.0 [+0.5, +5.5] (n=3)" + home)
    assert crit["tango", "great"] == (False, "+0.0 [+0.0, +0.0] (n=3)" + home)  # ood 0.1 everywhere
    assert crit["partial", "minimum"][1] == "-2.0 [-40.1, +36.1] (n=2)"
    # label-free against each arm over the seeds both ran on one machine kind: tango's seed 1 (0.27 - 0.24),
    # partial's seed 0 (0.30 - 0.31); apart ran its one seed in bf16. The gain over the start 0.2: +10, +7,
    # mean 8.5, sd 2.121, t(1) 12.706 x 2.121 / sqrt(2) = 19.06
    gain = "gain +8.5 [-10.6, +27.6] (n=2)"
    assert crit["tango", "excellent"] == (None, f"{gain}, vs tango +3.0 (n=1)")
    assert crit["partial", "excellent"] == (None, f"{gain}, vs partial -1.0 (n=1)")
    assert crit["apart", "excellent"] == (None, f"{gain}, no seed of both on one machine kind")
    assert not any(arm.startswith("grpo") for arm, _ in crit)  # the controls have no criteria


def test_what_the_seeds_can_resolve_by_hand(tmp_path):
    """grpo ran seeds 0-2 in bf16 (0.20 each), grpo_fp32 seeds 0-1 on the AVX2 machine (0.10 each). `a` ran seeds
    0-2 beside grpo's: +2, +6, +10, sd 4; `b` seeds 0-1 on the AVX2 machine: +4, +12 against grpo_fp32, sd 5.657.
    `c`'s seed 2 ran on the AVX2 machine where GRPO has no seed 2, so only its seed 0 pairs on one machine kind;
    `d` has one seed; grpo_fp32 is GRPO itself. The median sd 4.828: t(2) 4.303 x 4.828 / 1.732 = 12.0 on 3
    seeds, 2.776 x 4.828 / 2.236 = 6.0 on 5; ±2 needs t / sqrt(n) <= 0.4142: 2.069 / 4.899 = 0.422 on 24, 2.064 /
    5 = 0.413 on 25; ±5 needs <= 1.0355: 2.571 / 2.449 = 1.050 on 6, 2.447 / 2.646 = 0.925 on 7. The mean pass@1
    of the ten paired runs 1.94 / 10 = 0.194, on 200 problems: 100 sqrt(2 x 0.194 x 0.806 / 200) = 3.95; the rest
    sqrt(4.828^2 - 3.954^2) = 2.771, so ±2 needs t / sqrt(n) <= 0.7218: 0.769 on 9, 2.262 / 3.162 = 0.715 on 10.

    Problem by problem: grpo gets its first 40 of 200 right, a's seeds their first 44, 52 and 60, so they differ
    on 4, 12 and 20 problems, each by +1: the differences' sample variances (4 x 0.98^2 + 196 x 0.02^2) / 199 =
    0.019698, (12 x 0.94^2 + 188 x 0.06^2) / 199 = 0.056683 and (20 x 0.9^2 + 180 x 0.1^2) / 199 = 0.090452, over
    200 problems: sds 0.992, 1.684 and 2.127 points; their root mean square sqrt((0.985 + 2.834 + 4.523) / 3) =
    1.667. The rest sqrt(23.314 - 2.780) = 4.531: ±2 needs t / sqrt(n) <= 0.4414: 2.080 / 4.690 = 0.4435 on 22,
    2.074 / 4.796 = 0.4324 on 23."""
    study = tmp_path / "study"
    tango = "recipe: tango\n"
    runs = [*[("grpo", s, 0.20, "recipe: grpo\n", BF16) for s in (0, 1, 2)],
            *[("grpo_fp32", s, 0.10, "recipe: grpo\ntrain: {bf16: false}\n", FP32) for s in (0, 1)],
            ("a", 0, 0.22, tango, BF16), ("a", 1, 0.26, tango, BF16), ("a", 2, 0.30, tango, BF16),
            ("b", 0, 0.14, tango, FP32), ("b", 1, 0.22, tango, FP32),
            ("c", 0, 0.50, tango, BF16), ("c", 2, 0.90, tango, FP32), ("d", 0, 0.90, tango, BF16)]
    _write_runs(study, runs, 0.2)
    for arm, s, test, _, _ in runs:
        (study / arm / f"seed{s}" / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": test, "n": 200}}}))
    text = resolution(load_study(study))
    assert text == ("What its seeds can resolve (test, points): the seed-by-seed differences with grpo of 2 arms with two "
                    "seeds or more on one machine kind spread by a median sd of 4.8 (4.0 to 5.7), so a paired 95% interval "
                    "is ±12.0 on 3 seeds and ±6.0 on 5; ±2 (the minimum criterion's margin at a tie) needs 25 seeds, ±5 "
                    "(the good criterion's at a lead of +5) 7 seeds. The final evaluation's 200 problems alone move a "
                    "seed's difference by up to 4.0 (two models near the mean pass@1 0.19 whose errors are unrelated); "
                    "were all of that gone, ±2 would still need 10 seeds.")
    assert text in build_study(study)
    assert resolution(load_study(study), "ood") == ""  # no run was evaluated there
    # each problem's outcome kept by grpo's, grpo_fp32's and a's seeds, by b's first (on other problems: not paired)
    # and by d's one seed (not counted: it has no spread of seeds to take a part of)
    for arm, s, test, _, _ in runs:
        if arm in ("grpo", "grpo_fp32", "a", "d") or (arm, s) == ("b", 0):
            right = round(test * 200)
            (study / arm / f"seed{s}" / "outcomes.json").write_text(json.dumps({"test": {
                "correct": "1" * right + "0" * (200 - right), "questions_sha256": "other" if arm == "b" else "same"}}))
    assert resolution(load_study(study)).endswith(
        "were all of that gone, ±2 would still need 10 seeds. Measured problem by problem on the 3 pairs that kept each "
        "problem's outcome, it moves them by 1.7; without it, ±2 would need 23 seeds.")
    # an outcomes.json of another evaluation (a stale one: 45 right where eval.json counts 44) is not read
    (study / "a" / "seed0" / "outcomes.json").write_text(json.dumps({"test": {
        "correct": "1" * 45 + "0" * 155, "questions_sha256": "same"}}))
    assert "on the 2 pairs that kept" in resolution(load_study(study))
    for arm, s, test, _, _ in runs:  # on 10 problems: 100 sqrt(2 x 0.194 x 0.806 / 10) = 17.7, more than the spread
        (study / arm / f"seed{s}" / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": test, "n": 10}}}))
    assert resolution(load_study(study)).endswith("by up to 17.7 (two models near the mean pass@1 0.19 whose errors are "
                                                  "unrelated): as much as the whole spread.")


def test_one_setting_on_several_machine_kinds_reads_its_pairs_together_and_over_seeds_by_hand(tmp_path):
    """grpo ran seeds 0-2 in bf16 (0.20, 0.30, 0.40), grpo_fp32 seeds 0-1 on the AVX2 machine (0.10, 0.20). `a`
    ran seeds 0-2 beside grpo (+4, -2, +1 points), `b` (a's setting) seeds 0-1 on the AVX2 machine (+6, 0 over
    grpo_fp32; in fp32, `train.bf16: false`, no part of the setting the arms share), its in-training evaluation at
    step 20 two points below its final one (+4, -2 there), and seed 2 there too, which GRPO never ran on that
    machine kind: left out, though the study's table then pairs all of b's seeds with grpo in bf16. `c`, another
    α, one arm alone: no row.

    Over the five pairs +4, -2, +1, +6, 0: mean 1.8, squares of deviations 4.84 + 14.44 + 0.64 + 17.64 + 3.24 =
    40.8, sd sqrt(10.2) = 3.194, t(4) 2.776 x 3.194 / sqrt(5) = 3.97: [-2.2, +5.8]. Over seeds, each seed's pairs
    averaged first: +5, -1, +1, mean 1.667, sd sqrt(18.667 / 2) = 3.055, t(2) 4.303 x 3.055 / sqrt(3) = 7.59:
    [-5.9, +9.3]. The second half (step 20 alone): +4, -2, +1, +4, -2, mean 1, sd 3, 2.776 x 3 / sqrt(5) = 3.72:
    [-2.7, +4.7]; over seeds +4, -2, +1, sd 3, 4.303 x 3 / sqrt(3) = 7.45: [-6.5, +8.5]."""
    study = tmp_path / "study"
    tango, other = "recipe: tango\n", "recipe: tango\ncotraining: {alpha: 0.7}\n"
    _write_runs(study, [*[("grpo", s, t, "recipe: grpo\n", BF16) for s, t in enumerate((0.20, 0.30, 0.40))],
                        *[("grpo_fp32", s, t, "recipe: grpo\ntrain: {bf16: false}\n", FP32) for s, t in enumerate((0.10, 0.20))],
                        *[("a", s, t, tango, BF16) for s, t in enumerate((0.24, 0.28, 0.41))], ("c", 0, 0.25, other, BF16)], 0.1)
    for s, t in enumerate((0.16, 0.20, 0.90)):
        _fake_run(study / "b" / f"seed{s}", t, 0.1, [0.1, 0.1, t - 0.02], config=tango + "train: {bf16: false}\n")
        (study / "b" / f"seed{s}" / "env.json").write_text(json.dumps(FP32))
    text = kinds_table(load_study(study))
    assert text.splitlines()[2:] == [
        "| a, b | 5 on 2 | +1.8 [-2.2, +5.8] (n=5) | +1.7 [-5.9, +9.3] (n=3) | +1.0 [-2.7, +4.7] (n=5) / +1.0 [-6.5, +8.5] "
        "(n=3) | 0: +4.0, +6.0; 1: -2.0, +0.0; 2: +1.0, – |"]
    assert text in build_study(study)
    assert kinds_table(load_study(study)) and not kinds_table({k: v for k, v in load_study(study).items() if k != "b"})


def test_the_larger_evaluation_pairs_each_seed_problem_by_problem_by_hand(tmp_path, capsys):
    """grpo ran seeds 0-1 in bf16 (0.20 on 200 problems), grpo_fp32 seed 0 on the AVX2 machine (0.10). `a` ran seeds
    0-1 beside grpo (0.22, 0.26: +2, +6), `b` seed 0 on the AVX2 machine (0.14: +4 over grpo_fp32). Each final
    model again on 10 problems: grpo's both 1100000000 (0.2), grpo_fp32's 1100000000, a's 1110000000 (0.3) and
    0111100000 (0.4), b's 1000000000 (0.1).

    a seed 0: per-problem differences one +1 and nine 0, mean 0.1, sample variance (0.9^2 + 9 x 0.1^2) / 9 = 0.1,
    over 10 problems sd sqrt(0.01) = 0.1: +10 ± 1.96 x 10 = [-9.6, +29.6]. a seed 1: -1, 0, +1, +1, +1, 0 x 5,
    mean 0.2, variance (1.2^2 + 0.2^2 + 3 x 0.8^2 + 5 x 0.2^2) / 9 = 3.6 / 9 = 0.4, sd sqrt(0.04) = 0.2: +20 ± 39.2.
    b seed 0 against grpo_fp32 (its own machine kind): one -1, -10 ± 19.6. Over a's two seeds: +10, +20, mean 15,
    sd 7.071, t(1) 12.706 x 7.071 / 1.414 = 63.5: [-48.5, +78.5]; on the runs' own +2, +6: 4 ± 25.4. a and b are
    one setting on two machine kinds: over their three pairs +10, +20, -10, mean 6.667, sd 15.275, t(2) 4.303 x
    15.275 / 1.732 = 37.95: [-31.3, +44.6]; on the runs' own +2, +6, +4, sd 2: 4 ± 4.97. Over seeds, each seed's
    pairs averaged first: seed 0 (+10 - 10) / 2 = 0, seed 1 +20, mean 10, sd 14.142, t(1) 12.706 x 10 = 127.1;
    on the runs' own (+2 + 4) / 2 = 3 and +6, mean 4.5, sd 2.121, 12.706 x 1.5 = 19.06.
    `c`'s larger evaluation is of other problems (another hash), `d`'s disagrees with its eval.json (stale): no rows."""
    study = tmp_path / "study"
    tango = "recipe: tango\n"
    runs = [*[("grpo", s, 0.20, "recipe: grpo\n", BF16) for s in (0, 1)],
            ("grpo_fp32", 0, 0.10, "recipe: grpo\ntrain: {bf16: false}\n", FP32),
            ("a", 0, 0.22, tango, BF16), ("a", 1, 0.26, tango, BF16), ("b", 0, 0.14, tango + "train: {bf16: false}\n", FP32),
            ("c", 0, 0.30, tango, BF16), ("d", 0, 0.30, tango, BF16)]
    _write_runs(study, runs, 0.2)
    assert larger_table(load_study(study)) == ""  # no run was evaluated again
    again = {("grpo", 0): "1100000000", ("grpo", 1): "1100000000", ("grpo_fp32", 0): "1100000000",
             ("a", 0): "1110000000", ("a", 1): "0111100000", ("b", 0): "1000000000", ("c", 0): "1110000000",
             ("d", 0): "1110000000"}
    for arm, s, test, _, _ in runs:
        (study / arm / f"seed{s}" / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": test, "n": 200}}}))
        larger, correct = study / arm / f"seed{s}" / "larger", again[arm, s]
        larger.mkdir()
        hits = 4 if arm == "d" else correct.count("1")  # d's eval.json counts another evaluation than its outcomes
        (larger / "eval.json").write_text(json.dumps({"generator": {"test": {"pass@1": hits / 10, "n": 10}}}))
        (larger / "outcomes.json").write_text(json.dumps({"test": {
            "correct": correct, "questions_sha256": "other" if arm == "c" else "same"}}))
    text = larger_table(load_study(study))
    assert text.splitlines()[2:] == [
        "| a | 0 | grpo | +2.0 (200) | 0.200 → 0.300 | +10.0 [-9.6, +29.6] (10) |",
        "| a | 1 | grpo | +6.0 (200) | 0.200 → 0.400 | +20.0 [-19.2, +59.2] (10) |",
        "| b | 0 | grpo_fp32 | +4.0 (200) | 0.200 → 0.100 | -10.0 [-29.6, +9.6] (10) |",
        "",
        "- a, over seeds 0, 1: +15.0 [-48.5, +78.5] (n=2) on the larger evaluation, +4.0 [-21.4, +29.4] (n=2) on the runs' own",
        "- a, b (one setting on other machine kinds, each seed against GRPO on its own), over their 3 pairs: +6.7 "
        "[-31.3, +44.6] (n=3) on the larger evaluation, +4.0 [-1.0, +9.0] (n=3) on the runs' own; over seeds, each "
        "seed's pairs averaged first: +10.0 [-117.1, +137.1] (n=2) on the larger evaluation, +4.5 [-14.6, +23.6] (n=2) "
        "on the runs' own"]
    assert text in build_study(study)
    # a larger eval.json of another shape is one line and exit 2, not a traceback
    for bad in ({"generator": []}, {"generator": {"test": 5}}, {"generator": {"test": {"n": 10, "pass@1_ci95_lo": 0.1}}},
                {"generator": {"test": {"n": 10, "pass@1": "0.2"}}}):
        (study / "a" / "seed0" / "larger" / "eval.json").write_text(json.dumps(bad))
        capsys.readouterr()
        assert main(["study", str(study)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not an evaluation of the generator" in err[0], err



def _reading_study(tmp_path, margin=5):
    """grpo, and three arms read against it by a reading.yaml (window: the evaluations at steps 10 and 20)."""
    finals = {"grpo": [0.10, 0.12, 0.11], "good": [0.20, 0.20, 0.20], "none": [0.10, 0.12, 0.11],
              "maybe": [0.20, 0.12, 0.16]}
    curves = {"grpo": [[0.1, 0.1, 0.1]] * 3, "good": [[0.1, 0.2, 0.2]] * 3,
              "none": [[0.1, 0.1, 0.1], [0.1, 0.11, 0.11], [0.1, 0.09, 0.09]],
              "maybe": [[0.1, 0.2, 0.2], [0.1, 0.1, 0.1], [0.1, 0.15, 0.15]]}
    for arm in finals:
        for seed in range(3):
            d = _fake_run(tmp_path / arm / f"seed{seed}", finals[arm][seed], 0.0, curves[arm][seed])
            with open(d / "metrics.jsonl", "a") as f:  # the final evaluation's row repeats the last step: not in the window
                f.write(json.dumps({"step": 20, "eval/test/pass@1": finals[arm][seed], "eval/test/n": 1000}) + "\n")
    (tmp_path / "reading.yaml").write_text(f"baseline: grpo\nmargin: {margin}\nwindow: [10, 20]\nsplit: test\n"
                                           "arms: [good, none, maybe, absent]\n")
    return tmp_path


def test_the_reading_fixed_before_the_runs_by_hand(tmp_path):
    """Points, seed by seed against grpo (3 seeds; t(2) = 4.303, half-width 4.303 sd / sqrt(3)):
    good: final diffs [10, 8, 9] (mean 9, sd 1, [6.5, 11.5]); window [10, 10, 10]: HOLDS.
    none: final [0, 0, 0]; window [0, 1, -1] (sd 1, [-2.5, +2.5]): upper ends below 5: DOES NOT PAY.
    maybe: final [10, 0, 5] (mean 5, sd 5, [-7.4, +17.4]), the window the same: UNRESOLVED; to put the lower
    end above 0 at mean 5 and sd 5 the half-width must be <= 5: t(n - 1) <= sqrt(n) first at n = 7 (2.447 <=
    2.646; n = 6: 2.571 > 2.449)."""
    text = build_study(_reading_study(tmp_path))
    reading = text.split("\n\n")[1]                                            # the reading's own table
    rows = {line.split(" | ")[0].strip("| "): line for line in reading.splitlines() if line.startswith("| ")}
    assert "+9.0 [+6.5, +11.5] (seeds 0, 1, 2)" in rows["good"] and rows["good"].endswith("| HOLDS |")
    assert "+0.0 [-2.5, +2.5]" in rows["none"] and rows["none"].endswith("| DOES NOT PAY |")
    assert "+5.0 [-7.4, +17.4]" in rows["maybe"] and "about 7 seed pairs" in rows["maybe"]
    assert "no finished runs" in rows["absent"]
    assert text.index("The reading fixed before the runs") < text.index("| arm |")   # the answer first


def test_the_reading_pairs_no_seed_across_machine_kinds(tmp_path):
    """A seed of an arm that ran on another machine kind than grpo's seed is left out of its pairs."""
    study = _reading_study(tmp_path)
    (study / "good" / "seed2" / "env.json").write_text(json.dumps({"cpu": "Intel Xeon", "cpu_capability": "AVX512"}))
    rows = [line for line in build_study(study).split("\n\n")[1].splitlines() if line.startswith("| good ")]
    assert "(seeds 0, 1)" in rows[0] and "(seeds 0, 1, 2)" not in rows[0]


@pytest.mark.parametrize("content, said", [
    ("baseline: grpo\nmargin: 5\n", "a reading has baseline, margin, window"),
    ("baseline: grpo\nmargin: 5\nwindow: [20, 10]\n", "window must be two steps"),
    ("baseline: grpo\nmargin: 1e9\nwindow: [10, 20]\n", "margin must be a number of points"),
    ("baseline: grpo\nmargin: 5\nwindow: [10, 20]\narms: oops\n", "arms must be a list"),
    ("baseline: nobody\nmargin: 5\nwindow: [10, 20]\n", "baseline 'nobody' has no finished runs"),
])
def test_a_malformed_reading_is_one_line_and_exit_2(tmp_path, capsys, content, said):
    study = _reading_study(tmp_path)
    (study / "reading.yaml").write_text(content)
    assert main(["study", str(study)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
