"""Keeping what a study needs after its run directories are gone: `results/<study>/`.

Run directories are scratch (large checkpoints, optimizer states). A study keeps, in the repository:

    results/<study>/starts/<name>/     a start every arm shares: the model's weights and tokenizer (no
                                       optimizer), the run's config.yaml, env.json, eval.json, COMMAND
    results/<study>/<arm>/seed<S>/     a finished run: config.yaml, env.json, eval.json, metrics.jsonl.gz,
                                       COMMAND, and larger/ where its final model was evaluated again on
                                       more problems (eval.json, outcomes.json, COMMAND)

`cotrain archive RUN_DIR DEST [--model ROLE_DIR]` writes either; `cotrain study results/<study>` builds
the study's table and figures from them (cotrain.lab).
"""
from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

from cotrain.errors import UserError
from cotrain.registry import STUDY

RUN_FILES = ("config.yaml", "env.json", "eval.json", "outcomes.json")
LARGER, LARGER_FILES = STUDY.larger, ("eval.json", "outcomes.json", "COMMAND")  # the final model evaluated again
MODEL_SKIP = ("optim.pt",)  # a start is weights and tokenizer; the optimizer belongs to the run that made it


def gzip_file(src: Path, dest: Path) -> None:
    """dest = gzip of src, with no name or time in its header (the same bytes for the same file)."""
    with open(src, "rb") as fin, open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                                        mtime=0, compresslevel=9) as fout:
        shutil.copyfileobj(fin, fout)


def archive_run(run_dir: str | Path, dest: str | Path, command: str | None = None,
                model: str | Path | None = None) -> list[Path]:
    """Copy what a study keeps of a run into `dest` (created): its config.yaml, env.json, eval.json and
    outcomes.json (each problem's final greedy outcome) when present, metrics.jsonl gzipped, the verifiers'
    records of their final evaluation (`verifications/`), the larger evaluation of its final model (`larger/`)
    when present, COMMAND when given, and with `model` that model directory's files but its optimizer, under
    dest/<the model directory's name>. A larger/ that dest kept of a run with another final evaluation is
    removed: it evaluated another model.

    Raises:
        UserError: `run_dir` holds no config.yaml, or `model` is not a model directory.
    """
    run_dir, dest = Path(run_dir), Path(dest)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir}: not a run directory (no config.yaml)")
    if model is not None and not (Path(model) / "config.json").is_file():
        raise UserError(f"{model}: not a model directory (no config.json)")
    if not (run_dir / "eval.json").is_file():  # a run still going, or killed: kept, but said
        print(f"warning: {run_dir} has no eval.json (not finished): what is kept is its rows so far",
              file=sys.stderr, flush=True)
    dest.mkdir(parents=True, exist_ok=True)
    before = (dest / "eval.json").read_bytes() if (dest / "eval.json").is_file() else None
    written = []
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, dest / name)
            written.append(dest / name)
        elif name == "outcomes.json":  # an earlier archive's would be read as this run's
            (dest / name).unlink(missing_ok=True)
    if (run_dir / "metrics.jsonl").is_file():
        gzip_file(run_dir / "metrics.jsonl", dest / "metrics.jsonl.gz")
        written.append(dest / "metrics.jsonl.gz")
    for f in sorted((run_dir / "verifications").glob("*.jsonl.gz")):
        (dest / "verifications").mkdir(exist_ok=True)
        shutil.copyfile(f, dest / "verifications" / f.name)
        written.append(dest / "verifications" / f.name)
    if (run_dir / LARGER / "eval.json").is_file():
        shutil.rmtree(dest / LARGER, ignore_errors=True)  # whole: no file of an earlier one stays
        (dest / LARGER).mkdir()
        for name in LARGER_FILES:
            if (run_dir / LARGER / name).is_file():
                shutil.copyfile(run_dir / LARGER / name, dest / LARGER / name)
                written.append(dest / LARGER / name)
    elif (dest / LARGER).is_dir() and before is not None and before != (dest / "eval.json").read_bytes():
        shutil.rmtree(dest / LARGER)
    if command:
        (dest / "COMMAND").write_text(command.strip() + "\n", encoding="utf-8")
        written.append(dest / "COMMAND")
    if model is not None:
        model = Path(model)
        target = dest / model.name
        target.mkdir(exist_ok=True)
        for f in sorted(model.iterdir()):
            if f.is_file() and f.name not in MODEL_SKIP:
                shutil.copyfile(f, target / f.name)
                written.append(target / f.name)
    return written
