"""A study's table and figure, built from what `results/<study>/` keeps (runs/archive.py).

Layout read: `<study>/<arm>/seed<S>/{eval.json, metrics.jsonl.gz, env.json}`; the arm named `grpo` is the
baseline every other arm is paired with, seed by seed (cotrain.stats); an arm named `labelfree` is the
label-free arm of the plan's "excellent" criterion, whose gain is read against the start's greedy pass@1
(`<study>/starts/sft/eval.json`, else `starts/model/eval.json`, the published model's, the same problems as
the arms' final evaluation); an arm named
`grpo_long` is GRPO run on past the others' steps, read at each arm's FLOPs (equal compute). A verifier
warmed up once and committed as `<study>/starts/warm/verifier` is a cost the runs that start from it do not
log: the study adds that record's FLOPs (`<study>/starts/warm/metrics.jsonl.gz`) to their warm-up. An arm
whose runs are grpo's but for their precision (`train.bf16`, e.g. `grpo_fp32`) is GRPO run on another machine
kind: a seed of an arm that ran on another machine kind than grpo's is paired with it as well, below the table,
and the plan's criteria read that pairing where it covers every seed the plain one does. A run may also keep its
final model evaluated again on more problems, `<arm>/seed<S>/larger/{eval.json, outcomes.json}` (`eval.larger_n`,
or `cotrain eval RUN --n N --out RUN/larger/eval.json --outcomes RUN/larger/outcomes.json`): the study reads each
seed's pair there too, problem by problem, where both runs of the pair have one on the same problems (`larger_table`).

    cotrain study results/<study>        prints the table, writes <study>/table.md, <study>/curves.png and
                                         <study>/differences.png (each arm's paired difference with grpo)
"""
from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from cotrain.analysis.reading import read_spec, reading_table
from cotrain.config import RENAMED_SECTIONS, build_config, read_json_mapping, read_yaml_mapping
from cotrain.errors import UserError
from cotrain.eval.metrics import wilson_interval
from cotrain.eval.verifier_metrics import sound_balanced_accuracy, whole_verdict_errors
from cotrain.registry import RECIPES, STUDY
from cotrain.runs.rundir import load_metrics
from cotrain.stats import (
    POINTS,
    Z975,
    Criterion,
    Paired,
    auto_criteria,
    ceiling_share,
    evaluation_sd,
    interval,
    mean_ci95,
    paired_difference,
    paired_evaluation_sd,
    plan_criteria,
    seeds_needed,
)

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


def _cell(values: list[float]) -> str:
    m, h = mean_ci95(values)
    return "–" if math.isnan(m) else (f"{m:.3f}" if math.isnan(h) else f"{m:.3f} ± {h:.3f}")


def _mean_alpha(runs: dict[int, Run]) -> float | None:
    alphas = [r.alpha for r in runs.values() if r.alpha is not None]
    return sum(alphas) / len(alphas) if alphas else None


VERDICT = {True: "holds", False: "does not hold", None: "cannot say"}


SECOND_HALF = "second half"  # what the study pairs besides a split's final pass@1: `Run.second_half`


def _finals(runs: dict[int, Run], split: str) -> dict[int, float]:
    """Each seed's final pass@1 on `split`, or its in-training mean over the second half (`SECOND_HALF`)."""
    values = {s: r.second_half() if split == SECOND_HALF else r.final(split) for s, r in runs.items()}
    return {s: v for s, v in values.items() if v is not None}


def _vs_baseline(arms: dict[str, dict[int, Run]], arm: str, split: str):
    """The paired (arm − grpo) difference of the final `split` pass@1 (or `SECOND_HALF`) in points, or None (no
    grpo arm, the arm is grpo, or no seed in common)."""
    base = arms.get(BASELINE)
    if not base or arm == BASELINE:
        return None
    b, a = _finals(base, split), _finals(arms[arm], split)
    return paired_difference(b, a, POINTS) if set(b) & set(a) else None


HOME = "against GRPO on each seed's own machine kind"


def _grpo_pairing(arms: dict[str, dict[int, Run]], arm: str, split: str) -> tuple[dict[int, float], dict[int, float], str] | None:
    """(GRPO's finals, the arm's, a note) over the seeds the criteria pair: against GRPO on each seed's own
    machine kind (`home_baseline`) where a seed ran on another machine kind than grpo's and GRPO ran every
    seed of the plain pairing on the arm's own, with a note saying so; else grpo's own runs of the seeds both
    ran and no note. None where there is no grpo arm, the arm is grpo, or no seed is shared."""
    base = arms.get(BASELINE)
    if not base or arm == BASELINE:
        return None
    b, mine = _finals(base, split), _finals(arms[arm], split)
    paired = set(b) & set(mine)
    if not paired:
        return None
    home, names = home_baseline(arms, arm, split)
    seeds = set(home) & set(mine)
    if not paired <= seeds or all(names[s] == BASELINE for s in seeds):
        return {s: b[s] for s in paired}, {s: mine[s] for s in paired}, ""
    return {s: home[s] for s in seeds}, {s: mine[s] for s in seeds}, f" ({HOME})"


def _paired_runs(arms: dict[str, dict[int, Run]], arm: str, split: str) -> dict[int, tuple[str, Run]]:
    """{seed: (the GRPO arm, its run)} that `_grpo_pairing` pairs each of `arm`'s seeds with: GRPO's run on the
    seed's own machine kind where the pairing says so (`home_baseline`), else grpo's own; {} where it pairs none."""
    pairing = _grpo_pairing(arms, arm, split)
    if pairing is None:
        return {}
    base, _, note = pairing
    names = home_baseline(arms, arm, split)[1] if note else {}
    return {s: (names.get(s, BASELINE), arms[names.get(s, BASELINE)][s]) for s in sorted(base)}


def _vs_grpo(arms: dict[str, dict[int, Run]], arm: str, split: str) -> tuple[Paired | None, str]:
    """The paired difference the criteria read (`_grpo_pairing`), and the note for its figures. The study's
    table and its criteria read this pairing."""
    pairing = _grpo_pairing(arms, arm, split)
    if pairing is None:
        return None, ""
    base, mine, note = pairing
    return paired_difference(base, mine, POINTS), note


def resolution(arms: dict[str, dict[int, Run]], split: str = "test") -> str:
    """What the study's seeds can resolve: how far the seed-by-seed differences with GRPO spread (the criteria's
    pairing, `_grpo_pairing`, over the seeds run on one machine kind as GRPO's; GRPO rerun on another machine
    kind left out), as the median over the arms with two such seeds or more of each one's sample sd (a median,
    so an arm that collapses on one seed does not set it), the seeds a paired 95% interval of ±2 and ±5 points
    then needs (the minimum criterion's margin at a tie, the good criterion's at a lead of +5), and how much of
    the spread the final evaluation's own draw of problems can make (`evaluation_sd`). "" where no arm has two
    such seeds. Where both runs of such pairs kept each problem's outcome on the same problems (`outcomes.json`),
    it also gives that part as measured problem by problem (`paired_evaluation_sd`, its root mean square over
    the pairs), and the seeds ±2 would need without it."""
    twins, groups, finals, problems, measured = baseline_twins(arms), [], [], [], []
    for arm, runs in arms.items():
        pairing = None if arm in twins else _grpo_pairing(arms, arm, split)
        if pairing is None:
            continue
        base, mine, home = pairing
        paired = _paired_runs(arms, arm, split)
        seeds = [s for s in sorted(mine) if home or _alike(runs[s], arms[BASELINE][s])]
        if len(seeds) >= 2:
            groups.append([POINTS * (mine[s] - base[s]) for s in seeds])
            finals += [mine[s] for s in seeds] + [base[s] for s in seeds]
            problems += [runs[s].eval["generator"][split].get("n") for s in seeds]
            pairs = [_problem_by_problem(paired[s][1], runs[s], split) for s in seeds]
            measured += [x for x in pairs if x is not None]
    if not groups:
        return ""
    sds = [statistics.stdev(g) for g in groups]
    sd = statistics.median(sds)
    n, p = max(set(problems), key=problems.count), statistics.mean(finals)
    e = POINTS * evaluation_sd(p, n) if isinstance(n, int) else math.nan
    rest = math.sqrt(max(sd ** 2 - e ** 2, 0.0))

    def needs(spread: float, margin: float) -> str:
        count = seeds_needed(spread, margin)
        return "more than 10,000 seeds" if count is None else f"{count} seeds"

    arms_text = f"{len(groups)} arm{'s' if len(groups) > 1 else ''}"
    spread = f"a median sd of {sd:.1f} ({min(sds):.1f} to {max(sds):.1f})" if len(sds) > 1 else f"an sd of {sd:.1f}"
    text = (f"What its seeds can resolve ({split}, points): the seed-by-seed differences with {BASELINE} of {arms_text} "
            f"with two seeds or more on one machine kind spread by {spread}, "
            f"so a paired 95% interval is ±{interval(sd, 3):.1f} on 3 seeds and ±{interval(sd, 5):.1f} on 5; "
            f"±2 (the minimum criterion's margin at a tie) needs {needs(sd, 2)}, ±5 (the good criterion's at a lead "
            f"of +5) {needs(sd, 5)}.")
    if not math.isnan(e):
        text += (f" The final evaluation's {n} problems alone move a seed's difference by up to {e:.1f} (two models "
                 f"near the mean pass@1 {p:.2f} whose errors are unrelated)" + (
                     f"; were all of that gone, ±2 would still need {needs(rest, 2)}." if rest > 0 else ": as much as the whole spread."))
    if measured:
        m = math.sqrt(statistics.mean(x ** 2 for x in measured))
        rest = math.sqrt(max(sd ** 2 - m ** 2, 0.0))
        text += (f" Measured problem by problem on the {len(measured)} pair{'s' if len(measured) > 1 else ''} that kept "
                 f"each problem's outcome, it moves them by {m:.1f}" + (
                     f"; without it, ±2 would need {needs(rest, 2)}." if rest > 0 else ", as much as the whole spread."))
    return text


