"""The project stands on its own: the data its real tasks read ships inside the package (src/cotrain/data,
with the rows and checksums its README gives), a directory of one's own copies takes precedence, plain
or gzipped; a `datasets` id is an optional extra that fails in one line when it cannot be had; and no
file of the project reads or names a folder beside the repository."""
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cotrain.cli import main
from cotrain.errors import UserError
from cotrain.tasks import Problem, make_task
from cotrain.tasks.mathdata import FILES_READ, default_data_dir, read_jsonl, shipped_data_dir

REPO = Path(__file__).resolve().parents[1]
GSM8K_ROW = {"question": "What is 2+2?", "answer": "2+2 = <<2+2=4>>4\n#### 4"}
GSM8K_PROBLEM = Problem(question="What is 2+2?", answer="4", steps=("2+2 = 4",), solution="2+2 = 4\n#### 4",
                        meta={"line": 1})


@pytest.fixture
def no_data_dir(monkeypatch):
    monkeypatch.delenv("COTRAIN_DATA_DIR", raising=False)


# ---------------------------------------------------------------------- the shipped data


def test_the_shipped_files_are_those_the_data_readme_lists():
    """Each gzipped file of src/cotrain/data has the rows and the SHA-256 its README's table gives, and the
    table lists every one of them."""
    data = shipped_data_dir()
    table = re.findall(r"^\| `([\w.]+\.gz)` \| ([\d,]+) \|.*\| `([0-9a-f]{64})` \|$", (data / "README.md").read_text(), re.M)
    assert sorted(name for name, _, _ in table) == sorted(p.name for p in data.glob("*.gz")) == [
        "gsm8k_test.jsonl.gz", "gsm8k_train.jsonl.gz", "humaneval.jsonl.gz", "math500_test.jsonl.gz"]
    for name, rows, digest in table:
        path = data / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name
        assert len(read_jsonl(path, "shipped")) == int(rows.replace(",", "")), name


def test_the_tasks_read_the_shipped_copy_by_default(no_data_dir):
    assert default_data_dir() == shipped_data_dir()
    sizes = {name: len(make_task(name).problems(split)) for name, split in
             (("gsm8k", "test"), ("math500", "test"), ("humaneval", "test"))}
    assert sizes == {"gsm8k": 1319, "math500": 500, "humaneval": 164}
    for name in ("gsm8k_test", "math500_test", "humaneval"):
        assert str((shipped_data_dir() / f"{name}.jsonl.gz").resolve()) in FILES_READ  # a run records its hash


def test_an_installed_package_carries_its_data():
    """The package data of pyproject.toml names the data files, so that `pip install .` (a wheel) has
    them, not only an editable install."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^cotrain = \[.*"data/\*\.gz", "data/README\.md".*\]$', pyproject, re.M)


@pytest.mark.parametrize("name, gzipped", [
    ("gsm8k_test.jsonl", False),     # a plain copy of one's own
    ("gsm8k_test.jsonl.gz", True),   # gzipped, as shipped
    ("gsm8k_test.jsonl", True),      # gzipped under the plain name: told by its first bytes
])
def test_a_data_directory_of_ones_own_takes_precedence_plain_or_gzipped(tmp_path, monkeypatch, name, gzipped):
    text = (json.dumps(GSM8K_ROW) + "\n").encode()
    (tmp_path / name).write_bytes(gzip.compress(text) if gzipped else text)
    assert make_task("gsm8k", data_dir=str(tmp_path)).problems("test") == [GSM8K_PROBLEM]  # task.data_dir
    monkeypatch.setenv("COTRAIN_DATA_DIR", str(tmp_path))
    assert make_task("gsm8k").problems("test") == [GSM8K_PROBLEM]  # the environment variable


def test_a_split_file_named_data_colon_is_one_of_the_data_directory(tmp_path, monkeypatch, no_data_dir):
    """`data:NAME` in a file task's splits (configs/real/cure.yaml tests on `data:humaneval.jsonl.gz`)."""
    assert len(make_task("code_jsonl", splits={"test": "data:humaneval.jsonl.gz"}).problems("test")) == 164
    (tmp_path / "gsm8k_test.jsonl").write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    monkeypatch.setenv("COTRAIN_DATA_DIR", str(tmp_path))
    [problem] = make_task("jsonl", splits={"test": "data:gsm8k_test.jsonl"}).problems("test")
    assert (problem.question, problem.answer) == ("2+2?", "4")
    with pytest.raises(UserError, match="data file not found: .*humaneval.jsonl.gz"):  # not in one's own directory
        make_task("code_jsonl", splits={"test": "data:humaneval.jsonl.gz"}).problems("test")


