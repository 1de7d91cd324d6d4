"""The recipes `cotrain run` knows: each name, the file under `cotrain/recipes/` that runs it, and what
the rest of the tool needs to know of it (the config's checks, `cotrain check`).

Adding a recipe is one file `recipes/<name>.py` with `run(cfg, run_dir, resume)`, its declaration
`recipes/<name>_spec.py` (flags, variants, config section) and its name in `MODULES`; `cotrain recipes` and
`cotrain run --help` list every recipe with the first line of its file's docstring, and the plots draw the
panels its `PANELS` declares (both read from the source, so neither imports a recipe). See docs/new_recipe.md.
"""
from __future__ import annotations

import ast
import difflib
import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from cotrain.declare import Recipe

RECIPE_DIR = Path(__file__).parent / "recipes"


MODULES = ("sft", "grpo", "tango", "consistency", "triad", "reliability", "prime", "spin", "mars", "vstar",
           "self_rewarding", "cure")
"""Every recipe file under recipes/, in the order `cotrain recipes` lists them. Adding a recipe to the project is
its name here; what it is (its flags, its variants, its config section) is declared in `recipes/<module>_spec.py`."""


def _declaration(module: str) -> ModuleType:
    """`recipes/<module>_spec.py`: the recipe's declaration, free of torch (`RECIPES`, and `SECTIONS` where
    it has settings of its own)."""
    return importlib.import_module(f"cotrain.recipes.{module}_spec")


RECIPES: dict[str, Recipe] = {name: recipe for module in MODULES for name, recipe in _declaration(module).RECIPES.items()}
"""Every recipe name, with what the rest of the tool needs to know of it (`declare.Recipe`)."""


def recipe_sections() -> dict[str, type]:
    """{section name: its class} of every recipe's own config section, in registry order (config.py adds each
    to the run config after the shared sections)."""
    out: dict[str, type] = {}
    for module in MODULES:
        for name, section in getattr(_declaration(module), "SECTIONS", {}).items():
            if name in out:
                raise ValueError(f"config section {name!r} is declared twice (recipes/{module}_spec.py)")
            out[name] = section
    return out


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
    best_of_n: str = ""             # the eval.json section that holds best-of-N accuracies (its recipe declares it)
    larger: str = "larger"          # <run>/<larger>/: its final model evaluated again on more problems (eval.larger_n)


STUDY = StudyRoles(**{role: name for module in MODULES
                      for role, name in getattr(_declaration(module), "STUDY_ROLES", {}).items()})
"""The study's roles; a recipe declares those that are its own (`STUDY_ROLES` in its declaration: vstar's
eval.json section of best-of-N accuracies)."""


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
