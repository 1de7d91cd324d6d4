"""A study's runs as the study reads them: `<study>/<arm>/seed<S>/` loaded into `Run`, their settings, the
shared warm-ups they start from, and their curves over steps, FLOPs and samples."""
from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cotrain.config import RENAMED_SECTIONS, build_config, read_json_mapping, read_yaml_mapping
from cotrain.errors import UserError
from cotrain.registry import RECIPES, STUDY
from cotrain.runs.rundir import load_metrics
from cotrain.stats import mean_ci95


BASELINE, LABELFREE, LONG, CURVE = STUDY.baseline, STUDY.labelfree, STUDY.long, "eval/test/pass@1"


JUDGE = "gt/judge_agree"  # a judge's verdicts against the truth, read for display only (label-free recipes)


SAMPLED = "tokens/gen_generated_total"  # the tokens the generator sampled: "samples drawn", in tokens


AUTO, SCHEDULE = STUDY.auto, STUDY.schedule  # `cotraining.alpha: auto` and the paper's schedule (auto_criteria)


LARGER = STUDY.larger  # <run>/larger/: the run's final model evaluated again on more problems


@dataclass
class Run:
    """One archived run: its final evaluation, its in-training curve and the machine it ran on."""

    eval: dict
    steps: list[int] = field(default_factory=list)   # steps of the in-training evaluations
    acc: list[float] = field(default_factory=list)   # greedy pass@1 there (eval.n_during problems)
    flops: list[float] = field(default_factory=list)  # cumulative FLOPs there, warm-up included
    sampled: list[float] = field(default_factory=list)  # cumulative tokens the generator sampled there
    agree: dict[int, float] = field(default_factory=dict)  # step -> its judge's agreement with the truth
    step_times: list[float] = field(default_factory=list)  # wall seconds of each training step (time/step)
    warmup_flops: float = 0.0                          # FLOPs spent before the first generator step
    alpha: float | None = None                         # mean process-reward weight over the steps (tango)
    trust: float | None = None                         # mean reliability r_t over the steps (cotraining.alpha: auto)
    cpu: str = "?"
    verifier_init: str = ""                            # the verifier.init of a run that has a verifier
    init: str = ""                                     # the run's start (`init`)
    start: float | None = None                         # its start's test pass@1, where not the study's SFT start
    recipe: str = "?"
    verifier_source: str = "model"                     # verifier.source: model, or the oracle standing in for it
    process: tuple = ()                                # tango's process term: (credit, α, α schedule, groups)
    setting: dict = field(default_factory=dict)        # its resolved config (`run_setting`); {} where unreadable
    outcomes: dict = field(default_factory=dict)       # outcomes.json: {split: {"correct": "0110…", "questions_sha256"}}
    larger: Run | None = None                          # larger/: its final model evaluated again on more problems

    def final(self, split: str) -> float | None:
        return self.eval.get("generator", {}).get(split, {}).get("pass@1")

    def second_half(self) -> float | None:
        """The mean in-training accuracy over the evaluations past the run's middle step (not its start)."""
        if not self.steps:
            return None
        late = [a for s, a in zip(self.steps, self.acc) if s > self.steps[-1] / 2]
        return sum(late) / len(late) if late else None


def read_outcomes(run_dir: Path) -> dict[str, dict]:
    """A run's outcomes.json, {split: {"correct": "0110…", "questions_sha256": …}}, less any split whose entry
    is not that; {} where the run kept none.

    Raises:
        UserError: the file is not a JSON object (one line).
    """
    path = Path(run_dir) / "outcomes.json"
    if not path.is_file():
        return {}
    return {split: o for split, o in read_json_mapping(path, "the run's outcomes").items() if isinstance(o, dict)
            and isinstance(o.get("correct"), str) and set(o["correct"]) <= {"0", "1"}
            and isinstance(o.get("questions_sha256"), str)}


def read_larger(path: Path) -> dict:
    """A larger evaluation's eval.json, {"generator": {split: {"pass@1": …, "n": …, …}}}.

    Raises:
        UserError: it is not JSON of that shape (one line).
    """
    raw = read_json_mapping(path, "the run's larger evaluation")
    splits = raw.get("generator")
    if not isinstance(splits, dict) or not all(
            isinstance(m, dict) and type(m.get("n")) is int and type(m.get("pass@1")) in (int, float)
            for m in splits.values()):
        raise UserError(f"{path}: not an evaluation of the generator "
                        '({"generator": {split: {"pass@1": <number>, "n": <problems>}}})')
    return raw


