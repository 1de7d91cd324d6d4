"""The verifier role: how a (problem, solution) pair is put to a generative verifier, what it should
write, and how its output is read. Pure string functions; `parse` never raises.

A verification is one line per step of the solution, each ending with a verdict word, then a final
verdict line:

    tiny world (plain prompt)               chat models
    12+34=46 46 ok                          Step 1: 12+34 is 46, as stated. CORRECT
    46-5=41 42 no                           Step 2: 46-5 is 41, not 42. INCORRECT
    #no                                     Final: INCORRECT

Whatever comes before a step's verdict word is the verifier's rationale. In the tiny world it is the
step recomputed from its own operands followed by the result the solution claims, so that judging a
step reduces to writing the arithmetic digit by digit and comparing two adjacent numbers: a
~1M-parameter verifier cannot learn to judge `57-7=50` in one token, but it can learn this.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MARK = "@check"
"""Line after the solution in a plain verifier prompt: what tells a from-scratch model to verify."""

CHAT_INSTRUCTION = (
    "Below are a problem and a proposed solution with numbered steps. Check every step in order. For "
    "each step write one line 'Step k: <your check> CORRECT' or 'Step k: <your check> INCORRECT'. Then "
    "write a last line 'Final: CORRECT' if the final answer is right, else 'Final: INCORRECT'.\n\n"
    "Problem: {question}\n\nSolution:\n{steps}")

_WORDS = {"ok": True, "correct": True, "no": False, "incorrect": False}
_SPLIT = re.compile(r"[\s:]+")


@dataclass(frozen=True)
class Verification:
    """A parsed verifier output.

    Attributes:
        steps: the verdict of each step line, in order (True = judged correct).
        final: the final verdict (True = the solution is judged correct), None when absent.
        format: in [0, 1]: half for a final verdict, half for exactly the expected number of step verdicts.
    """

    steps: list[bool] = field(default_factory=list)
    final: bool | None = None
    format: float = 0.0


# ----------------------------------------------------------------------------- the solution's steps


def split_steps(completion: str) -> list[tuple[int, str]]:
    """The steps of a generator completion: (line index, stripped text) of each non-empty line before
    the first line that starts with `#` (the final-answer line). Never raises.

    Args:
        completion: e.g. "12+34=46\\n46-5=41\\n#41".

    Returns:
        e.g. [(0, "12+34=46"), (1, "46-5=41")].
    """
    if not isinstance(completion, str):
        return []
    steps = []
    for i, line in enumerate(completion.split("\n")):
        line = line.strip()
        if line.startswith("#"):
            break
        if line:
            steps.append((i, line))
    return steps


def answer_line(completion: str) -> int:
    """The (0-based) line index of a completion's final-answer line, the first line that starts with `#`;
    one past its last line when it has none. Never raises.

    Example: "12+34=46\\n46-5=41\\n#41" gives 2; "12+34=46" gives 1.
    """
    lines = completion.split("\n") if isinstance(completion, str) else []
    return next((i for i, line in enumerate(lines) if line.strip().startswith("#")), len(lines))


# ----------------------------------------------------------------------------- prompts


def flip_equation(line: str) -> str:
    """`lhs=rhs` shown as `rhs=lhs` (a line with exactly one `=`); other lines unchanged.

    A from-scratch verifier sees the solution's steps this way round. Written as the generator wrote
    them ("-3+62=51"), the claimed result follows the very characters the verifier writes when it
    recomputes the step ("-3+62="), and a small model learns to copy it (an induction pattern) instead
    of computing; shown as "51=-3+62", nothing in the prompt continues "-3+62=" and it must compute.
    """
    if line.count("=") != 1:
        return line
    lhs, rhs = line.split("=")
    return f"{rhs}={lhs}"


def plain_prompt(question: str, completion: str) -> str:
    """Prompt of a from-scratch verifier: the question, the solution with each equation flipped
    (`flip_equation`), then the check mark line."""
    shown = "\n".join(flip_equation(line) for line in completion.strip().split("\n"))
    return f"{question}\n{shown}\n{PLAIN_MARK}\n"


def chat_messages(question: str, completion: str) -> list[dict[str, str]]:
    """Chat messages for an instruction-tuned verifier; the solution's steps are numbered."""
    steps = split_steps(completion)
    lines = [f"Step {k + 1}: {text}" for k, (_, text) in enumerate(steps)]
    answer = [line.strip() for line in completion.split("\n")[(steps[-1][0] + 1) if steps else 0:] if line.strip()]
    numbered = "\n".join(lines + ([f"Answer: {answer[0]}"] if answer else []))
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(question=question, steps=numbered or "(empty)")}]