# ---------------------------------------------------------------------- a datasets id (optional)


def test_a_dataset_id_without_the_datasets_library_is_one_line_and_exit_code_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(UserError, match=r"needs the datasets library: pip install 'cotrain\[datasets\]'"):
        make_task("gsm8k", dataset="openai/gsm8k").problems("train")
    config = tmp_path / "grpo.yaml"
    config.write_text("recipe: grpo\n")
    code = main(["check", str(config), "task.name=gsm8k", "task.dataset=openai/gsm8k", "--prompts", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "gsm8k: task.dataset=openai/gsm8k needs the datasets" in err


def test_gsm8k_and_math500_read_a_datasets_data_set(tmp_path, monkeypatch):
    """A `save_to_disk` copy of a DatasetDict, and a directory of data files as `hf download --repo-type
    dataset` leaves it, both offline."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))  # not the user's cache
    saved = tmp_path / "gsm8k"
    datasets.DatasetDict({"train": datasets.Dataset.from_list([GSM8K_ROW]),
                          "test": datasets.Dataset.from_list([GSM8K_ROW] * 2)}).save_to_disk(str(saved))
    task = make_task("gsm8k", dataset=str(saved))
    assert task.problems("train") == [GSM8K_PROBLEM] and len(task.problems("test")) == 2
    files = tmp_path / "math500"
    files.mkdir()
    row = {"problem": "What is $1+1$?", "solution": "So $\\boxed{2}$.", "answer": "2", "subject": "Algebra",
           "level": 1, "unique_id": "test/algebra/1.json"}
    (files / "test.jsonl").write_text(json.dumps(row) + "\n")
    [problem] = make_task("math500", dataset=str(files)).problems("test")
    assert (problem.question, problem.answer, problem.meta["level"]) == ("What is $1+1$?", "2", 1)
    assert f"{saved}[default]:train" in FILES_READ and f"{files}[default]:test" in FILES_READ
    train_only = tmp_path / "train_only"
    datasets.DatasetDict({"train": datasets.Dataset.from_list([row])}).save_to_disk(str(train_only))
    with pytest.raises(UserError, match="has no split 'test'"):
        make_task("math500", dataset=str(train_only)).problems("test")
    with pytest.raises(UserError, match="BuilderConfig 'socratic' not found"):  # a configuration it lacks
        make_task("math500", dataset=str(files), dataset_config="socratic").problems("test")
    with pytest.raises(UserError, match="no such directory"):
        make_task("gsm8k", dataset=str(tmp_path / "absent")).problems("train")


def test_a_hub_id_that_cannot_be_had_fails_in_one_line_at_once(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))
    # HF_HUB_OFFLINE set: datasets reads its cache, where the data set is not (datasets reads the variable
    # when imported, so it is set there too)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="gsm8k: dataset 'cotrain-tests/absent' is not in the Hugging Face cache, "
                                        "and HF_HUB_OFFLINE is set .*leave task.dataset unset"):
        make_task("gsm8k", dataset="cotrain-tests/absent").problems("train")
    # neither variable set and the hub out of reach: the error comes before datasets spends a minute retrying
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    start = time.perf_counter()
    with pytest.raises(UserError, match="127.0.0.1 cannot be reached: download it .* set HF_HUB_OFFLINE=1"):
        make_task("math500", dataset="HuggingFaceH4/MATH-500").problems("test")
    assert time.perf_counter() - start < 5


# ---------------------------------------------------------------------- nothing outside the repository


def project_files() -> list[Path]:
    """The files of the project: those git tracks (and those it would add), else every file of the tree
    outside the virtual environment, caches and run directories."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
        return [REPO / name for name in listed if name and (REPO / name).is_file()]
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        skip = {".git", ".venv", "runs", "__pycache__", ".pytest_cache", ".hypothesis"}
        files = []
        for root, dirs, names in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
            files += [Path(root) / name for name in names]
        return files


def test_no_file_names_a_folder_beside_the_repository():
    """A user has the repository alone: no file reads or names the folder that once sat beside it."""
    beside = ".." + "/shared"  # written in two pieces, so that this file does not name it
    naming = sorted(str(path.relative_to(REPO)) for path in project_files()
                    if beside.encode() in path.read_bytes())
    assert naming == [], f"files that name {beside}: {', '.join(naming)}"