def load_run(run_dir: Path) -> Run:
    run = Run(read_json_mapping(run_dir / "eval.json", "the run's eval.json"))
    flops, sampled, alphas, trusts = 0.0, 0.0, [], []
    for row in load_metrics(run_dir):
        flops = row.get("flops/total", flops)
        sampled = row.get(SAMPLED, sampled)
        if isinstance(row.get("time/step"), (int, float)):
            run.step_times.append(float(row["time/step"]))
        if isinstance(row.get(JUDGE), (int, float)) and "step" in row:
            run.agree[int(row["step"])] = float(row[JUDGE])
        alphas += [row["gen/alpha"]] if "gen/alpha" in row else []
        trusts += [row["gen/alpha_trust"]] if "gen/alpha_trust" in row else []
        if row.get("step") == 0:
            run.warmup_flops = flops
        if CURVE in row:
            run.steps.append(int(row["step"]))
            run.acc.append(float(row[CURVE]))
            run.flops.append(float(flops))
            run.sampled.append(float(sampled))
    run.sampled = run.sampled if any(run.sampled) else []  # a run that never logged the count
    run.alpha = sum(alphas) / len(alphas) if alphas else None
    run.trust = sum(trusts) / len(trusts) if trusts else None
    config = run_dir / "config.yaml"
    if config.is_file():
        raw = read_yaml_mapping(config, "the run's config")
        run.setting = run_setting(raw)
        verifier = raw.get("verifier")
        run.recipe = str(raw.get("recipe", "?"))
        run.init = str(raw.get("init") or "")
        uses = RECIPES.get(run.recipe)
        if isinstance(verifier, dict) and uses is not None and {"verifier", "judge"} & set(uses.roles):
            run.verifier_init = str(verifier.get("init") or "")  # a recipe without a verifier ignores it
            run.verifier_source = str(verifier.get("source") or "model")
        names = ("cotraining", *(old for old, new in RENAMED_SECTIONS.items() if new == "cotraining"))
        process = next((raw[name] for name in names if isinstance(raw.get(name), dict)), None)
        if uses is not None and uses.step_verdicts and process is not None:
            run.process = tuple(str(process.get(k, default)) for k, default in
                                (("credit", "to_go"), ("alpha", 0.1), ("alpha_schedule", "exp"), ("process_groups", "all")))
    run.outcomes = read_outcomes(run_dir)
    if (run_dir / LARGER / "eval.json").is_file():
        run.larger = Run(read_larger(run_dir / LARGER / "eval.json"), outcomes=read_outcomes(run_dir / LARGER))
    env = run_dir / "env.json"
    if env.is_file():
        e = read_json_mapping(env, "the run's env.json")
        autocast = (e.get("precision") or {}).get("bf16_autocast")
        family = f" {e['cpu_family_model']}" if e.get("cpu_family_model") else ""
        run.cpu = f"{e.get('cpu', '?')}{family} ({e.get('cpu_capability', '?')}" + (
            "" if autocast is None else ", bf16 autocast" if autocast else ", fp32") + ")"
    return run


PLACE = ("out_dir", "log.", "checkpoint.", "eval.larger_n")  # where a run writes and what it reports: not what it trains


PRECISION = "train.bf16"