# ----------------------------------------------------------------------------- targets and parsing


def render(rationales: list[str], verdicts: list[bool], final: bool, chat: bool = False,
           final_rationale: str = "") -> str:
    """The verification a verifier should write (its SFT target).

    Args:
        rationales: one per step (may be empty strings).
        verdicts: one per step, True = correct.
        final: the final verdict.
        chat: write the chat vocabulary (Step k: ... CORRECT / Final: ...) instead of the tiny one.
        final_rationale: what the final line says before its verdict (e.g. "#22 ok"), if anything.
    """
    assert len(rationales) == len(verdicts), "one rationale per step verdict"
    note = f"{final_rationale} " if final_rationale else ""
    if chat:
        lines = [f"Step {k + 1}: {(r + ' ') if r else ''}{'CORRECT' if v else 'INCORRECT'}"
                 for k, (r, v) in enumerate(zip(rationales, verdicts))]
        return "\n".join(lines + [f"Final: {note}{'CORRECT' if final else 'INCORRECT'}"])
    lines = [f"{(r + ' ') if r else ''}{'ok' if v else 'no'}" for r, v in zip(rationales, verdicts)]
    return "\n".join(lines + [f"#{note}{'ok' if final else 'no'}"])


def _verdict(line: str) -> bool | None:
    words = [w for w in _SPLIT.split(line) if w]
    if not words:
        return None
    return _WORDS.get(words[-1].strip("#*.`'\"()[]!,").lower())


def parse(text: str, n_steps: int | None = None) -> Verification:
    """Read a verification. Never raises.

    A line whose last word is a verdict word (ok / CORRECT, no / INCORRECT; case and surrounding
    punctuation ignored) is a verdict; it is the final verdict when the line starts with `#` or
    `Final`, and reading stops there. Other lines are ignored.

    Args:
        text: the verifier's output.
        n_steps: how many steps the verified solution has (for the format score).

    Returns:
        The Verification; `format` is 0.5 for a final verdict plus 0.5 for exactly `n_steps` step
        verdicts (when n_steps is None: for at least one).
    """
    if not isinstance(text, str):
        return Verification()
    steps: list[bool] = []
    final = None
    for line in text.split("\n"):
        line = line.strip()
        verdict = _verdict(line)
        if verdict is None:
            continue
        if line.startswith("#") or line.lower().startswith("final"):
            final = verdict
            break
        steps.append(verdict)
    count_ok = len(steps) == n_steps if n_steps is not None else len(steps) > 0
    return Verification(steps=steps, final=final, format=0.5 * (final is not None) + 0.5 * count_ok)


def reference_verification(task, problem, completion: str, chat: bool = False) -> str:
    """The verification a verifier should write for `completion` (its warm-up SFT target).

    The final verdict is the completion's ground-truth outcome (`task.grade`). Step verdicts are the
    task's process labels where it has them (`task.step_labels`); otherwise every step is marked
    correct in a correct solution, and only the last step incorrect in an incorrect one (a guess: the
    task cannot say which step failed). Rationales come from `task.step_rationales` where present, and
    the final line's from `task.final_rationale` (given the completion's answer). Never raises on malformed completions.
    """
    steps = [text for _, text in split_steps(completion)]
    correct = task.grade(completion, problem) >= 1.0
    if hasattr(task, "step_labels"):
        labels = list(task.step_labels(problem, steps))
    else:
        labels = [True] * len(steps)
        if steps and not correct:
            labels[-1] = False
    rationales = task.step_rationales(problem, steps) if hasattr(task, "step_rationales") else [""] * len(steps)
    final_note = (task.final_rationale(problem, steps, answer=task.extract_answer(completion))
                  if hasattr(task, "final_rationale") else "")
    return render(list(rationales), labels, correct, chat=chat, final_rationale=final_note)


