"""The tree's layout: one recipe per file on top, a library below that never imports a recipe, no
import circle (lazy imports inside functions count), and every recipe registered and listed.

`python tests/test_layout.py` prints the package-level import graph and the recipes' sizes.
"""
from __future__ import annotations

import ast
import fnmatch
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
RECIPES = SRC / "cotrain" / "recipes"
MAX_RECIPE_LINES = 500
MAX_FUNCTION_LINES = 120  # a recipe's run reads top to bottom on a screen or two


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def is_module(name: str) -> bool:
    base = SRC / Path(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """{module: the cotrain modules it imports}, from every import statement in its source."""
    graph: dict[str, set[str]] = {}
    for path in sorted((SRC / "cotrain").rglob("*.py")):
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "cotrain"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cotrain":
                for a in node.names:  # `from cotrain.train import verifier` imports a module
                    full = f"{node.module}.{a.name}"
                    targets.add(full if is_module(full) else node.module)
        graph[module_name(path)] = targets - {module_name(path)}
    return graph


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for m, targets in graph.items():
        out[package_of(m)] |= {package_of(t) for t in targets if package_of(t) != package_of(m)}
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its nodes in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_between_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_import_circle_between_packages():
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "package circle: " + " -> ".join(cycle)


def test_nothing_below_the_recipes_imports_one():
    """The CLI runs a recipe through the registry (importlib), so no module outside recipes/ names one."""
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() if not m.startswith("cotrain.recipes")
                    for t in targets if t.startswith("cotrain.recipes"))
    assert not upward, upward


TRAINING = ("cotrain.runs", "cotrain.train", "cotrain.recipes", "cotrain.rl", "cotrain.models", "cotrain.eval")


def test_training_never_imports_reporting():
    """A run writes its files; the command line (or whoever called the recipe) draws the plots after it returns.
    No module that trains, evaluates or keeps a run imports `cotrain.analysis` (the count was 2 in runs/:
    alarms.py for load_metrics, session.py for the plots)."""
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() if m.startswith(TRAINING)
                    for t in targets if t.startswith("cotrain.analysis"))
    assert not upward, upward


def test_nothing_that_trains_imports_the_lab():
    """The lab (`cotrain.lab`: pairing, criteria, a study's tables and figures) reads archived runs; only the
    command line and the report, which read finished runs, import it."""
    readers = ("cotrain.cli", "cotrain.analysis", "cotrain.lab")
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() if not m.startswith(readers)
                    for t in targets if t.startswith("cotrain.lab"))
    assert not upward, upward


LONGEST_FILE_LIMIT = 800
"""The longest file in src/, in lines: no file is longer (each recipe's config section is declared beside it,
`recipes/<name>_spec.py`, not in config.py)."""
LAB_FILE_LIMIT = 500  # the lab is split by what each part holds


def file_lengths() -> dict[str, int]:
    return {p.relative_to(SRC).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(SRC.rglob("*.py"))}


def test_no_file_in_src_is_long():
    lengths = file_lengths()
    print("files in src/ over 800 lines:", [f"{rel}: {n}" for rel, n in lengths.items() if n > 800])
    longest = max(lengths.values())
    assert longest <= LONGEST_FILE_LIMIT, f"the longest file in src/ has {longest} lines (at most {LONGEST_FILE_LIMIT})"
    lab = {rel: n for rel, n in lengths.items() if rel.startswith("cotrain/lab/") and n >= LAB_FILE_LIMIT}
    assert not lab, f"lab files of {LAB_FILE_LIMIT} lines or more: {lab}"


def _recipe_files() -> list[Path]:
    """Each recipe's loop (`recipes/<module>.py`), its declaration `<module>_spec.py` aside."""
    return sorted(p for p in RECIPES.glob("*.py") if p.name != "__init__.py" and not p.stem.endswith("_spec"))


