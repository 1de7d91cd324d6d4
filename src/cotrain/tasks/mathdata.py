"""Math word problems from files: GSM8K, MATH-500, and any JSONL file of question/answer rows.

GSM8K and MATH-500 are shipped inside the package, gzipped (src/cotrain/data, its README gives their
source, license and checksums); a data directory of one's own takes precedence (`default_data_dir`),
and a `datasets` id (`task.dataset`, cotrain.hub.HubDataset) replaces the files. They are read on the first
`problems()` call, so a task that only grades needs no file. `problems(split, n, seed)` shuffles the
split's rows with random.Random(seed) and takes the first n: deterministic, and a shorter list is a
prefix of a longer one with the same seed.

Grading extracts the completion's final answer (per task, below) and compares it with
`grading.math_equal`: exact for plain numbers, as text for words (a name: "Clara1" is not "Clara"),
math-verify for anything else.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import string
import sys
import zlib
from dataclasses import replace
from importlib import resources
from pathlib import Path

from cotrain.errors import UserError
from cotrain.hub import HubDataset
from cotrain.tasks.base import Problem, labelled
from cotrain.tasks.grading import math_equal, normal_text

# A number, with thousands separators; the minus counts only where it cannot be a subtraction ("12-5" ends in 5).
_NUMBER = re.compile(r"(?:(?<![\w)\].])-)?[0-9][0-9,]*(?:\.[0-9]+)?")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_MARK = re.compile(r"####|answer\s*:", re.IGNORECASE)
# A backslash escapes the next character (\{ is a literal brace, \\ a line break); braces otherwise.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_CALCULATOR = re.compile(r"<<[^<>]*>>")
_WORD_MARK = re.compile(r"####|answer\s*:|the (?:final )?answer is", re.IGNORECASE)
# A number (or a fraction of two) at the start of an answer line, then a unit, a sentence or nothing:
# "2 bananas", "12. Check: ...", "5/2"; not the start of an expression ("2x+1", "3 + 4").
_LEADING_NUMBER = re.compile(r"\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\s*/\s*[0-9]+)?)\$?"
                             r"(?=\s*$|[.,;!?)(\]]|\s+[^\s+\-*/^=])")


# ----------------------------------------------------------------------------- answer extraction


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`) whose braces balance, or None.

    Escaped braces `\\{`, `\\}` (LaTeX set braces) do not count. Linear in len(text).

    Args:
        text: e.g. "so $\\boxed{\\frac{1}{2}}$."

    Returns:
        e.g. "\\frac{1}{2}".
    """
    if not isinstance(text, str):
        return None
    closing: dict[int, int] = {}  # position of "{" -> position of its "}"
    stack = []
    for token in _BRACE_TOKEN.finditer(text):
        if token.group() == "{":
            stack.append(token.start())
        elif token.group() == "}" and stack:
            closing[stack.pop()] = token.start()
    for match in reversed(list(_BOXED.finditer(text))):
        open_at = match.end() - 1
        if open_at in closing:
            return text[open_at + 1: closing[open_at]].strip()
    return None


def last_number(text: str) -> str | None:
    """The last number in `text` with thousands separators removed ("1,000" -> "1000"), or None."""
    if not isinstance(text, str):
        return None
    matches = _NUMBER.findall(text)
    return _clean_number(matches[-1]) if matches else None


def extract_gsm8k_answer(completion: str) -> str | None:
    """A GSM8K completion's final answer, or None. Never raises.

    In order: after the last `####`, the first number, unless the rest of that line is LaTeX (holds a
    backslash or a brace: "#### \\frac{1}{2}", "#### \\boxed{18}"), which is read like a MATH answer
    line; else the content of the last `\\boxed{}`; else the number that starts the line after the last
    `Answer:` or `The answer is` ("The answer is 12. Check: 12 * 2 = 24." -> 12, "5/2" whole); else the
    last number of the text.
    """
    if not isinstance(completion, str):
        return None
    mark = completion.rfind("####")
    if mark != -1:
        line = completion[mark + 4:].split("\n", 1)[0]
        if "\\" in line or "{" in line:
            answer = last_boxed(line) or _answer_line(line)
            if answer:
                return answer
        match = _NUMBER.search(completion, mark + 4)
        if match:
            return _clean_number(match.group())
    boxed = last_boxed(completion)
    if boxed:
        return boxed
    return _marked_number(completion) or last_number(completion)