def _agrees(correct: str, run: Run, split: str) -> bool:
    """Whether per-problem outcomes are those of the run's final evaluation of `split`: as many problems, and as
    many right as its Wilson interval counts (or, without one, as its pass@1 does)."""
    metrics = run.eval.get("generator", {}).get(split, {})
    hits, n = correct.count("1"), len(correct)
    if n != metrics.get("n") or n == 0:
        return False
    if isinstance(metrics.get("pass@1_ci95_lo"), (int, float)):
        return math.isclose(wilson_interval(hits, n)[0], metrics["pass@1_ci95_lo"], abs_tol=1e-9)
    return isinstance(metrics.get("pass@1"), (int, float)) and math.isclose(hits / n, metrics["pass@1"], abs_tol=1e-9)


def _problem_by_problem(base: Run, run: Run, split: str) -> float | None:
    """How far the draw of problems moves the pair's difference (points), read from both runs' per-problem
    outcomes of `split` (`paired_evaluation_sd`); None unless both kept them on the same problems and each
    agrees with its eval.json (a stale outcomes.json beside a newer evaluation is not read)."""
    pair = same_problems(base.outcomes.get(split), run.outcomes.get(split))
    if pair is None or not (_agrees(pair[0], base, split) and _agrees(pair[1], run, split)):
        return None
    sd = paired_evaluation_sd(*pair)
    return None if math.isnan(sd) else POINTS * sd


def _larger_pair(base: Run, run: Run, split: str) -> tuple[str, str] | None:
    """The two runs' per-problem outcomes of `split` on their larger evaluations (`Run.larger`), as ("0110…",
    "1010…"), where both have one on the same problems that agrees with its eval.json (`_agrees`); else None."""
    if base.larger is None or run.larger is None:
        return None
    pair = same_problems(base.larger.outcomes.get(split), run.larger.outcomes.get(split))
    if pair is None or not (_agrees(pair[0], base.larger, split) and _agrees(pair[1], run.larger, split)):
        return None
    return pair


def larger_table(arms: dict[str, dict[int, Run]], split: str = "test") -> str:
    """Each arm's seeds read again on their final models' larger evaluation (`Run.larger`): for every seed whose
    run and the GRPO run the table pairs it with (`_paired_runs`) both hold one on the same problems
    (`_larger_pair`), the arm − GRPO difference in points on the runs' own final evaluation and on the larger
    one, with the larger one's 95% interval over its problems, paired problem by problem (z x
    `paired_evaluation_sd`: it says nothing of another seed); under the table, an arm with two such seeds or
    more gets the paired interval over them on both evaluations, and so do the arms of one setting but for the
    precision (`train.bf16`) run on other machine kinds (e.g. `oracle_xeon` and `oracle_icelake`), over those
    of their pairs whose GRPO run is of the seed's own machine kind, and over seeds with each seed's pairs
    averaged first (`over_seeds`). "" where no pair has one (grpo and its twins,
    `baseline_twins`, are the pairs' other half, not rows)."""
    twins, rows, over, settings = baseline_twins(arms), [], [], {}
    for arm, runs in arms.items():
        if arm == BASELINE or arm in twins:
            continue
        own, again = ({}, {}), ({}, {})  # (GRPO's, the arm's) {seed: pass@1}: the runs' own evaluation, the larger one
        home = set()  # the seeds paired with GRPO on their own machine kind: those the setting's pooled line reads
        for s, (name, base) in _paired_runs(arms, arm, split).items():
            pair = _larger_pair(base, runs[s], split)
            if pair is None or len(pair[0]) < 2 or base.final(split) is None or runs[s].final(split) is None:
                continue
            own[0][s], own[1][s] = base.final(split), runs[s].final(split)
            again[0][s], again[1][s] = base.larger.final(split), runs[s].larger.final(split)
            if "?" not in base.cpu and base.cpu == runs[s].cpu:
                home.add(s)
            d, half = POINTS * (again[1][s] - again[0][s]), POINTS * Z975 * paired_evaluation_sd(*pair)
            rows.append(f"| {arm} | {s} | {name} | {POINTS * (own[1][s] - own[0][s]):+.1f} "
                        f"({base.eval['generator'][split].get('n', '?')}) | {again[0][s]:.3f} → {again[1][s]:.3f} | "
                        f"{d:+.1f} [{d - half:+.1f}, {d + half:+.1f}] ({len(pair[0])}) |")
        if len(again[0]) >= 2:
            over.append(f"- {arm}, over seeds {', '.join(map(str, sorted(again[0])))}: "
                        f"{paired_difference(*again, POINTS).text()} on the larger evaluation, "
                        f"{paired_difference(*own, POINTS).text()} on the runs' own")
        if home and (setting := _setting_key(runs)) is not None:  # one setting: its arms on other kinds join it
            settings.setdefault(setting, []).append((arm, *({s: v for s, v in part.items() if s in home}
                                                            for part in (*own, *again))))
    for group in settings.values():
        pooled = [{}, {}, {}, {}]  # GRPO's and the arm's pass@1, own then larger evaluation: {(arm, seed): value}
        for arm, *parts in group:
            for kept, part in zip(pooled, parts):
                kept.update({(arm, s): v for s, v in part.items()})
        if len(group) >= 2 and len(pooled[2]) >= 2:
            over.append(f"- {', '.join(arm for arm, *_ in group)} (one setting on other machine kinds, each seed against "
                        f"GRPO on its own), over their {len(pooled[2])} pairs: "
                        f"{paired_difference(pooled[2], pooled[3], POINTS).text()} on the larger evaluation, "
                        f"{paired_difference(pooled[0], pooled[1], POINTS).text()} on the runs' own; over seeds, each "
                        f"seed's pairs averaged first: {over_seeds(pooled[2], pooled[3]).text()} on the larger "
                        f"evaluation, {over_seeds(pooled[0], pooled[1]).text()} on the runs' own")
    if not rows:
        return ""
    return "\n".join([f"| arm | seed | against | arm − GRPO, {split}, the runs' own final evaluation, points "
                      f"(problems) | GRPO → arm, larger evaluation | arm − GRPO there, 95% over its problems "
                      f"(problems) |", "|---|---|---|---|---|---|", *rows] + ([""] + over if over else []))


def _setting_key(runs: dict[int, Run]) -> tuple | None:
    """The setting an arm's runs share but for their seed and precision (`train.bf16`), as a key that arms of
    one setting run on other machine kinds share; None where its runs differ or one's setting is unreadable."""
    setting = {tuple(sorted((k, repr(v)) for k, v in r.setting.items() if k not in ("seed", PRECISION)))
               for r in runs.values()}
    return setting.pop() if len(setting) == 1 and () not in setting else None


def over_seeds(base: dict[tuple[str, int], float], mine: dict[tuple[str, int], float]) -> Paired:
    """mine − base in points over the seeds of pairs keyed (arm, seed), each seed's pairs on its machine kinds
    averaged first: the seed is the unit. Runs of one seed on other machine kinds share their start, their
    problems in one order and their first steps' samples, so they are no independent seeds; an interval over
    the pairs themselves is narrower than its seeds allow."""
    by_seed: dict[int, list[tuple[str, int]]] = {}
    for key in sorted(set(base) & set(mine)):
        by_seed.setdefault(key[1], []).append(key)
    return paired_difference({s: statistics.fmean(base[k] for k in keys) for s, keys in by_seed.items()},
                             {s: statistics.fmean(mine[k] for k in keys) for s, keys in by_seed.items()}, POINTS)


