"""Pure cron arithmetic: parse five-field cron expressions and compute their occurrences.

Times are Unix epoch seconds (``int`` or ``float`` in, ``int`` out).  Matching happens on
the *wall clock* of the schedule's IANA timezone (resolved with :mod:`zoneinfo`).

croniter parses, we search: :mod:`croniter` expands the five fields into value sets (names,
ranges, steps, ``7``, macros), with our own checks on top for the syntax subset, the error
messages and the cases below where its reading differs; the search and DST handling are ours.

Syntax
======
An expression starting ``@every:`` is an interval (``@every:15m+5m``), computed by
:mod:`perfectsched.every`; every other one is cron:
exactly five blank-separated fields: ``minute hour day-of-month month day-of-week``.
Each field is a comma list of ``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n`` or ``a/n``
(``a/n`` means ``a-<max>/n`` as in croniter, with Saturday as the day-of-week maximum;
``7/n`` is ``0/n``).  croniter's extensions (``?``, ``L``, ``W``, ``#``, ``H``, ``R``,
six or seven fields) are refused, and so are reversed ranges (``fri-mon``), which croniter
would wrap around.
Months accept ``jan``..``dec`` and weekdays ``sun``..``sat`` (case-insensitive); ``0`` and
``7`` are both Sunday and ``sun`` at the end of a range means 7 (``fri-sun``).  The macros ``@yearly``/``@annually``,
``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and ``@hourly`` are accepted;
``@reboot`` and every other ``@`` word are refused.  A step larger than the field's span
is allowed (``*/90`` in the minute field fires at minute 0 only), like croniter and Vixie.
``a-a`` and ``a-a/n`` are the single value ``a`` (Vixie's reading; croniter 7 reads
``0-0`` as ``*`` and ``a-a/n`` as ``*/n``, so such an element is handed to it as ``a``).

Day-of-month and day-of-week are OR-ed when *both* are restricted and AND-ed otherwise
(the Vixie rule).  We follow croniter's reading of "restricted", exactly: a field is
restricted when its text is not exactly ``*``, except that a field covering every value
(``1-31``, ``*/1``, ``0-6``, ``1-7``) is unrestricted when the *other* field's text contains
a ``*``.  So ``0 0 */1 * mon`` and ``0 0 13 * 0-6`` fire every day (OR), ``0 0 */2 * mon``
fires on odd days and on Mondays (OR), while ``0 0 */2 * 0-6`` fires on odd days only and
``0 0 1-31 * */2`` on Sundays, Tuesdays, Thursdays and Saturdays (AND).  Real Vixie cron
calls a field unrestricted whenever its text starts with ``*``; it differs from croniter
(and from us) only when one field starts with ``*`` and the other one is restricted but
does not cover every value (``0 0 */2 * mon``: Vixie fires on odd Mondays only).

An expression that can never fire (``0 0 30 2 *``) is refused by :func:`validate_cron` with
a static check, so no search can ever loop on it.  ``0 0 29 2 *`` is valid: it fires in
leap years only (2100 is not one).

Daylight-saving time
====================
A wall-clock time can be *in a gap* (skipped by a spring-forward transition: it never
shows on the clock), *in a fold* (repeated by a fall-back transition: it shows twice,
first with the old offset, ``fold=0``, then with the new one, ``fold=1``) or ordinary.
Two policies say what a matching wall time does:

``dst="vixie"`` (default; the rule of Vixie cron)
    A schedule is *fixed-time* when neither its minute nor its hour field contains ``*``
    (after macro expansion: ``@daily`` is fixed, ``@hourly`` and ``*/15 2 * * *`` are not,
    ``0-59/15 2 * * *`` is).

    * Fixed-time: a matching time skipped by a gap fires once, at the transition instant
      (the first instant after the gap; :attr:`Occurrence.shifted` is true).  A matching
      time repeated by a fold fires once, at its first pass (``fold=0``).
    * Wildcard: follows the real clock.  Times in a gap do not fire; times in a fold fire
      on both passes (the second one has :attr:`Occurrence.repeated` true).

``dst="exact"`` (PerfectSched's historic behaviour)
    Every schedule follows the real clock: a gap is skipped entirely, a fold fires twice.

Occurrences landing on the same instant are a single occurrence (``0,30 2 * * *`` on a
spring-forward day fires once at the end of the gap).  Such an occurrence is reported as
``shifted`` only when its own wall time does not match the expression.

Algorithm
=========
Candidate wall times are enumerated in wall-clock order with a field matcher that jumps
straight to the next allowed month, day, hour and minute (a yearly or Feb-29 expression
costs a handful of steps, never a minute-by-minute walk).  Each wall time is mapped to its
instant(s) with ``fold=0``/``fold=1``; the first-pass ("primary") instants are
non-decreasing in wall order, only second passes of a fold come out of order, and an instant
after ``ts`` can only have an earlier wall time than ``ts`` when ``ts`` itself is in the
first pass of a fold.  So the search starts at the wall time of ``ts`` (minus the fold
length in that case) and stops at the first wall time whose primary instant qualifies.
The search only moves forward and always terminates.  It assumes offset changes are at
least a few hours apart, which holds for every zone in the tz database since 1900.

Limits: ``ts`` must be a finite real number (not a bool) in [``MIN_TS``, ``MAX_TS``), i.e.
1900-01-01 to 9000-01-01 UTC (negative values are accepted).  ``n`` must be an int in
0..``MAX_COUNT``; :func:`upcoming`/:func:`occurrences` stop early only if occurrences
would pass ``MAX_TS``.
"""

