"""What a stored schedule row does when it is due, decided without the database (pure functions).

A row is read as it is stored: any column may have been edited by hand, or name a timezone this
host's tzdata lacks. :func:`check` applies to it the rules ``add`` applies to its arguments and
raises a ValidationError saying what is wrong. :func:`tick_plan` and :func:`poll_plan` decide
what a due row does: fire (tasks to submit, or an occurrence to lease) and advance, or — when it
cannot be computed — be set aside with the reason (:class:`SetAside`). Nothing here reads or
writes the database, so an error raised here is the schedule's, never the database's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from queue_core.validate import check_name, check_time, encode_data

from . import catchup as catchup_mod
from . import cron as cronlib
from .errors import ValidationError

MAX_DELAY = 366 * 86400
#: a task key adds ".<time>" (up to 15 characters) to the schedule key; task keys hold 255
MAX_KEY_LENGTH = 240
#: what computing a row raises when a column holds what no check foresaw (json, zoneinfo and
#: datetime errors; a wrong type read from a column SQLite let through)
CANNOT_COMPUTE = (ValueError, TypeError, ArithmeticError, LookupError, RecursionError)
MAX_REASON = 2000


def check_key(key: Any) -> str:
    check_name(key, "schedule key")
    if len(key) > MAX_KEY_LENGTH:
        raise ValidationError(f"schedule key is longer than {MAX_KEY_LENGTH} characters (task keys add '.<time>')")
    return key


def check_spec(cron: Any, timezone: Any, delay: Any, catchup: Any, dst: Any) -> tuple[str, str, int, str, str]:
    """The cron expression, timezone, delay, catch-up and DST policies, normalised (or ValidationError)."""
    cron = cronlib.validate_cron(cron)
    tz = cronlib.validate_timezone(timezone).key
    if isinstance(delay, bool) or not isinstance(delay, int) or not (0 <= delay <= MAX_DELAY):
        raise ValidationError(f"delay must be whole seconds between 0 and {MAX_DELAY}, not {delay!r}")
    if catchup not in catchup_mod.POLICIES:
        raise ValidationError(f"catchup must be one of {', '.join(catchup_mod.POLICIES)}, not {catchup!r}")
    return cron, tz, delay, catchup, cronlib.validate_dst(dst)


@dataclass(frozen=True)
class Checked:
    """A schedule row each column of which the scheduler reads was checked."""

    key: str
    type: str
    spec: dict  # cron, timezone, delay, catchup, dst (normalised)
    data: dict
    next_time: int
    next_run_time: float


def _data(text: Any, limit: int) -> dict:
    try:
        data = json.loads(text) if text else {}
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"data is not valid JSON: {exc}") from None
    encode_data(data, limit)  # a JSON object of at most max_data_size bytes, as add requires
    return data


def check(row: Mapping, max_data_size: int) -> Checked:
    """The row checked as ``add`` checks its arguments, its next occurrence computable; else
    ValidationError (or one of :data:`CANNOT_COMPUTE`) saying why."""
    check_name(row["type"], "schedule type")
    cron, timezone, delay, catchup, dst = check_spec(*_spec_columns(row))
    spec = {"cron": cron, "timezone": timezone, "delay": delay, "catchup": catchup, "dst": dst}
    next_time = check_time(row["next_time"], "next_time")
    if not next_time.is_integer():
        raise ValidationError(f"next_time {row['next_time']!r} is not whole seconds")
    cronlib.next_time(cron, next_time, timezone, dst)
    return Checked(
        key=check_key(row["key"]),
        type=row["type"],
        spec=spec,
        data=_data(row["data"], max_data_size),
        next_time=int(next_time),
        next_run_time=check_time(row["next_run_time"], "next_run_time"),
    )


def _spec_columns(row: Mapping) -> tuple:
    return row["cron"], row["timezone"], row["delay"], row["catchup"], row["dst"]


def reason(exc: BaseException) -> str:
    """Why a row cannot be computed, in one line."""
    text = str(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:MAX_REASON]


@dataclass(frozen=True)
class Fire:
    """Submit ``tasks`` (none: skipped by the catch-up policy), then advance: ``advance`` is
    ``(key, expected next_time, next_time, next_run_time)`` as ``ScheduleStore.advance_many`` takes."""

    advance: tuple[str, int, int, float]
    tasks: list


@dataclass(frozen=True)
class Lease:
    """Lease ``occurrence`` of ``row`` (poll), a row :func:`check` passed."""

    row: Mapping
    occurrence: int


@dataclass(frozen=True)
class SetAside:
    """The row cannot be computed: set it aside at the occurrence it was read at."""

    key: str
    expected: Any  # the next_time as read
    reason: str


def _advance(row: Checked, after: int) -> tuple[str, int, int, float]:
    return row.key, row.next_time, after, after + row.spec["delay"]


def tick_plan(row: Mapping, now: float, *, grace: float, max_data_size: int, new_task: Callable) -> Fire | SetAside:
    """What ``tick`` does with a due row: every occurrence its catch-up policy submits, as tasks
    made by ``new_task(**submit options)`` (which checks them as a submit would), then advance."""
    try:
        r = check(row, max_data_size)
        todo, after = catchup_mod.plan(r.spec, r.next_time, now, grace=grace)
        delay = r.spec["delay"]
        runs = [(o, r.next_run_time if o == r.next_time else o + delay) for o in todo]
        tasks = [new_task(key=f"{r.key}.{o}", type=r.type, data=r.data, run_at=at) for o, at in runs]
        return Fire(_advance(r, after), tasks)
    except CANNOT_COMPUTE as exc:
        return SetAside(row["key"], row["next_time"], reason(exc))


def poll_plan(row: Mapping, now: float, *, grace: float, max_data_size: int) -> Lease | Fire | SetAside:
    """What ``poll`` does with a due row: lease the occurrence its catch-up policy delivers, or
    advance past the missed ones it skips."""
    try:
        r = check(row, max_data_size)
        todo, after = catchup_mod.plan(r.spec, r.next_time, now, grace=grace, limit=1)
    except CANNOT_COMPUTE as exc:
        return SetAside(row["key"], row["next_time"], reason(exc))
    return Lease(row, todo[0]) if todo else Fire(_advance(r, after), [])
