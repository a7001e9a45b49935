"""Checks of what callers pass in, task data as JSON and error texts as stored (queue layer, no I/O)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

from ..errors import ValidationError

#: the largest value of an INT column (priorities, caps, attempts)
INT32_MAX = 2**31 - 1
_INT_MIN, _INT_MAX = -INT32_MAX - 1, INT32_MAX
#: the latest time, in epoch seconds, pq takes as an input (a due time, ``now=``, a schedule's occurrence)
MAX_TIME = 1e13


@overload
def check_name(value: Any, what: str, *, optional: Literal[False] = False) -> str: ...
@overload
def check_name(value: Any, what: str, *, optional: bool) -> str | None: ...
def check_name(value: Any, what: str, *, optional: bool = False) -> str | None:
    """Keys, types, users and groups: 1-255 characters of valid UTF-8 without NUL."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise ValidationError(f"{what} must not be empty")
    if len(value) > 255:
        raise ValidationError(f"{what} is {len(value)} characters long; the limit is 255")
    if "\x00" in value:
        raise ValidationError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid Unicode (lone surrogate)") from None
    return value


def check_types(value: Any, what: str = "types") -> tuple[str, ...]:
    """Task types a claim is limited to: a non-empty collection of task types (not one string)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a collection of task types, not {_shown(value)}")
    types = tuple(sorted({check_name(x, "task type") for x in value}))
    if not types:
        raise ValidationError(f"{what} must name at least one task type")
    return types


#: a tag is at most this many characters, a task has at most this many (store/schema.py: the same)
MAX_TAG_LENGTH, MAX_TAGS = 100, 32
_TAG_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_tag(value: Any, what: str = "tag") -> str:
    """A tag: 1-100 characters of valid Unicode, no control characters, no space at either end
    (``customer:acme``, ``invoice``, ``region/eu west``)."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, not {_shown(value)}")
    if not value or value != value.strip():
        raise ValidationError(f"{what} {_shown(value)} must be non-empty, without spaces at either end")
    if len(value) > MAX_TAG_LENGTH:
        raise ValidationError(f"{what} is {len(value)} characters long; the limit is {MAX_TAG_LENGTH}")
    if _TAG_CONTROL.search(value):
        raise ValidationError(f"{what} {_shown(value)} must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} {_shown(value)} is not valid Unicode (lone surrogate)") from None
    return value


def check_tags(value: Any, what: str = "tags") -> tuple[str, ...]:
    """The tags of a task: a collection of tags (not one string), each once, at most 32; sorted."""
    if type(value) in (tuple, list) and not value:
        return ()  # (most tasks: no tags, checked at the cost of a comparison)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list of tags, not {_shown(value)}")
    tags = tuple(sorted({check_tag(x, "tag") for x in value}))
    if len(tags) > MAX_TAGS:
        raise ValidationError(f"{what}: {len(tags)} tags; a task has at most {MAX_TAGS}")
    return tags


#: a queue name: a letter or digit, then up to 63 letters, digits and ``_.:-`` (no comma or
#: ``=``: a list of queues is written ``a,b`` or ``a=3,b=1``)
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
#: the largest weight of a served queue
MAX_QUEUE_WEIGHT = 1_000_000