def _marked_number(completion: str) -> str | None:
    """The number (or fraction) that starts the line after the last `####`, `Answer:` or `The answer is`."""
    marks = list(_WORD_MARK.finditer(completion))
    lead = _LEADING_NUMBER.match(completion[marks[-1].end():].split("\n", 1)[0]) if marks else None
    return _clean_number(re.sub(r"\s+", "", lead.group(1))) if lead else None


def extract_math_answer(completion: str) -> str | None:
    """A MATH-style completion's final answer, or None. Never raises.

    As `extract_word_answer`: the content of the last `\\boxed{}` with balanced braces; else what follows
    the last `####`, `answer:` or `The answer is` (any case) on its line: the number it starts with when
    a unit or a sentence follows ("12 inches", "12. Check: ..."), else the whole rest of the line
    without surrounding `$` and a final period ("\\frac{1}{2}", "2x+1").
    """
    return extract_word_answer(completion)


def extract_word_answer(completion: str) -> str | None:
    """A word problem's final answer as people write it, or None. Never raises.

    In order: the content of the last `\\boxed{}`; else what follows the last `####`, `Answer:` or
    `The answer is` (any case) on its line: the number it starts with, units and sentences after it
    dropped ("#### 2 bananas" -> 2, "The answer is 12. Check: 12 * 2 = 24." -> 12, "5/2" -> 5/2), or
    the whole rest of the line when it does not start with a number ("11:45 p.m.", a name); else None.
    """
    if not isinstance(completion, str):
        return None
    boxed = last_boxed(completion)
    if boxed:
        return boxed
    marks = list(_WORD_MARK.finditer(completion))
    if not marks:
        return None
    line = completion[marks[-1].end():].split("\n", 1)[0]
    lead = _LEADING_NUMBER.match(line)
    if lead:
        return _clean_number(re.sub(r"\s+", "", lead.group(1)))
    return _answer_line(line)


def same_text(a: str, b: str) -> bool:
    """Two answers equal as text (`grading.normal_text`): case, `\\text{}`, surrounding spaces and
    punctuation, and inner runs of spaces ignored ("11:45 p.m." and "11:45 P.M"; a name)."""
    return isinstance(a, str) and isinstance(b, str) and bool(normal_text(a)) and normal_text(a) == normal_text(b)


def _answer_line(line: str) -> str | None:
    """The answer written on the rest of a line: stripped of spaces, a final period and surrounding `$`."""
    return line.strip().rstrip(".").strip().strip("$").strip() or None


def _clean_number(text: str) -> str:
    return text.replace(",", "")


# ----------------------------------------------------------------------------- data files


def shipped_data_dir() -> Path:
    """The data files shipped inside the package (`cotrain/data`: GSM8K, MATH-500, HumanEval, gzipped),
    wherever the package is installed."""
    return Path(str(resources.files("cotrain") / "data"))


def default_data_dir() -> Path:
    """Where the data files are looked for when a task is given no `data_dir`.

    Returns:
        $COTRAIN_DATA_DIR when set (one's own copies); else the copies shipped with the package
        (`shipped_data_dir`).
    """
    if os.environ.get("COTRAIN_DATA_DIR"):
        return Path(os.environ["COTRAIN_DATA_DIR"])
    return shipped_data_dir()


def data_file(root: str | Path, name: str) -> Path:
    """The file `name` of the data directory `root`, plain or gzipped: `root/name` when it exists, else its
    twin with `.gz` added or removed when that exists, else `root/name` (whose absence the reader reports).

    Args:
        root: a data directory, e.g. `default_data_dir()`.
        name: e.g. "gsm8k_test.jsonl" (found as gsm8k_test.jsonl.gz too).
    """
    path = Path(root) / name
    twin = path.with_suffix("") if path.suffix == ".gz" else path.with_name(path.name + ".gz")
    return twin if not path.is_file() and twin.is_file() else path


DATA_PREFIX = "data:"
"""A split's file written `data:NAME` is NAME in the data directory (`data:humaneval.jsonl.gz`)."""


def split_file(file: str | Path) -> Path:
    """A split's file as a config names it: `data:NAME` is `data_file(default_data_dir(), NAME)`, any
    other path is taken as written."""
    text = str(file)
    if text.startswith(DATA_PREFIX):
        return data_file(default_data_dir(), text[len(DATA_PREFIX):])
    return Path(file)


