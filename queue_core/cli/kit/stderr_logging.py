"""Logging of a command: debug lines to stderr when verbose, library warnings kept off it."""

from __future__ import annotations

import logging
import os
import sys

from .passwords import scrub


class _StderrHandler(logging.Handler):
    """Writes to the *current* ``sys.stderr`` (which test runners swap) and scrubs passwords."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(scrub(self.format(record)) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


_saved_root_level: int | None = None


def debug_env() -> bool:
    """Whether ``PQ_DEBUG`` asks for debug output (tracebacks of errors)."""
    return os.environ.get("PQ_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def setup_logging(verbose: bool, *, own_logging: bool = False) -> None:
    """Debug logging to stderr when verbose; otherwise keep library warnings off stderr
    (a failing command prints exactly one line). ``own_logging``: the command (a worker)
    configures logging itself; only set the level."""
    if verbose:
        _log_debug(to_stderr=not own_logging)
        return
    _undo_debug()  # a previous verbose command in this process (tests, embedding)
    if not own_logging:
        _silence_libraries()


def _log_debug(*, to_stderr: bool) -> None:
    global _saved_root_level
    root = logging.getLogger()
    if to_stderr and not any(isinstance(h, _StderrHandler) for h in root.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    if _saved_root_level is None:
        _saved_root_level = root.level
    root.setLevel(logging.DEBUG)


def _undo_debug() -> None:
    global _saved_root_level
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    if _saved_root_level is not None:
        root.setLevel(_saved_root_level)
        _saved_root_level = None


def _silence_libraries() -> None:
    for name in ("queue_core", "perfectsched", "pqflow"):
        lg = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
            lg.addHandler(logging.NullHandler())