from __future__ import annotations

import math
import numbers
import re
from bisect import bisect_left
from calendar import monthrange
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import TypeGuard
from zoneinfo import ZoneInfo

from croniter import croniter

from perfectsched.errors import InvalidCronError, InvalidTimezoneError, ValidationError

from . import every

__all__ = [
    "DST_POLICIES",
    "MAX_COUNT",
    "MAX_TS",
    "MIN_TS",
    "Occurrence",
    "cron_time",
    "next_time",
    "occurrences",
    "upcoming",
    "validate_cron",
    "validate_dst",
    "validate_timezone",
]

DST_POLICIES = ("vixie", "exact")
MIN_TS = -2208988800  # 1900-01-01T00:00:00Z
MAX_TS = 221845392000  # 9000-01-01T00:00:00Z
MAX_COUNT = 100_000

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)

_FIELD_HELP = "minute hour day-of-month month day-of-week"
# Field name and the values its text accepts (croniter's ranges, except that day-of-week
# also accepts 7 for Sunday, which croniter maps to 0).
_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MAX_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb counts Feb 29
_ALL_DAYS = set(range(1, 32))
_ALL_WEEKDAYS = set(range(7))
# The subset of croniter's syntax we accept: "*", "a" or "a-b", then an optional "/n".
_ELEMENT_RE = re.compile(r"^(?:\*|(?P<first>[a-z0-9]+)(?:-(?P<last>[a-z0-9]+))?)(?:/(?P<step>[a-z0-9]*))?$")
_ZONE_RE = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")