def check_queue(value: Any, what: str = "queue") -> str:
    """A queue name (:data:`QUEUE_NAME`)."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, not {_shown(value)}")
    if not QUEUE_NAME.fullmatch(value):
        raise ValidationError(
            f"{what} {_shown(value)} is not a queue name: 1-64 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return value


def check_served_queues(value: Any, what: str = "queues") -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    """The queues a worker serves and their weights (None: strict order): ``"a,b,c"`` (strict),
    ``"a=5,b=3,c=1"`` (weighted), or a list of names, or of ``(name, weight)`` pairs, or a mapping
    of names to weights. Every queue once; weights for all of them or for none."""
    pairs = _queue_pairs(value, what)
    names = tuple(check_queue(n, f"{what}: queue") for n, _ in pairs)
    if not names:
        raise ValidationError(f"{what} must name at least one queue (for example: critical,default)")
    if len(set(names)) != len(names):
        raise ValidationError(f"{what} names a queue twice: {', '.join(names)}")
    weights = [w for _, w in pairs]
    if all(w is None for w in weights):
        return names, None
    if any(w is None for w in weights):
        raise ValidationError(f"{what}: give every queue a weight or none (for example: critical=5,default=3,low=1)")
    return names, tuple(_weight(w, f"{what}: weight of {n}") for n, w in pairs)


def _weight(value: Any, what: str) -> int:
    weight = check_int(value, what, minimum=1)
    if weight > MAX_QUEUE_WEIGHT:
        raise ValidationError(f"{what} must be at most {MAX_QUEUE_WEIGHT}, not {weight}")
    return weight


#: the units of a rate's window, in seconds
_RATE_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"\s*(\d{1,10})\s*/\s*(\d{1,10}(?:\.\d{1,6})?)?\s*([a-z]*)\s*")
#: the longest window of a rate limit (a day)
MAX_RATE_WINDOW = 86400.0
RATE_EXAMPLE = "for example 100/60s (100 starts in any 60 seconds), 10/s, 500/5m, 1000/h"


def check_rate(value: Any, what: str = "rate") -> tuple[int, float]:
    """A rate limit: ``"N/W"`` (``100/60s``, ``10/s``, ``500/5m``, ``1000/h``) or ``(N, W)``;
    returns ``(N, W in seconds)``: at most N starts in any window of W seconds."""
    if isinstance(value, str):
        m = _RATE.fullmatch(value.lower())
        if not m or m.group(3) not in _RATE_UNITS or not (m.group(2) or m.group(3)):
            raise ValidationError(f"{what} {_shown(value)} is not a rate: {RATE_EXAMPLE}")
        count, window = int(m.group(1)), float(m.group(2) or 1) * _RATE_UNITS[m.group(3)]
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        count, window = value[0], value[1]
        if isinstance(count, bool) or not isinstance(count, int) or isinstance(window, bool):
            raise ValidationError(f"{what} {_shown(value)} is not a rate: {RATE_EXAMPLE}")
        window = float(window)
    else:
        raise ValidationError(f"{what} {_shown(value)} is not a rate: {RATE_EXAMPLE}")
    if not 1 <= count <= INT32_MAX or not (math.isfinite(window) and 0 < window <= MAX_RATE_WINDOW):
        raise ValidationError(f"{what} {_shown(value)}: 1 or more starts in a window of up to a day; {RATE_EXAMPLE}")
    return count, window


def _queue_pairs(value: Any, what: str) -> list[tuple[Any, Any]]:
    if isinstance(value, str):
        pairs: list[tuple[Any, Any]] = []
        for part in (p.strip() for p in value.split(",")):
            name, sep, weight = part.partition("=")
            if sep and not re.fullmatch(r"\s*\d{1,10}\s*", weight):
                raise ValidationError(
                    f"{what}: weight {weight!r} of {name.strip()!r} is not a whole number "
                    "(for example: critical=5,default=1)"
                )
            pairs.append((name.strip(), int(weight) if sep else None))
        return pairs
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list of queue names, not {_shown(value)}")
    return [(x[0], x[1]) if isinstance(x, (tuple, list)) and len(x) == 2 else (x, None) for x in value]


def _shown(value: Any) -> str:
    """``repr(value)`` for a message; also for ints past Python's int-to-str digit limit."""
    try:
        text = repr(value)
    except ValueError:
        return f"<a {type(value).__name__} too large to print>"
    return text if len(text) <= 80 else text[:77] + "..."


