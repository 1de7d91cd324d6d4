"""Experiment: is checking easier than solving for SmolLM2-135M-Instruct on its word problems' arithmetic?

A co-trained verifier can only help where it knows more than the generator it checks (the
generation-verification gap). This measures that gap for the real model at the level where its
word-problem solutions go right or wrong, one equation of `wordproblems` (n_steps 1, numbers <= 10:
a sum, a difference or a product), through the chat template, greedy:

  solve  "What is 7 * 6? Answer with the number only." -> right when the reply's answer is 42, read as the
         task grades a solution (after `####`, else `\\boxed{}`, else the last number: "7 * 6 = 42" is right);
  check  "Is this equation correct? 7 * 6 = 42 ..." with the stated result right for half of the
         equations and off by 1 to 3 (never negative) for the other half -> the reply's first verdict
         word (CORRECT / INCORRECT) against the truth: balanced accuracy and approve rate; and a score
         from the model's likelihoods, log P("CORRECT") - log P("INCORRECT") as the whole reply, whose
         AUROC says whether the model ranks right equations above wrong ones at all.

Checking is easier than solving when the check's balanced accuracy is clearly above the solve
accuracy (a verifier that guesses has 0.5). The same equations are solved and checked.

Run:  python bench/smollm2_gap.py              (200 equations, 2 threads; about 70 s here)
The last line is `solve_accuracy=X.XXX check_balanced_accuracy=X.XXX check_auroc=X.XXX`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out" / "smollm2_gap"
CHECK = ("Is this equation correct? {a} {op} {b} = {c}\n"
         "Answer with one word: CORRECT if it is right, INCORRECT if it is wrong.")
SOLVE = "What is {a} {op} {b}? Answer with the number only."


def equations(n: int, seed: int) -> list[tuple[int, str, int, int, int, bool]]:
    """n equations (a, op, b, true result, stated result, stated is right) of the task's one-step range."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        op = rng.choice("+-*")
        if op == "*":
            a, b = rng.randint(2, 9), rng.randint(2, 9)
        elif op == "-":
            a = rng.randint(2, 10)
            b = rng.randint(1, a)
        else:
            a, b = rng.randint(1, 10), rng.randint(1, 10)
        true = a + b if op == "+" else a - b if op == "-" else a * b
        right = i % 2 == 0
        stated = true
        while not right and stated == true:
            stated = max(0, true + rng.choice([-3, -2, -1, 1, 2, 3]))
        out.append((a, op, b, true, stated, right))
    return out


def first_verdict(text: str) -> bool | None:
    m = re.search(r"\b(INCORRECT|CORRECT|WRONG|RIGHT|YES|NO)\b", text.upper())
    return None if m is None else m.group(1) in ("CORRECT", "RIGHT", "YES")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="equations (half of them stated right)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="smollm2", help="model.path of the model to probe")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    from cotrain.eval.verifier_metrics import verdict_metrics
    from cotrain.models.build import load_model
    from cotrain.models.generate import completion_logprobs, generate, left_pad, right_pad
    from cotrain.models.prompts import decode_completions
    from cotrain.precision import machine_line
    from cotrain.tasks.mathdata import extract_gsm8k_answer

    model, tok = load_model(args.model)
    model.eval()
    eqs = equations(args.n, args.seed)

    def chat(text: str) -> list[int]:
        return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)

    def replies(prompts: list[list[int]], max_new: int) -> list[str]:
        texts = []
        for i in range(0, len(prompts), 50):
            ro = generate(model, prompts[i:i + 50], max_new_tokens=max_new, eos_id=tok.eos_token_id,
                          pad_id=tok.pad_token_id, greedy=True, seed=0)
            texts += decode_completions(tok, ro.completion_ids, ro.completion_mask)
        return texts

    solve_prompts = [chat(SOLVE.format(a=a, op=op, b=b)) for a, op, b, *_ in eqs]
    check_prompts = [chat(CHECK.format(a=a, op=op, b=b, c=c)) for a, op, b, _, c, _ in eqs]
    solved = [extract_gsm8k_answer(t) == str(true) for t, (_, _, _, true, _, _) in zip(replies(solve_prompts, 48), eqs)]
    check_texts = replies(check_prompts, 8)
    verdicts = [first_verdict(t) for t in check_texts]
    truth = [right for *_, right in eqs]

    # likelihood score: log P(reply "CORRECT") - log P(reply "INCORRECT"), each reply followed by eos
    answers = {w: tok(w, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for w in ("CORRECT", "INCORRECT")}
    totals = {}
    with torch.no_grad():
        for word, ids in answers.items():
            sums = []
            for i in range(0, len(check_prompts), 50):
                chunk = check_prompts[i:i + 50]
                p_ids, p_mask = left_pad(chunk, tok.pad_token_id)
                c_ids, c_mask = right_pad([ids] * len(chunk), tok.pad_token_id)
                logp, _ = completion_logprobs(model, p_ids, p_mask, c_ids, c_mask)
                sums += (logp * c_mask).sum(-1).tolist()
            totals[word] = sums
    scores = [c - i for c, i in zip(totals["CORRECT"], totals["INCORRECT"])]
    m = verdict_metrics(verdicts, truth, scores)
    by_op = {op: round(sum(s for s, e in zip(solved, eqs) if e[1] == op) / max(1, sum(e[1] == op for e in eqs)), 3)
             for op in "+-*"}
    results = {"machine": machine_line(), "model": args.model, "n": args.n, "solve_accuracy": sum(solved) / len(solved),
               "solve_by_op": by_op, "check": {k: m[k] for k in ("balanced_accuracy", "approve_rate", "parse_rate", "auroc")},
               "check_examples": check_texts[:6]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    print(f"{machine_line()}; {args.threads} threads; {args.model}; {args.n} equations (half stated right)")
    print(f"solve: accuracy {results['solve_accuracy']:.3f} (by operation {by_op})")
    print(f"check: balanced accuracy {m['balanced_accuracy']:.3f}, approves {m['approve_rate']:.3f}, "
          f"verdict parsed {m['parse_rate']:.3f}, likelihood AUROC {m['auroc']:.3f}")
    print("check replies, first six:", " | ".join(t.replace("\n", " ")[:40] for t in check_texts[:6]))
    print(f"solve_accuracy={results['solve_accuracy']:.3f} check_balanced_accuracy={m['balanced_accuracy']:.3f} "
          f"check_auroc={m['auroc']:.3f}")


if __name__ == "__main__":
    main()