# ----------------------------------------------------------------------------- pairwise judgments
#
# A pairwise judge is shown two solutions of one problem, A and B, checks each in turn as it would
# alone, and ends with its preference:
#
#     tiny world (plain prompt)               chat models
#     <check of A>                            Solution A:
#     <check of B>                            <check of A>
#     >a        (A; `>b` B, `>=` neither)     Solution B:
#                                             <check of B>
#                                             Preferred: A     (B, or SAME)
#
# The checks before the preference are its rationale (a small model cannot compare two solutions in one
# token); only the preference line is read.

PAIR_SEPARATOR = "@vs"
"""Line between the two solutions of a plain pairwise prompt."""
PAIR_MARK = "@prefer"
"""Line after the second solution: what tells a from-scratch model to compare."""

CHAT_PAIR_INSTRUCTION = (
    "Below are a problem and two proposed solutions, A and B, with numbered steps. Check each solution "
    "step by step: write 'Solution A:', then one line 'Step k: <your check> CORRECT' or 'Step k: <your "
    "check> INCORRECT' per step and a line 'Final: CORRECT' or 'Final: INCORRECT'; then the same under "
    "'Solution B:'. End with one line 'Preferred: A' or 'Preferred: B' for the better solution, or "
    "'Preferred: SAME' when neither is better.\n\nProblem: {question}\n\nSolution A:\n{first}\n\nSolution B:\n{second}")

_PREFERENCES = {"a": 1, "b": -1, "=": 0, "same": 0}


def pair_plain_prompt(question: str, first: str, second: str) -> str:
    """Prompt of a from-scratch pairwise judge: the question, both solutions with their equations
    flipped (`flip_equation`) and the separator between them, then the mark line."""
    def shown(completion: str) -> str:
        return "\n".join(flip_equation(line) for line in completion.strip().split("\n"))
    return f"{question}\n{shown(first)}\n{PAIR_SEPARATOR}\n{shown(second)}\n{PAIR_MARK}\n"


def pair_chat_messages(question: str, first: str, second: str) -> list[dict[str, str]]:
    """Chat messages for an instruction-tuned pairwise judge; each solution's steps are numbered."""
    def numbered(completion: str) -> str:
        content = chat_messages("", completion)[0]["content"]
        return content[content.index("Solution:\n") + len("Solution:\n"):]
    return [{"role": "user", "content": CHAT_PAIR_INSTRUCTION.format(question=question, first=numbered(first),
                                                                     second=numbered(second))}]


def render_pair(check_first: str, check_second: str, preference: int, chat: bool = False) -> str:
    """The pairwise judgment a judge should write (its SFT target): both checks (`render`'s output),
    then the preference, 1 for the first solution, -1 for the second, 0 for neither."""
    assert preference in (-1, 0, 1), "a preference is 1 (first), -1 (second) or 0"
    if chat:
        word = {1: "A", -1: "B", 0: "SAME"}[preference]
        return f"Solution A:\n{check_first}\nSolution B:\n{check_second}\nPreferred: {word}"
    return f"{check_first}\n{check_second}\n>{ {1: 'a', -1: 'b', 0: '='}[preference] }"


def parse_preference(text: str) -> int | None:
    """The preference a pairwise judgment ends with: 1 (the first solution, A), -1 (the second, B), 0
    (neither), None when there is no preference line. The first line starting with `>` or
    `Preferred` is read, case and surrounding punctuation ignored. Never raises."""
    if not isinstance(text, str):
        return None
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith(">"):
            word = line[1:]
        elif line.lower().startswith("preferred"):
            word = line[len("preferred"):].lstrip(" :")
        else:
            continue
        return _PREFERENCES.get(word.strip(" *.`'\"()[]!,").lower())
    return None


def reference_preference(task, problem, first: str, second: str) -> int:
    """The ground-truth preference between two solutions: the right one over the wrong one, 0 when both
    are right or both wrong (`task.grade`)."""
    return int(task.grade(first, problem) >= 1.0) - int(task.grade(second, problem) >= 1.0)


def reference_pair(task, problem, first: str, second: str, chat: bool = False) -> str:
    """The pairwise judgment a judge should write for two solutions (its warm-up SFT target): the
    `reference_verification` of each, then `reference_preference`. Reads the ground truth."""
    return render_pair(reference_verification(task, problem, first, chat=chat),
                       reference_verification(task, problem, second, chat=chat),
                       reference_preference(task, problem, first, second), chat=chat)
