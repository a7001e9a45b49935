"""Writing what a command prints: tables, JSON, times and one-line error texts."""

from __future__ import annotations

import datetime as _dt
import json
import re
import unicodedata
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from ...errors import ConfigError

#: width of an error text in a table row (:func:`short_error`)
ERROR_WIDTH = 60


def _tzinfo(tz: Any) -> _dt.tzinfo:
    if tz is None:
        return _dt.UTC
    if isinstance(tz, _dt.tzinfo):
        return tz
    try:
        return ZoneInfo(str(tz))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {tz!r}") from None


def format_time(ts: float | None, tz: Any = None) -> str:
    """``ts`` (epoch seconds) as ISO 8601 with offset, in zone ``tz`` (name or tzinfo) or UTC."""
    if ts is None:
        return "-"
    try:
        dt = _dt.datetime.fromtimestamp(float(ts), _tzinfo(tz))
    except (OverflowError, OSError, ValueError):
        return str(ts)
    spec = "seconds" if dt.microsecond == 0 else "milliseconds"
    return dt.isoformat(timespec=spec)


#: what a terminal would act on instead of showing: C0 and C1 controls, DEL, and the
#: bidirectional controls (which reorder the text shown around them)
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: the same, less the line breaks and tabs of a text of several lines
_INLINE_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` that any UTF-8 stream accepts: a lone surrogate (which Python strings, and so
    task data or error texts, may hold) becomes a ``\\udcff`` escape instead of making the
    output fail half-way with UnicodeEncodeError."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def terminal_text(text: str) -> str:
    """``text`` (of one or more lines) as a terminal shows it without acting on it: escape
    sequences, other controls and bidirectional controls written as ``\\x1b``, ``\\u202e``;
    line breaks and tabs kept."""
    return printable(_INLINE_CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text))


def json_text(obj: Any, **kwargs: Any) -> str:
    """JSON text as compact as asked, not ASCII-escaped unless it has to be: data holding a
    lone surrogate is written with ``\\uXXXX`` escapes, so it parses back to the same value."""
    text = json.dumps(obj, ensure_ascii=False, default=_json_default, **kwargs)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, default=_json_default, **kwargs)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    if text == "":
        return '""'
    return printable(_CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text))


def _width(text: str) -> int:
    return sum(
        2 if unicodedata.east_asian_width(ch) in ("W", "F") else 0 if unicodedata.combining(ch) else 1 for ch in text
    )


def print_table(rows: list[dict], columns: list[str], *, file: Any = None) -> None:
    """Plain text table: a header line, then one aligned line per row (None shown as -)."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [_width(c) for c in columns]
    for line in cells:
        widths = [max(w, _width(v)) for w, v in zip(widths, line, strict=False)]

    def fmt(values: list[str]) -> str:
        parts = [v + " " * (w - _width(v)) for v, w in zip(values, widths, strict=False)]
        return "  ".join(parts).rstrip()

    click.echo(fmt(list(columns)), file=file)
    for line in cells:
        click.echo(fmt(line), file=file)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (bytes, bytearray)):
        return obj.decode("utf-8", "replace")
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)


def print_json(obj: Any, *, file: Any = None) -> None:
    """Pretty JSON on stdout (UTF-8, not ASCII-escaped)."""
    click.echo(json_text(obj, indent=2), file=file)


def short_error(error: str | None) -> str | None:
    """``error`` on one line, cut to :data:`ERROR_WIDTH` characters (for a table cell)."""
    if error is None:
        return None
    text = re.sub(r"\s+", " ", error).strip()
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."
