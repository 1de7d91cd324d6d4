"""A run's life in its directory: `open_session` prepares the directory and restores a resumed run
(weights, optimizers, RNG, the recipe's own state), settles the precision and records the machine;
`maybe_checkpoint` saves on schedule; `finish` saves the final models, evaluates them and plots."""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cotrain import allocator, dist, threads
from cotrain.config import RunSettings, TrainConfig
from cotrain.eval.evaluate import evaluate_generator, evaluation_size, sample_records, take_outcomes
from cotrain.models.build import load_weights
from cotrain.precision import dtype_warning, machine, provenance, resolve_bf16
from cotrain.registry import STUDY
from cotrain.runs.alarms import KEYS as ALARM_KEYS
from cotrain.runs.alarms import alarms_due
from cotrain.runs.policy import Policy
from cotrain.runs.rundir import (
    MetricsLogger,
    NullLogger,
    Progress,
    list_checkpoints,
    load_checkpoint_state,
    prepare_run_dir,
    save_checkpoint,
    write_config,
    write_json_atomic,
)
from cotrain.runs.trackers import open_tracker
from cotrain.tasks.base import Task


@dataclass
class Session:
    """What a recipe's loop needs from the outside world, and the settings logging, checkpointing and the
    final evaluation read (`RunConfig.run_settings`)."""

    settings: RunSettings
    run_dir: Path
    logger: MetricsLogger
    progress: Progress
    start_step: int
    stopped: bool = False  # the run ended early (a stopping rule fired) before its last checkpoint
    state: dict = field(default_factory=dict)  # the resumed checkpoint's run state (step, RNG, recipe extras)
    history: list = field(default_factory=list)  # the logged rows' alarm inputs (runs/alarms.py), oldest first


def open_session(settings: RunSettings, config: dict, run_dir: str | Path, resume: bool, roles: dict,
                 desc: str) -> Session:
    """Prepare the run directory, write `config` (the run's, as config.yaml keeps it) and settle the precision;
    on resume, restore each role's weights, optimizer and the RNG.

    Args:
        roles: {role: Policy}; model weights are reloaded in place.
    """
    dist.on_main(prepare_run_dir, run_dir, resume=resume)
    run_dir = Path(run_dir)
    dist.on_main(write_config, run_dir, config)
    log = settings.log
    choose_precision(settings.train, settings.dtype, [p.model for p in roles.values()], run_dir, resume)
    start, stopped, state = 0, False, {}
    ckpts = list_checkpoints(run_dir) if resume else []
    if ckpts:
        ckpt = ckpts[-1]
        for role, p in roles.items():
            load_weights(p.model, ckpt / role)
        state = load_checkpoint_state(ckpt, roles)
        start, stopped = state["step"], state.get("stopped", False)
    tracked = {**config, "train": {**config["train"], "bf16": settings.train.bf16}}  # the precision as settled
    tracker = open_tracker(run_dir, tracked, enabled=log.wandb and dist.is_main(), project=log.wandb_project,
                           mode=log.wandb_mode, resume=resume)
    logger = (MetricsLogger(run_dir, log.tensorboard, resume_step=start if resume else None, tracker=tracker)
              if dist.is_main() else NullLogger())
    progress = Progress(settings.train.steps, start=start, enabled=log.progress and dist.is_main(), desc=desc)
    dist.on_main(record_data_files, run_dir)
    history = _alarm_history(run_dir / "metrics.jsonl") if resume and dist.is_main() else []
    return Session(settings, run_dir, logger, progress, start, stopped, state, history)


def _alarm_history(path: Path) -> list[dict]:
    """What the alarms read of the rows a resumed run keeps (its metrics.jsonl, already cut back)."""
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append({k: v for k, v in row.items() if k in ALARM_KEYS or k.startswith("alarm/")})
    return rows


def choose_precision(t: TrainConfig, dtype: str, models: list, run_dir: Path, resume: bool) -> None:
    """Settle `train.bf16` (auto: on where bf16 is native on every model's device) in `t`, say the
    choice once, warn of weights in a dtype this hardware computes slowly, and record the machine in
    `env.json` (a resumed run keeps the machines of its earlier parts under `earlier`), beside the C allocator's
    settings (`allocator.tune`, made here once a process)."""
    devices = [next(m.parameters()).device for m in models] or [dist.device()]
    malloc = allocator.tune()
    bf16, line = resolve_bf16(t.bf16, devices)
    setting = t.bf16
    t.bf16 = bf16
    lines = [text for text in (threads.chosen_line(), line) if text]
    lines += [w for w in {dtype_warning(dtype, d) for d in devices} if w]
    if dist.is_main():
        for text in lines:
            print(text, file=sys.stderr, flush=True)
        env = {**machine(), **provenance(), "processes": dist.world(),
               "precision": {"train.bf16": setting, "bf16_autocast": bf16, "model.dtype": dtype,
                             "devices": sorted({str(d) for d in devices}), "reason": line}, "allocator": malloc}
        path = run_dir / "env.json"
        if resume and path.is_file():
            try:
                before = json.loads(path.read_text(encoding="utf-8"))
                env["earlier"] = before.pop("earlier", []) + [before]
            except (OSError, ValueError):
                pass  # an unreadable record is replaced, never fatal
        write_json_atomic(path, env)