@dataclass(frozen=True)
class _Spec:
    """A parsed cron expression (value tuples are sorted)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    day_restricted: bool
    weekday_restricted: bool
    fixed_time: bool  # neither minute nor hour contains "*"

    def day_matches(self, year: int, month: int, day: int) -> bool:
        dom_ok = day in self.days
        dow_ok = (date(year, month, day).weekday() + 1) % 7 in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def matches(self, wall: datetime) -> bool:
        """Whether a naive wall-clock time matches (whole minutes only)."""
        return (
            wall.second == 0
            and wall.microsecond == 0
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall.year, wall.month, wall.day)
        )


@dataclass(frozen=True)
class Occurrence:
    """One firing of a schedule.

    ``time`` is the instant (epoch seconds), ``local`` the aware wall-clock time in the
    schedule's zone (``local.fold == 1`` on the second pass of a fold), ``shifted`` is true
    when the vixie policy moved a time out of a spring-forward gap, and ``repeated`` when
    this is the second pass through a fall-back fold.
    """

    time: int
    local: datetime
    shifted: bool
    repeated: bool


# --------------------------------------------------------------------------- validation


def validate_cron(cron: str) -> str:
    """Return the normalised expression (lower case, single blanks; an interval ``@every:...``
    without blanks, :mod:`perfectsched.every`) or raise InvalidCronError."""
    if every.is_every(cron):
        return every.normalise(cron)
    _parse(cron)
    return _normalise(cron)


def validate_timezone(name: str) -> ZoneInfo:
    """Return the ZoneInfo of an IANA zone name or raise InvalidTimezoneError."""
    if not isinstance(name, str):
        raise InvalidTimezoneError(f"invalid timezone {name!r}: expected a string")
    return _zone(name)


def validate_dst(policy: str) -> str:
    """Return ``"vixie"`` or ``"exact"`` (case-insensitive) or raise ValidationError."""
    if isinstance(policy, str) and policy.strip().lower() in DST_POLICIES:
        return policy.strip().lower()
    raise ValidationError(f"invalid dst policy {policy!r}: expected one of 'vixie', 'exact'")


def _validate_ts(ts: float) -> float:
    if isinstance(ts, bool) or not isinstance(ts, numbers.Real):
        raise ValidationError(f"invalid time {ts!r}: expected epoch seconds (int or float)")
    value = float(ts)
    if not math.isfinite(value):
        raise ValidationError(f"invalid time {ts!r}: not a finite number")
    if not MIN_TS <= value < MAX_TS:
        raise ValidationError(f"invalid time {ts!r}: out of the supported range {MIN_TS}..{MAX_TS} (years 1900-8999)")
    return value


def _validate_count(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValidationError(f"invalid count {n!r}: expected an int")
    if not 0 <= n <= MAX_COUNT:
        raise ValidationError(f"invalid count {n!r}: expected 0..{MAX_COUNT}")
    return int(n)


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    if not _ZONE_RE.match(name) or any(part in (".", "..") for part in name.split("/")):
        raise InvalidTimezoneError(f"invalid timezone {name!r}: not an IANA zone name")
    try:
        return ZoneInfo(name)
    except Exception as exc:  # ZoneInfoNotFoundError (a KeyError), ValueError, OSError...
        raise InvalidTimezoneError(f"invalid timezone {name!r}: unknown IANA zone") from exc


# ------------------------------------------------------------------------------ parsing


def _normalise(cron: str) -> str:
    return " ".join(cron.split()).lower()


def _parse(cron: str) -> _Spec:
    if not isinstance(cron, str):
        raise InvalidCronError(f"invalid cron {cron!r}: expected a string")
    return _parse_cached(_normalise(cron), cron)


@lru_cache(maxsize=16384)
def _parse_cached(text: str, original: str) -> _Spec:
    """croniter expands the fields; we check the syntax it must accept and the day rule."""

    def fail(reason: str) -> InvalidCronError:
        return InvalidCronError(f"invalid cron {original!r}: {reason}")

    if not text:
        raise fail(f"empty expression (expected 5 fields: {_FIELD_HELP})")
    if text.startswith("@"):
        if text not in _MACROS:
            raise fail(f"unsupported macro {text!r} (supported: {', '.join(_MACROS)})")
        parts = _croniter(text, fail).expressions  # the macro's five fields
    else:
        parts = text.split(" ")
    if len(parts) != 5:
        raise fail(f"expected 5 fields ({_FIELD_HELP}), got {len(parts)}")
    try:
        fields = [
            ",".join(_check_element(element, index) for element in part.split(",")) for index, part in enumerate(parts)
        ]
    except ValueError as exc:
        raise fail(str(exc)) from None
    expanded = _croniter(" ".join(fields), fail).expanded
    minutes, hours, days, months, weekdays = (
        set(range(low, high + 1)) if "*" in values else set(values)
        for values, (_, low, high) in zip(expanded, _FIELDS, strict=True)
    )
    weekdays = {v % 7 for v in weekdays}
    spec = _Spec(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=tuple(sorted(days)),
        months=tuple(sorted(months)),
        weekdays=frozenset(weekdays),
        day_restricted=_restricted(parts[2], days == _ALL_DAYS, parts[4]),
        weekday_restricted=_restricted(parts[4], weekdays == _ALL_WEEKDAYS, parts[2]),
        fixed_time="*" not in parts[0] and "*" not in parts[1],
    )
    _check_can_fire(spec, fail)
    return spec


def _croniter(text: str, fail) -> croniter:
    """croniter's parse of ``text``; any error it raises becomes a one-line InvalidCronError."""
    try:
        return croniter(text, 0)
    except Exception as exc:  # CroniterError (a ValueError), or anything it lets through
        lines = str(exc).strip().splitlines()  # croniter may wrap a whole traceback
        raise fail(f"croniter: {lines[-1].strip() if lines else type(exc).__name__}") from None


