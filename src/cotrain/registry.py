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
from cotrain.errors import UserError

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


USER_RECIPES: dict[str, ModuleType] = {}
"""Recipes of one's own (`register`), by name: the module that declares and runs each."""
USER_SECTIONS: dict[str, type] = {}
"""Their config sections, by name (config.py adds them to the run config)."""
_OWNERS: dict[str, str] = {}  # each recipe's and section's name of one's own: the file that declared it


def register(module: ModuleType | str) -> str:
    """Make the recipes a file of one's own declares known in this process, and return where it lives (its file,
    absolute; `package.module` inside a package): the `recipe_module` a run records, so that a later `cotrain eval`,
    resume, sweep or torchrun finds it again. The file holds what a recipe's two files hold inside the package:
    `RECIPES` ({name: `declare.Recipe`}), `SECTIONS` where it has settings of its own, and `run(cfg, run_dir,
    resume)`. `module` is the module, a file path or an importable module name. See docs/new_recipe.md."""
    from cotrain.userfiles import file_of, load_module

    if not isinstance(module, ModuleType):
        module = load_module(str(module), "recipe_module")
    where = file_of(module, f"recipe module {module.__name__}")
    recipes, sections = getattr(module, "RECIPES", None), getattr(module, "SECTIONS", {})
    if not (isinstance(recipes, dict) and recipes and all(isinstance(r, Recipe) for r in recipes.values())):
        raise UserError(f"recipe_module {where}: declares no recipe (RECIPES = {{name: cotrain.declare.Recipe(...)}})")
    if not callable(getattr(module, "run", None)):
        raise UserError(f"recipe_module {where}: has no run(cfg, run_dir, resume)")
    if not isinstance(sections, dict):
        raise UserError(f"recipe_module {where}: SECTIONS must be {{name: a cotrain.declare.Section subclass}}")
    from cotrain.declare import Section

    for name in recipes:  # the same file registered again (imported, then named by path) takes its names back
        if name in RECIPES and _OWNERS.get(f"recipe {name}") != where:
            raise UserError(f"recipe_module {where}: recipe {name!r} is taken; choose another name")
    for name, section in sections.items():
        if not (isinstance(section, type) and issubclass(section, Section)):
            raise UserError(f"recipe_module {where}: SECTIONS[{name!r}] is not a cotrain.declare.Section subclass")
        if name in SHARED_SECTIONS or name in recipe_sections() or _OWNERS.get(f"section {name}", where) != where:
            raise UserError(f"recipe_module {where}: config section {name!r} is taken; choose another name")
    for name, recipe in recipes.items():
        RECIPES[name], USER_RECIPES[name], _OWNERS[f"recipe {name}"] = recipe, module, where
    for name, section in sections.items():
        USER_SECTIONS[name], _OWNERS[f"section {name}"] = section, where
    return where


SHARED_SECTIONS = ("recipe", "recipe_module", "seed", "out_dir", "init", "model", "task", "train", "grpo", "verifier",
                   "cotraining", "selfplay", "safeguard", "rollout", "eval", "checkpoint", "log", "alarms")
"""The run config's own keys and shared sections (config.py's `_RunConfig`, tests/test_api.py checks), which no
recipe's section may take."""


@cache
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
    if name in USER_RECIPES:
        return USER_RECIPES[name]
    return importlib.import_module(f"cotrain.recipes.{RECIPES[name].module}")


@cache
def summary(name: str) -> str:
    """The recipe's one-line summary: its own, or the first line of its file's docstring."""
    recipe = RECIPES[name]
    if recipe.summary:
        return recipe.summary
    if name in USER_RECIPES:
        doc = USER_RECIPES[name].__doc__ or ""
    else:
        doc = ast.get_docstring(_module_tree(recipe.module)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _module_tree(module: str) -> ast.Module:
    return ast.parse((RECIPE_DIR / f"{module}.py").read_text(encoding="utf-8"))


def panels() -> tuple[tuple, ...]:
    """The curves.png panels the recipes declare, in registry order, each once: a recipe module's
    `PANELS = ((title, ylabel, metric, unit_interval), ...)`, a literal read from its source (a recipe of one's
    own: its module's `PANELS`, after). `metric` names the last part of the logged keys the panel draws (`ROLE/metric`)."""
    out = list(_own_panels())
    for module in dict.fromkeys(USER_RECIPES.values()):
        out += [tuple(p) for p in getattr(module, "PANELS", ()) if tuple(p) not in out]
    return tuple(out)


@cache
def _own_panels() -> tuple[tuple, ...]:
    out: list[tuple] = []
    for module in dict.fromkeys(r.module for name, r in RECIPES.items() if name not in USER_RECIPES):
        for node in _module_tree(module).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PANELS" for t in node.targets):
                out += [tuple(p) for p in ast.literal_eval(node.value) if tuple(p) not in out]
    return tuple(out)


def listing(width: int = 18) -> str:
    """Every recipe with its summary, one per line."""
    return "\n".join(f"  {name:<{width}}{summary(name)}" for name in RECIPES)
