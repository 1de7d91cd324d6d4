"""Files of one's own: a user's task, reward or recipe, loaded from a file path or an importable module name,
every failure one line (`UserError`)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from cotrain.errors import UserError

USER_MODULE = "cotrain_user_"  # the module name a file loaded by path is given


def load_module(where: str, what: str) -> ModuleType:
    """`path/to/file.py` (loaded once per process, under a name of its absolute path) or `package.module`."""
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise UserError(f"{what}: file not found: {path.absolute()}")
            key = USER_MODULE + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
            module = sys.modules.get(key)
            if module is None:
                loader = importlib.util.spec_from_file_location(key, path)
                module = importlib.util.module_from_spec(loader)
                sys.modules[key] = module
                try:
                    loader.loader.exec_module(module)
                except BaseException:
                    del sys.modules[key]  # a file that failed is loaded afresh once fixed
                    raise
            return module
        return importlib.import_module(where)
    except UserError:
        raise
    except Exception as err:  # the user's file: any error in it is theirs to fix, in one line
        raise UserError(f"{what}: {where} does not load: {type(err).__name__}: {err}") from None


def load_object(spec: str, what: str):
    """`path/to/file.py:Name` or `package.module:Name` (a `task.module`, a `task.reward`), loaded: one line on failure."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise UserError(f"{what}: expected path/to/file.py:Name or package.module:Name, got {spec!r}")
    module = load_module(where, what)
    if not hasattr(module, attr):
        raise UserError(f"{what}: {where} has no {attr!r}")
    return getattr(module, attr)


def file_of(module: ModuleType, what: str) -> str:
    """Where a module of one's own lives, found from any directory: its file, absolute; `package.module` for a
    module inside a package."""
    name, path = module.__name__, getattr(module, "__file__", None)
    if "." in name and not name.startswith(USER_MODULE):
        return name
    if path is None:
        raise UserError(f"{what} is defined where no other process can find it (a notebook cell?): put it in a file")
    return str(Path(path).resolve())
