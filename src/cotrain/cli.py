"""cotrain run | recipes | check | eval | demo | plot | sweep | archive | study.

Every mistake a user can make ends with one line on stderr and exit code 2; anything else is a bug in
cotrain, which ends with its traceback, a line that says so, and exit code 1.
"""
from __future__ import annotations

import argparse
import atexit
import copy
import json
import os
import sys
import traceback
from importlib import resources
from pathlib import Path

import yaml

from cotrain import registry
from cotrain.errors import UserError
from cotrain.hub import require_model_sources
from cotrain.models import gguf_source


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse would print the whole usage)
        raise UserError(f"{message} (see '{self.prog} --help')")


def cmd_run(args) -> int:
    from cotrain.config import build_config, read_yaml_mapping  # validated before torch: a mistake is reported at once

    raw = read_yaml_mapping(Path(args.config), "config file")
    if args.resume and args.out:  # its relative paths, as the run's first part found them, from any directory
        raw = rebase_paths(raw, _started_in(Path(args.out)))
    run_config(build_config(raw, args.overrides), args.out, args.resume)
    return 0


def require_sources(cfg) -> None:
    """Every model a run starts from, found: its hub ids reachable, its GGUF files installed."""
    verifier_path = cfg.verifier.model.path if cfg.verifier.model is not None else None
    require_model_sources([(cfg.model.path, cfg.init), (verifier_path, cfg.verifier.init)])
    gguf_source.require_sources([cfg.model.path, cfg.init, verifier_path, cfg.verifier.init, cfg.selfplay.proposer_init])


def run_config(cfg, out: str | Path | None, resume: bool = False) -> dict:
    """Run a validated config into `out` (else its `out_dir`), as `cotrain run` does, and return its eval.json:
    its models' sources and evaluation splits checked first, the threads chosen before torch loads, the plots
    drawn after the recipe returns. A finished run resumed is read, not rerun."""
    require_sources(cfg)  # an unreachable hub id, a missing GGUF file: one line now, not after a minute of retries
    out = out or cfg.out_dir
    if not out:
        raise UserError("no run directory: pass --out DIR or set out_dir in the config")
    cfg.out_dir = str(out)
    _choose_threads(cfg.train.threads, Path(out) if resume else None)  # before torch loads
    if not resume:
        from cotrain.runs.rundir import refuse_a_run_there

        refuse_a_run_there(out)  # one sentence now, before the data loads and the recipe starts
    # finished: nothing to resume, nothing re-evaluated (one process: under torchrun every rank must take the
    # same path, and a rank may start after another has written eval.json)
    if resume and (Path(out) / "eval.json").is_file() and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        print(f"{out} has finished (eval.json is written); nothing to resume. Its results:", file=sys.stderr)
        results = json.loads((Path(out) / "eval.json").read_text(encoding="utf-8"))
        _print_results(out, results)
        return results
    from cotrain import dist
    from cotrain.eval.evaluate import require_eval_splits
    from cotrain.train.setup import build_task

    # every evaluation split loads before the first step: a typo or a broken file stops the run now
    require_eval_splits(build_task(cfg.task), cfg.task.name, cfg.eval.splits, max(cfg.eval.n, cfg.eval.larger_n),
                        named="splits" in cfg.eval.model_fields_set)
    dist.init()  # under torchrun: join the process group (one process: nothing)
    main_process, several = dist.is_main(), dist.world() > 1
    try:
        results = registry.load(cfg.recipe).run(cfg, out, resume=resume)
    except UserError as err:
        dist.close(wait=False)
        if (Path(out) / "checkpoints").is_dir() and any((Path(out) / "checkpoints").iterdir()):
            raise UserError(f"{err}; the run's checkpoints are kept in {out}: fix this and add --resume to go on "
                            "from the last one") from None
        raise
    except BaseException:
        dist.close(wait=False)
        raise
    dist.close()
    if main_process:
        _print_results(out, results)
        if cfg.log.plots:
            from cotrain.analysis.plot import plot_finished
            plot_finished(out)
    if several:
        _exit_without_teardown()
    return results


