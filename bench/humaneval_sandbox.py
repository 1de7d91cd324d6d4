"""HumanEval through the sandbox: the 164 reference solutions must pass, and semantic mutants of them
must be caught by the tests (the mutation score), each verdict decided outside the sandbox
(`cotrain.sandbox.run_tests`).

Mutants: in the reference solution's own function body only, the first place each of three
operators applies: an arithmetic operator changed (+ and -, * to +, // and / to *, % to //), a
comparison changed (< and <=, > and >=, == and !=, in and not in), an integer constant plus one.
Every mutant compiles (they are made on the syntax tree); one that equals the original is dropped.
A mutant that behaves like the original on every input cannot be caught, so the score is a floor.

Prints `reference_pass`, `mutants`, `mutation_score`, and per operator; then the sandbox's rate
(programs per second, 2 slots) over all of them.
"""
from __future__ import annotations

import argparse
import ast
import copy
import gzip
import json
import time
from pathlib import Path

from cotrain import sandbox

ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
         ast.Mod: ast.FloorDiv}
COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
           ast.In: ast.NotIn, ast.NotIn: ast.In}


def mutants(program: str, entry: str) -> dict[str, str]:
    """{operator: mutated program} for each operator that applies inside `entry`'s body."""
    tree = ast.parse(program)
    original = ast.unparse(tree)
    out = {}
    for kind in ("arith", "compare", "constant"):
        mutated = copy.deepcopy(tree)
        function = next((n for n in ast.walk(mutated) if isinstance(n, ast.FunctionDef) and n.name == entry), None)
        if function is None:
            continue
        for node in ast.walk(function):
            if kind == "arith" and isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITH:
                node.op = ARITH[type(node.op)]()
                break
            if kind == "compare" and isinstance(node, ast.Compare) and type(node.ops[0]) in COMPARE:
                node.ops[0] = COMPARE[type(node.ops[0])]()
                break
            if (kind == "constant" and isinstance(node, ast.Constant) and type(node.value) is int):
                node.value += 1
                break
        else:
            continue
        text = ast.unparse(mutated)
        if text != original:
            out[kind] = text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "humaneval.jsonl.gz"))
    args = parser.parse_args()
    rows = [json.loads(line) for line in gzip.open(args.data, "rt")]
    jobs = []
    for row in rows:
        program = row["prompt"] + row["canonical_solution"]
        jobs.append(("reference", row, program))
        jobs += [(kind, row, text) for kind, text in mutants(program, row["entry_point"]).items()]
    t0 = time.perf_counter()
    verdicts = []
    for kind, row, program in jobs:
        run = sandbox.run_tests(program, row["entry_point"], row["test"], context=row["prompt"])
        verdicts.append((kind, row["task_id"], run.status == "ok"))
    rate = len(jobs) / (time.perf_counter() - t0)
    ref = [ok for kind, _, ok in verdicts if kind == "reference"]
    print(f"isolation: {sandbox.isolation()}")
    print(f"reference_pass={sum(ref)}/{len(ref)}")
    failed = [task for kind, task, ok in verdicts if kind == "reference" and not ok]
    if failed:
        print("reference failures:", ", ".join(failed))
    muts = [(kind, ok) for kind, _, ok in verdicts if kind != "reference"]
    caught = sum(not ok for _, ok in muts)
    print(f"mutants={len(muts)} caught={caught} mutation_score={caught / len(muts):.3f}")
    for kind in ("arith", "compare", "constant"):
        k = [ok for m, ok in muts if m == kind]
        print(f"  {kind}: {sum(not ok for ok in k)}/{len(k)} caught")
    print(f"sandbox_tests_per_s={rate:.1f} (one after another, recording and replay included)")


if __name__ == "__main__":
    main()