def _check_element(element: str, index: int) -> str:
    """Check one list element on top of croniter; return the text croniter should expand.

    croniter accepts more than five-field cron (``?``, ``L``, ``W``, ``#``, ``H``, ``R``),
    wraps reversed ranges around (``fri-mon``) and reports bad values without naming the
    field, so the element shape, values and range order are checked here.  It also reads
    ``a-a`` as the whole field (and ``a-a/n`` as ``*/n``): such an element is handed over as
    plain ``a`` (Vixie's reading).
    """
    name = _FIELDS[index][0]
    if not element:
        raise ValueError(f"{name} field has an empty list element")
    match = _ELEMENT_RE.match(element)
    if not match:
        raise ValueError(f"{name} element {element!r} is not valid cron syntax")
    first, last, step = match.group("first", "last", "step")
    low = _value(first, index) if first is not None else None
    one_value_range = False
    if low is not None and last is not None:  # a range (the pattern has no "-last" without a first)
        high = _value(last, index, range_end=True)
        if low > high:
            raise ValueError(f"{name} range {first}-{last} is reversed")
        one_value_range = low == high
    if step is not None:
        if not step.isdigit() or len(step) > 9:
            raise ValueError(f"{name} step {step!r} is not a positive number")
        if int(step) == 0:
            raise ValueError(f"{name} step 0 must be at least 1")
    return first if one_value_range else element


def _value(token: str, index: int, range_end: bool = False) -> int:
    """The number a field token stands for (names from croniter's tables)."""
    name, low, high = _FIELDS[index]
    if token.isdigit():
        if len(token) > 9 or not low <= int(token) <= high:
            raise ValueError(f"{name} value {token} out of range {low}-{high}")
        return int(token)
    value = croniter.ALPHACONV[index].get(token)
    if not isinstance(value, int):  # croniter's day-of-month table also holds "l"
        raise ValueError(f"{name} value {token!r} is not a number or a known name")
    return 7 if range_end and index == 4 and value == 0 else value  # "fri-sun" is 5-7


def _restricted(text: str, covers_all: bool, other_text: str) -> bool:
    """croniter's rule: not ``*``, and not "every value" next to a ``*``-bearing field."""
    return text != "*" and not (covers_all and "*" in other_text)


def _check_can_fire(spec: _Spec, fail) -> None:
    """Refuse expressions whose day-of-month never exists in any allowed month."""
    if spec.weekday_restricted or not spec.day_restricted:
        return  # OR with a weekday (or any day): some day of every month matches
    if any(spec.days[0] <= _MAX_MONTH_DAYS[m] for m in spec.months):
        return
    days = ",".join(map(str, spec.days))
    months = ",".join(map(str, spec.months))
    raise fail(f"never fires: day-of-month {days} does not exist in month {months}")


# ---------------------------------------------------------------------- wall-clock search


def _next_day(spec: _Spec, year: int, month: int, day: int) -> int | None:
    """First matching day >= ``day`` in the month, or None (see the OR/AND rule)."""
    last = monthrange(year, month)[1]
    if day > last:
        return None
    i = bisect_left(spec.days, day)
    by_date = spec.days[i] if i < len(spec.days) and spec.days[i] <= last else None
    if not spec.weekday_restricted:
        return by_date  # spec.days is 1..31 when day-of-month is "*"
    by_weekday = _next_weekday(spec.weekdays, year, month, day, last)
    if not spec.day_restricted:
        return by_weekday
    return min((d for d in (by_date, by_weekday) if d is not None), default=None)


