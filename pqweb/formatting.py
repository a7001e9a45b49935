"""How values read on a page (pure): ages, times, and task data as pretty JSON cut to a size a
page can carry. The templates escape everything these return."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

#: the most characters of a task's data (or result, or error) a page shows
MAX_SHOWN = 20_000


def age(seconds: float | None) -> str:
    """``3s``, ``5m 2s``, ``2h 10m``, ``3d 4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def when(epoch: float | None) -> str:
    """An epoch time as UTC ISO 8601 to the second; ``-`` for None."""
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def pretty_json(value: Any, limit: int = MAX_SHOWN) -> str:
    """``value`` as indented JSON (non-ASCII kept, a lone surrogate escaped), cut at ``limit``
    characters with a note of how much was left out."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return cut(_printable(text), limit)


def cut(text: str | None, limit: int = MAX_SHOWN) -> str:
    """``text`` cut at ``limit`` characters, saying how many were left out."""
    if text is None:
        return ""
    text = _printable(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit:,} more characters not shown)"


def _printable(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate becomes ``\\udXXX``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