def read_jsonl(path: Path, task: str, hint: str = "set task.data_dir or COTRAIN_DATA_DIR") -> list[dict]:
    """The rows of a JSONL file, plain or gzipped (told by its first two bytes), blank lines skipped.

    Args:
        path: the file.
        task: the task's name, for error messages.
        hint: how to point the task at another file, for the error of a missing one.

    Raises:
        UserError: the file is missing, a line is not UTF-8 text, or a line is not a JSON object.
    """
    if not path.is_file():
        raise UserError(f"{task}: data file not found: {path.absolute()} ({hint})")
    rows = []
    try:
        rows = _read_rows(path, task, rows)
        FILES_READ[str(path.resolve())] = hashlib.sha256(path.read_bytes()).hexdigest()
        return rows
    except (OSError, EOFError, zlib.error) as error:  # a broken .gz
        raise UserError(f"{task}: {path}: cannot be read ({error})") from None


FILES_READ: dict[str, str] = {}
"""Every data file this process has read: resolved path -> SHA-256 of its bytes, and every `datasets`
split: "<dataset>[<config>]:<split>" -> SHA-256 of its rows as JSON lines (a run records them)."""

_REPORTED: set[tuple] = set()
"""(task class, split, file, its SHA-256, its fields) of each split whose load line this process printed: one each."""