def _next_weekday(weekdays: frozenset[int], year: int, month: int, day: int, last: int) -> int | None:
    weekday = (date(year, month, day).weekday() + 1) % 7  # 0 = Sunday
    for delta in range(7):
        if (weekday + delta) % 7 in weekdays:
            return day + delta if day + delta <= last else None
    return None


def _next_wall(spec: _Spec, wall: datetime) -> datetime:
    """First naive wall time >= ``wall`` (rounded up to the minute) matching the fields."""
    if wall.second or wall.microsecond:
        wall = wall.replace(second=0, microsecond=0) + _MINUTE
    year, month, day, hour, minute = wall.year, wall.month, wall.day, wall.hour, wall.minute
    limit = year + 30  # a valid expression fires at least every 8 years
    while year <= limit:
        if month not in spec.months:
            i = bisect_left(spec.months, month)
            if i == len(spec.months):
                year, month = year + 1, spec.months[0]
            else:
                month = spec.months[i]
            day, hour, minute = 1, 0, 0
            continue
        found = _next_day(spec, year, month, day)
        if found is None:
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            day, hour, minute = 1, 0, 0
            continue
        if found != day:
            day, hour, minute = found, 0, 0
        time = _next_time_of_day(spec, hour, minute)
        if time is None:
            day, hour, minute = day + 1, 0, 0
            continue
        return datetime(year, month, day, *time)
    raise InvalidCronError("cron expression never fires")  # unreachable for valid specs


def _next_time_of_day(spec: _Spec, hour: int, minute: int) -> tuple[int, int] | None:
    i = bisect_left(spec.hours, hour)
    if i == len(spec.hours):
        return None
    if spec.hours[i] != hour:
        return spec.hours[i], spec.minutes[0]
    j = bisect_left(spec.minutes, minute)
    if j < len(spec.minutes):
        return hour, spec.minutes[j]
    if i + 1 < len(spec.hours):
        return spec.hours[i + 1], spec.minutes[0]
    return None


# ------------------------------------------------------------------- wall time -> instant


def _offset(wall: datetime, zone: ZoneInfo, fold: int) -> int:
    return _offset_seconds(wall.replace(tzinfo=zone, fold=fold))


def _naive_seconds(wall: datetime) -> int:
    return (wall - _EPOCH) // _SECOND


def _offset_at(instant: int, zone: ZoneInfo) -> int:
    return _offset_seconds(datetime.fromtimestamp(instant, zone))


def _offset_seconds(aware: datetime) -> int:
    """The UTC offset of ``aware`` in seconds (a ZoneInfo gives every datetime one)."""
    offset = aware.utcoffset()
    if offset is None:
        raise ValueError(f"{aware!r} has no UTC offset")
    return offset // _SECOND


def _transition(zone: ZoneInfo, before: int, after: int, new_offset: int) -> int:
    """The first instant in (before, after] whose offset is ``new_offset``."""
    while after - before > 1:
        middle = (before + after) // 2
        if _offset_at(middle, zone) == new_offset:
            after = middle
        else:
            before = middle
    return after


@dataclass(frozen=True)
class _Mapped:
    """The instants of one wall time: ``primary`` (first pass, or the vixie shift of a gap),
    ``second`` (second pass of a fold, when the policy fires it) and ``gap_end`` (the
    transition instant, when the wall time is in a gap and does not fire)."""

    primary: int | None
    second: int | None = None
    gap_end: int | None = None


def _map_wall(wall: datetime, zone: ZoneInfo, spec: _Spec, vixie: bool) -> _Mapped:
    before, after = _offset(wall, zone, 0), _offset(wall, zone, 1)
    base = _naive_seconds(wall)
    if before == after:
        return _Mapped(base - before)
    if before > after:  # fold: the wall time shows twice
        repeat = not (vixie and spec.fixed_time)
        return _Mapped(base - before, base - after if repeat else None)
    transition = _transition(zone, base - after, base - before, after)  # gap
    if vixie and spec.fixed_time:
        return _Mapped(transition)
    return _Mapped(None, gap_end=transition)


