"""Worker logging: one line per state change, to stderr or a file reopened on SIGUSR2."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"

_file_handlers: list[logging.FileHandler] = []


def setup_logging(path: str | None = None, level: str = "INFO") -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_pq", False):
            root.removeHandler(h)
    if path:
        file_handler = logging.FileHandler(path, delay=False)
        _file_handlers.append(file_handler)
        handler: logging.Handler = file_handler
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler._pq = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def reopen_logs() -> None:
    """Reopen log files (after logrotate moved them)."""
    for h in _file_handlers:
        h.acquire()
        try:
            if h.stream:
                h.stream.close()
            h.stream = h._open()
        finally:
            h.release()