def _read_rows(path: Path, task: str, rows: list[dict]) -> list[dict]:
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"  # gzip's magic number: a .jsonl.gz, whatever the file is called
    with (gzip.open(path, "rb") if gzipped else path.open("rb")) as f:
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # a leading BOM is fine
            except UnicodeDecodeError as error:
                raise UserError(f"{task}: {path}:{line_number}: not UTF-8 text (byte {raw[error.start]:#04x} at "
                                f"column {error.start + 1}); convert the file to UTF-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"{task}: {path}:{line_number}: not valid JSON ({error.msg})") from None
            except (ValueError, RecursionError) as error:  # a number over Python's digit limit, nesting too deep
                reason = "nested too deeply" if isinstance(error, RecursionError) else str(error).split(";")[0]
                raise UserError(f"{task}: {path}:{line_number}: unreadable JSON ({reason})") from None
            if not isinstance(row, dict):
                raise UserError(f"{task}: {path}:{line_number}: expected a JSON object, got {type(row).__name__}")
            rows.append({**row, "_line": line_number})
    return rows


def take_shuffled(items: list, n: int | None, seed: int) -> list:
    """The first n of `items` shuffled by random.Random(seed) (all when n is None); a pure function."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in order[:n]]


class _FileTask:
    """Shared loading of a file-backed task: subclasses set name and _files and define _to_problem.
    A subclass that reads some splits from a `datasets` data set sets `_dataset` (cotrain.hub.HubDataset)
    and lists those splits in `_dataset_splits`."""

    name: str
    _files: dict[str, Path]
    _hint = "set task.data_dir or COTRAIN_DATA_DIR"  # how to point the task at another file
    _dataset = None
    _dataset_splits: tuple[str, ...] = ()

    def __init__(self):
        self._cache: dict[str, list[Problem]] = {}

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._files)

    def problems(self, split: str, n: int | None = None, seed: int = 0) -> list[Problem]:
        """The first n problems of `split` after a shuffle by `seed` (see the module docstring)."""
        if split not in self._files:
            raise UserError(f"{self.name}: unknown split {split!r} (valid: {', '.join(self._files)})")
        if split not in self._cache:
            self._cache[split] = self._load(split)
        return take_shuffled(self._cache[split], n, seed)

    def _load(self, split: str) -> list[Problem]:
        path = self._files[split]
        if split in self._dataset_splits:
            rows = self._dataset.rows(split, record=FILES_READ)
        else:
            rows = read_jsonl(path, f"{self.name} ({split} split)", self._hint)
        return [self._to_problem(row, path) for row in rows]

    def _to_problem(self, row: dict, path: Path) -> Problem:
        raise NotImplementedError

    def answers_equal(self, a: str, b: str) -> bool:
        """Mathematical equivalence of two extracted answers (math-verify, time-bounded)."""
        return a == b or math_equal(a, b)


def _field(row: dict, key: str, path: Path, task: str) -> str:
    """The row's field `key`, or a template over its fields (`"{body} {question}"`: a question split
    over two fields); a missing field is an error that lists the fields the row has."""
    if "{" in key:
        try:
            return key.format_map({k: v for k, v in row.items() if k != "_line"})
        except KeyError as err:
            missing = err.args[0]
        except (ValueError, IndexError, AttributeError) as err:
            raise UserError(f"{task}: bad field template {key!r} ({err}); write fields as {{name}}") from None
    elif key in row:
        return str(row[key])
    else:
        missing = key
    fields = ", ".join(k for k in row if k != "_line") or "none"
    raise UserError(f"{task}: {path}:{row['_line']}: missing field {missing!r} (the row has: {fields}; set the "
                    "task's *_field options)")


def _math500_problem(row: dict, path: Path, task: str) -> Problem:
    """A MATH-500 row as a Problem (see `Math500Task`)."""
    meta = {key: row[key] for key in ("subject", "level", "unique_id") if key in row}
    return Problem(question=_field(row, "problem", path, task), answer=_field(row, "answer", path, task),
                   solution=_field(row, "solution", path, task), meta={**meta, "line": row["_line"]})


def check_normalise(how, where: str) -> None:
    """Raise UserError naming `where` unless `how` is none, number or regex:<a valid pattern>."""
    if how in ("none", "number"):
        return
    if isinstance(how, str) and how.startswith("regex:"):
        try:
            re.compile(how[len("regex:"):])
            return
        except re.error as error:
            raise UserError(f"{where}: bad regular expression ({error})") from None
    raise UserError(f"{where}: {how!r} is not a normalisation (valid: none, number, regex:<pattern>)")


def normalise_answer(answer: str, how: str) -> str | None:
    """A gold answer as the grader compares it, or None when the form does not apply. Never raises.

    `none`: as written. `number`: its leading number, thousands separators dropped, with whatever
    follows it (a unit, a parenthesis, a sentence) dropped too: "9 (apples)" -> "9", "$1,200 a month"
    -> "1200", "5/2 cups" -> "5/2". `regex:<pattern>`: the first group of the first match (the whole
    match when the pattern has no group).
    """
    if how == "none":
        return answer
    if how == "number":
        lead = _LEADING_NUMBER.match(answer)
        return _clean_number(re.sub(r"\s+", "", lead.group(1))) if lead else None
    match = re.search(how[len("regex:"):], answer)
    if not match:
        return None
    value = match.group(1) if match.groups() else match.group(0)
    return value.strip() or None


# ----------------------------------------------------------------------------- tasks


class Gsm8kTask(_FileTask):
    """GSM8K: splits `train` and `test` (gsm8k_train.jsonl, gsm8k_test.jsonl, shipped gzipped in the
    package), or those of a `datasets` data set (`dataset: openai/gsm8k`), and optionally an
    out-of-distribution split `ood` from another data set, so that one run trains on GSM8K and is
    evaluated on both (`eval.splits: [test, ood]`).

    steps: the reference answer's lines before `####` with the `<<calc>>` annotations removed;
    solution: the steps and a final line `#### N`; answer: N without thousands separators;
    meta: {"line": line number in the file, or the row's number in a `datasets` split}.

    With `ood="math500"` the `ood` split holds the 500 MATH-500 problems (math500_test.jsonl) exactly
    as `Math500Task` reads them, with meta["source"] = "math500", and `grade` grades them as
    `Math500Task` does (`extract_math_answer`), so their pass@1 equals that of an evaluation with
    `task: math500`. `extract_answer` (majority votes) reads every completion by the GSM8K rule, which
    also takes a LaTeX answer after `####`.

    Args:
        data_dir: directory of the files, plain or gzipped (default: `default_data_dir()`).
        ood: "math500" for the `ood` split, or None (no `ood` split). It is read from the data directory
            even when `dataset` is set.
        dataset: a `datasets` id or local directory whose `train` and `test` splits replace the files
            (`openai/gsm8k`; cotrain.hub.HubDataset), or None. Needs `pip install 'cotrain[datasets]'`.
        dataset_config: the data set's configuration (default: `main` for openai/gsm8k, which also has
            `socratic`; else none).
    """

    name = "gsm8k"
    OOD_SOURCES = ("math500",)
    HUB_CONFIGS = {"openai/gsm8k": "main"}
    """The configuration read from a hub id that has several, when `dataset_config` names none."""

    def __init__(self, data_dir: str | Path | None = None, ood: str | None = None, dataset: str | None = None,
                 dataset_config: str | None = None):
        super().__init__()
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        self._files = {"train": data_file(root, "gsm8k_train.jsonl"), "test": data_file(root, "gsm8k_test.jsonl")}
        if dataset is not None:
            self._dataset = HubDataset(dataset, dataset_config or self.HUB_CONFIGS.get(dataset), self.name)
            self._dataset_splits = ("train", "test")
            self._files = {split: Path(dataset) for split in self._files}
        if ood is not None:
            if ood not in self.OOD_SOURCES:
                raise UserError(f"{self.name}: task.ood must be one of {', '.join(self.OOD_SOURCES)} or null "
                                f"(got {ood!r})")
            self._files["ood"] = data_file(root, "math500_test.jsonl")

    def _to_problem(self, row: dict, path: Path) -> Problem:
        if path == self._files.get("ood"):
            problem = _math500_problem(row, path, self.name)
            return replace(problem, meta={**problem.meta, "source": "math500"})
        reference = _field(row, "answer", path, self.name)
        body, mark, final = reference.rpartition("####")
        if not mark:
            raise UserError(f"{self.name}: {path}:{row['_line']}: answer has no '#### N' line")
        steps = tuple(line.strip() for line in _CALCULATOR.sub("", body).split("\n") if line.strip())
        answer = _clean_number(final.strip())
        return Problem(question=_field(row, "question", path, self.name), answer=answer, steps=steps,
                       solution="\n".join([*steps, f"#### {answer}"]), meta={"line": row["_line"]})

    def extract_answer(self, completion: str) -> str | None:
        """See `extract_gsm8k_answer`: after the last `####`, else the last `\\boxed{}`, else the last number."""
        return extract_gsm8k_answer(completion)

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the extracted answer equals the problem's (exact for numbers), else 0.0. Never raises.
        Problems of the `ood` split are read by their own source's rule (`extract_math_answer`).
        LabelLeak on a blinded problem."""
        labelled(problem)
        extract = extract_math_answer if problem.meta.get("source") == "math500" else extract_gsm8k_answer
        predicted = extract(completion)
        return float(predicted is not None and math_equal(predicted, problem.answer))