def _search_start(ts: float, zone: ZoneInfo) -> datetime:
    """Earliest wall time whose instants can be >= ts (see the module docstring).

    It starts one second before ``ts``: when ``ts`` is exactly the end of a gap, the wall
    times in the gap (shown before ``ts``) shift onto ``ts`` itself under vixie.
    """
    local = datetime.fromtimestamp(ts - 1, zone)
    wall = local.replace(tzinfo=None, fold=0)
    if local.fold == 0:
        first, second = _offset(wall, zone, 0), _offset(wall, zone, 1)
        if first > second:  # ts is on the first pass of a fold: later instants show earlier
            wall -= timedelta(seconds=first - second)
    return wall.replace(second=0, microsecond=0)


def _find(spec: _Spec | every.Every, zone: ZoneInfo, vixie: bool, ts: float, inclusive: bool) -> int:
    """The smallest occurrence instant >= ts (inclusive) or > ts."""
    if isinstance(spec, every.Every):
        return spec.find(ts, inclusive)

    def qualifies(instant: int | None) -> TypeGuard[int]:
        return instant is not None and (instant >= ts if inclusive else instant > ts)

    best: int | None = None
    wall = _next_wall(spec, _search_start(ts, zone))
    while True:
        mapped = _map_wall(wall, zone, spec, vixie)
        if qualifies(mapped.second) and (best is None or mapped.second < best):
            best = mapped.second
        if qualifies(mapped.primary):
            return mapped.primary if best is None else min(best, mapped.primary)
        if mapped.gap_end is not None:  # skip the rest of the gap in one jump
            resume = datetime.fromtimestamp(mapped.gap_end, zone).replace(tzinfo=None)
            wall = _next_wall(spec, max(resume, wall + _MINUTE))
        else:
            wall = _next_wall(spec, wall + _MINUTE)


def _occurrence(spec: _Spec | every.Every, zone: ZoneInfo, instant: int) -> Occurrence:
    local = datetime.fromtimestamp(instant, zone)
    return Occurrence(
        time=instant,
        local=local,
        shifted=isinstance(spec, _Spec) and not spec.matches(local.replace(tzinfo=None)),
        repeated=local.fold == 1,
    )


# ------------------------------------------------------------------------------ public API


def _prepare(cron: str, ts: float, timezone: str, dst: str) -> tuple[_Spec | every.Every, ZoneInfo, bool, float]:
    spec = every.parse(cron) if every.is_every(cron) else _parse(cron)
    zone = validate_timezone(timezone)
    vixie = validate_dst(dst) == "vixie"
    return spec, zone, vixie, _validate_ts(ts)


def cron_time(cron: str, ts: float, timezone: str = "UTC", dst: str = "vixie") -> int:
    """The first occurrence at or after ``ts``."""
    spec, zone, vixie, value = _prepare(cron, ts, timezone, dst)
    return _find(spec, zone, vixie, value, inclusive=True)


def next_time(cron: str, ts: float, timezone: str = "UTC", dst: str = "vixie") -> int:
    """The first occurrence strictly after ``ts``."""
    spec, zone, vixie, value = _prepare(cron, ts, timezone, dst)
    return _find(spec, zone, vixie, value, inclusive=False)


def upcoming(cron: str, ts: float, n: int, timezone: str = "UTC", dst: str = "vixie") -> list[int]:
    """The next ``n`` occurrences strictly after ``ts`` (``next_time`` iterated)."""
    spec, zone, vixie, value = _prepare(cron, ts, timezone, dst)
    result: list[int] = []
    for _ in range(_validate_count(n)):
        value = _find(spec, zone, vixie, value, inclusive=False)
        if value >= MAX_TS:
            break
        result.append(value)
    return result


def occurrences(cron: str, ts: float, n: int, timezone: str = "UTC", dst: str = "vixie") -> list[Occurrence]:
    """The same instants as :func:`upcoming`, annotated with their wall time and DST flags."""
    spec, zone, _, _ = _prepare(cron, ts, timezone, dst)
    return [_occurrence(spec, zone, t) for t in upcoming(cron, ts, n, timezone, dst)]
