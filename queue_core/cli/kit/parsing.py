"""Reading what a command line gives: JSON objects, times, plain integers."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import click

from ...errors import ValidationError
from ...rules.validate import MAX_DATA_DEPTH, json_nested_deeper
from .exits import CLIError

_JSON_TYPE_NAMES = {
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def parse_json_object(text: str, what: str = "DATA") -> dict:
    """Parse a JSON object given on the command line (``@FILE`` reads a file, ``-`` stdin)."""
    if text is None:
        return {}
    value = _decode_json(_read_argument(text, what), what)
    if not isinstance(value, dict):
        kind = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise CLIError(f"{what} must be a JSON object like '{{\"a\": 1}}', got {kind}")
    return value


def _read_argument(text: str, what: str) -> str:
    """``text`` itself, stdin for ``-``, or the content of FILE for ``@FILE``."""
    if text == "-":
        return sys.stdin.read()
    if not text.startswith("@"):
        return text
    path = text[1:]
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise CLIError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CLIError(f"{what} file {path} is not UTF-8 text") from None


def _decode_json(text: str, what: str) -> Any:
    if json_nested_deeper(text):  # (the limit of task data; refused before a parser recurses)
        raise CLIError(f"{what} is nested deeper than {MAX_DATA_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise CLIError(f"{what} is not valid JSON: {exc} is not allowed") from None
    except RecursionError:
        raise CLIError(f"{what} is nested too deeply") from None


_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_time(text: str, what: str = "TIME") -> float:
    """Epoch seconds (``1795255200``, ``1795255200.5``) or ISO 8601 with an offset
    (``2026-11-21T10:00:00Z``, ``2026-11-21T10:00:00+09:00``)."""
    s = str(text).strip()
    if _NUMBER_RE.match(s):
        v = float(s)
        if not math.isfinite(v) or v < 0:
            raise CLIError(f"{what} {text!r} is not a valid epoch time")
        return v
    iso = s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s
    try:
        dt = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise CLIError(
            f"{what} {text!r} is neither epoch seconds nor an ISO 8601 time like 2026-11-21T10:00:00Z"
        ) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise CLIError(f"{what} {text!r} has no UTC offset; add one, like {s}Z or {s}+09:00")
    return dt.timestamp()


class StrictInt(click.ParamType):
    """An integer written plainly: optional sign and ASCII digits.

    click's INT takes whatever ``int()`` takes: " 7", "1_000", "٣" (an Arabic-Indic three).
    Options that go into the database say exactly what they mean instead.
    """

    name = "integer"
    _PLAIN = re.compile(r"[+-]?[0-9]+", re.ASCII)

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and self._PLAIN.fullmatch(value):
            return int(value)
        self.fail(f"{value!r} is not a plain integer (digits, optionally signed)", param, ctx)


STRICT_INT = StrictInt()


class Checked(click.ParamType):
    """A value the library's ``check`` accepts (a queue name, a tag), checked before anything
    connects: a bad one is a usage error (exit 2) with the check's message."""

    def __init__(self, name: str, check: Callable[[Any], Any]):
        self.name = name
        self.check = check

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return self.check(value)
        except ValidationError as exc:
            self.fail(str(exc), param, ctx)