def kinds_table(arms: dict[str, dict[int, Run]]) -> str:
    """The arms of one setting but for the precision run on other machine kinds (`_setting_key`; e.g. `oracle`,
    `oracle_fp32`, `oracle_xeon`), read together: each seed against GRPO's run of it on its own machine kind
    (`home_baseline`; a seed with none is left out), the arm − GRPO difference of the final `test` pass@1 and
    of the in-training mean over the second half, over all the pairs and over seeds (`over_seeds`), and each
    seed's pairs. A row for
    each setting with two arms or more and two pairs or more; "" where there is none (grpo and its twins,
    `baseline_twins`, are the pairs' other half, not rows)."""
    twins, groups = baseline_twins(arms), {}
    for arm, runs in arms.items():
        if arm != BASELINE and arm not in twins and (setting := _setting_key(runs)) is not None:
            groups.setdefault(setting, []).append(arm)
    rows = []
    for names in groups.values():
        pooled = {}  # measure -> (GRPO's, the arms') {(arm, seed): value}
        for measure in ("test", SECOND_HALF):
            b, a = {}, {}
            for arm in names:
                home, mine = home_baseline(arms, arm, measure)[0], _finals(arms[arm], measure)
                for s in set(home) & set(mine):
                    b[arm, s], a[arm, s] = home[s], mine[s]
            pooled[measure] = (b, a)
        b, a = pooled["test"]
        names = [arm for arm in names if any(k[0] == arm for k in b)]
        if len(names) < 2 or len(b) < 2:
            continue
        cpus = {arms[arm][s].cpu for arm, s in b}
        each = "; ".join(f"{s}: " + ", ".join(f"{POINTS * (a[arm, s] - b[arm, s]):+.1f}" if (arm, s) in b else "–"
                                              for arm in names) for s in sorted({s for _, s in b}))
        late = pooled[SECOND_HALF]
        rows.append(f"| {', '.join(names)} | {len(b)} on {len(cpus)} | {paired_difference(b, a, POINTS).text()} | "
                    f"{over_seeds(b, a).text()} | "
                    + (f"{paired_difference(*late, POINTS).text()} / {over_seeds(*late).text()}" if len(late[0]) >= 2 else "–")
                    + f" | {each} |")
    if not rows:
        return ""
    return "\n".join(["| arms of one setting | pairs on machine kinds | arm − GRPO, test, over the pairs (points) | over "
                      "seeds, each seed's pairs averaged first | in-training pass@1, 2nd half: over the pairs / over seeds | "
                      "each seed's pairs, test, in the arms' order (points) |", "|---|---|---|---|---|---|", *rows])


def same_problems(a: dict | None, b: dict | None) -> tuple[str, str] | None:
    """The two runs' per-problem outcomes of one split (`read_outcomes` entries) as ("0110…", "1010…") where
    they were evaluated on the same problems (equal hashes and counts); None where either has none or they differ."""
    if not a or not b or a["questions_sha256"] != b["questions_sha256"] or len(a["correct"]) != len(b["correct"]):
        return None
    return a["correct"], b["correct"]


def _alike(a: Run, b: Run) -> bool:
    """Whether two runs ran on one machine kind and precision (or either's is unknown): a pair the criteria read."""
    return "?" in a.cpu or "?" in b.cpu or a.cpu == b.cpu


def study_criteria(arms: dict[str, dict[int, Run]], start: float | None = None) -> list[tuple[str, Criterion]]:
    """The plan's criteria (`stats.plan_criteria`) of each co-training arm (not the grpo and sft controls)
    against grpo (`_vs_grpo`: GRPO on each seed's own machine kind where it ran there), and `cotraining.alpha:
    auto`'s two rules for its arm, as (arm, criterion) in the study's order of arms. The label-free gain needs
    the start's `test` pass@1 (`start`); label-free against the arm pairs the seeds both ran on one machine kind."""
    out = []
    for arm, runs in arms.items():
        (d_test, note), (d_ood, ood_note) = _vs_grpo(arms, arm, "test"), _vs_grpo(arms, arm, "ood")
        single = all(r.recipe in RECIPES and RECIPES[r.recipe].control for r in runs.values())  # grpo_long, sft: controls
        if d_test is None or arm == LABELFREE or single:  # the criteria compare co-training with grpo
            continue
        test = _finals(runs, "test")
        gain = vs = None
        if LABELFREE in arms and start is not None:
            lf = _finals(arms[LABELFREE], "test")
            gain = paired_difference({s: start for s in lf}, lf, POINTS)
            alike = {s for s in set(lf) & set(test) if _alike(arms[LABELFREE][s], runs[s])}
            if alike:
                vs = paired_difference({s: test[s] for s in alike}, {s: lf[s] for s in alike}, POINTS)
        extra = auto_criteria(d_test, _mean_alpha(runs), _mean_alpha(arms.get(SCHEDULE, {}))) if arm == AUTO else []
        notes = {"minimum": note, "good": note, "great": ood_note}
        out += [(arm, replace(c, figures=c.figures + notes.get(c.name, ""))) for c in plan_criteria(d_test, d_ood, gain, vs, arm) + extra]
    return out


CHECKERS = (  # (eval.json section, metric, what it is): the first a run has is its checker's quality
    ("verifier", "balanced_accuracy", "verifier's balanced accuracy"),
    ("judge", "balanced_accuracy", "judge's balanced accuracy"),
    ("prm", "auroc", "implicit PRM's AUROC"),
)


def checker_quality(runs: dict[int, Run]) -> str:
    """The quality of the arm's verifier, judge or implicit PRM on its final generator's `test` samples
    (mean ± 95% CI over seeds), or V-STaR's best-of-N at the largest N against a random pick; "–" where
    the arm has none."""
    for section, metric, what in CHECKERS:
        values = [r.eval.get(section, {}).get("test", {}).get(metric) for r in runs.values()]
        values = [v for v in values if isinstance(v, (int, float))]
        if values:
            return f"{what} {_cell(values)}"
    bon = [r.eval.get(STUDY.best_of_n, {}).get("test", {}) for r in runs.values()]
    ns = sorted({int(k.split("/")[0][4:]) for b in bon for k in b if k.startswith("bon@") and k.endswith("/vstar")})
    if ns:
        n = ns[-1]
        picked = [b[f"bon@{n}/vstar"] for b in bon if f"bon@{n}/vstar" in b]
        rand = [b[f"bon@{n}/random"] for b in bon if f"bon@{n}/random" in b]
        return f"V-STaR verifier's best of {n} {_cell(picked)} (random pick {_cell(rand)})"
    return "–"


def role_compute(runs: dict[int, Run]) -> str:
    """Each role's compute at the end of training (eval.json `compute`, means over seeds): its FLOPs and
    the tokens through it (run forward to sample or score, plus trained on), e.g. "gen 2.3e+12 (627k);
    ver 3.7e+12 (1,683k)"; the shared warm-up a study adds is not in it. "–" where no run recorded any."""
    roles: dict[str, list[tuple[float, float]]] = {}
    for r in runs.values():
        for role, c in (r.eval.get("compute") or {}).items():
            if role != "total" and isinstance(c, dict) and "flops" in c:
                through = float(c.get("tokens_forward", 0)) + float(c.get("tokens_trained", 0))
                roles.setdefault(role, []).append((float(c["flops"]), through))
    if not roles:
        return "–"
    cells = []
    for role, rows in roles.items():
        flops, through = (sum(x) / len(rows) for x in zip(*rows))
        cells.append(f"{role} {flops:.1e} ({through / 1e3:,.0f}k)")
    return "; ".join(cells)


MARK = "‡"


def _paired_cell(d: Paired | None, note: str) -> str:
    return "–" if d is None else d.text() + (f" {MARK}" if note else "")


def _home_target(arms: dict[str, dict[int, Run]], arm: str) -> float | None:
    """GRPO's final in-training accuracy (mean curve) over the runs `home_baseline` reads `arm`'s seeds
    against: its runs on each seed's own machine kind; None where one of them has no curve."""
    _, names = home_baseline(arms, arm)
    runs = {s: arms[name][s] for s, name in names.items()}
    return mean_curve(runs)[1][-1] if runs and all(r.steps for r in runs.values()) else None


