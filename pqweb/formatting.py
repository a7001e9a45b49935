"""How values read on a page (pure): ages, times, task data as pretty JSON cut to a size a
page can carry, and user text made safe to show (:func:`shown`, applied by the templates to every
``{{ }}`` they print)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from markupsafe import Markup, escape

#: the characters that reorder the text around them (embeddings, overrides, isolates, marks):
#: shown as their escape, never applied (``invoice\u202egnp.exe`` is not ``invoiceexe.png``)
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI = re.compile(f"[{BIDI_CONTROLS}]")

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


def shown(value: Any) -> Any:
    """What a template prints for ``value``: text escaped, each bidirectional control as a
    visible ``\\u202e`` in ``<span class="bidi">``; Markup (already made safe) and non-text as
    they are. For element content only: an attribute takes :func:`field`."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    if not _BIDI.search(value):
        return escape(value)
    return Markup(_BIDI.sub(lambda m: f'<span class="bidi">{_escape_of(m[0])}</span>', str(escape(value))))


def plain(value: Any) -> Markup:
    """``value`` as escaped text with each bidirectional control written as ``\\u202e`` (no
    markup: for SVG text and titles)."""
    return Markup(_BIDI.sub(lambda m: _escape_of(m[0]), str(escape(value))))


def field(value: Any) -> Markup:
    """``value`` escaped for an attribute, exactly (a form sends a key back as it is)."""
    return escape("" if value is None else value)


def _escape_of(char: str) -> str:
    return f"\\u{ord(char):04x}"