@overload
def check_int(value: Any, what: str, *, minimum: int | None = None, optional: Literal[False] = False) -> int: ...
@overload
def check_int(value: Any, what: str, *, minimum: int | None = None, optional: bool) -> int | None: ...
def check_int(value: Any, what: str, *, minimum: int | None = None, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{what} must be an integer, not {_shown(value)}")
    if not (_INT_MIN <= value <= _INT_MAX):
        raise ValidationError(f"{what} {_shown(value)} is out of range")
    if minimum is not None and value < minimum:
        raise ValidationError(f"{what} must be at least {minimum}, not {value}")
    return value


def check_time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{what} must be epoch seconds (a number), not {_shown(value)}")
    try:
        v = float(value)
    except OverflowError:  # an int beyond any float
        v = math.inf
    if not math.isfinite(v) or v < 0 or v > MAX_TIME:
        raise ValidationError(f"{what} {_shown(value)} is not a valid epoch time")
    return v


def check_duration(value: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{what} must be a number of seconds, not {_shown(value)}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v) or v < 0 or (positive and v == 0) or v > MAX_DURATION:
        raise ValidationError(f"{what} {_shown(value)} is out of range")
    return v


MAX_DURATION = 1e11
#: deepest nesting of task data: far below Python's recursion limit, so that data written from
#: a shallow stack can always be decoded from a deeper one (a worker's poll, the CLI)
MAX_DATA_DEPTH = 200


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_nested_deeper(text: str, limit: int = MAX_DATA_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``limit`` (the outermost
    counts 1), told without parsing it (its strings skipped): a parser's recursion on such text
    can end in RecursionError, and an object finalized meanwhile prints to stderr."""
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > limit:
            return True
    return False


def _check_structure(data: Mapping) -> None:
    """Keys are strings (json.dumps would turn 1 into "1", silently merging keys) and nesting is
    at most MAX_DATA_DEPTH. Iterative: no recursion limit of its own."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DATA_DEPTH:
            raise ValidationError(f"task data is nested deeper than {MAX_DATA_DEPTH} levels")
        if isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise ValidationError(f"task data keys must be strings, not {type(k).__name__} {_shown(k)}")
                if isinstance(v, (Mapping, list, tuple)):
                    stack.append((v, depth + 1))
        else:
            stack.extend((v, depth + 1) for v in value if isinstance(v, (Mapping, list, tuple)))


def encode_data(data: Any, limit: int) -> str:
    """Task data as JSON text: a JSON object (dict) of at most ``limit`` bytes."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValidationError(f"task data must be a JSON object (dict), not {type(data).__name__}")
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise ValidationError("task data is nested too deeply to encode as JSON") from None
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"task data is not JSON-serialisable: {exc}") from None
    _check_structure(data)  # after dumps, which refuses cycles
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValidationError(f"task data is {size} bytes as JSON; the limit is {limit} (max_data_size)")
    return text


def decode_data(text: str | None) -> dict:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


#: bytes of an error text: MySQL/MariaDB's TEXT column (every error column: a task's, an event's
#: detail and traceback, a schedule's) holds 65,535
MAX_ERROR_BYTES = 65000
#: the marker that ends a cut error text (``{n}``: the bytes cut off)
CUT_MARKER = "\u2026 [cut: {n} bytes more]"


def cap_text(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """``text`` as valid UTF-8 (lone surrogates escaped) of at most ``limit`` bytes: when longer,
    cut at a character boundary and ended with :data:`CUT_MARKER` naming the bytes cut off. The
    one cap of every error text pq stores (the error columns cap what is bound to them with it:
    ``store/schema.ErrorText``). A NUL, which PostgreSQL's text columns refuse, is written
    ``\\x00`` on every database."""
    if "\0" in text:
        text = text.replace("\0", "\\x00")
    if text.isascii() and len(text) <= limit:
        return text
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= limit:
        return raw.decode("utf-8")
    room = limit - len(CUT_MARKER.format(n=len(raw)).encode("utf-8"))
    kept = raw[: max(room, 0)].decode("utf-8", "ignore")  # a character cut in two is dropped whole
    return kept + CUT_MARKER.format(n=len(raw) - len(kept.encode("utf-8")))


@overload
def _error_text(error: BaseException) -> str: ...
@overload
def _error_text(error: Any) -> str | None: ...
def _error_text(error: Any) -> str | None:
    """``error`` as storable text: never raises (a handler's exception may have a broken
    ``__str__``), capped by :func:`cap_text`."""
    if error is None:
        return None
    try:
        text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    except Exception:  # noqa: BLE001
        text = f"{type(error).__name__}: <str() failed>"
    return cap_text(text)