def _exit_without_teardown() -> None:
    """End a finished torchrun worker without the interpreter's teardown: objects that still refer to the
    destroyed process group (gloo work, FSDP2's meshes) can abort a process while they are freed at exit
    ("terminate called without an active exception", SIGABRT), failing a run whose results are
    written. The exit handlers run first (they stop helper processes); output is flushed."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _number(v: float) -> str:
    """A result as people read it: 0.438 for a rate, 7.6e10 for a count of FLOPs."""
    if abs(v) < 1e5:
        return f"{v:.3f}"
    mantissa, exponent = f"{v:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _print_results(run_dir, results: dict) -> None:
    for role, splits in results.items():
        for split, m in splits.items():
            shown = "  ".join(f"{k}={_number(v)}" for k, v in m.items() if k not in ("n",) and isinstance(v, float))
            print(f"{run_dir}  {role}/{split}: {shown}")


def cmd_recipes(args) -> int:
    print(registry.listing())
    return 0


def cmd_check(args) -> int:
    from cotrain.config import load_config  # validated before torch is imported, as in cmd_run

    cfg = load_config(args.config, args.overrides)
    from cotrain.tasks import make_task

    make_task(cfg.task.name, **cfg.task.options())  # a bad task option, then an unreachable hub id: at once
    if args.prompts < 1:
        raise UserError(f"--prompts must be at least 1 (got {args.prompts})")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    if args.device_memory is not None and not 0 < args.device_memory <= 1e6:
        raise UserError(f"--device-memory must be a size in GiB between 0 and 1e6 (got {args.device_memory:g})")
    require_sources(cfg)
    from cotrain.preflight import check

    print(f"cotrain check {args.config}", flush=True)
    check(cfg, prompts=args.prompts, max_new_tokens=args.max_new_tokens, device_memory_gib=args.device_memory,
          rollout=not args.no_rollout, say=lambda line: print(line, flush=True))
    return 0


def _recorded_run(checkpoint: str) -> dict:
    """The config of the run a checkpoint belongs to (config.yaml in it or up to three folders above it: a
    run dir, a step dir, a model dir) that records its task; {} where there is none."""
    from cotrain.config import read_yaml_mapping

    path = Path(checkpoint).resolve()
    for folder in [path, *path.parents][:4]:
        if (folder / "config.yaml").is_file():
            raw = read_yaml_mapping(folder / "config.yaml", "the run's config")
            if isinstance(raw.get("task"), dict) and raw["task"].get("name"):
                return rebase_paths(raw, _started_in(folder))
    return {}


def _started_in(run_dir: Path) -> Path | None:
    """The directory a run started in (env.json's `cwd`; its first part's, for a resumed run), or None."""
    try:
        env = json.loads((run_dir / "env.json").read_text(encoding="utf-8"))
        first = (env.get("earlier") or [env])[0]
        return Path(first["cwd"]) if isinstance(first.get("cwd"), str) else None
    except (OSError, ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None


PATH_KEYS = ("init", "model.path", "model.lora_init", "verifier.init", "selfplay.proposer_init", "task.path",
             "task.data_dir")  # and each of task.splits's files


def rebase_paths(raw: dict, base: Path | None) -> dict:
    """A run's config as written, with each relative data or model path that names something under `base` (the
    directory the run started in) made absolute, so that the run is found again from any directory. A path
    that exists nowhere there (a hub id, `data:NAME`) stays as written."""
    if base is None:
        return raw
    out = copy.deepcopy(raw)

    def fixed(value):
        if isinstance(value, str) and value and not value.startswith("data:") and not Path(value).is_absolute() \
                and (base / value).exists():
            return str(base / value)
        return value

    for key in PATH_KEYS:
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            node[last] = fixed(node[last])
    task = out.get("task") if isinstance(out.get("task"), dict) else {}
    for key in ("module", "reward"):
        if isinstance(task.get(key), str) and ".py:" in task[key]:  # path/to/file.py:Name
            file, _, name = task[key].rpartition(":")
            task[key] = f"{fixed(file)}:{name}"
    splits = task.get("splits")
    for split, spec in (splits or {}).items() if isinstance(splits, dict) else ():
        if isinstance(spec, dict):
            spec["path"] = fixed(spec.get("path"))
        else:
            splits[split] = fixed(spec)
    return out


def cmd_eval(args) -> int:
    from cotrain.config import build_config, evaluation_sections
    from cotrain.dist import device
    from cotrain.eval.evaluate import evaluate_generator, take_outcomes
    from cotrain.models.build import load_model
    from cotrain.precision import resolve_bf16
    from cotrain.runs.rundir import resolve_model_dir, write_json_atomic
    from cotrain.tasks import make_task

    flags = [f"eval.splits=[{args.splits}]"] if args.splits else []
    flags += [f"eval.n={args.n}"] if args.n is not None else []
    run = _recorded_run(args.checkpoint)  # a run's checkpoint is evaluated as its run evaluates, where not told otherwise
    if not (args.task or run):
        raise UserError(f"{args.checkpoint} records no task (no run config.yaml in it or above it): pass --task NAME")
    cfg = build_config({**evaluation_sections(run), "task": {"name": args.task} if args.task else run["task"]},
                       list(args.overrides or []) + flags)
    model, tokenizer = load_model(resolve_model_dir(args.checkpoint))
    model.to(device())
    cfg.train.bf16, line = resolve_bf16(cfg.train.bf16, [device()])
    print(line, file=sys.stderr, flush=True)
    task = make_task(cfg.task.name, **cfg.task.options())
    results = {"generator": evaluate_generator(model, tokenizer, task, cfg.eval.splits, n=cfg.eval.n,
                                               outcomes=bool(args.outcomes), **cfg.eval_settings())}
    outcomes = take_outcomes(results["generator"])
    if args.outcomes:
        write_json_atomic(Path(args.outcomes), outcomes)
    if args.verifier and args.bon:
        results["best_of_n"] = _best_of_n(cfg, args, model, tokenizer, task)
    elif args.verifier:
        if len(args.verifier) > 1:
            raise UserError("several --verifier are compared by best-of-N: add --bon, e.g. --bon 1,4,16,64")
        results["verifier"] = _eval_verifier(cfg, args.verifier[0], model, tokenizer, task)
    if args.out:
        write_json_atomic(Path(args.out), results)
    print(json.dumps(results, indent=2))
    return 0


def _eval_verifier(cfg, path: str, model, tokenizer, task) -> dict:
    """A verifier judging the generator's samples on each split: its verdict metrics and the
    generation-verification gaps (`eval.k` samples of `eval.n_sampled` problems), a line each on stderr."""
    from cotrain.eval.verifier_eval import evaluate_verifiers
    from cotrain.models.build import load_model
    from cotrain.runs.rundir import resolve_model_dir

    verifier, vtok = load_model(resolve_model_dir(path, role="verifier"))
    verifier.to(model.device).eval()
    kw, out = cfg.eval_settings(), {}
    for split in (s for s in cfg.eval.splits if s in task.splits):
        m = evaluate_verifiers({"verifier": (verifier, vtok)}, model, tokenizer, task, split,
                               n=max(cfg.eval.n_sampled, 1), k=max(cfg.eval.k, 2), temperature=cfg.eval.temperature,
                               gen_max_new_tokens=kw["max_new_tokens"], ver_max_new_tokens=cfg.verifier.max_new_tokens,
                               batch_size=kw["batch_size"], bf16=kw["bf16"])["verifier"]
        out[split] = m
        print(f"{split}: gap/verifier {m['gap/verifier']:+.3f} (approved {m['precision']:.3f} vs all "
              f"{m['base_rate']:.3f}), gap/majority {m['gap/majority']:+.3f}, verifier balanced accuracy "
              f"{m['balanced_accuracy']:.3f}" + (f", AUROC {m['auroc']:.3f}" if "auroc" in m else ""),
              file=sys.stderr, flush=True)
    return out


def _best_of_n(cfg, args, model, tokenizer, task) -> dict:
    """`--bon`: best-of-N against N of each `--verifier` ([NAME=]PATH), a random pick, majority voting and
    the oracle, on eval.n_sampled problems of the first split; a markdown table on stdout's stderr side."""
    from cotrain.eval.verifier_eval import best_of_n_study
    from cotrain.models.build import load_model
    from cotrain.runs.rundir import resolve_model_dir

    try:
        ns = sorted({int(x) for x in args.bon.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--bon takes sample counts separated by commas, e.g. 1,4,16,64; got {args.bon!r}") from None
    if not ns or ns[0] < 1 or ns[-1] > 4096:
        raise UserError(f"--bon counts must lie within 1..4096; got {args.bon!r}")
    verifiers = {}
    for spec in args.verifier:
        name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
        try:
            where = resolve_model_dir(path, role="verifier")
        except UserError:  # a run without a verifier: its generator judges
            where = resolve_model_dir(path)
        model_v, vtok = load_model(where)
        verifiers[name or f"verifier{len(verifiers) + 1}"] = (model_v.to(model.device).eval(), vtok)
    split = next((s for s in cfg.eval.splits if s in task.splits), None)
    if split is None:
        raise UserError(f"task {cfg.task.name} has none of the splits {', '.join(cfg.eval.splits)}")
    kw = cfg.eval_settings()
    out = best_of_n_study(verifiers, model, tokenizer, task, split, n=max(cfg.eval.n_sampled, 1), ns=ns,
                          temperature=cfg.eval.temperature, gen_max_new_tokens=kw["max_new_tokens"],
                          ver_max_new_tokens=cfg.verifier.max_new_tokens, batch_size=kw["batch_size"], bf16=kw["bf16"])
    cols = ["oracle", "random", "majority", *verifiers]
    lines = [f"best-of-N on {split}: {out.get('problems', 0)} problems x {ns[-1]} samples",
             "| N | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += [f"| {size} | " + " | ".join(f"{row.get(c, float('nan')):.3f}" for c in cols) + " |"
              for size, row in out.get("rows", {}).items()]
    print("\n".join(lines), file=sys.stderr, flush=True)
    return {split: out}


def demo_stages() -> dict:
    """The embedded default of `cotrain demo`: {"starts", "prepare", "stages"} (src/cotrain/demo.yaml)."""
    return yaml.safe_load(resources.files("cotrain").joinpath("demo.yaml").read_text())


def _study_path(rel: str) -> Path | None:
    """A committed study of the demo's starts (`_repo_path`), None unless it holds a finished run: the demo
    then prints its own results without the documented ones (a checkout carrying the starts alone)."""
    path = _repo_path(rel)
    return path if path is not None and any(path.glob("*/seed*/eval.json")) else None


def _repo_path(rel: str) -> Path | None:
    """A path of the repository (the committed starts), from the working directory or from the checkout
    this package is installed from; None when neither has it (an installed wheel, elsewhere)."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (root / rel).exists():
            return root / rel
    return None


def _demo_stage(name: str, raw: dict, out: Path, starts: dict, args, overrides: list[str]) -> dict:
    """Run one stage of the demo into out/name (or read its eval.json when it finished); returns eval.json."""
    from cotrain.config import build_config

    raw = dict(copy.deepcopy(raw), seed=args.seed)
    for key, field in (("init_from", "init"), ("verifier_from", "verifier")):
        src = raw.pop(key, None)  # a start's name, or a path inside the demo's directory
        if src is not None:
            path = str(starts.get(src, out / src))
            raw[field] = path if field == "init" else {**raw.get("verifier", {}), "init": path}
    cfg = build_config(raw, overrides)
    cfg.out_dir = str(out / name)
    print(f"== demo stage {name}: {cfg.recipe}, {cfg.train.steps} steps -> {out / name}", flush=True)
    if (out / name / "eval.json").is_file() and not args.force:
        print("   (already finished; --force reruns)")
        return json.loads((out / name / "eval.json").read_text())
    resume = args.resume or (out / name / "checkpoints").exists()
    results = registry.load(cfg.recipe).run(cfg, out / name, resume=resume)
    if cfg.log.plots:
        from cotrain.analysis.plot import plot_finished
        plot_finished(out / name)
    return results


def _demo_findings(arm_dir: Path, base: str, arm: str, acc: dict, splits: list[str], n: int, steps: int,
                   seed: int) -> list[str]:
    """The demo's result in words: what was compared, on which machine, and the arm's difference from the
    baseline on each split with its interval (one seed: over the problems, paired problem by problem where
    both runs kept each problem's outcome on the same problems (`stats.paired_evaluation_sd`), else as if
    their errors were unrelated (`stats.difference_ci95`, wider)). The baseline's run is arm_dir's sibling."""
    from cotrain.lab.pairing import same_problems
    from cotrain.lab.runs import read_outcomes
    from cotrain.stats import Z975, difference_ci95, paired_evaluation_sd

    def outcomes(run: Path) -> dict:
        try:
            return read_outcomes(run)
        except UserError:  # unreadable: the interval as if unpaired
            return {}

    kept = {base: outcomes(arm_dir.parent / base), arm: outcomes(arm_dir)}
    env = json.loads((arm_dir / "env.json").read_text()) if (arm_dir / "env.json").is_file() else {}
    machine = f"{env.get('cpu', '?')} ({env.get('cpu_capability', '?')}, family/model {env.get('cpu_family_model', '?')})"
    precision = "bf16 autocast" if env.get("precision", {}).get("bf16_autocast") else "fp32"
    lines = [f"Compared: {base} and {arm} from one committed start, seed {seed}, {steps} generator steps each, "
             f"greedy pass@1 on {n} held-out problems a split; on {machine}, {precision}."]
    for i, split in enumerate(splits):
        d, lo, hi = difference_ci95(acc[base][i], acc[arm][i], n)
        pair = same_problems(kept[base].get(split), kept[arm].get(split))
        paired = pair is not None and len(pair[0]) == n >= 2
        if paired:  # the two runs' outcomes problem by problem: the interval of the paired difference, narrower
            half = Z975 * paired_evaluation_sd(*pair)
            lo, hi = d - half, d + half
        verdict = (f"{arm} ahead" if lo > 0 else f"{base} ahead" if hi < 0 else "neither ahead (the interval holds 0)")
        lines.append(f"{arm} − {base} on {split}: {100 * d:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}] "
                     f"({acc[base][i]:.3f} → {acc[arm][i]:.3f}): {verdict}; 95% over the problems of this one seed"
                     f"{', paired problem by problem' if paired else ''}, another seed lands elsewhere (the result over "
                     "seeds: below)")
    return lines


def _choose_threads(setting: int | None, resumed: Path | None = None) -> None:
    """Set the run's threads before torch loads (cotrain.threads; the run says them beside its precision); a
    resumed run replays the count its env.json recorded. Under torchrun each rank keeps torchrun's OMP_NUM_THREADS."""
    from cotrain.threads import apply_threads, choose_threads

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return
    replayed = None
    if resumed is not None and (resumed / "env.json").is_file():
        try:
            replayed = json.loads((resumed / "env.json").read_text(encoding="utf-8")).get("threads")
        except (OSError, ValueError, AttributeError):
            replayed = None  # an unreadable record: choose afresh
    choice = choose_threads(os.environ, setting, replayed if isinstance(replayed, int) else None)
    apply_threads(choice)


def cmd_demo(args) -> int:
    setting = [o.split("=", 1)[1] for o in args.overrides or [] if o.startswith("train.threads=")]
    _choose_threads(int(setting[-1]) if setting and setting[-1].isdigit() and int(setting[-1]) >= 1 else None)
    from cotrain.analysis.plot import demo_figure, plot_runs
    from cotrain.lab.runs import load_study
    from cotrain.lab.table import documented

    read: dict[Path, dict] = {}

    def study_runs(path: Path) -> dict:  # each committed study read once (its runs' metrics are most of the time)
        if path not in read:
            read[path] = load_study(path)
        return read[path]

    out, spec = Path(args.out), demo_stages()
    if args.from_scratch:  # make the two starts first, then read them from out/
        for name, raw in spec["prepare"].items():
            if isinstance(raw, dict):
                _demo_stage(name, raw, out, {}, args, [])
        starts = {role: out / spec["prepare"][role] for role in ("generator", "verifier")}
    else:
        starts = {role: _repo_path(spec["starts"][role]) for role in ("generator", "verifier")}
        missing = [spec["starts"][r] for r, p in starts.items() if p is None]
        if missing:
            raise UserError(f"the demo's committed starts are missing ({', '.join(missing)}): run it from the "
                            "repository root, or make them with `cotrain demo --from-scratch`")
    results = {name: _demo_stage(name, raw, out, starts, args, args.overrides) for name, raw in spec["stages"].items()}
    names = list(results)
    paths = [demo_figure([out / n for n in names], out / "demo.png",
                         title="cotrain demo: GRPO and RL Tango in the sparse world, from one start")]
    paths += plot_runs([out / n for n in names], out_dir=out)
    from cotrain.analysis.report import build_report

    studies = [p for p in ([] if args.from_scratch else [_study_path(r) for r in spec["starts"]["studies"][:1]]) if p]
    steps = yaml.safe_load((out / names[-1] / "config.yaml").read_text())["train"]["steps"]
    splits = [s for s in ("test", "ood") if any(s in r.get("generator", {}) for r in results.values())]
    n = max((r["generator"][s].get("n", 0) for r in results.values() for s in splits if s in r["generator"]), default=0)
    acc = {name: [r["generator"].get(s, {}).get("pass@1", float("nan")) for s in splits] for name, r in results.items()}
    base, arm = names[0], names[-1]  # the demo's baseline and its co-training arm, in the order demo.yaml runs them
    found = _demo_findings(out / arm, base, arm, acc, splits, n, steps, args.seed)
    headline = [line for study in studies for line in documented(study_runs(study), arm, steps)]  # the first study's
    paths.append(build_report([out / n for n in names] + studies, out / "report.html",
                              summary=(found + [f"documented over seeds ({spec['starts']['studies'][0]}): {line}"
                                                for line in headline], out / "demo.png")))

    # ------------------------------------------------------------------ one screen of results
    print(f"\n== demo results: seed {args.seed}, {steps} generator steps, greedy pass@1 on {n} held-out problems a split")
    print(f"{'':<14}" + "".join(f"{s:>9}" for s in splits))
    for name, row in acc.items():
        print(f"{name:<14}" + "".join(f"{x:>9.3f}" for x in row))
    for line in found[1:]:
        print(line)
    for name, r in results.items():
        for role, when in (("verifier", "co-trained"), ("verifier_warmup", "at its start")):
            m = r.get(role, {}).get(splits[0] if splits else "test", {})
            if "balanced_accuracy" in m:
                right = int(m.get("n/correct", 0))
                print(f"{name}'s verifier {when}, greedy verdicts on {m['n']} of the final generator's samples "
                      f"({right} right, {m['n'] - right} wrong): balanced accuracy {m['balanced_accuracy']:.3f}")
    for rel in [] if args.from_scratch else spec["starts"]["studies"]:  # what the lab measured from these starts
        study = _study_path(rel)
        lines = [line for arm in spec["starts"]["documented"]
                 for line in (documented(study_runs(study), arm, steps) if study else [])]
        if lines:
            print(f"\ndocumented ({rel}, every seed from these starts, `cotrain study {rel}`):")
            for line in lines:
                print("  " + line)
    print("\nplots and the report: " + "  ".join(str(p) for p in paths))
    return 0


def cmd_plot(args) -> int:
    from cotrain.analysis.plot import plot_runs

    for d in args.runs:
        if not Path(d).is_dir():
            raise UserError(f"not a run directory: {d}")
    try:
        paths = plot_runs([Path(d) for d in args.runs], out_dir=Path(args.out) if args.out else None)
    except ValueError as err:
        raise UserError(str(err)) from None
    for p in paths:
        print(p)
    return 0


def cmd_sweep(args) -> int:
    from cotrain.runs.sweep import load_sweep, run_sweep

    sweep = load_sweep(args.sweep, args.overrides)
    try:
        return run_sweep(sweep, args.out, jobs=args.jobs, dry_run=args.dry_run, only=args.only)
    except KeyboardInterrupt:
        print("cotrain: interrupted (the same command continues the sweep)", file=sys.stderr)
        return 130


def cmd_archive(args) -> int:
    from cotrain.runs.archive import archive_run

    for path in archive_run(args.run, args.dest, command=args.command, model=args.model):
        print(path)
    return 0


def cmd_study(args) -> int:
    from cotrain.lab.gains import build_gains
    from cotrain.lab.table import build_study
    from cotrain.lab.worlds import verifier_table, warmup_table, world_table
    from cotrain.runs.alarms import alarm_table

    if args.alarms:
        text = alarm_table(args.study)
        (Path(args.study) / "alarms.md").write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    if args.verifiers:
        text = verifier_table(args.study)
        (Path(args.study) / "verifiers.md").write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    if args.gains:
        print(build_gains(args.study))
        return 0
    if args.warmups:
        text = warmup_table(args.study)
        (Path(args.study) / "table.md").write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    if args.worlds:
        text = world_table(args.study)
        (Path(args.study) / "table.md").write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    print(build_study(args.study))
    return 0


def cmd_report(args) -> int:
    from cotrain.analysis.report import build_report

    print(build_report(args.paths, args.out))
    return 0


KEYS_HELP = ("config keys: `cotrain keys` lists every key with its default and a one-line description "
             "(`cotrain keys grpo` one section); docs/reference.md#configs explains them")
OVERRIDES = {"nargs": "*", "metavar": "key.sub=value", "default": []}  # never named as required


def cmd_keys(args) -> int:
    from cotrain.config import describe_keys

    print(describe_keys(args.section))
    return 0


def _sweep_format() -> str:
    """The sweep file's format: the docstring of runs/sweep.py, read without importing it."""
    import ast

    source = resources.files("cotrain").joinpath("runs/sweep.py").read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse(source)) or ""


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("cotrain")
    except PackageNotFoundError:  # run from a source tree that is not installed
        release = "unknown (not installed)"
    p = _Parser(prog="cotrain", description="RL co-training of language models that check each other.",
                epilog="Start with `cotrain run configs/smoke.yaml --out runs/smoke`; " + KEYS_HELP + ".")
    p.add_argument("--version", action="version", version=f"cotrain {release}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    r = sub.add_parser("run", help="run a config: cotrain run CONFIG.yaml [key.sub=value ...]",
                       description="Run the recipe a config names (`recipe:`), in a run directory.",
                       epilog="recipes:\n" + registry.listing() + "\n\n" + KEYS_HELP + ".",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", help="a YAML config: only what differs from the defaults (configs/ has examples)")
    r.add_argument("overrides", **OVERRIDES, help="dotted overrides, e.g. train.lr=1e-4 (see `cotrain keys`)")
    r.add_argument("--out", help="run directory (overrides out_dir)")
    r.add_argument("--resume", action="store_true", help="continue from the last complete checkpoint")
    r.set_defaults(fn=cmd_run)

    rc = sub.add_parser("recipes", help="list the recipes a config can name, each with its summary")
    rc.set_defaults(fn=cmd_recipes)

    c = sub.add_parser("check", help=("validate a config and start it: load the data and every model, run and grade "
                                      "the first rollout, report sizes, speed and memory"))
    c.epilog = KEYS_HELP + "."
    c.add_argument("config", help="a YAML config, as for `cotrain run`")
    c.add_argument("overrides", **OVERRIDES, help="dotted overrides, e.g. model.path=/path/to/model")
    c.add_argument("--prompts", type=int, default=2, help="training prompts in the first rollout (default 2)")
    c.add_argument("--max-new-tokens", type=int, help="cap on the first rollout's completion length")
    c.add_argument("--no-rollout", action="store_true",
                   help="validate the config, its data and its models only: nothing sampled, graded or timed")
    c.add_argument("--device-memory", type=float, metavar="GIB",
                   help="plan the run's memory for a device of this many GiB (default: the generator's device)")
    c.set_defaults(fn=cmd_check)

    e = sub.add_parser("eval", help="evaluate a checkpoint: cotrain eval CHECKPOINT --task arith")
    e.add_argument("checkpoint", help=("a run dir, a checkpoint dir or a model dir; one of a run is evaluated in its "
                                       "run's settings (its eval section, grpo.max_new_tokens, train.bf16) but for "
                                       "the flags and overrides given"))
    e.add_argument("--task", help=("the task to evaluate on, e.g. arith, countdown, gsm8k (default: the task the "
                                   "checkpoint's run recorded in its config.yaml, with its options)"))
    e.add_argument("--splits", help="comma-separated splits (default: test,ood)")
    e.add_argument("--n", type=int, help="problems per split")
    e.add_argument("--out", help=("write the results to this JSON file (its folder made); a run's final model "
                                  "evaluated again on more problems goes to RUN/larger/eval.json, which `cotrain study` reads"))
    e.add_argument("--outcomes", help=("write each problem's greedy outcome to this JSON file, as a run's outcomes.json "
                                       "(RUN/larger/outcomes.json beside a larger evaluation: `cotrain study` pairs it "
                                       "problem by problem)"))
    e.add_argument("--bon", help=("best-of-N against N, e.g. 1,4,16,64: each --verifier's pick of N samples beside a "
                                  "random pick, majority voting and the oracle pass@N, the samples drawn once"))
    e.add_argument("--verifier", action="append", help=("a verifier ([NAME=]run dir, checkpoint or model dir) to judge the checkpoint's "
                                       "samples: its accuracy and the generation-verification gaps; several with --bon"))
    e.add_argument("overrides", **OVERRIDES, help="dotted overrides, e.g. eval.k=4 task.data_dir=DIR")
    e.set_defaults(fn=cmd_eval)

    d = sub.add_parser("demo", help="GRPO against RL Tango in the sparse world from committed starts, evaluated and plotted")
    d.add_argument("--seed", type=int, default=0, help="the seed of both arms (default 0)")
    d.add_argument("--out", default="runs/demo", help="the demo's directory: both runs, plots, report (default runs/demo)")
    d.add_argument("--resume", action="store_true", help="continue unfinished stages")
    d.add_argument("--force", action="store_true", help="rerun stages that already finished")
    d.add_argument("--from-scratch", action="store_true",
                   help="make the starts too (SFT, then the verifier's warm-up) instead of reading the committed ones")
    d.add_argument("overrides", **OVERRIDES, help="dotted overrides applied to both arms (not to --from-scratch's starts)")
    d.set_defaults(fn=cmd_demo)

    pl = sub.add_parser("plot", help="PNG curves of one or several runs")
    pl.add_argument("runs", nargs="+", help="run directories; several are drawn on shared axes")
    pl.add_argument("--out", help="output directory (default: each run's own directory for one run)")
    pl.set_defaults(fn=cmd_plot)

    sw = sub.add_parser("sweep", help="a grid of configs x seeds, summarised: cotrain sweep SWEEP.yaml --out DIR",
                        epilog=_sweep_format(), formatter_class=argparse.RawDescriptionHelpFormatter)
    sw.add_argument("sweep", help="sweep file (its format below; configs/sweeps/ has examples)")
    sw.add_argument("--out", required=True, help="sweep directory: one run dir per cell and seed, and the summary")
    sw.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    sw.add_argument("--dry-run", action="store_true", help="list the runs and whether each is new, to resume or finished")
    sw.add_argument("--only", action="append", metavar="CELL[/seedS]",
                    help="run only this cell (an arm) or one of its seeds, e.g. --only grpo/seed2; repeatable")
    sw.add_argument("overrides", **OVERRIDES, help="dotted overrides applied to every run, e.g. train.steps=50")
    sw.set_defaults(fn=cmd_sweep)

    a = sub.add_parser("archive", help=("keep a run's results in the repository: cotrain archive RUN_DIR "
                                        "results/STUDY/ARM/seedS (config, env, eval.json, gzipped metrics)"))
    a.add_argument("run", help="the run directory")
    a.add_argument("dest", help="where to write, e.g. results/sparse/grpo/seed0 or results/sparse/starts/sft")
    a.add_argument("--command", help="the command that made the run, kept as DEST/COMMAND")
    a.add_argument("--model", help="also keep this model directory's weights and tokenizer (a start)")
    a.set_defaults(fn=cmd_archive)

    st = sub.add_parser("study", help="a study's table and curves from results/STUDY (arms paired with grpo by seed)")
    st.add_argument("study", help="the study directory, e.g. results/sparse")
    st.add_argument("--worlds", action="store_true", help=("the directory holds <world>/eval.json of runs without "
                                                           "generator steps: tabulate each world's measurements at its start"))
    st.add_argument("--warmups", action="store_true", help=("the directory holds <warm-up>/eval.json of verifier "
                                                            "warm-ups: tabulate each against a verifier start's target"))
    st.add_argument("--verifiers", action="store_true", help=("the co-trained verifier against its warm-up start, per "
                                                              "arm and error kind, paired by seed; writes verifiers.md"))
    st.add_argument("--gains", action="store_true", help=("STUDY is a gains spec (YAML): co-training's gain over grpo in "
                                                          "each setting it names, against a measured x; writes "
                                                          "SPEC.md and SPEC.png beside it"))
    st.add_argument("--alarms", action="store_true", help=("STUDY is a results directory: which alarms fire over "
                                                          "the studies under it, each run's rows replayed; writes alarms.md"))
    st.set_defaults(fn=cmd_study)

    rp = sub.add_parser("report", help=("one self-contained HTML page of runs, sweeps and studies to send to a "
                                        "colleague: cotrain report DIR... --out report.html"))
    rp.add_argument("paths", nargs="+", help="run, sweep or study directories (results/<study>), in page order")
    rp.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    rp.set_defaults(fn=cmd_report)

    k = sub.add_parser("keys", help="every config key with its default and description: cotrain keys [SECTION]")
    k.add_argument("section", nargs="?", help="one section, e.g. grpo, verifier, cotraining (default: all)")
    k.set_defaults(fn=cmd_keys)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        # overrides may stand anywhere after the command, options included
        args, extra = parser.parse_known_args(argv)
        unknown = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if extra:
            args.overrides = list(args.overrides or []) + extra
        if getattr(args, "fn", None) is None:  # a bare `cotrain`: the help, not an error
            parser.print_help()
            return 0
        return args.fn(args)
    except UserError as err:
        print(f"cotrain: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cotrain: interrupted (resume with --resume)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`cotrain ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:  # not a user's mistake: keep the traceback, and say that it is a bug
        traceback.print_exc()
        print(f"cotrain: internal error: {type(err).__name__}: {err} -- a bug in cotrain, not in your input; "
              "please report it with the traceback above", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
