"""Worker logging: one line per state change, to stderr or a file reopened on SIGUSR2."""

from __future__ import annotations

import logging
import sys

from ..rules import url_secrets

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"

_file_handlers: list[logging.FileHandler] = []


class MaskingFormatter(logging.Formatter):
    """A log line with every URL's password and secret query values as ``***`` (an error that
    quotes a configuration, a traceback of a driver that names its URL)."""

    def format(self, record: logging.LogRecord) -> str:
        return url_secrets.hide_secrets(super().format(record))


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
    handler.setFormatter(MaskingFormatter(FORMAT))
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
