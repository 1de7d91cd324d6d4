"""Answers graded per second, per task: can the grader keep up with a training step?

Workload, per task, from the data files shipped with the package (`src/cotrain/data`, or
$COTRAIN_DATA_DIR) where the task reads files:
  ordinary      each gold answer written back the ways a model writes one: "The answer is X.",
                "#### X" and "\\boxed{X}" (GSM8K test, MATH-500, a jsonl copy of GSM8K test;
                arith and countdown: their own reference solutions), graded against its problem.
  rewritten     the same, the answer written differently but equal: \\dfrac for \\frac, spaces around
                + and after commas, thousands separators in numbers (the text differs, so math-verify
                or the exact number comparison decides).
  wrong         the same forms with another problem's answer (a miss costs math-verify more).
  pathological  strings built to be slow: 10,000 nested fractions, power towers, 50,000 digits,
                100,000 characters of text, unbalanced braces; graded against a few gold answers.

Prints, per task and kind, answers per second and the slowest single answer, then one ratio line:
`ordinary_answers_per_s_min` (the slowest task's rate on ordinary and rewritten answers; goal >= 200
on 2 cores) and the
time limit per answer (`grading.math_equal`'s timeout, 5 s) with the slowest answer seen.

Run:  python bench/grading.py [--n 300]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

from cotrain.tasks import make_task
from cotrain.tasks.grading import math_equal
from cotrain.tasks.mathdata import data_file, default_data_dir, read_jsonl

PATHOLOGICAL = ["\\boxed{" + "\\frac{1}{" * 5000 + "2" + "}" * 5000 + "}",
                "\\boxed{" + "9^{" * 30 + "9" + "}" * 30 + "}",
                "\\boxed{9^{9^{9^{9}}}}",  # short, but sympy does not finish: the time limit stops it
                "The answer is " + "7" * 50000,
                "x " * 50000,
                "\\boxed{" * 3000,
                "#### " + "{" * 2000 + "1",
                "The answer is \\sqrt{\\sqrt{\\sqrt{" * 300]


def written_forms(answer: str) -> list[str]:
    return [f"So the total is this. The answer is {answer}.", f"Adding up.\n#### {answer}", f"Thus \\boxed{{{answer}}}"]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def rewrite(answer: str) -> str:
    """An equal answer in other text: \\dfrac, spaces around + and after commas, 1,000 for 1000."""
    if answer.isdigit() and len(answer) > 3:
        return f"{int(answer):,}"
    return answer.replace("\\frac", "\\dfrac").replace("+", " + ").replace(",", ", ")


def grade_all(task, pairs: list[tuple[str, object]]) -> tuple[float, float]:
    """(answers per second, slowest answer in seconds) over (completion, problem) pairs."""
    slowest = 0.0
    t0 = time.perf_counter()
    for completion, problem in pairs:
        t = time.perf_counter()
        task.grade(completion, problem)
        slowest = max(slowest, time.perf_counter() - t)
    return len(pairs) / (time.perf_counter() - t0), slowest


def tasks(n: int, tmp: Path) -> dict:
    data = default_data_dir()
    gsm = read_jsonl(data_file(data, "gsm8k_test.jsonl"), "gsm8k")
    jsonl = tmp / "gsm8k_as_jsonl.jsonl"
    jsonl.write_text("".join(json.dumps({"question": r["question"], "answer": r["answer"].split("####")[-1].strip()})
                             + "\n" for r in gsm))
    out = {}
    for name, options, split in [("gsm8k", {"data_dir": data}, "test"), ("math500", {"data_dir": data}, "test"),
                                 ("jsonl", {"path": jsonl}, "train"), ("arith", {}, "test"),
                                 ("countdown", {}, "test")]:
        task = make_task(name, **options)
        out[name] = (task, task.problems(split, n=n, seed=0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="problems per task")
    args = parser.parse_args()
    rng = random.Random(0)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, python {platform.python_version()}")
    math_equal("x+1", "1+x")  # the worker's one-time start (importing sympy) is set-up, not grading
    rates = {}
    slowest_all = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (task, problems) in tasks(args.n, Path(tmp)).items():
            steps = name in ("arith", "countdown")  # a model writes the whole solution: the reference one
            ordinary = [(c, p) for p in problems for c in ([p.solution] if steps else written_forms(p.answer))]
            others = problems[1:] + problems[:1]
            wrong = [(c, p) for p, q in zip(problems, others) for c in ([q.solution] if steps else written_forms(q.answer))]
            rewritten = [(c, p) for p in problems for c in
                         ([p.solution] if steps else written_forms(rewrite(p.answer)))]
            patho = [(c, rng.choice(problems)) for c in PATHOLOGICAL]
            for kind, pairs in (("ordinary", ordinary), ("rewritten", rewritten), ("wrong", wrong),
                                ("pathological", patho)):
                rate, slowest = grade_all(task, pairs)
                slowest_all = max(slowest_all, slowest)
                print(f"{name:10s} {kind:12s} {len(pairs):5d} answers  {rate:9.1f} answers/s  slowest {slowest:.3f} s")
                if kind in ("ordinary", "rewritten"):
                    rates[f"{name} {kind}"] = rate
    worst = min(rates, key=rates.get)
    print(f"ordinary_answers_per_s_min={rates[worst]:.1f} ({worst})  time_limit_per_answer_s=5.0  "
          f"slowest_answer_s={slowest_all:.3f}")


if __name__ == "__main__":
    main()
