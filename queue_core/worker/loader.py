"""Find the handler a worker serves from a command-line TARGET.

TARGET is ``module:Name``, ``path/to/file.py:Name`` or, PerfectQueue style, a bare ``Name``
looked up in the modules named with ``-r/--require``. Modules are imported from the current
directory first, as ``celery -A`` and ``rq worker`` do; ``-I/--include`` adds import paths before it.
Only code the operator names is ever imported; task data never selects code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError


def _import_file(path: str):
    path = os.path.abspath(path)
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if file and os.path.abspath(file) == path:
            return mod
    name = "pq_target_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        del sys.modules[name]
        raise ConfigError(f"cannot load {path}: file not found") from None
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"error while importing {path}: {type(exc).__name__}: {exc}") from None
    return module


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot import module {name!r}: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"error while importing {name!r}: {type(exc).__name__}: {exc}") from None


def _attr(module, dotted: str, where: str) -> Any:
    obj = module
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{where} has no attribute {dotted!r}") from None
    return obj


def _add_import_paths(include: Sequence[str]) -> None:
    """Put the current directory, then each of ``include`` before it, at the front of ``sys.path``
    (a console script's ``sys.path[0]`` is its own bin directory, not where it was started)."""
    for path in [os.getcwd(), *include]:
        path = os.path.abspath(path)
        if path not in sys.path:
            sys.path.insert(0, path)


def load_target(spec: str, include: Sequence[str] = (), require: Sequence[str] = ()) -> Any:
    """Import and return the handler named by ``spec``."""
    _add_import_paths(include)
    required = [_import_module(name) if not name.endswith(".py") else _import_file(name) for name in require]
    if not spec:
        raise ConfigError("no TARGET given")
    if ":" in spec:
        where, name = spec.rsplit(":", 1)
        if where.endswith(".py") or os.sep in where:
            module = _import_file(where)
        else:
            module = _import_module(where)
        return _attr(module, name, where)
    for module in reversed(required):
        if hasattr(module, spec.split(".")[0]):
            return _attr(module, spec, module.__name__)
    if "." in spec:
        mod, _, name = spec.rpartition(".")
        return _attr(_import_module(mod), name, mod)
    raise ConfigError(f"cannot find {spec!r}: use module:Name, path/to/file.py:Name, or -r MODULE {spec}")
