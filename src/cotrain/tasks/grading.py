"""Equality of two math answers: exact numbers fast, anything else through math-verify in a worker
process that this module bounds in time.

math-verify's own timeouts use `signal.alarm`, which works only on the main thread and cannot stop
C code; sympy can also hang for minutes on a short input (`9^{9^{9^{...}}}`). So every comparison
that is not a plain number runs in one long-lived child process; when an answer does not come back
in time the child is killed and a fresh one starts at once, importing math-verify while the caller
goes on; the next call waits for it within its own limit.

The child is a plain `python -c` that loads THIS file by path (so it imports neither `cotrain` nor
the caller's `__main__`, unlike multiprocessing's spawn; and it is not a fork of a process that may
hold torch's threads). This file therefore imports only the standard library at the top.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

STARTUP_TIMEOUT = 120.0
"""Seconds a new worker may take to import math-verify and answer its first comparison."""

_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
# Written around numbers without changing them: thousands separators (`10,\!080`), currency, spaces.
_NUMBER_NOISE = re.compile(r"\\!|\\,|\\\$|[$,\s]")

_BOOTSTRAP = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_cotrain_grading_worker', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module._serve()\n"
)

_lock = threading.Lock()
_worker: subprocess.Popen | None = None
_warming = False  # the worker's answer to its warm-up comparison has not been read yet


def plain_number(text: str) -> Fraction | None:
    """The exact value of `text` when it is a plain decimal number, else None.

    Args:
        text: e.g. "1,000", "$18", "-0.50", "10,\\!080".

    Returns:
        The value as a Fraction (so "0.5" equals "0.50" exactly), or None for anything else
        ("1/2", "\\frac{1}{2}", "3x", "").
    """
    cleaned = _NUMBER_NOISE.sub("", text)
    # Numbers too long for int() (Python caps them at 4300 digits) are no plain numbers.
    if len(cleaned) > 1000 or not _PLAIN_NUMBER.fullmatch(cleaned):
        return None
    return Fraction(cleaned)


def math_equal(pred: str, gold: str, timeout: float = 5.0) -> bool:
    """Whether the answer `pred` equals the ground truth `gold`; no pair of strings makes it raise.

    The same text (up to runs of spaces) is equal, plain numbers on both sides are compared exactly
    without math-verify, words (`text_answer`: a name, a direction) are compared as text, answers longer
    than MAX_ANSWER_CHARS or nested deeper than MAX_ANSWER_DEPTH are unequal; answers that `guard`
    decides (where math-verify 0.9 is wrong) are decided there; anything else goes to math-verify
    (`parse` of each side wrapped in `\\boxed{}`, then `verify(gold, pred)`) in the worker process,
    bounded by `timeout` seconds.

    Args:
        pred: the extracted answer of a completion (LaTeX or plain text, no `\\boxed{}` around it).
        gold: the ground-truth answer.
        timeout: seconds the comparison may take; past that it counts as not equal.

    Returns:
        True when equal; False when not, on timeout, or on any error.

    Raises:
        UserError: when math-verify is not installed (and the strings are not both plain numbers).
    """
    try:
        if not isinstance(pred, str) or not isinstance(gold, str) or not pred.strip() or not gold.strip():
            return False
        pred_value, gold_value = plain_number(pred), plain_number(gold)
        if pred_value is not None and gold_value is not None:
            return pred_value == gold_value
        if " ".join(pred.split()) == " ".join(gold.split()):
            return True  # the same text: equal whatever it means (and whether or not math-verify parses it)
        words = words_equal(pred, gold)
        if words is not None:
            return words
        if len(pred) > MAX_ANSWER_CHARS or _depth(pred) > MAX_ANSWER_DEPTH:
            return False  # no final answer is this long or this deeply nested; math-verify would time out on it
        guarded = guard(pred, gold)
        if guarded is not None:
            return guarded
        return _verify_in_worker(pred, gold, timeout)
    except Exception as error:
        # Imported here, not at the top: the worker loads this file without `cotrain` on its path.
        from cotrain.errors import UserError

        if isinstance(error, UserError):
            raise  # math-verify is missing: a setup problem, not a wrong answer
        return False


# LaTeX that wraps text in an answer, dropped before text is compared: \text{east}, \textbf{Evelyn}, \mbox{even}.
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|textsf|mathrm|mathbf|mathit|mbox)\s*\{([^{}]*)\}")
# Words alone: letters (any script), several words apart by spaces, commas, periods, hyphens, apostrophes or "&".
_WORDS = re.compile(r"[^\W\d_]+(?:[\s,.'\u2019&-]+[^\W\d_]+)*")
_TWO_LETTERS = re.compile(r"[^\W\d_]{2}")
_LETTER = re.compile(r"[^\W\d_]")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_SURROUNDING = " \t\n.,;:!?$*\"'`"


def normal_text(text: str) -> str:
    """`text` as answers are compared as text: the `\\text{}`-like wrappers dropped, case folded, surrounding
    spaces and punctuation stripped, inner runs of spaces made one (" \\text{East}. " -> "east")."""
    for _ in range(4):  # \textbf{\text{x}}: the innermost wrapper first
        unwrapped = _TEXT_WRAPPER.sub(lambda m: m.group(1), text)
        if unwrapped == text:
            break
        text = unwrapped
    return " ".join(text.casefold().strip(_SURROUNDING).split())


def text_answer(text: str) -> str | None:
    """The words of an answer written as text, normalised (`normal_text`), or None when it is not words
    alone. Words are letters, two or more in a row somewhere ("Clara", "north east", "even"), with no
    digit, operator, bracket or LaTeX other than a text wrapper: "Clara1", "x", "2x" and "\\pi" are no
    words. (So "xy" counts as a word, not as a product of two variables.)"""
    words = normal_text(text)
    return words if _WORDS.fullmatch(words) and _TWO_LETTERS.search(words) else None


def words_equal(pred: str, gold: str) -> bool | None:
    """Whether two answers are equal when one of them is words (`text_answer`), else None (not decided).

    Words equal only the same words (case, surrounding punctuation and `\\text{}` aside), and so does a gold
    answer of prose with numbers (two letters in a row outside LaTeX commands and text wrappers): math-verify
    reads "Clara" as the product c*l*a*r*a, so that "Clara1" and "Carla" would equal it. Against an
    answer that is not words, words are unequal unless that answer's letters all belong to LaTeX commands
    ("\\infty", "\\sqrt{2}"): that pair math-verify decides ("infinity" and "\\infty" are equal).
    """
    pred_words, gold_words = text_answer(pred), text_answer(gold)
    if pred_words is None and gold_words is None:
        if _TWO_LETTERS.search(_LATEX_COMMAND.sub("", _TEXT_WRAPPER.sub("", gold))):
            # a gold answer of prose with numbers ("February 3rd", "Vendor 2", "11:55 p.m. on 24 December 2014"):
            # the same text or nothing; math-verify reads a number out of it ("1February 3rd" equal, any "2014")
            return normal_text(pred) == normal_text(gold)
        return None
    if pred_words is not None and gold_words is not None:
        return pred_words == gold_words
    other = pred if pred_words is None else gold
    if _LETTER.search(_LATEX_COMMAND.sub("", other)):
        return False  # letters of its own: "Clara1", "1Clara", "x+1" against a word
    return None


MAX_ANSWER_CHARS = 2000
"""The longest extracted answer compared (longer ones are wrong without asking math-verify: the longest
MATH-500 gold answer has 53 characters)."""
MAX_ANSWER_DEPTH = 12
"""The deepest nesting of braces compared (a power tower or 5,000 nested fractions is no answer)."""


def _depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth = max(depth - 1, 0)
    return deepest


# A number written in a base: digits, then the base as a subscript ("4210_{5}", "10101_2").
_BASE_NUMBER = re.compile(r"\s*\$?\s*([0-9A-Za-z]+)\s*_\s*\{?\s*([0-9]+)\s*\}?\s*\$?\s*")
# A unit in text mode with an optional power: "\mbox{ inches}^3", "\text{cm}^{2}", "\mathrm{m}".
_UNIT = re.compile(r"\\(?:mbox|text|textrm|mathrm)\s*\{([^{}]*)\}(?:\s*\^\s*\{?\s*([0-9]+)\s*\}?)?")


def guard(pred: str, gold: str) -> bool | None:
    """Decide the pairs math-verify 0.9 gets wrong (docs/math_verify_report.md), else None.

    - Both numbers written in a base ("4210_{6}" against "4210_{5}"): equal when they are the same
      number (math-verify drops the subscript and compares the digits).
    - Both with units in text mode ("12\\mbox{ inches}^3" against "12\\mbox{ inches}^2"): unequal
      when the units or their powers differ, singular and plural alike (math-verify drops the units);
      with the same units, math-verify compares the rest.
    """
    a, b = _BASE_NUMBER.fullmatch(pred), _BASE_NUMBER.fullmatch(gold)
    if a and b and all(m.group(1)[0].isdigit() and int(m.group(2)) >= 2 for m in (a, b)):  # not "x_1", an index
        values = (_in_base(*a.groups()), _in_base(*b.groups()))
        return None not in values and values[0] == values[1]   # "29_{2}" is no number: unequal
    units_a, units_b = _units(pred), _units(gold)
    if units_a and units_b and units_a != units_b:
        return False
    return None


def _in_base(digits: str, base: str) -> int | None:
    try:
        return int(digits, int(base))
    except ValueError:  # a digit the base does not have, or a base outside 2..36
        return None


def _units(text: str) -> list[tuple[str, str]]:
    """The text-mode units of an answer with their powers, normalised ("inches" and "inch" alike)."""
    def singular(unit: str) -> str:
        unit = " ".join(unit.casefold().split())
        return unit.removesuffix("s").removesuffix("e") if len(unit) > 2 else unit
    return [(singular(u), power or "1") for u, power in _UNIT.findall(text) if u.strip()]


def shutdown_worker() -> None:
    """Kill the math-verify worker if one runs (the next `math_equal` starts a new one)."""
    global _worker
    with _lock:
        if _worker is not None:
            _kill(_worker)
            _worker = None


# ----------------------------------------------------------------------------- parent side


def _verify_in_worker(pred: str, gold: str, timeout: float) -> bool:
    """math-verify's verdict within `timeout` seconds of wall time. The start of a worker that is
    the first (or the first after `shutdown_worker`) is not counted: importing sympy takes seconds.
    A replacement for a killed worker is started at once and its start is counted: when it is not
    ready by the deadline the answer is False (as for a timeout) and it stays, still starting."""
    global _worker, _warming
    with _lock:
        deadline = time.monotonic() + timeout
        if _worker is None:
            _worker = _spawn_worker()
            if _read(_worker, STARTUP_TIMEOUT) is not True:
                _kill(_worker)
                _worker, _warming = None, False
                raise RuntimeError("the math-verify worker process did not start (see its stderr above)")
            _warming = False
            deadline = time.monotonic() + timeout
        elif _worker.poll() is not None:
            _worker = _spawn_worker()  # died while idle or starting: its replacement's start counts
        if _warming:
            if _read(_worker, deadline - time.monotonic()) is None:
                if _worker.poll() is not None:
                    _worker = _spawn_worker()
                return False
            _warming = False
        if deadline - time.monotonic() <= 0:
            return False  # the warm-up took the whole limit; the worker is idle and ready
        answer = _ask(_worker, pred, gold, deadline - time.monotonic())
        if answer is None:
            # Timed out or died: the child may still be computing, so it cannot answer the next call.
            _kill(_worker)
            _worker = _spawn_worker()
            return False
        return answer


def _spawn_worker() -> subprocess.Popen:
    """A new worker, sent its warm-up comparison (whose answer `_warming` says is still unread)."""
    global _warming
    if importlib.util.find_spec("math_verify") is None:
        from cotrain.errors import UserError

        raise UserError("math-verify is not installed: pip install math-verify (needed to grade math answers)")
    proc = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP, __file__], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    _send(proc, "1", "1")
    _warming = True
    return proc


def _ask(proc: subprocess.Popen, pred: str, gold: str, timeout: float) -> bool | None:
    """The worker's verdict on one pair, or None when it did not answer within `timeout` seconds."""
    return _read(proc, timeout) if _send(proc, pred, gold) else None