def log_step(session: Session, step: int, metrics: dict, shown: dict, force: bool = False) -> None:
    """Write the step's metrics when due (every `log.every` steps, the last step, or `force`) and show
    `shown` and the latest greedy pass@1 (the test split's, else the first split's) on the progress line."""
    s = session.settings
    if force or step % s.log.every == 0 or step == s.train.steps:
        if dist.is_main():
            session.history.append({k: v for k, v in metrics.items() if k in ALARM_KEYS})
            for name, message in alarms_due(session.history, s.alarms, s.label_free).items():
                metrics[f"alarm/{name}"] = session.history[-1][f"alarm/{name}"] = 1.0
                print(f"\nalarm at step {step}: {message}", file=sys.stderr, flush=True)
        session.logger.log(step, metrics)
    evals = sorted((k != "eval/test/pass@1", k) for k in metrics if k.startswith("eval/") and k.endswith("/pass@1"))
    session.progress.update(step, {**shown, **({evals[0][1].split("/", 1)[1]: metrics[evals[0][1]]} if evals else {})})


def maybe_checkpoint(session: Session, step: int, roles: dict, stop: bool = False,
                     extra: dict | None = None, force: bool = False) -> None:
    """Checkpoint every `checkpoint.every` steps, at the last step, when a stopping rule fires, or when
    forced; `extra` is recipe state restored on resume as `session.state`."""
    s = session.settings
    if force or stop or step == s.train.steps or (s.checkpoint.every and step % s.checkpoint.every == 0):
        dist.on_main(save_checkpoint, session.run_dir, step, savable(roles), {"stopped": stop, **(extra or {})},
                     s.checkpoint.keep_last)


class _GatheredOptimizer:
    """The whole optimizer state of a sharded model, gathered to be saved."""

    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state


def savable(roles: dict) -> dict:
    """`roles` with each model sharded by FSDP2 replaced by its plain copy and its optimizer by its
    gathered state (collectives: every process calls it)."""
    out = {}
    for role, p in roles.items():
        if dist.is_sharded(p.model):
            # before the first step there is no state to gather (gathering would initialise AdamW's
            # moments with a zero step, which counts in its bias correction)
            opt = _GatheredOptimizer(dist.full_optimizer_state(p.model, p.optimizer) if p.optimizer.state
                                     else p.optimizer.state_dict())
            p = Policy(dist.plain_copy(p.model), p.tokenizer, opt, p.scheduler)
        out[role] = p
    return out


def finish(session: Session, model, tokenizer, task: Task, step: int,
           other_models: dict | None = None, other_results: dict | None = None,
           generator_results: dict | None = None) -> dict:
    """Save the final model(s), evaluate every split and write eval.json (the caller draws the plots: a run
    never imports reporting).

    Args:
        other_models: {role: (model, tokenizer)} saved beside the generator in `final/`.
        other_results: more eval.json entries ({role: {split: {metric: value}}}), evaluated by the recipe.
        generator_results: {split: metrics} the recipe evaluated in place of the generator model's own
            (mars: its planner and worker together), written as eval.json's `generator`.
    """
    s = session.settings
    session.progress.close()
    others = {role: (dist.plain_copy(m), tok) for role, (m, tok) in (other_models or {}).items()}
    dist.on_main(_save_final, session.run_dir, dist.plain_copy(model), tokenizer, others)
    evaluated = generator_results is None  # else the recipe evaluated its generator in its own way (mars)
    results = {"generator": _evaluation(s, model, tokenizer, task, "final evaluation", n=s.eval.n, **s.eval_settings())
               if evaluated else generator_results}
    outcomes = take_outcomes(results["generator"])  # each problem's greedy outcome: `outcomes.json`, not eval.json
    results.update(other_results or {})
    row = {f"eval/{split}/{k}": v for split, m in results["generator"].items() for k, v in m.items()}
    row.update({f"eval/{role}/{split}/{k}": v for role, splits in (other_results or {}).items()
                for split, m in splits.items() for k, v in m.items()})
    session.logger.log(step, row)
    _record_samples(session, model, tokenizer, task, others.get("verifier"), step)
    session.logger.close()
    if outcomes:
        dist.on_main(write_json_atomic, session.run_dir / "outcomes.json", outcomes)
    elif dist.is_main():  # a recipe that evaluates in its own way (mars) keeps none: no earlier file stays
        (session.run_dir / "outcomes.json").unlink(missing_ok=True)
    dist.on_main(write_json_atomic, session.run_dir / "eval.json", results)
    dist.on_main(record_data_files, session.run_dir)
    if dist.is_main():  # an earlier final model's larger evaluation would be read as this one's
        shutil.rmtree(session.run_dir / STUDY.larger, ignore_errors=True)
    # the same model on more problems, greedy alone, after eval.json: a kill here costs no run
    if s.eval.larger_n and evaluated:
        larger = _evaluation(s, model, tokenizer, task, "larger evaluation", n=s.eval.larger_n,
                             **{**s.eval_settings(), "k": 0, "n_sampled": 0})
        dist.on_main(write_json_atomic, session.run_dir / STUDY.larger / "outcomes.json", take_outcomes(larger))
        dist.on_main(write_json_atomic, session.run_dir / STUDY.larger / "eval.json", {"generator": larger})
    return results


