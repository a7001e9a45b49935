"""The optional dependencies of pq, each installed by an extra of the ``pq`` distribution
(``pyproject.toml``), and the one error that names the extra to install when one is missing."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path
from types import ModuleType

from .errors import ConfigError

#: module imported -> the extra that installs it
EXTRAS = {
    "prometheus_client": "metrics",
    "opentelemetry": "tracing",
    "psycopg": "postgres",
    "matplotlib": "graph",
    "starlette": "web",
    "jinja2": "web",
    "uvicorn": "web",
    "multipart": "web",
    "itsdangerous": "web",
}


class MissingExtraError(ConfigError):
    """An optional dependency is not installed; the message names the extra that installs it."""

    def __init__(self, module: str, purpose: str):
        top = module.split(".")[0]
        self.module, self.extra = top, EXTRAS[top]
        super().__init__(f"{purpose} needs {top}: install pq[{self.extra}] ({install_hint(top)})")


#: pq's clone, when pq runs from it (installed in place: ``pip install -e``)
SOURCE = Path(__file__).resolve().parents[1]


def install_hint(module: str) -> str:
    """What to run to install ``module`` (one of :data:`EXTRAS`). pq installs from its clone:
    the ``pq`` of PyPI is another project, so the hint never names that one."""
    extra = EXTRAS[module.split(".")[0]]
    if (SOURCE / "pyproject.toml").is_file():
        return "pip install -e " + shlex.quote(f"{SOURCE}[{extra}]")
    return f"pip install '<your pq clone>[{extra}]'"


def require(module: str, purpose: str) -> ModuleType:
    """``module`` imported, or MissingExtraError naming its extra when it (or what it needs) is
    not installed. ``purpose`` starts the message ("perfectqueue metrics")."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, purpose) from None
