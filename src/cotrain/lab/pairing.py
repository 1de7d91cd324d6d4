"""Pairing an arm with GRPO seed by seed, on each seed's own machine kind: the paired differences, the pairs
across machine kinds, the problem-by-problem pairs on larger evaluations, and the share of a ceiling."""
from __future__ import annotations

import math
import statistics

from cotrain.eval.metrics import wilson_interval
from cotrain.lab.runs import BASELINE, PRECISION, Run
from cotrain.stats import (
    POINTS,
    Z975,
    Paired,
    ceiling_share,
    evaluation_sd,
    interval,
    paired_difference,
    paired_evaluation_sd,
    seeds_needed,
)


VERDICT = {True: "holds", False: "does not hold", None: "cannot say"}


SECOND_HALF = "second half"  # what the study pairs besides a split's final pass@1: `Run.second_half`


def final_values(runs: dict[int, Run], split: str) -> dict[int, float]:
    """Each seed's final pass@1 on `split`, or its in-training mean over the second half (`SECOND_HALF`)."""
    values = {s: r.second_half() if split == SECOND_HALF else r.final(split) for s, r in runs.items()}
    return {s: v for s, v in values.items() if v is not None}


def _vs_baseline(arms: dict[str, dict[int, Run]], arm: str, split: str):
    """The paired (arm − grpo) difference of the final `split` pass@1 (or `SECOND_HALF`) in points, or None (no
    grpo arm, the arm is grpo, or no seed in common)."""
    base = arms.get(BASELINE)
    if not base or arm == BASELINE:
        return None
    b, a = final_values(base, split), final_values(arms[arm], split)
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
    b, mine = final_values(base, split), final_values(arms[arm], split)
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


def vs_grpo(arms: dict[str, dict[int, Run]], arm: str, split: str) -> tuple[Paired | None, str]:
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
        seeds = [s for s in sorted(mine) if home or runs_alike(runs[s], arms[BASELINE][s])]
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
                home, mine = home_baseline(arms, arm, measure)[0], final_values(arms[arm], measure)
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


def runs_alike(a: Run, b: Run) -> bool:
    """Whether two runs ran on one machine kind and precision (or either's is unknown): a pair the criteria read."""
    return "?" in a.cpu or "?" in b.cpu or a.cpu == b.cpu


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
            if there := final_values({seed: runs[seed]}, split):
                finals[seed], names[seed] = there[seed], name
                break
    return finals, names


def cross_machine_pairs(arms: dict[str, dict[int, Run]]) -> list[str]:
    """A line for each arm whose seeds ran on another machine kind or precision than the baseline's same
    seeds: such a pair shares its start, problems and seeds but not its kernels' rounding, so it is paired
    less tightly than the rest (a difference of precision can shift accuracy on its own). Where GRPO ran
    those seeds on the arm's machine kind too (`home_baseline`), a line more gives the pairing the table does
    not: against grpo alone where the table reads each seed against GRPO on its own machine kind (`vs_grpo`),
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
        mine = final_values(runs, "test")
        seeds = sorted(set(home) & set(mine))
        if arm in twins or not set(apart) & set(seeds):
            continue
        by_arm = {n: [s for s in seeds if names[s] == n] for n in dict.fromkeys(names[s] for s in seeds)}
        which = "; ".join(f"seed{'s' if len(ss) > 1 else ''} {', '.join(map(str, ss))} {n}" for n, ss in by_arm.items())
        if vs_grpo(arms, arm, "test")[1]:  # the table reads it so already: the pairing it leaves out
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
    kind and precision: the arm's and the oracle's run alike (`runs_alike`; of its ceiling arms, the first whose run
    of the seed is), GRPO's on that kind (grpo's own or a twin's, `home_baseline`). A pair with no such seed
    gets a row saying so; "" without a grpo arm or a pair."""
    base = arms.get(BASELINE) or {}
    rows = []
    for arm, ceilings in ceiling_pairs(arms):
        a, o, source, shared = final_values(arms[arm], split), {}, {}, False
        for oracle in ceilings:
            for s, v in final_values(arms[oracle], split).items():
                shared = shared or s in a
                if s in a and s not in o and runs_alike(arms[arm][s], arms[oracle][s]):
                    o[s], source[s] = v, oracle
        home, _ = home_baseline(arms, arm, split)
        plain = {s: v for s, v in final_values(base, split).items() if s in arms[arm] and runs_alike(base[s], arms[arm][s])}
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
    base = final_values(arms.get(BASELINE) or {}, split)
    twins = baseline_twins(arms)
    rows = []
    for arm, runs in arms.items():
        mine = final_values(runs, split)
        seeds = sorted(set(base) & set(mine))
        if arm == BASELINE or arm in twins or not seeds:
            continue
        home, _ = home_baseline(arms, arm, split)
        moved = any(s in home and home[s] != base[s] for s in seeds)
        at_home = paired_difference(home, mine, POINTS) if moved and set(home) & set(mine) else None
        rows.append((arm, paired_difference(base, mine, POINTS), {s: (mine[s] - base[s]) * POINTS for s in seeds},
                     at_home))
    return rows
