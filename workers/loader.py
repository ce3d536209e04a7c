"""Find the user's `@activity` functions and `Decider` classes in their modules.

Modules are named as for `import` (`examples.order`, found from the current
directory first) or given as a path to a `.py` file.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType

from sdk.activity import ActivityDefinition
from sdk.decider import Decider


class LoadError(Exception):
    """A module could not be loaded, or holds nothing to run."""


def import_module(name: str) -> ModuleType:
    if name.endswith(".py") or os.sep in name:
        return _import_path(Path(name))
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise LoadError(f"cannot import {name}: no module named {exc.name!r}") from None
        raise LoadError(f"cannot import {name}: {exc}") from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise LoadError(_cannot_import(name, exc)) from exc


def _cannot_import(name: object, exc: BaseException) -> str:
    # A module's `sys.exit()` would end the worker in silence, with its code;
    # another BaseException (a Ctrl-C aside) would end it with a traceback.
    if isinstance(exc, SystemExit):
        return f"cannot import {name}: it called sys.exit({exc.code!r}) while being imported"
    return f"cannot import {name}: {type(exc).__name__}: {exc}"


def _import_path(path: Path) -> ModuleType:
    if not path.is_file():
        raise LoadError(f"cannot import {path}: no such file")
    # Its siblings import as they would under `python FILE` ...
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # ... and its name cannot shadow another module (a `json.py`, two `tasks.py`).
    name = f"weft_user_{abs(hash(str(path.resolve())))}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:
        del sys.modules[name]
        raise LoadError(_cannot_import(path, exc)) from exc
    return module


def activities_in(modules: list[ModuleType]) -> list[ActivityDefinition]:
    found: dict[int, ActivityDefinition] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, ActivityDefinition):
                found[id(value)] = value
    return list(found.values())


def deciders_in(modules: list[ModuleType]) -> list[Decider]:
    """One instance of each concrete `Decider` subclass (one whose `decide` is written)."""
    classes: dict[int, type[Decider]] = {}
    for module in modules:
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, Decider)
                and value is not Decider
                and value.decide is not Decider.decide
                and not inspect.isabstract(value)
            ):
                classes[id(value)] = value
    out = []
    for cls in classes.values():
        try:
            out.append(cls())
        except SystemExit as exc:  # (as at import: not a silent exit with its code)
            raise LoadError(
                f"cannot create {cls.__qualname__}(): it called sys.exit({exc.code!r})"
            ) from exc
        except Exception as exc:
            raise LoadError(f"cannot create {cls.__qualname__}(): {exc}") from exc
    return out


def load(names: list[str]) -> list[ModuleType]:
    return [import_module(name) for name in names]
