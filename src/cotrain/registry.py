"""The recipes `cotrain run` knows: each name, the file under `cotrain/recipes/` that runs it, and what
the rest of the tool needs to know of it (the config's checks, `cotrain check`).

Adding a recipe is one file `recipes/<name>.py` with `run(cfg, run_dir, resume)` plus one line in
`RECIPES`; `cotrain recipes` and `cotrain run --help` list every recipe with the first line of its
file's docstring, and the plots draw the panels its `PANELS` declares (both read from the source, so
neither imports a recipe). See docs/new_recipe.md.
"""
from __future__ import annotations

import ast
import difflib
import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

RECIPE_DIR = Path(__file__).parent / "recipes"


@dataclass(frozen=True)
class Recipe:
    module: str                 # recipes/<module>.py runs it
    roles: tuple[str, ...] = ("generator",)  # the roles it trains (`cotrain check` builds their models)
    label_free: bool = False    # its training path never sees a ground-truth answer
    vllm: bool = False          # its generator's rollouts can run on a vLLM engine (rollout.engine: vllm)
    fsdp: bool = True           # it supports train.fsdp
    summary: str | None = None  # a variant's own line (else the first line of its file's docstring)
    labels: str = "outcomes"    # the labels its training reads (the comparison tables' column)
    step_verdicts: bool = False  # its generator's process reward reads step verdicts (verifier.source can stand in)
    control: bool = False       # it trains one model on labels alone: a study's control, never a co-training arm
    groups: bool = True         # it samples groups of completions (grpo.group_size divides its batch); sft does not
    rewards_every_verdict: bool = False  # its reward reads the verifier's verdict on every sample (verify_groups: all)
    guarded: bool = False       # the safeguard (safeguard.enabled) can guard it
    custom_reward: bool = False  # its training reward can be a user's function (task.reward)


CO_TRAINING = ("generator", "verifier")
SELF_PLAY = ("proposer", "solver", "judge")  # the solver is the generator; one model may play all three

RECIPES: dict[str, Recipe] = {
    "sft": Recipe("sft", labels="reference solutions", control=True, groups=False),
    "grpo": Recipe("grpo", vllm=True, control=True, custom_reward=True),
    "tango": Recipe("tango", roles=CO_TRAINING, vllm=True, labels="outcomes; the verifier's warm-up: process labels",
                    step_verdicts=True),
    "frozen_verifier": Recipe("tango", roles=CO_TRAINING, vllm=True, summary=(
        "RL Tango's baseline: the verifier warmed up, then frozen; only the generator trains."),
        labels="outcomes; the verifier's warm-up: process labels", step_verdicts=True),
    "consistency": Recipe("consistency", roles=CO_TRAINING, label_free=True, vllm=True, labels="none (a given verifier)",
                          rewards_every_verdict=True, guarded=True),
    "triad": Recipe("triad", roles=SELF_PLAY, label_free=True, fsdp=False, labels="none", guarded=True),
    "reliability": Recipe("reliability", roles=SELF_PLAY, label_free=True, fsdp=False, labels="none", guarded=True),
    "prime": Recipe("prime", fsdp=False),
    "spin": Recipe("spin", fsdp=False, labels="reference solutions"),
    "mars": Recipe("mars", fsdp=False, labels="outcomes; the roles' warm-up: reference solutions"),
    "vstar": Recipe("vstar", roles=CO_TRAINING, fsdp=False, labels="outcomes (correct and incorrect samples)"),
    "self_rewarding": Recipe("self_rewarding", fsdp=False, labels="its judge's warm-up: process labels; then none"),
    "cure": Recipe("cure", fsdp=False, labels="unit tests; the tester's warm-up: reference tests"),
    "cure_label_free": Recipe("cure", label_free=True, fsdp=False, summary=(
        "CURE without labels: the generated unit tests stand in for the ground-truth ones on the training path."),
        labels="none (generated tests)"),
}


@dataclass(frozen=True)
class StudyRoles:
    """The arms a study (`cotrain study results/<study>`, lab/) reads by role, each by its
    directory name under the study: every other arm is paired with `baseline` seed by seed."""
    baseline: str = "grpo"          # the control every arm is compared with
    long: str = "grpo_long"         # the baseline trained on past the others (steps to its final accuracy)
    labelfree: str = "labelfree"    # a label-free arm, read against the shared start
    auto: str = "tango_auto"        # `cotraining.alpha: auto`, read by the plan's criteria against `schedule`
    schedule: str = "tango"         # RL Tango's schedule: the co-training arm a gains spec reads by default
    start: str = "sft"              # starts/<start>/eval.json: the start the arms share
    published: str = "model"        # ... or starts/<published>/eval.json: the published model, where no SFT start is
    best_of_n: str = "vstar"        # the recipe whose eval.json section holds best-of-N accuracies
    larger: str = "larger"          # <run>/<larger>/: its final model evaluated again on more problems (eval.larger_n)


STUDY = StudyRoles()


def unknown(name: str) -> str:
    """The one-line complaint about a recipe name that is not in `RECIPES`."""
    close = difflib.get_close_matches(name, RECIPES, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown recipe '{name}': one of {', '.join(RECIPES)}{hint}"


def load(name: str) -> ModuleType:
    """The recipe's module (its `run(cfg, run_dir, resume)` trains)."""
    if name not in RECIPES:
        raise ValueError(unknown(name))
    return importlib.import_module(f"cotrain.recipes.{RECIPES[name].module}")


@cache
def summary(name: str) -> str:
    """The recipe's one-line summary: its own, or the first line of its file's docstring."""
    recipe = RECIPES[name]
    if recipe.summary:
        return recipe.summary
    doc = ast.get_docstring(_module_tree(recipe.module)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _module_tree(module: str) -> ast.Module:
    return ast.parse((RECIPE_DIR / f"{module}.py").read_text(encoding="utf-8"))


@cache
def panels() -> tuple[tuple, ...]:
    """The curves.png panels the recipes declare, in registry order, each once: a recipe module's
    `PANELS = ((title, ylabel, metric, unit_interval), ...)`, a literal read from its source. `metric`
    names the last part of the logged keys the panel draws (`ROLE/metric`)."""
    out: list[tuple] = []
    for module in dict.fromkeys(r.module for r in RECIPES.values()):
        for node in _module_tree(module).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PANELS" for t in node.targets):
                out += [tuple(p) for p in ast.literal_eval(node.value) if tuple(p) not in out]
    return tuple(out)


def listing(width: int = 18) -> str:
    """Every recipe with its summary, one per line."""
    return "\n".join(f"  {name:<{width}}{summary(name)}" for name in RECIPES)