@pytest.mark.parametrize("path", _recipe_files(), ids=lambda p: p.name)
def test_recipe_file_is_short_and_registered(path):
    from cotrain import registry

    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_RECIPE_LINES
    tree = ast.parse(text)
    long = [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long
    assert path.stem in {r.module for r in registry.RECIPES.values()}, f"{path.name} is not in registry.RECIPES"
    assert "Run:" in (ast.get_docstring(tree) or ""), "a recipe's docstring ends with the command that runs it"


DECLARATION_IMPORTS = {"__future__", "typing", "pydantic", "cotrain.declare"}


def test_each_recipe_is_declared_beside_its_loop_free_of_torch():
    """What a recipe is (its flags, its variants, its config section) lives in `recipes/<module>_spec.py`, which
    imports nothing that loads torch; the registry and the run config read every declaration, and nothing but
    the registry lists a recipe."""
    from cotrain import registry
    from cotrain.config import RunConfig

    for module in registry.MODULES:
        path = RECIPES / f"{module}_spec.py"
        assert path.is_file() and (RECIPES / f"{module}.py").is_file(), module
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imported <= DECLARATION_IMPORTS, f"{path.name} imports {sorted(imported - DECLARATION_IMPORTS)}"
        declared = registry._declaration(module)
        assert declared.RECIPES and {r.module for r in declared.RECIPES.values()} == {module}, module
        assert set(getattr(declared, "SECTIONS", {})) <= set(RunConfig.model_fields), module
        assert set(getattr(declared, "STUDY_ROLES", {})) <= set(registry.StudyRoles.__dataclass_fields__), module
    assert registry.STUDY.best_of_n == "vstar"  # declared beside vstar's loop, read by the study
    spec_files = {p.stem.removesuffix("_spec") for p in RECIPES.glob("*_spec.py")}
    assert spec_files == set(registry.MODULES) == {p.stem for p in _recipe_files()}

def _recipe_names() -> list[str]:
    from cotrain import registry

    return list(registry.RECIPES)


@pytest.mark.parametrize("name", _recipe_names())
def test_every_recipe_loads_with_a_one_line_summary(name):
    from cotrain import registry

    assert callable(registry.load(name).run)
    summary = registry.summary(name)
    assert summary.endswith(".") and "\n" not in summary and len(summary) <= 110, summary


def test_an_unknown_recipe_is_one_line_naming_the_closest(capsys, tmp_path):
    from cotrain.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("recipe: tang\n")
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown recipe 'tang'" in err and "did you mean 'tango'" in err, err


def test_cli_lists_every_recipe_with_its_summary(capsys):
    from cotrain import registry
    from cotrain.cli import main

    assert main(["recipes"]) == 0
    listed = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helped = capsys.readouterr().out
    for name in registry.RECIPES:
        line = f"{name:<18}{registry.summary(name)}"
        assert line in listed and line in helped, name



# ---------------------------------------------------------------- the layout list of docs/reference.md

LAYOUT_DOC = REPO / "docs" / "reference.md"
_MODULE_TOKEN = re.compile(r"(?<![\w/.])(\w+(?:/\w+)*\.py)\b")


def documented_layout(text: str) -> list[tuple[str, list[str]]]:
    """The entries of the `src/cotrain/` block under "## Layout": [(name, modules named in its text)].

    An entry starts on a line indented by two spaces ("  models/  build.py (...), ..."); deeper lines
    continue it; the block ends at the first line that is not indented. A folder's modules are the
    `*.py` names its entry mentions (relative to the folder).
    """
    section = re.split(r"^## Layout\b.*$", text, maxsplit=1, flags=re.M)
    assert len(section) == 2, "docs/reference.md has no '## Layout' section"
    block = section[1].split("```", 2)[1]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "src/cotrain/")
    entries: list[tuple[str, list[str]]] = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith(" "):
            break
        if line.startswith("  ") and not line.startswith("   "):
            name, _, rest = line.strip().partition(" ")
            entries.append((name, [rest]))
        elif line.strip():
            assert entries, f"a continued line before any entry: {line!r}"
            entries[-1][1].append(line)
    return [(name, _MODULE_TOKEN.findall(" ".join(rest)) if name.endswith("/") else [])
            for name, rest in entries]


def package_tree(root: Path) -> tuple[set[str], dict[str, set[str]], set[str]]:
    """(top-level modules, {package folder: its modules but __init__.py}, other top-level entries)."""
    top, packages, other = set(), {}, set()
    for path in sorted(root.iterdir()):
        if path.name in ("__init__.py", "__pycache__") or path.name.endswith(".egg-info"):
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            packages[path.name + "/"] = {m.relative_to(path).as_posix() for m in path.rglob("*.py")
                                         if m.name != "__init__.py" and "__pycache__" not in m.parts}
        elif path.suffix == ".py":
            top.add(path.name)
        else:
            other.add(path.name + "/" if path.is_dir() else path.name)
    return top, packages, other