def study_table(arms: dict[str, dict[int, Run]], start: float | None = None) -> str:
    """The study's markdown table: per arm its seeds, final greedy pass@1 (`test`, `ood`; mean ± 95% CI
    half-width), the paired difference with the baseline in points, the steps its mean curve takes to
    reach the baseline's final in-training accuracy (GRPO's on each seed's own machine kind where the paired
    difference reads it, `_vs_grpo`), its FLOPs, its mean process-reward weight α (and
    reliability r with `cotraining.alpha: auto`), its gain over the start's `test` pass@1 (`start`, where
    known; a run from another committed start, a judge's warm-up, against that one's); then the plan's
    criteria per arm."""
    base = arms.get(BASELINE)
    target = mean_curve(base)[1][-1] if base and all(r.steps for r in base.values()) else None
    long = mean_curve(arms[LONG]) if LONG in arms and all(r.steps for r in arms[LONG].values()) else None
    at_home = False
    lines = ["| arm | seeds | test pass@1 | ood pass@1 | paired vs grpo, test (points) | paired vs grpo, ood | "
             "steps to grpo's final | in-training pass@1, 2nd half: paired vs grpo | FLOPs (warm-up) | "
             "grpo at these FLOPs (without the warm-up) | mean α (r) | gain over the start (points) | CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        test = _finals(runs, "test")
        ood = _finals(runs, "ood")
        (d_test, t_note), (d_ood, o_note), (d_half, h_note) = (_vs_grpo(arms, arm, w) for w in ("test", "ood", SECOND_HALF))
        at_home |= bool(t_note or o_note or h_note)
        reach = "–"
        if target is not None and all(r.steps for r in runs.values()):
            steps, acc, _, _ = mean_curve(runs)
            goal = _home_target(arms, arm) if t_note else target
            hit = None if goal is None else steps_to_reach(steps, acc, goal)
            reach = "–" if goal is None else ("not reached" if hit is None else str(hit)) + (f" {MARK}" if t_note else "")
        flops = sum(r.flops[-1] if r.flops else 0.0 for r in runs.values()) / len(runs)
        warm = sum(r.warmup_flops for r in runs.values()) / len(runs)
        cpus = ", ".join(sorted({r.cpu for r in runs.values()}))
        equal = "–"
        if long is not None and arm not in (BASELINE, LONG):
            # the generator's share alone: GRPO's curve is shifted by no warm-up
            per_step = long[3][-1] / long[0][-1] if long[0][-1] else 0.0
            shown = []
            for budget in (flops, flops - warm):
                x = at_flops(long[3], long[1], budget)
                shown.append(f"{x:.3f}" if x is not None else
                             f"past its end: ≈{budget / per_step:,.0f} steps" if per_step else "past its end")
            equal = " (".join(shown) + ")"
        alphas = [r.alpha for r in runs.values() if r.alpha is not None]
        trusts = [r.trust for r in runs.values() if r.trust is not None]
        alpha = "–" if not alphas else f"{sum(alphas) / len(alphas):.4f}" + (
            f" ({sum(trusts) / len(trusts):.3f})" if trusts else "")
        own = {s: runs[s].start if runs[s].start is not None else start for s in test}  # e.g. a judge's warm-up
        over = paired_difference(own, test, POINTS).text() if test and None not in own.values() else "–"
        lines.append(f"| {arm} | {','.join(map(str, sorted(runs)))} | {_cell(list(test.values()))} | "
                     f"{_cell(list(ood.values()))} | {_paired_cell(d_test, t_note)} | "
                     f"{_paired_cell(d_ood, o_note)} | {reach} | {_paired_cell(d_half, h_note)} | {flops:.2e} ({warm:.1e}) | "
                     f"{equal} | {alpha} | {over} | {cpus} |")
    criteria = [f"- {arm}, **{c.name}** ({c.rule}): {VERDICT[c.holds]}; {c.figures}"
                for arm, c in study_criteria(arms, start)]
    lines += ["", "| arm | recipe | labels its training reads | its checker at the end (test) | "
              "FLOPs by role (tokens through it) | generator tokens sampled (grpo's accuracy at as many) | "
              "seconds a step |", "|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        recipes = sorted({r.recipe for r in runs.values()})
        labels = sorted({RECIPES[r].labels for r in recipes if r in RECIPES}) or ["?"]
        sources = sorted({r.verifier_source for r in runs.values()} - {"model"})
        if sources:  # the oracle reads the task's labels in training: its verdicts are process labels
            labels = [f"outcomes; process labels (verifier.source: {', '.join(sources)})"]
        lines.append(f"| {arm} | {', '.join(recipes)} | {'; '.join(labels)} | {checker_quality(runs)} | "
                     f"{role_compute(runs)} | {at_equal_samples(arms, arm)} | {step_seconds(runs)} |")
    if target is not None:
        lines.append(f"\ngrpo's final in-training accuracy (mean curve): {target:.3f}")
    if at_home:
        lines.append(f"\n{MARK} {HOME}: a seed of the arm ran on another machine kind than {BASELINE}'s, and GRPO ran "
                     f"every paired seed on its own machine kind too (which run, below; the criteria read the same)")
    apart = cross_machine_pairs(arms)
    return "\n".join(lines + ([""] + apart if apart else []) + ([""] + criteria if criteria else []))


def baseline_twins(arms: dict[str, dict[int, Run]]) -> dict[str, dict[int, Run]]:
    """The arms other than grpo each of whose runs has the setting of grpo's run of its seed but for its
    precision (`train.bf16`): GRPO itself, run again on another machine kind (e.g. `grpo_fp32`)."""
    base = arms.get(BASELINE) or {}

    def alike(run: Run, seed: int) -> bool:
        other = base[seed].setting if seed in base else {}
        return bool(run.setting) and bool(other) and all(
            run.setting.get(k) == other.get(k) for k in set(run.setting) | set(other) if k != PRECISION)

    return {arm: runs for arm, runs in arms.items()
            if arm != BASELINE and runs and all(alike(r, s) for s, r in runs.items())}


def home_baseline(arms: dict[str, dict[int, Run]], arm: str, split: str = "test") -> tuple[dict[int, float], dict[int, str]]:
    """For each seed of `arm`, the final `split` pass@1 (or `SECOND_HALF`) of GRPO's run of that seed on the
    same machine kind and precision (grpo's own, else a twin's, `baseline_twins`, other than `arm` itself), and
    the arm it comes from; seeds with no such run are left out."""
    finals, names = {}, {}
    for seed, run in arms[arm].items():
        for name, runs in [(BASELINE, arms.get(BASELINE) or {}), *baseline_twins(arms).items()]:
            if name == arm or seed not in runs or "?" in run.cpu or runs[seed].cpu != run.cpu:
                continue
            if there := _finals({seed: runs[seed]}, split):
                finals[seed], names[seed] = there[seed], name
                break
    return finals, names


def cross_machine_pairs(arms: dict[str, dict[int, Run]]) -> list[str]:
    """A line for each arm whose seeds ran on another machine kind or precision than the baseline's same
    seeds: such a pair shares its start, problems and seeds but not its kernels' rounding, so it is paired
    less tightly than the rest (a difference of precision can shift accuracy on its own). Where GRPO ran
    those seeds on the arm's machine kind too (`home_baseline`), a line more gives the pairing the table does
    not: against grpo alone where the table reads each seed against GRPO on its own machine kind (`_vs_grpo`),
    else that one over the seeds it covers. [] where every pair ran alike or a machine is unknown."""
    base = arms.get(BASELINE) or {}
    twins = baseline_twins(arms)
    lines = []
    for arm, runs in arms.items():
        if arm == BASELINE:
            continue
        apart = {s: (runs[s].cpu, base[s].cpu) for s in sorted(set(runs) & set(base))
                 if "?" not in (runs[s].cpu, base[s].cpu) and runs[s].cpu != base[s].cpu}
        for cpus in sorted(set(apart.values())):
            seeds = [s for s, c in apart.items() if c == cpus]
            lines.append(f"- {arm}: seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} ran on {cpus[0]}, "
                         f"{BASELINE}'s on {cpus[1]}: paired across machine kinds")
        home, names = home_baseline(arms, arm)
        mine = _finals(runs, "test")
        seeds = sorted(set(home) & set(mine))
        if arm in twins or not set(apart) & set(seeds):
            continue
        by_arm = {n: [s for s in seeds if names[s] == n] for n in dict.fromkeys(names[s] for s in seeds)}
        which = "; ".join(f"seed{'s' if len(ss) > 1 else ''} {', '.join(map(str, ss))} {n}" for n, ss in by_arm.items())
        if _vs_grpo(arms, arm, "test")[1]:  # the table reads it so already: the pairing it leaves out
            lines.append(f"  - {arm} in the table {HOME} ({which}); against {BASELINE} alone, test (points): "
                         f"{_vs_baseline(arms, arm, 'test').text()}")
            continue
        d = paired_difference({s: home[s] for s in seeds}, {s: mine[s] for s in seeds}, POINTS)
        lines.append(f"  - {arm} {HOME} ({which}), test (points): {d.text()}")
    return lines


def ceiling_pairs(arms: dict[str, dict[int, Run]]) -> list[tuple[str, list[str]]]:
    """(arm, its ceiling arms) for every tango arm whose verdicts come from a verifier model or the noisy
    oracle and the arms of the oracle (`verifier.source: oracle`) with the same process term (construction,
    α, α schedule, groups; one arm per machine kind it ran on, e.g. an fp32 twin): the ceiling that arm's
    verifier is measured against."""
    def kind(runs: dict[int, Run]) -> tuple[str, tuple] | None:
        found = {(r.verifier_source, r.process) for r in runs.values()}  # one kind, with a process term
        return found.pop() if len(found) == 1 and all(process for _, process in found) else None

    kinds = {arm: kind(runs) for arm, runs in arms.items()}
    oracles: dict[tuple, list[str]] = {}
    for arm, k in kinds.items():
        if k and k[0] == "oracle":
            oracles.setdefault(k[1], []).append(arm)
    return [(arm, oracles[k[1]]) for arm, k in kinds.items() if k and k[0] != "oracle" and k[1] in oracles]


def ceiling_table(arms: dict[str, dict[int, Run]], split: str = "test") -> str:
    """The share of its ceiling each verifier arm captures (`ceiling_pairs`), (arm − grpo) / (oracle −
    grpo) of the final `split` pass@1 (stats.ceiling_share) over the seeds whose three runs ran on one machine
    kind and precision: the arm's and the oracle's run alike (`_alike`; of its ceiling arms, the first whose run
    of the seed is), GRPO's on that kind (grpo's own or a twin's, `home_baseline`). A pair with no such seed
    gets a row saying so; "" without a grpo arm or a pair."""
    base = arms.get(BASELINE) or {}
    rows = []
    for arm, ceilings in ceiling_pairs(arms):
        a, o, source, shared = _finals(arms[arm], split), {}, {}, False
        for oracle in ceilings:
            for s, v in _finals(arms[oracle], split).items():
                shared = shared or s in a
                if s in a and s not in o and _alike(arms[arm][s], arms[oracle][s]):
                    o[s], source[s] = v, oracle
        home, _ = home_baseline(arms, arm, split)
        plain = {s: v for s, v in _finals(base, split).items() if s in arms[arm] and _alike(base[s], arms[arm][s])}
        b = {**plain, **home}
        seeds = set(b) & set(a) & set(o)
        if not seeds:
            if shared:
                rows.append(f"| {arm} | {' / '.join(ceilings)} | no seed of the three on one machine kind | | |")
            continue
        b, a, o = ({s: x[s] for s in seeds} for x in (b, a, o))
        oracle = " / ".join(c for c in ceilings if c in {source[s] for s in seeds})
        rows.append(f"| {arm} | {oracle} | {paired_difference(b, a, POINTS).text()} | "
                    f"{paired_difference(b, o, POINTS).text()} | {ceiling_share(b, a, o).text()} |")
    if not rows:
        return ""
    lines = [f"| arm | its ceiling | arm − grpo, {split} (points) | ceiling − grpo | share of the ceiling |",
             "|---|---|---|---|---|", *rows]
    return "\n".join(lines)


def difference_rows(arms: dict[str, dict[int, Run]], split: str = "test") -> list[tuple[str, Paired, dict[int, float], Paired | None]]:
    """(arm, its paired difference with grpo in points, each seed's difference, the paired difference with
    GRPO on each seed's own machine kind where that pairs any seed otherwise) for each arm that shares a
    seed with grpo, in the study's order (grpo and its twins, `baseline_twins`, left out)."""
    base = _finals(arms.get(BASELINE) or {}, split)
    twins = baseline_twins(arms)
    rows = []
    for arm, runs in arms.items():
        mine = _finals(runs, split)
        seeds = sorted(set(base) & set(mine))
        if arm == BASELINE or arm in twins or not seeds:
            continue
        home, _ = home_baseline(arms, arm, split)
        moved = any(s in home and home[s] != base[s] for s in seeds)
        at_home = paired_difference(home, mine, POINTS) if moved and set(home) & set(mine) else None
        rows.append((arm, paired_difference(base, mine, POINTS), {s: (mine[s] - base[s]) * POINTS for s in seeds},
                     at_home))
    return rows


def plot_differences(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> bool:
    """Each arm's final `test` pass@1 minus grpo's, seeds paired, in points: the mean (a dot) with its 95%
    interval (a bar, two seeds or more), each seed's own difference (crosses), and the mean against GRPO on
    each seed's own machine kind (a ring) where that differs. False (nothing drawn) without a pair."""
    rows = difference_rows(arms)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the axis spans every seed and every interval of three seeds or more; a wider one (two seeds: t is 12.7)
    # is cut at the edge and marked there with an arrowhead
    shown = [v for _, d, seeds, home in rows for v in [d.mean, *seeds.values(), *([home.mean] if home else []),
                                                       *([d.lo, d.hi] if d.n > 2 and not math.isnan(d.lo) else [])]]
    lo_x, hi_x = min(shown + [0.0]) - 3, max(shown + [0.0]) + 3
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(rows)))
    for y, (arm, d, seeds, home) in enumerate(reversed(rows)):
        if not math.isnan(d.lo):
            ax.plot([max(d.lo, lo_x), min(d.hi, hi_x)], [y, y], color="tab:blue", linewidth=2)
            for end, edge, marker in ((d.lo, lo_x, "<"), (d.hi, hi_x, ">")):
                if (end < edge) if marker == "<" else (end > edge):
                    ax.plot([edge], [y], marker, color="tab:blue")
        ax.plot([d.mean], [y], "o", color="tab:blue")
        ax.plot(list(seeds.values()), [y] * len(seeds), "x", color="0.4", markersize=5)
        if home is not None:
            ax.plot([home.mean], [y], "o", markerfacecolor="none", markeredgecolor="tab:red", markersize=9)
    ax.set_yticks(range(len(rows)), [f"{arm} (n={d.n})" for arm, d, _, _ in reversed(rows)], fontsize=8)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlim(lo_x, hi_x)
    ax.set_xlabel(f"final test pass@1 minus {BASELINE}'s, seeds paired (points): mean, 95% CI, each seed (x); "
                  "ring: against GRPO on each seed's own machine kind", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_study(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> None:
    """Accuracy against generator steps and against FLOPs, every arm's mean over seeds with its 95% CI
    shaded (with more than six arms, grpo's alone: the others' bands would hide each other), clipped to
    [0, 1]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    longest = {arm: max(max(r.steps) for r in runs.values()) for arm, runs in arms.items()
               if all(r.steps for r in runs.values())}
    others = [n for arm, n in longest.items() if arm != LONG]
    clip = max(others) if others and longest.get(LONG, 0) > max(others) else None  # grpo_long runs on past the rest
    if len(longest) > 10:  # more arms than the default cycle's 10 colours: 20, then dashed
        palette = plt.get_cmap("tab20").colors
        left.set_prop_cycle(color=[palette[i % 20] for i in range(len(longest))],
                            linestyle=["-" if i < 20 else "--" for i in range(len(longest))])
    for arm, runs in arms.items():
        if arm not in longest:
            continue
        steps, acc, half, flops = mean_curve(runs, after_warmup=True)
        lo, hi = [max(0.0, a - h) for a, h in zip(acc, half)], [min(1.0, a + h) for a, h in zip(acc, half)]
        label = f"{arm} (n={len(runs)})" + (f"; to step {longest[arm]} on the right" if clip and arm == LONG else "")
        line, = left.plot(steps, acc, label=label)
        right.plot(flops, acc, color=line.get_color(), linestyle=line.get_linestyle())
        if len(longest) <= 6 or arm == BASELINE:
            left.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
            right.fill_between(flops, lo, hi, alpha=0.2, color=line.get_color())
    if clip:
        left.set_xlim(0, clip)
    left.set_xlabel("generator step")
    right.set_xlabel("FLOPs after the warm-up (cumulative; the table counts the warm-up)")
    spent = [x for line in right.get_lines() for x in line.get_xdata() if x > 0]
    if spent and max(spent) > 100 * min(spent):  # log only where the FLOPs span more than two decades
        right.set_xscale("log")
        right.xaxis.set_minor_formatter(NullFormatter())  # the minor ticks' labels overlap over a decade or less
    else:  # each tick its own exponent: matplotlib's shared one sits on the axis label
        right.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.1e}".replace("e+", "e") if x else "0"))
    for ax in (left, right):
        ax.set_ylabel("greedy pass@1 (test, in training)")
        ax.grid(alpha=0.3)
    if len(longest) > 6:  # many arms: the legend beside the panels, not over the curves
        fig.legend(*left.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    else:
        left.legend()
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def build_start(study_dir: str | Path, start: str | None = None) -> float | None:
    """The `test` pass@1 of the generator of the study's start `starts/<start>/eval.json`, or None. By
    default the SFT start the arms share (`starts/sft`), else the published model they start from
    (`starts/model`, where the arms train a published model with no SFT of ours)."""
    for name in [start] if start else [STUDY.start, STUDY.published]:
        start_eval = Path(study_dir) / "starts" / name / "eval.json"
        if start_eval.is_file():
            return json.loads(start_eval.read_text(encoding="utf-8")).get("generator", {}).get("test", {}).get("pass@1")
    return None


def build_study(study_dir: str | Path) -> str:
    """Table (printed and written to table.md) and curves.png of a study directory; where an arm measured
    best-of-N (V-STaR), its table follows and bon.png draws it."""
    study_dir = Path(study_dir)
    arms = load_study(study_dir)
    add_shared_warmups(arms, study_dir)
    text = study_table(arms, build_start(study_dir))
    if (study_dir / "reading.yaml").is_file():  # the reading fixed before the runs comes first
        text = reading_table(arms, read_spec(study_dir / "reading.yaml")) + "\n\n" + text
    picks = best_of_n_by_arm(arms)
    if picks:
        text += "\n\nBest of N samples against N (`test`, the final generator; mean ± 95% CI over seeds):\n\n"
        text += bon_table(picks)
        plot_bon(picks, study_dir / "bon.png", title=study_dir.name)
    judged = {arm: runs for arm, runs in arms.items() if all(r.agree for r in runs.values())}
    if judged:
        text += ("\n\nThe judge's agreement with the truth over training (its verdicts on the generator's samples, "
                 "each seed's mean over a window of steps; mean ± 95% CI over seeds):\n\n" + judge_table(judged))
        plot_judge(judged, study_dir / "judge.png", title=study_dir.name)
    shares = ceiling_table(arms)
    if shares:
        text += ("\n\nThe share of its ceiling each verifier captures: its lead over grpo against the lead of the "
                 "oracle under the same construction and α, seeds paired on one machine kind (Fieller's 95% interval):\n\n" + shares)
    if reach := resolution(arms):
        text += "\n\n" + reach
    if together := kinds_table(arms):
        text += ("\n\nOne setting run on several machine kinds, each pair against GRPO on its own kind. Pairs of one seed "
                 "share their start, their problems in one order and their first steps' samples, so the interval over "
                 "the pairs is narrower than its seeds allow; read the one over seeds:\n\n" + together)
    if again := larger_table(arms):
        text += ("\n\nThe final models evaluated again on more problems (`<run>/larger/`), each seed against the GRPO "
                 "run the table pairs it with:\n\n" + again)
    (study_dir / "table.md").write_text(text + "\n", encoding="utf-8")
    plot_study(arms, study_dir / "curves.png", title=study_dir.name)
    plot_differences(arms, study_dir / "differences.png", title=study_dir.name)
    return text


def judge_agreement(runs: dict[int, Run], window: int = 10) -> list[tuple[int, list[float]]]:
    """The judge's agreement with the truth in windows of `window` steps (steps 1-10, 11-20, ...), as
    (the window's last step, each seed's mean over the steps it logged there, in seed order); windows
    some seed logged nothing in are left out."""
    out = []
    last = max(max(r.agree) for r in runs.values())
    for end in range(window, last + window, window):
        means = []
        for _, r in sorted(runs.items()):
            vals = [v for s, v in r.agree.items() if end - window < s <= end]
            means.append(sum(vals) / len(vals) if vals else None)
        if None not in means:
            out.append((end, means))
    return out


def judge_table(arms: dict[str, dict[int, Run]]) -> str:
    """Per arm: the judge's agreement in its first and last window (`judge_agreement`) and the change
    between them, paired by seed, in points."""
    lines = ["| arm | seeds | first 10 steps | last 10 steps | change (points) |", "|---|---|---|---|---|"]
    for arm, runs in arms.items():
        windows = judge_agreement(runs)
        if not windows:
            continue
        first, last = windows[0][1], windows[-1][1]
        seeds = sorted(runs)
        change = paired_difference(dict(zip(seeds, first)), dict(zip(seeds, last)), POINTS).text()
        lines.append(f"| {arm} | {','.join(map(str, seeds))} | {_cell(first)} | {_cell(last)} | {change} |")
    return "\n".join(lines)


def plot_judge(arms: dict[str, dict[int, Run]], path: str | Path, title: str = "") -> None:
    """The judge's agreement with the truth against steps, an arm a line (mean over seeds of 10-step
    windows) with its 95% CI shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, runs in arms.items():
        windows = judge_agreement(runs)
        if not windows:
            continue
        steps = [w[0] for w in windows]
        stats = [mean_ci95(w[1]) for w in windows]
        m = [x for x, _ in stats]
        h = [0.0 if math.isnan(y) else y for _, y in stats]
        ax.plot(steps, m, marker=".", label=arm)
        ax.fill_between(steps, [a - b for a, b in zip(m, h)], [a + b for a, b in zip(m, h)], alpha=0.2)
    _finish_axes(ax, "generator step", "judge verdict = truth", title)
    _save(fig, path)


BON_NAMES = {"oracle": "oracle (pass@N)", "random": "random pick", "majority": "majority vote",
             STUDY.best_of_n: "V-STaR verifier"}


def best_of_n(runs: dict[int, Run]) -> dict[str, dict[int, list[float]]]:
    """The best-of-N accuracies a V-STaR run measured at its end (eval.json vstar/test `bon@N/<selector>`:
    the oracle, a random pick, majority voting, its verifier and any named generative verifier), as
    selector -> N -> the values over seeds in seed order; {} where no run measured any."""
    out: dict[str, dict[int, list[float]]] = {}
    for _, run in sorted(runs.items()):
        for key, value in (run.eval.get(STUDY.best_of_n, {}).get("test", {}) or {}).items():
            found = re.fullmatch(r"bon@(\d+)/(\w+)", key)
            if found and isinstance(value, (int, float)):
                out.setdefault(found.group(2), {}).setdefault(int(found.group(1)), []).append(float(value))
    return out


def best_of_n_by_arm(arms: dict[str, dict[int, Run]]) -> dict[str, dict[str, dict[int, list[float]]]]:
    """`best_of_n` of each arm that measured it."""
    picks = {arm: best_of_n(runs) for arm, runs in arms.items()}
    return {arm: p for arm, p in picks.items() if p}


def _selectors(p: dict[str, dict[int, list[float]]]) -> list[str]:
    """The selectors in display order: oracle, random, majority, V-STaR's verifier, then named verifiers."""
    return sorted(p, key=lambda k: (list(BON_NAMES).index(k) if k in BON_NAMES else len(BON_NAMES), k))


def bon_table(picks: dict[str, dict[str, dict[int, list[float]]]]) -> str:
    """Best-of-N against N as a markdown table, a row per arm and selector, mean ± 95% CI over seeds
    (`best_of_n_by_arm`)."""
    ns = sorted({n for p in picks.values() for sel in p.values() for n in sel})
    lines = ["| arm | selector | seeds | " + " | ".join(f"N = {n}" for n in ns) + " |",
             "|---|---|---|" + "---|" * len(ns)]
    for arm, p in picks.items():
        for sel in _selectors(p):
            seeds = max(len(v) for v in p[sel].values())
            cells = [_cell(p[sel][n]) if n in p[sel] else "–" for n in ns]
            lines.append(f"| {arm} | {BON_NAMES.get(sel, sel + ' verifier')} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_bon(picks: dict[str, dict[str, dict[int, list[float]]]], path: str | Path, title: str = "") -> None:
    """Best-of-N accuracy against N, a panel per arm, a line per selector with its 95% CI as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(picks), figsize=(5.5 * len(picks), 4), squeeze=False)
    for ax, (arm, p) in zip(axes[0], picks.items()):
        for sel in _selectors(p):
            ns = sorted(p[sel])
            stats = [mean_ci95(p[sel][n]) for n in ns]
            ax.errorbar(ns, [m for m, _ in stats], yerr=[0 if math.isnan(h) else h for _, h in stats],
                        marker="o", capsize=3, label=BON_NAMES.get(sel, sel + " verifier"),
                        linestyle="--" if sel == "oracle" else "-")
        ax.set_xscale("log", base=2)
        _finish_axes(ax, "N (samples to pick from)", "accuracy of the pick (test)", arm)
    if title:
        fig.suptitle(title)
    _save(fig, path)


def _finish_axes(ax, xlabel: str, ylabel: str, title: str = "") -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)


def _save(fig, path: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def documented(study_dir: str | Path, arm: str, step: int | None = None) -> list[str]:
    """What a study documents of `arm` against grpo, a line each: the paired difference of the final greedy
    pass@1 on `test` and `ood`, and (with `step`) of the in-training accuracy at that step, where both arms
    evaluated it, then the machines the runs ran on. Lines a study cannot give are left out; a study
    without the two arms gives []."""
    arms = load_study(study_dir)
    if arm not in arms or BASELINE not in arms:
        return []
    base, runs = arms[BASELINE], arms[arm]
    lines = []
    for split in ("test", "ood"):
        a = {s: r.final(split) for s, r in base.items() if r.final(split) is not None}
        b = {s: r.final(split) for s, r in runs.items() if r.final(split) is not None}
        if set(a) & set(b):
            d = paired_difference(a, b, POINTS)
            last = max(r.steps[-1] for r in runs.values() if r.steps) if any(r.steps for r in runs.values()) else "?"
            lines.append(f"{arm} − {BASELINE}, greedy pass@1 on {split} after {last} steps: {d.text()} points, "
                         f"{_cell([a[s] for s in d.seeds])} → {_cell([b[s] for s in d.seeds])}")
    if step is not None:
        a = {s: r.acc[r.steps.index(step)] for s, r in base.items() if step in r.steps}
        b = {s: r.acc[r.steps.index(step)] for s, r in runs.items() if step in r.steps}
        if set(a) & set(b):
            d = paired_difference(a, b, POINTS)
            lines.append(f"{arm} − {BASELINE}, in-training pass@1 on test at step {step}: {d.text()} points")
    if lines:
        lines.append("ran on " + ", ".join(sorted({r.cpu for r in [*base.values(), *runs.values()]})))
    return lines


# ---------------------------------------------------------------- worlds: where step verdicts can matter

WORLD_GOALS = (  # (metric of verifier_warmup/<split>, goal, at least?) for a world where step verdicts carry
    ("all_wrong@8", 0.5, True),                        # what the outcome does not: sparse outcomes ...
    ("process/n_failed", 500, True),                    # ... on enough failed samples ...
    ("process/first_false_not_last", 0.5, True),        # ... whose first error is not the last step ...
    ("process/first_rejected_match", 0.7, True),        # ... and that the verifier points to,
    ("balanced_accuracy", 0.9, True),                   # from a verifier that judges the generator's samples
    ("n/correct", 100, True),                           # (on enough of each class)
)
KIND_GOAL = 0.8  # and catches each kind of error


def world_row(name: str, m: dict) -> tuple[str, bool]:
    """One markdown row of a world's measurements at its start (the `verifier_warmup/<split>` metrics of a
    run with no generator steps) and whether it meets every goal of WORLD_GOALS and KIND_GOAL."""
    cells, ok = [name], True
    for key, goal, _ in WORLD_GOALS:
        value = m.get(key)
        met = value is not None and value >= goal
        ok &= met
        cells.append("–" if value is None else (f"{value:.0f}" if value >= 10 else f"{value:.3f}") + ("" if met else " ✗"))
    n_wrong = sum(v for k, v in m.items() if k.startswith("n/") and k != "n/correct")
    cells.insert(-1, f"{n_wrong:.0f}")
    ok &= n_wrong >= 100
    kinds = {k.removeprefix("caught/"): v for k, v in m.items() if k.startswith("caught/") and k != "caught/correct"
             and m.get("n/" + k.removeprefix("caught/"), 0) >= 10}
    worst = min(kinds.items(), key=lambda kv: kv[1]) if kinds else None
    ok &= worst is not None and worst[1] >= KIND_GOAL
    cells.append("–" if worst is None else f"{worst[1]:.3f} ({worst[0]})" + ("" if worst[1] >= KIND_GOAL else " ✗"))
    cells.append("yes" if ok else "no")
    return "| " + " | ".join(cells) + " |", ok


def _evals(directory: str | Path, what: str) -> list[tuple[str, dict]]:
    """(name, eval.json) of every `<directory>/<name>/eval.json`, sorted by name."""
    found = sorted(Path(directory).glob("*/eval.json"))
    if not found:
        raise UserError(f"{directory}: no <{what}>/eval.json")
    return [(ev.parent.name, json.loads(ev.read_text(encoding="utf-8"))) for ev in found]


def world_table(worlds_dir: str | Path, split: str = "test") -> str:
    """The measurements of every `<worlds_dir>/<world>/eval.json` against the goals (✗ marks a goal missed;
    error kinds with fewer than 10 samples are left out of the weakest catch)."""
    rows = ["| world | all-wrong groups of 8 (≥ 0.5) | failed samples with a false step (≥ 500) | first false "
            "step not the last (≥ 0.5) | verifier's first rejected step = it (≥ 0.7) | balanced accuracy (≥ 0.9) | "
            "wrong samples (≥ 100) | right samples (≥ 100) | weakest catch by error kind (≥ 0.8) | meets all |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in _evals(worlds_dir, "world"):  # the warmed-up verifier's, or the oracle's measurement
        rows.append(world_row(name, (data.get("verifier_warmup") or data.get("oracle") or {}).get(split, {}))[0])
    return "\n".join(rows)


# ---------------------------------------------------------------- verifier starts: a warm-up against its target

START_GOAL = 0.85     # a warmed-up verifier judges the generator's whole samples at this balanced accuracy ...
START_KIND_GOAL = 0.8  # ... and rejects at least this share of each kind of false step (with >= 10 of the kind)


def warmup_row(name: str, m: dict, injected: dict) -> tuple[str, bool | None]:
    """One markdown row of a verifier warm-up's measurements (eval.json `verifier_warmup`: `test`, the
    generator's own samples, and `test_injected`) and whether it meets START_GOAL and START_KIND_GOAL:
    None where the step verdicts by fault were not measured (an older run) and the whole verdicts meet
    their goal, so the row cannot say."""
    def fmt(value, goal=None):
        if value is None:
            return "–"
        return f"{value:.3f}" + ("" if goal is None or value >= goal else " ✗")

    ba = m.get("balanced_accuracy")
    kinds = {k.removeprefix("step/catch/"): v for k, v in m.items() if k.startswith("step/catch/")
             and m.get("step/n_false/" + k.removeprefix("step/catch/"), 0) >= 10}
    worst = min(kinds.items(), key=lambda kv: kv[1]) if kinds else None
    whole = ba is not None and ba >= START_GOAL
    ok = (whole and worst[1] >= START_KIND_GOAL) if worst is not None else (False if not whole else None)
    cells = [name, f"{m.get('n', 0):.0f}", fmt(ba, START_GOAL), fmt(m.get("auroc")), fmt(m.get("strict/balanced_accuracy")),
             fmt(m.get("step/approve_right")), fmt(m.get("step/catch_false")),
             "–" if worst is None else f"{fmt(worst[1], START_KIND_GOAL)} ({worst[0]})",
             fmt(injected.get("balanced_accuracy")), VERDICT[ok]]
    return "| " + " | ".join(cells) + " |", ok


def warmup_table(warmups_dir: str | Path) -> str:
    """Every `<warmups_dir>/<warm-up>/eval.json` against a verifier start's target: balanced accuracy on
    the generator's own samples ≥ START_GOAL and every fault kind's false steps caught ≥ START_KIND_GOAL
    (✗ marks a goal missed; kinds with fewer than 10 false steps are left out of the weakest)."""
    rows = [f"| warm-up | generator samples | balanced accuracy (≥ {START_GOAL}) | AUROC | strict balanced accuracy | "
            f"right steps approved | false steps caught | weakest catch by fault (≥ {START_KIND_GOAL}) | "
            "injected references: balanced accuracy | meets the target |",
            "|---|---:|---|---|---|---|---|---|---|---|"]
    errors = {}
    for name, data in _evals(warmups_dir, "warm-up"):
        data = data.get("verifier_warmup") or {}
        rows.append(warmup_row(name, data.get("test", {}), data.get("test_injected", {}))[0])
        kept = Path(warmups_dir) / name / "verifications" / "verifier_warmup_test.jsonl.gz"
        if kept.is_file():
            rows_kept = _jsonl_gz(kept)
            errors[name] = {**whole_verdict_errors(rows_kept), "sound": sound_balanced_accuracy(rows_kept)}
    return "\n".join(rows) + ("\n\n" + whole_error_table(errors) if errors else "")


def _jsonl_gz(path: Path) -> list[dict]:
    """The rows of a gzipped JSON-lines file (`runs.rundir.write_jsonl_gz_atomic`)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise UserError(f"{path}: not gzipped JSON lines ({type(err).__name__})") from None
    if not all(isinstance(row, dict) for row in rows):
        raise UserError(f"{path}: a line is not a JSON object")
    return rows


def whole_error_table(errors: dict[str, dict]) -> str:
    """Where each warm-up's whole verdicts on the generator's samples go wrong (`whole_verdict_errors` of
    its `verifications/`): the right samples it rejects and the wrong ones it approves, by the first part
    of its final line that differs from the one it was taught; then, where given (`sound`), its balanced
    accuracy with right answers reached through a false step counted wrong (`sound_balanced_accuracy`)."""
    extra = ("n", "a step rejected", "through a false step")
    causes = sorted({c for e in errors.values() for k in ("right_rejected", "wrong_approved") for c in e.get(k) or {}
                     if c not in extra})
    rows = ["Where its whole verdicts go wrong: the first part of its final line that differs from the one it was "
            "taught (`line as taught`: the same line, the other verdict); right answers reached through a step the "
            "task marks false, rejected of all such.", "",
            "| warm-up | side | samples | a step rejected too | right answers through a false step | "
            + " | ".join(causes) + " |",
            "|---|---|---:|---:|---:|" + "---:|" * len(causes)]
    for name, e in errors.items():
        right = e.get("right", {})
        for side, label in (("right_rejected", "right, rejected"), ("wrong_approved", "wrong, not rejected")):
            c = e.get(side, {})
            if side == "right_rejected":
                step = str(c.get("a step rejected", 0))
                lucky = f"{c.get('through a false step', 0)} of {right.get('through a false step', 0)}"
            else:
                step = lucky = "–"
            rows.append(f"| {name} | {label} | {c.get('n', 0)} | {step} | {lucky} | "
                        + " | ".join(str(c.get(x, 0)) for x in causes) + " |")
    sound = [f"{name} {e['sound']:.3f}" for name, e in errors.items() if e.get("sound") is not None]
    if sound:
        rows += ["", "Balanced accuracy with a right answer reached through a false step counted wrong: " + ", ".join(sound) + "."]
    return "\n".join(rows)


# ---------------------------------------------------------------- a gain across settings

def _lookup(data, key: str):
    """The value at a slash-separated key; metric names hold slashes themselves (`gap/verifier`), so at
    each level the whole rest of the key is tried before its first part."""
    parts = key.split("/")
    while parts:
        if not isinstance(data, dict):
            return None
        if "/".join(parts) in data:
            return data["/".join(parts)]
        data, parts = data.get(parts[0]), parts[1:]
    return data


def _measured(spec_dir: Path, setting: dict, x: dict) -> float:
    path = spec_dir / str(setting.get("measured", ""))
    if not path.is_file():
        raise UserError(f"setting {setting.get('name')!r}: its measurement {path} is not a file")
    try:
        value = _lookup(json.loads(path.read_text(encoding="utf-8")), str(x.get("key", "")))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"setting {setting.get('name')!r}: {path} is no JSON ({err})") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UserError(f"setting {setting.get('name')!r}: {path} has no number at {x.get('key')!r}")
    return 1.0 - float(value) if x.get("one_minus") else float(value)


def gains_table(spec_path: str | Path) -> tuple[str, list[dict]]:
    """Co-training's gain over GRPO in each of several settings, against a measured property of each.

    The spec (YAML) names the property and the settings; paths are relative to the spec's directory:

        x: {label: all-wrong groups of 8 at the start, key: generator/test/pass@8, one_minus: true}
        arm: tango                  # the arm paired with grpo (default tango)
        settings:
          - {name: SFT step 500, runs: step_500, measured: step_500.json}

    `runs` is a study directory (`<arm>/seed<S>/`, as `cotrain study` reads); `measured` a JSON file
    whose number at `key` (slash-separated; metric names may hold slashes) is the setting's x, or 1 − it.
    The label-free gain is the `labelfree` arm's final test pass@1 against the study's start
    (`starts/sft/eval.json`), where both are there.

    Returns:
        (markdown table, one dict per setting: name, x, gain (Paired or None), labelfree (Paired or None)).
    """
    spec_path = Path(spec_path)
    spec = read_yaml_mapping(spec_path, "the gains spec")
    x, arm, settings = spec.get("x"), str(spec.get("arm", SCHEDULE)), spec.get("settings")
    if not isinstance(x, dict) or "key" not in x:
        raise UserError(f"{spec_path}: `x` must be a mapping with a `key` (and a `label`)")
    if not isinstance(settings, list) or not settings or not all(isinstance(s, dict) for s in settings):
        raise UserError(f"{spec_path}: `settings` must be a non-empty list of mappings")
    label = str(x.get("label", x["key"]))
    lines = [f"| setting | {label} | seeds | grpo test pass@1 | {arm} test pass@1 | {arm} − grpo (points) | "
             "label-free gain over the start (points) | CPU |", "|---|---:|---|---|---|---|---|---|"]
    points = []
    for setting in settings:
        name = str(setting.get("name", setting.get("runs")))
        value = _measured(spec_path.parent, setting, x)
        arms = load_study(spec_path.parent / str(setting.get("runs", "")))
        finals = {a: {s: r.final("test") for s, r in runs.items() if r.final("test") is not None}
                  for a, runs in arms.items()}
        base, co = finals.get(BASELINE, {}), finals.get(arm, {})
        gain = paired_difference(base, co, POINTS) if set(base) & set(co) else None
        lf = None
        if finals.get(LABELFREE):
            start = build_start(spec_path.parent / str(setting.get("runs", "")))
            if start is not None:
                lf = paired_difference({s: start for s in finals[LABELFREE]}, finals[LABELFREE], POINTS)
        seeds = sorted(gain.seeds) if gain else []
        cpus = ", ".join(sorted({r.cpu for runs in arms.values() for r in runs.values()}))
        lines.append(f"| {name} | {value:.3f} | {','.join(map(str, seeds)) or '–'} | "
                     f"{_cell([base[s] for s in seeds])} | {_cell([co[s] for s in seeds])} | "
                     f"{gain.text() if gain else '–'} | {lf.text() if lf else '–'} | {cpus} |")
        points.append({"name": name, "x": value, "gain": gain, "labelfree": lf})
    return "\n".join(lines), points


def plot_gains(points: list[dict], path: str | Path, xlabel: str, arm: str = SCHEDULE) -> None:
    """Each setting's paired gain over GRPO (and the label-free gain, where there is one) against its x,
    with 95% CIs as error bars and the settings named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, marker in (("gain", f"{arm} − grpo", "o"), ("labelfree", "label-free − start", "s")):
        shown = [p for p in points if p[key] is not None]
        if not shown:
            continue
        xs, ys = [p["x"] for p in shown], [p[key].mean for p in shown]
        err = [[0.0 if math.isnan(p[key].lo) else p[key].mean - p[key].lo for p in shown],
               [0.0 if math.isnan(p[key].hi) else p[key].hi - p[key].mean for p in shown]]
        ax.errorbar(xs, ys, yerr=err, fmt=marker, capsize=4, label=label)
        for p in shown:
            ax.annotate(p["name"], (p["x"], p[key].mean), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("gain, points of greedy pass@1 (test; 95% CI)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def build_gains(spec_path: str | Path) -> str:
    """The table (printed, and written beside the spec as <spec>.md) and figure (<spec>.png) of a gains spec."""
    spec_path = Path(spec_path)
    text, points = gains_table(spec_path)
    spec = read_yaml_mapping(spec_path, "the gains spec")
    x = spec["x"]
    spec_path.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    plot_gains(points, spec_path.with_suffix(".png"), str(x.get("label", x["key"])), str(spec.get("arm", SCHEDULE)))
    return text


# ---------------------------------------------------------------- verifier quality (experiment 4.3)

VERIFIER_SPLITS = (("test", "the final generator's samples"), ("test_injected", "held-out injected errors"))
VERIFIER_METRICS = ("balanced_accuracy", "auroc")


def verifier_table(study_dir: str | Path) -> str:
    """The co-trained verifier against its warm-up start, per arm that trained one: on the final
    generator's samples and on held-out injected errors (eval.json's `verifier` and `verifier_warmup`),
    balanced accuracy, AUROC and the share caught of each error kind (`caught/<kind>`, with the kind's
    count), each as warm-up and co-trained means ± 95% CI over the seeds and their paired difference
    in points. An arm whose verifier never trained (frozen) shows a difference of 0."""
    arms = load_study(study_dir)
    lines = ["| arm | split | metric | n (seed 0) | warm-up | co-trained | co-trained − warm-up (points) |",
             "|---|---|---|---:|---|---|---|"]
    for arm, runs in arms.items():
        if not all("verifier" in r.eval and "verifier_warmup" in r.eval for r in runs.values()):
            continue
        for split, label in VERIFIER_SPLITS:
            first = runs[min(runs)].eval["verifier_warmup"].get(split, {})
            kinds = sorted(k for k in first if k.startswith("caught/"))
            for metric in (*VERIFIER_METRICS, *kinds):
                warm = {s: r.eval["verifier_warmup"].get(split, {}).get(metric) for s, r in runs.items()}
                co = {s: r.eval["verifier"].get(split, {}).get(metric) for s, r in runs.items()}
                warm = {s: v for s, v in warm.items() if isinstance(v, (int, float))}
                co = {s: v for s, v in co.items() if isinstance(v, (int, float))}
                if not set(warm) & set(co):
                    continue
                d = paired_difference(warm, co, POINTS)
                n = first.get("n/" + metric.split("/", 1)[1], first.get("n")) if "/" in metric else first.get("n")
                lines.append(f"| {arm} | {label} | {metric} | {'' if n is None else f'{n:.0f}'} | "
                             f"{_cell([warm[s] for s in d.seeds])} | {_cell([co[s] for s in d.seeds])} | {d.text()} |")
    if len(lines) == 2:
        raise UserError(f"{study_dir}: no arm with a trained verifier (eval.json's verifier and verifier_warmup)")
    return "\n".join(lines)