class Math500Task(_FileTask):
    """MATH-500: the single split `test` (math500_test.jsonl, shipped gzipped in the package), or that of
    a `datasets` data set (`dataset: HuggingFaceH4/MATH-500`).

    answer: the row's `answer`; solution: the row's `solution` (ends in a `\\boxed{}` answer); steps:
    none; meta: {"subject", "level", "unique_id" when present, "line"}.

    Args:
        data_dir: directory of the file, plain or gzipped (default: `default_data_dir()`).
        dataset: a `datasets` id or local directory whose `test` split replaces the file
            (`HuggingFaceH4/MATH-500`; cotrain.hub.HubDataset), or None. Needs `pip install 'cotrain[datasets]'`.
        dataset_config: the data set's configuration, if it has several.
    """

    name = "math500"

    def __init__(self, data_dir: str | Path | None = None, dataset: str | None = None,
                 dataset_config: str | None = None):
        super().__init__()
        root = Path(data_dir) if data_dir is not None else default_data_dir()
        self._files = {"test": data_file(root, "math500_test.jsonl")}
        if dataset is not None:
            self._dataset = HubDataset(dataset, dataset_config, self.name)
            self._dataset_splits = ("test",)
            self._files = {"test": Path(dataset)}

    def _to_problem(self, row: dict, path: Path) -> Problem:
        return _math500_problem(row, path, self.name)

    def extract_answer(self, completion: str) -> str | None:
        """See `extract_math_answer`: the last `\\boxed{}`, else the text after `####`/`answer:`."""
        return extract_math_answer(completion)

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when math-verify finds the extracted answer equal to the problem's, else 0.0. Never raises,
        except LabelLeak on a blinded problem."""
        labelled(problem)
        predicted = extract_math_answer(completion)
        return float(predicted is not None and math_equal(predicted, problem.answer))


class JsonlTask(_FileTask):
    """Any JSONL file (or one per split) of rows with a question and an answer, as published.

    Args:
        path: shorthand for splits={"train": path}.
        splits: split name -> file, e.g. {"train": "a.jsonl", "test": "b.jsonl.gz"}; a split's value may
            also be a mapping with its own `path` and any of the field options below, which then apply
            to that split's file alone. A file given only as `test` is an evaluation set (no training).
            A file may be gzipped; `data:NAME` is NAME in the data directory (`split_file`).
        question_field: the row field holding the question, or a template over fields for a question
            split over several (`"{body} {question}"`).
        answer_field: the row field holding the ground-truth answer (or a template).
        solution_field: the row field holding a reference solution, if any.
        answer_normalise: how a gold answer is read before grading (`normalise_answer`): `none` (as
            written), `number` (its leading number: "9 (apples)" -> 9), or `regex:<pattern>` (the first
            group of the first match, else the whole match).
        name: the task's name in messages and logs.

    Problems carry the row's other fields in `meta` (with "line": the line number). Grading extracts
    like MATH (last `\\boxed{}`, else after `####`/`answer:`), falling back to the last number, then
    compares as text or with `math_equal`.

    On loading a split, one line on stderr reports the share of its gold answers the grader can read
    (a gold answer written back after "The answer is" and in `\\boxed{}` grades correct), over its
    first `REPORT_ROWS` rows; below 99% it is a warning with three examples (and the normalisation that
    would read more of them, if one would). A test split whose questions also appear in the train
    split gets a warning with the count.
    """

    REPORT_ROWS = 200
    _MAPPING_KEYS = ("question_field", "answer_field", "solution_field", "answer_normalise")

    def __init__(self, path: str | Path | None = None, splits: dict | None = None,
                 question_field: str = "question", answer_field: str = "answer",
                 solution_field: str | None = None, answer_normalise: str = "none", name: str = "jsonl"):
        super().__init__()
        self.name = name
        if (path is None) == (splits is None):
            raise UserError(f"{name}: give exactly one of task.path (one file, the train split) "
                            "or task.splits ({split: file})")
        files = {"train": path} if path is not None else splits
        if not isinstance(files, dict) or not files:
            raise UserError(f"{name}: task.splits must map at least one split to a file")
        default = {"question_field": question_field, "answer_field": answer_field,
                   "solution_field": solution_field, "answer_normalise": answer_normalise}
        self._files, self._mappings = {}, {}
        for split, spec in files.items():
            mapping = dict(default)
            if isinstance(spec, dict):
                spec = dict(spec)
                file = spec.pop("path", None)
                unknown_keys = sorted(set(spec) - set(self._MAPPING_KEYS))
                if file is None or unknown_keys:
                    raise UserError(f"{name}: task.splits.{split}: " + (
                        f"unknown key {unknown_keys[0]!r} (valid: path, {', '.join(self._MAPPING_KEYS)})"
                        if unknown_keys else "give the split's file as path: FILE"))
                mapping.update(spec)
            else:
                file = spec
            if not isinstance(file, (str, Path)):
                raise UserError(f"{name}: task.splits.{split}: expected a file path, got {type(file).__name__}")
            check_normalise(mapping["answer_normalise"], f"{name}: task.splits.{split}.answer_normalise"
                            if isinstance(files.get(split), dict) else f"{name}: task.answer_normalise")
            self._files[split] = split_file(file)
            self._mappings[split] = mapping
        first = next(iter(self._mappings.values()))
        self.question_field, self.answer_field = first["question_field"], first["answer_field"]
        self.solution_field = first["solution_field"]
        self._hint = "set task.path or task.splits"

    def _load(self, split: str) -> list[Problem]:
        path, mapping = self._files[split], self._mappings[split]
        rows = read_jsonl(path, f"{self.name} ({split} split)", self._hint)
        problems = [self._problem(row, path, mapping) for row in rows]
        resolved = str(Path(path).resolve())
        said = (type(self), split, resolved, FILES_READ.get(resolved), repr(sorted(mapping.items())))  # read otherwise: again
        if said in _REPORTED:  # the same file read again in this process (another instance of the task): said once
            return problems
        _REPORTED.add(said)
        print(self._readable_report(split, rows, problems, mapping), file=sys.stderr, flush=True)
        if split != "train" and "train" in self._files:
            overlap = self._overlap(problems)
            if overlap:
                print(f"warning: {self.name}: {overlap} of the {len(problems)} {split} questions also appear in "
                      "the train split: its scores are not held out", file=sys.stderr, flush=True)
        return problems

    def _to_problem(self, row: dict, path: Path) -> Problem:
        return self._problem(row, path, self._mappings[next(iter(self._mappings))])

    def _problem(self, row: dict, path: Path, mapping: dict) -> Problem:
        qf, af, sf = mapping["question_field"], mapping["answer_field"], mapping["solution_field"]
        question = _field(row, qf, path, self.name)  # a bad template fails here, in one line
        written = _field(row, af, path, self.name)
        answer = normalise_answer(written, mapping["answer_normalise"])
        solution = _field(row, sf, path, self.name) if sf else None
        used = {qf, af, sf, "_line"}
        used |= {name for template in (qf, af) if "{" in template
                 for _, name, _, _ in string.Formatter().parse(template) if name}
        meta = {**{k: v for k, v in row.items() if k not in used}, "line": row["_line"]}
        if answer is None:  # the normalisation does not apply: grade against the answer as written
            answer, meta["unnormalised"] = written, True
        return Problem(question=question, answer=answer, solution=solution, meta=meta)

    def readable(self, problem: Problem) -> bool:
        """Whether the grader reads the gold answer back: written after "The answer is" and in `\\boxed{}`,
        it grades correct. A user's own grader (a subclass's `grade`) reads it where it grades any one of those
        forms, the answer alone or after `####` correct; one that raises on them does not read it."""
        forms = [f"The answer is {problem.answer}", f"\\boxed{{{problem.answer}}}"]
        if type(self).grade is JsonlTask.grade:
            return all(self.grade(f, problem) == 1 for f in forms)
        try:
            return any(self.grade(f, problem) == 1 for f in [*forms, str(problem.answer), f"#### {problem.answer}"])
        except Exception:  # noqa: BLE001 (a user's grader that fails on a gold answer reads none)
            return False

    def _readable_report(self, split: str, rows: list[dict], problems: list[Problem], mapping: dict) -> str:
        checked = problems[:self.REPORT_ROWS]
        bad = [p for p in checked if p.meta.get("unnormalised") or not self.readable(p)]
        share = 1 - len(bad) / max(len(checked), 1)
        scope = f"{len(checked)} of its {len(problems)}" if len(checked) < len(problems) else f"all {len(problems)}"
        line = (f"{self.name}: {split}: {len(problems)} problems from {self._files[split]}; gold answers the "
                f"grader reads: {share:.1%} ({scope} checked)")
        if share >= 0.99:
            return line
        examples = "; ".join(f"line {p.meta['line']}: {p.answer!r}" for p in bad[:3])
        hint = ""
        if mapping["answer_normalise"] == "none":
            as_number = [self._problem(r, self._files[split], {**mapping, "answer_normalise": "number"})
                         for r in rows[:self.REPORT_ROWS]]
            better = sum(not p.meta.get("unnormalised") and self.readable(p) for p in as_number) / max(len(checked), 1)
            if better > share:
                hint = f"; with task.answer_normalise: number it would read {better:.1%}"
        return f"warning: {line}; unread, e.g. {examples}{hint}"

    def _overlap(self, problems: list[Problem]) -> int:
        def key(q: str) -> str:
            return " ".join(q.casefold().split())
        train = {key(p.question) for p in self.problems("train")}
        return sum(key(p.question) in train for p in problems)

    def extract_answer(self, completion: str) -> str | None:
        """`extract_word_answer` (the last `\\boxed{}`, else the answer after the last `####`, `Answer:`
        or `The answer is`, units dropped), else the last number."""
        return extract_word_answer(completion) or last_number(completion)

    def answers_equal(self, a: str, b: str) -> bool:
        """Two extracted answers equal as `grade` compares them: as text or mathematically."""
        return same_text(a, b) or math_equal(a, b)

    def grade(self, completion: str, problem: Problem) -> float:
        """1.0 when the extracted answer equals the problem's, as text (`same_text`: times, names) or
        mathematically (`math_equal`, which compares words as text too), else 0.0. Never raises, except
        LabelLeak on a blinded problem."""
        labelled(problem)
        predicted = self.extract_answer(completion)
        return float(predicted is not None and self.answers_equal(predicted, problem.answer))