def _dotted(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def run_setting(raw: dict) -> dict:
    """A run's config as today's schema resolves it (defaults filled in, old section names read as new),
    as dotted keys, less where the run writes and what it reports (`PLACE`); {} where today's schema no
    longer reads it. Two runs of different versions that trained alike have equal settings."""
    try:
        resolved = build_config(raw).model_dump()
    except UserError:
        return {}
    return {k: v for k, v in _dotted(resolved).items() if not k.startswith(PLACE)}


def load_study(study_dir: str | Path) -> dict[str, dict[int, Run]]:
    """{arm: {seed: Run}} of every `<arm>/seed<S>/eval.json` under the study; arms sorted, baseline first."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise UserError(f"{study_dir}: no such study directory")
    arms: dict[str, dict[int, Run]] = {}
    for ev in sorted(study_dir.glob("*/seed*/eval.json")):
        arm, seed = ev.parent.parent.name, ev.parent.name.removeprefix("seed")
        if arm != "starts" and seed.isdigit():
            arms.setdefault(arm, {})[int(seed)] = load_run(ev.parent)
    if not arms:
        raise UserError(f"{study_dir}: no finished runs (<arm>/seed<S>/eval.json)")
    return dict(sorted(arms.items(), key=lambda kv: (kv[0] != BASELINE, kv[0])))


# committed warm-ups a study's runs may start from: a start named `warm` or `warm_<anything>` (a verifier's
# warm-up: several verifier sizes or formats in one study) or `judge`
WARMUPS = {  # kind -> (its model, the Run field naming it, where the run that made it keeps the model)
    "warm": ("verifier", "verifier_init", "warmup/verifier"),  # tango's verifier warm-up, read through verifier.init
    "judge": ("generator", "init", "final/generator"),          # self_rewarding's judge: the model is its own judge
}


def warmup_kind(start: str) -> str | None:
    """The WARMUPS kind of a start directory's name: `warm`, `warm_small` -> "warm"; `judge`; else None."""
    return "warm" if start == "warm" or start.startswith("warm_") else "judge" if start == "judge" else None


def add_shared_warmup(arms: dict[str, dict[int, Run]], flops: float, made_in: str | None = None,
                      start: str = "warm", start_accuracy: float | None = None) -> None:
    """Count a committed warm-up of `flops` FLOPs (`starts/<start>/`) in every run that started from it:
    for `warm`, a verifier.init ending in starts/warm/verifier, for `judge` an init ending in
    starts/judge/generator, or either naming the model in the run directory the warm-up was made in
    (`made_in`, as a run started before the warm-up was committed does). Its warm-up, and every point of
    its FLOPs curve. Where the committed model is the run's generator (`judge`), the run's start becomes
    that model's `test` pass@1 (`start_accuracy`), read in place of the study's SFT start."""
    model, attr, kept = WARMUPS[warmup_kind(start)]
    sources = [f"starts/{start}/{model}"] + ([f"{made_in.rstrip('/')}/{kept}"] if made_in else [])
    for runs in arms.values():
        for run in runs.values():
            if any(getattr(run, attr).rstrip("/").endswith(src) for src in sources):
                run.warmup_flops += flops
                run.flops = [f + flops for f in run.flops]
                if model == "generator":  # the committed model is the run's generator: its start
                    run.start = start_accuracy


def add_shared_warmups(arms: dict[str, dict[int, Run]], study_dir: Path) -> None:
    """`add_shared_warmup` for each committed warm-up the study keeps (starts/warm, starts/warm_*,
    starts/judge)."""
    starts = Path(study_dir) / "starts"
    names = sorted(p.name for p in starts.iterdir() if p.is_dir() and warmup_kind(p.name)) if starts.is_dir() else []
    for start in names:
        flops = shared_warmup_flops(study_dir, start)
        if flops:
            add_shared_warmup(arms, flops, shared_warmup_origin(study_dir, start), start,
                              build_start(study_dir, start))


def shared_warmup_origin(study_dir: Path, start: str = "warm") -> str | None:
    """The run directory the study's committed warm-up was made in (`--out` of starts/<start>/COMMAND)."""
    command = Path(study_dir) / "starts" / start / "COMMAND"
    found = re.search(r"--out\s+(\S+)", command.read_text(encoding="utf-8")) if command.is_file() else None
    return found.group(1) if found else None


def shared_warmup_flops(study_dir: Path, start: str = "warm") -> float:
    """The FLOPs of the study's committed warm-up `starts/<start>` (the last `compute/total/flops` its
    record logged), or 0 where the study keeps none."""
    record = Path(study_dir) / "starts" / start
    if not (record / "metrics.jsonl.gz").is_file() and not (record / "metrics.jsonl").is_file():
        return 0.0
    flops = 0.0
    for row in load_metrics(record):
        flops = row.get("eval/compute/total/flops", row.get("flops/total", flops))
    return float(flops)


def steps_to_reach(steps: list[int], acc: list[float], target: float) -> int | None:
    """The first step whose accuracy is at least `target` (up to float rounding of the means), or None if
    the curve never gets there."""
    return next((s for s, a in zip(steps, acc) if a >= target - 1e-9), None)


def _common_steps(runs: dict[int, Run]) -> list[int]:
    """The steps every seed evaluated at."""
    return sorted(set.intersection(*(set(r.steps) for r in runs.values())))


def _seed_mean(runs: dict[int, Run], values, steps: list[int]) -> list[float]:
    """The mean over seeds, at each of `steps`, of `values(run)` (a list aligned with run.steps)."""
    series = [(r.steps, values(r)) for r in runs.values()]
    return [sum(v[st.index(s)] for st, v in series) / len(series) for s in steps]


def mean_curve(runs: dict[int, Run], after_warmup: bool = False) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, mean accuracy, CI half-width, mean FLOPs) over the seeds, at the steps every seed evaluated;
    with `after_warmup`, the FLOPs spent since the warm-up."""
    common = _common_steps(runs)
    acc, half = [], []
    for s in common:
        m, h = mean_ci95([r.acc[r.steps.index(s)] for r in runs.values()])
        acc.append(m)
        half.append(0.0 if math.isnan(h) else h)
    flops = _seed_mean(runs, lambda r: [f - (r.warmup_flops if after_warmup else 0.0) for f in r.flops], common)
    return common, acc, half, flops


def at_flops(flops: list[float], acc: list[float], budget: float) -> float | None:
    """The accuracy of the last evaluation whose cumulative FLOPs are within `budget`, or None when the
    curve ends before the budget (it would have to run on) or starts after it."""
    if not flops or flops[-1] < budget:
        return None
    within = [a for f, a in zip(flops, acc) if f <= budget]
    return within[-1] if within else None


def step_seconds(runs: dict[int, Run]) -> str:
    """Wall seconds per training step (`time/step`, every role's work in it; evaluations not), the mean
    over seeds of each run's median, e.g. "4.2"; "–" where no run logged it. Comparable between arms
    that ran on the same machine kind under the same load (the CPU column says which)."""
    medians = [statistics.median(r.step_times) for r in runs.values() if r.step_times]
    return f"{sum(medians) / len(medians):.1f}" if medians else "–"


def at_equal_samples(arms: dict[str, dict[int, Run]], arm: str) -> str:
    """The tokens the arm's generator sampled over training (mean over seeds), GRPO's in-training accuracy
    once it had sampled as many (its mean curve, from `grpo_long` where the study has it, else from `grpo`)
    and the arm's own last in-training accuracy, both on the same `eval.n_during` problems: e.g. "0.61M
    (grpo 0.467, this arm 0.412)"; "past its end" where GRPO's curve stops short of that count."""
    runs = arms[arm]
    if not all(r.sampled for r in runs.values()):
        return "–"
    drawn = sum(r.sampled[-1] for r in runs.values()) / len(runs)
    ref = next((arms[a] for a in (LONG, BASELINE) if a in arms and a != arm
                and all(r.sampled and r.steps for r in arms[a].values())), None)
    if ref is None or arm in (BASELINE, LONG):
        return f"{drawn / 1e6:.2f}M"
    common = _common_steps(ref)
    x = at_flops(_seed_mean(ref, lambda r: r.sampled, common), _seed_mean(ref, lambda r: r.acc, common), drawn)
    own = f", this arm {mean_curve(runs)[1][-1]:.3f}" if all(r.steps for r in runs.values()) else ""
    return f"{drawn / 1e6:.2f}M (grpo {x:.3f}{own})" if x is not None else f"{drawn / 1e6:.2f}M (grpo: past its end)"


def cell(values: list[float]) -> str:
    m, h = mean_ci95(values)
    return "–" if math.isnan(m) else (f"{m:.3f}" if math.isnan(h) else f"{m:.3f} ± {h:.3f}")


def mean_alpha(runs: dict[int, Run]) -> float | None:
    alphas = [r.alpha for r in runs.values() if r.alpha is not None]
    return sum(alphas) / len(alphas) if alphas else None


def build_start(study_dir: str | Path, start: str | None = None) -> float | None:
    """The `test` pass@1 of the generator of the study's start `starts/<start>/eval.json`, or None. By
    default the SFT start the arms share (`starts/sft`), else the published model they start from
    (`starts/model`, where the arms train a published model with no SFT of ours)."""
    for name in [start] if start else [STUDY.start, STUDY.published]:
        start_eval = Path(study_dir) / "starts" / name / "eval.json"
        if start_eval.is_file():
            return json.loads(start_eval.read_text(encoding="utf-8")).get("generator", {}).get("test", {}).get("pass@1")
    return None


def read_jsonl_gz(path: Path) -> list[dict]:
    """The rows of a gzipped JSON-lines file (`runs.rundir.write_jsonl_gz_atomic`)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise UserError(f"{path}: not gzipped JSON lines ({type(err).__name__})") from None
    if not all(isinstance(row, dict) for row in rows):
        raise UserError(f"{path}: a line is not a JSON object")
    return rows