def _evaluation(s: RunSettings, model, tokenizer, task: Task, desc: str, **settings) -> dict:
    """`evaluate_generator` of the run's splits after training (outcomes kept), on a progress line of its own
    counted in completions (`evaluation_size`)."""
    bar = Progress(evaluation_size(task, s.eval.splits, **settings), enabled=s.log.progress and dist.is_main(),
                   desc=desc, unit="completion")
    results = evaluate_generator(model, tokenizer, task, s.eval.splits, outcomes=True, done=bar.advance, **settings)
    bar.close()
    return results


SAMPLES = 8  # greedy completions kept in samples.jsonl for people to read


def _record_samples(session: Session, model, tokenizer, task: Task, verifier: tuple | None, step: int = 0) -> None:
    """`samples.jsonl`: SAMPLES greedy completions of the first eval split, graded, with the verifier's
    verdict where the run has one; mirrored to the run's tracker as a table. Never costs a finished run: a
    failure is one warning line."""
    s, run_dir, logger = session.settings, session.run_dir, session.logger
    try:
        rows = sample_records(model, tokenizer, task, s.eval.splits[0], n=SAMPLES,
                              max_new_tokens=s.eval_settings()["max_new_tokens"], bf16=s.train.bf16,
                              verifier=verifier, verifier_max_new_tokens=s.verifier_max_new_tokens)
    except Exception as err:  # noqa: BLE001 (a sample for people to read must never cost a finished run)
        print(f"warning: samples.jsonl not written: {err}")
        return
    tracker = getattr(logger, "tracker", None)
    if tracker is not None and rows:  # as TRL's log_completions: a table of prompts and completions
        tracker.table("completions", ["step", "prompt", "completion", "correct", "verdict"],
                      [[step, r["question"], r["completion"], r["correct"], r.get("verdict", "")] for r in rows], step)
    if dist.is_main() and rows:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        tmp = run_dir / "samples.jsonl.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(run_dir / "samples.jsonl")


def record_data_files(run_dir: Path) -> None:
    """`data.json`: the SHA-256 of every data file the run has read so far ({path: hash}; a resumed run
    adds to its earlier parts' record, and a file whose bytes changed between them keeps both hashes)."""
    from cotrain.tasks.mathdata import FILES_READ

    path = Path(run_dir) / "data.json"
    record: dict[str, list[str]] = {}
    if path.is_file():
        try:
            record = json.loads(path.read_text(encoding="utf-8")).get("files", {})
        except (OSError, ValueError, AttributeError):
            record = {}  # an unreadable record is replaced, never fatal
    for file, digest in FILES_READ.items():
        hashes = record.setdefault(file, [])
        if digest not in hashes:
            hashes.append(digest)
    if record:
        write_json_atomic(path, {"files": record})


def _save_final(run_dir: Path, model, tokenizer, other_models: dict) -> None:
    """`final/`: written beside and renamed into place (a run dir's `final/` is what `init:` and
    `cotrain eval` load)."""
    from cotrain.models.build import save_model

    final, tmp = run_dir / "final", run_dir / ".tmp_final"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tokenizer, tmp / "generator")
    for role, (m, tok) in other_models.items():
        save_model(m, tok, tmp / role)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