def layout_problems(entries: list[tuple[str, list[str]]], root: Path) -> list[str]:
    """What the layout list gets wrong about the tree at `root`, one line each ([] when they agree)."""
    top, packages, other = package_tree(root)
    names = [name for name, _ in entries]
    problems = [f"{n} is listed {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1]
    problems += [f"{n} is in the tree but not in the layout" for n in sorted((top | set(packages)) - set(names))]
    problems += [f"{n} is in the layout but not in the tree" for n in sorted(set(names) - top - set(packages) - other)]
    for name, modules in entries:
        if name not in packages:
            continue
        problems += [f"{name}{m} is named {modules.count(m)} times" for m in sorted(set(modules)) if modules.count(m) > 1]
        if name != "recipes/":  # a new recipe's file need not be named (registry.py and `cotrain recipes` list it)
            problems += [f"{name}{m} is in the tree but not in the layout" for m in sorted(packages[name] - set(modules))]
        problems += [f"{name}{m} is in the layout but not in the tree" for m in sorted(set(modules) - packages[name])]
    return problems


def test_layout_checker_finds_a_missing_a_stale_and_a_doubled_module(tmp_path):
    root = tmp_path / "cotrain"
    (root / "models").mkdir(parents=True)
    (root / "data").mkdir()
    for f in ("__init__.py", "cli.py", "hub.py", "models/__init__.py", "models/build.py", "models/lora.py"):
        (root / f).write_text("")
    doc = ("## Layout\n\n```\nsrc/cotrain/\n  cli.py     the commands\n  gone.py    removed long ago\n"
           "  models/    build.py (presets), generate.py,\n             build.py again\n  data/      data files\n"
           "configs/   only overrides\n```\n")
    assert sorted(layout_problems(documented_layout(doc), root)) == sorted([
        "hub.py is in the tree but not in the layout",
        "gone.py is in the layout but not in the tree",
        "models/build.py is named 2 times",
        "models/lora.py is in the tree but not in the layout",
        "models/generate.py is in the layout but not in the tree",
    ])
    # a recipe's file need not be named: a new recipe touches no list of the docs (registry.py lists it)
    (root / "recipes").mkdir()
    for f in ("recipes/__init__.py", "recipes/grpo.py", "recipes/new.py"):
        (root / f).write_text("")
    doc = ("## Layout\n\n```\nsrc/cotrain/\n  cli.py     the commands\n  hub.py     hub\n  models/    build.py, lora.py\n"
           "  data/      data files\n  recipes/   grpo.py, old.py\n```\n")
    assert layout_problems(documented_layout(doc), root) == ["recipes/old.py is in the layout but not in the tree"]


def test_the_layout_in_docs_names_every_module_once():
    """docs/reference.md's layout list and src/cotrain/ agree: a module added, moved or removed without
    its line fails here, with the line to add or remove."""
    problems = layout_problems(documented_layout(LAYOUT_DOC.read_text(encoding="utf-8")), SRC / "cotrain")
    assert not problems, "docs/reference.md, ## Layout: " + "; ".join(problems)


if __name__ == "__main__":
    sys.path.insert(0, str(SRC))
    for package, targets in sorted(package_graph(import_graph()).items()):
        print(f"{package:<22} -> {', '.join(sorted(targets)) or '-'}")
    print()
    for path in _recipe_files():
        longest = max((n.end_lineno - n.lineno + 1, n.name) for n in ast.walk(ast.parse(path.read_text()))
                      if isinstance(n, ast.FunctionDef))
        print(f"recipes/{path.name:<18} {len(path.read_text().splitlines()):>4} lines, longest function "
              f"{longest[1]} {longest[0]}")


def test_every_relative_link_of_the_readme_and_docs_resolves():
    """A page moved or renamed leaves no dead link behind in README.md, docs/, results/ or configs/."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "results").rglob("*.md")),
             *sorted((REPO / "configs").rglob("*.md")), REPO / "bench" / "README.md"]
    dead = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path):
                continue  # an anchor on the same page, or a URL
            if not (page.parent / path).exists():
                dead.append(f"{page.relative_to(REPO)}: {target}")
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_recipe_panels_are_declared_beside_their_recipes_and_drawn():
    """Each recipe's own curves come from its module's PANELS (read without importing it), once each,
    and the plots draw them; no two panels share a metric."""
    from cotrain import registry
    from cotrain.analysis import plot

    declared = registry.panels()
    metrics = [p[2] for p in declared]
    assert {"alpha", "ranking_acc", "pair_acc", "followed"} <= set(metrics)
    assert len(metrics) == len(set(metrics))
    assert {p.metric for p in plot._PANELS} >= set(metrics)


WHOLE_CONFIG_LIMIT = 0
"""Functions that take the whole run config outside recipes/ and the modules that plan or start a whole run
(the command line, `cotrain check`'s preflight.py, the Python API, config.py): none. A recipe unpacks its config
once and hands the library sections and values (`RunConfig.run_settings` is what a session reads)."""
WHOLE_CONFIG_READERS = ("/cli.py", "/preflight.py", "/api.py", "/config.py")


def library_trees(*skip: str):
    """(`src/cotrain/...` path, parsed tree) of each module outside recipes/ and the files named in `skip`."""
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).as_posix()
        if "/recipes/" not in rel and not rel.endswith(skip):
            yield rel, ast.parse(path.read_text(encoding="utf-8"))


def hold_count(found: list[str], limit: int, what: str, remedy: str) -> None:
    """Print `found` and fail when there are more than `limit` of them: a number that may only fall."""
    print(f"{len(found)} {what}:\n  " + "\n  ".join(found))
    assert len(found) <= limit, f"{len(found)} {what} (at most {limit}): {remedy}"


def whole_config_takers() -> list[str]:
    """`module:line name` of each function outside recipes/ with a parameter annotated `RunConfig`, or an
    unannotated one named `cfg`, and `module:line Class.field` of each class field annotated `RunConfig`."""
    out = []
    for rel, tree in library_trees(*WHOLE_CONFIG_READERS):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    annotation = ast.unparse(a.annotation) if a.annotation else ""
                    if "RunConfig" in annotation or (a.arg == "cfg" and not annotation):
                        out.append(f"{rel}:{node.lineno} {node.name}")
                        break
            elif isinstance(node, ast.ClassDef):  # an object that holds the config is a use too
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and "RunConfig" in ast.unparse(item.annotation):
                        out.append(f"{rel}:{item.lineno} {node.name}.{ast.unparse(item.target)}")
    return out


def test_few_functions_below_the_recipes_take_the_whole_config():
    hold_count(whole_config_takers(), WHOLE_CONFIG_LIMIT, "functions below the recipes take the whole run config",
               "pass the section or the values a function reads")


def test_only_the_recipes_and_the_run_planners_import_the_run_config():
    """Below recipes/, `RunConfig` is imported only by the modules that plan or start a whole run (a renamed
    parameter is no way around the count above)."""
    importers = sorted(f"{rel}:{node.lineno}" for rel, tree in library_trees(*WHOLE_CONFIG_READERS)
                       for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                       and any(a.name == "RunConfig" for a in node.names))
    assert not importers, f"modules below the recipes that import RunConfig: {importers}"


# ---------------------------------------------------------------- the config files of docs/reference.md


def config_list_problems(doc_text: str, shipped: list[str]) -> list[str]:
    """What disagrees between the `## Config files` section of docs/reference.md and the shipped YAML files
    (`configs/...` paths): one listed twice, one not listed, one listed that does not exist."""
    section = doc_text.split("\n## Config files\n", 1)
    if len(section) != 2:
        return ["no '## Config files' section"]
    body = section[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(configs/[^`]+\.yaml)` \|", body, flags=re.M)
    patterns = [p for p in listed if "*" in p]  # a row for a family of files: configs/*_smoke.yaml
    listed = [p for p in listed if "*" not in p]
    problems = [f"{p} listed twice" for p in sorted({p for p in listed if listed.count(p) > 1})]
    problems += [f"{p} not listed" for p in sorted(set(shipped) - set(listed))
                 if not any(fnmatch.fnmatch(p, pattern) for pattern in patterns)]
    problems += [f"{p} listed but not shipped" for p in sorted(set(listed) - set(shipped))]
    problems += [f"{p} matches no shipped file" for p in patterns if not fnmatch.filter(shipped, p)]
    return problems


def test_config_list_checker_finds_a_missing_a_stale_and_a_doubled_file():
    doc = "\n## Config files\n\n| `configs/a.yaml` | A |\n| `configs/a.yaml` | A |\n| `configs/old.yaml` | gone |\n\n## Tasks\n"
    assert config_list_problems(doc, ["configs/a.yaml", "configs/real/b.yaml"]) == [
        "configs/a.yaml listed twice", "configs/real/b.yaml not listed", "configs/old.yaml listed but not shipped"]
    assert config_list_problems("# no section", []) == ["no '## Config files' section"]
    # a family row covers the files it matches (a new recipe's smoke config), and must match one
    doc = "\n## Config files\n\n| `configs/*_smoke.yaml` | each recipe's |\n| `configs/real/*.yaml` | none |\n"
    assert config_list_problems(doc, ["configs/new_smoke.yaml", "configs/a.yaml"]) == [
        "configs/a.yaml not listed", "configs/real/*.yaml matches no shipped file"]


def test_the_config_files_in_docs_are_every_shipped_config_once():
    """docs/reference.md's `## Config files` and configs/ agree: a config added, moved or removed without
    its line in the reference fails here."""
    shipped = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.yaml"))
    problems = config_list_problems(LAYOUT_DOC.read_text(encoding="utf-8"), shipped)
    assert not problems, "docs/reference.md, ## Config files: " + "; ".join(problems)


RECIPE_LITERAL_LIMIT = 2
"""String literals naming a recipe outside recipes/, registry.py and config.py: the number may only fall.
A study's arm roles are declared in registry.py (`STUDY`), the demo's comparison comes from demo.yaml; the
two left are rl/losses.py's `loss_type: grpo`, the GRPO paper's normalisation, named as TRL names it."""


def recipe_literals() -> list[str]:
    """`module:line 'name'` of each string constant (docstrings aside) equal to a registered recipe's name,
    outside recipes/, registry.py and config.py."""
    from cotrain.registry import RECIPES

    out = []
    for rel, tree in library_trees("/registry.py", "/config.py"):
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        out += [f"{rel}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RECIPES
                and id(node) not in docstrings]
    return sorted(out)


def test_few_recipe_names_are_written_outside_the_recipes():
    hold_count(recipe_literals(), RECIPE_LITERAL_LIMIT, "recipe names written outside recipes/, registry.py and config.py",
               "declare what a recipe is in registry.py (its Recipe entry), or read it from the file that names it")


def recipe_comparisons() -> list[str]:
    """`module:line` of each comparison of a recipe's name with a string (`cfg.recipe == "tango"`, `recipe in
    ("a", "b")`) outside recipes/ and registry.py: what a recipe is belongs in its registry entry."""
    from cotrain.registry import RECIPES as NAMES

    out = []
    for rel, tree in library_trees("/registry.py"):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = [s for s in sides if (isinstance(s, ast.Attribute) and s.attr == "recipe")
                     or (isinstance(s, ast.Name) and s.id == "recipe")]
            strings = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)
                       or isinstance(s, (ast.Tuple, ast.List, ast.Set))
                       and any(isinstance(e, ast.Constant) and e.value in NAMES for e in s.elts)]
            if names and strings:
                out.append(f"{rel}:{node.lineno}")
    return sorted(out)


def test_no_recipe_name_is_compared_outside_the_recipes_and_the_registry():
    """Was 2, both in config.py (`recipe != "sft"`, `recipe == "consistency"`): now registry flags."""
    hold_count(recipe_comparisons(), 0, "comparisons of a recipe's name outside recipes/ and registry.py",
               "give the recipe a flag in its registry entry and read that")


def shared_runs(files: dict[str, list[str]], n: int = 10) -> list[str]:
    """`a:line ~ b:line` for each first place where two files share `n` consecutive non-blank lines to the
    letter (leading spaces kept: the same lines at another depth are another shape)."""
    seen: dict[tuple, str] = {}
    out = []
    for name, lines in sorted(files.items()):
        kept = [(i + 1, line.rstrip()) for i, line in enumerate(lines) if line.strip()]
        last = -n
        for j in range(len(kept) - n + 1):
            window = tuple(text for _, text in kept[j:j + n])
            other = seen.get(window)
            if other and not other.startswith(f"{name}:") and j >= last + n:
                out.append(f"{other} ~ {name}:{kept[j][0]}")
                last = j
            seen.setdefault(window, f"{name}:{kept[j][0]}")
    return out


def test_shared_runs_finds_ten_lines_two_files_share():
    same = [f"x = {i}" for i in range(12)]
    assert shared_runs({"a.py": ["import a", *same], "b.py": [*same, "", "y = 1"]}) == ["a.py:2 ~ b.py:1"]
    assert shared_runs({"a.py": same[:9] + ["z"], "b.py": same[:9] + ["w"]}) == []  # nine lines alone
    assert shared_runs({"a.py": same, "b.py": ["    " + line for line in same]}) == []  # another depth


SHARED_RUN_LIMIT = 0
"""Places where two recipes' code (below their docstrings and imports) shares 10 non-blank lines to the letter:
none. What the recipes repeated is one call each: the self-play setup (`open_selfplay`), its step's end and its
finish (`SelfPlayRun.end_step`, `.finish`), a step's generator rollout with its accounting (`Sampler.batch`,
`Compute.add_rollout`). Rows alike only in shape (two roles' loops written out) may stay."""


def test_few_places_where_two_recipes_share_ten_lines_to_the_letter():
    files = {}
    for p in _recipe_files():
        lines = p.read_text(encoding="utf-8").splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("def "))  # code, not the header
        files[p.name] = [""] * first + lines[first:]
    hold_count(shared_runs(files), SHARED_RUN_LIMIT, "places where two recipes share 10 lines to the letter",
               "make the shared lines one call of the library")