def _send(proc: subprocess.Popen, pred: str, gold: str) -> bool:
    try:
        # json.dumps escapes non-ASCII (even lone surrogates), so one request is always one ASCII line.
        proc.stdin.write((json.dumps([pred, gold]) + "\n").encode("ascii"))
        proc.stdin.flush()
        return True
    except (OSError, ValueError):
        return False


def _read(proc: subprocess.Popen, timeout: float) -> bool | None:
    """The worker's next verdict, or None when none came within `timeout` seconds or it died."""
    try:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([proc.stdout], [], [], remaining)
            if ready:
                break
        line = proc.stdout.readline()
    except (OSError, ValueError):
        return None
    if line not in (b"1\n", b"0\n"):
        return None  # EOF: the worker died (e.g. a C stack overflow on deeply nested input)
    return line == b"1\n"


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.kill()
        proc.wait(timeout=10)
    except Exception:
        pass


@atexit.register
def _shutdown_at_exit() -> None:
    if _worker is not None:
        _kill(_worker)


# ----------------------------------------------------------------------------- worker side


def _serve() -> None:
    """The worker's loop: one JSON `[pred, gold]` per stdin line, one `1`/`0` per stdout line."""
    import logging

    from math_verify import parse, verify

    # Timeouts are handled by the parent; silence math-verify's warning that they are off.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    for line in sys.stdin:
        try:
            pred, gold = json.loads(line)
            gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)
            pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)
            equal = bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=None)
        except Exception:
            equal = False
        sys.stdout.write("1\n" if equal else "0\n")
        sys.stdout.flush()
