"""What a stored schedule row does when it is due, decided without the database (pure functions).

A row is read as it is stored: any column may have been edited by hand, or name a timezone this
host's tzdata lacks. :func:`check` applies to it the rules ``add`` applies to its arguments, then
the store's check of every column (:mod:`queue_core.store.rowcheck`: also a lease flag or token, a
time or a created_at perfectsched never writes), and raises a ValidationError saying what is wrong
and where (``invalid cron '61 * * * *': ...``, ``column leased: 7, outside 0..1 ...``).
:func:`tick_plan` and :func:`poll_plan` decide what a due row does: fire (tasks to submit, or an
occurrence to lease) and advance, or — when it cannot be computed — be set aside with the reason
(:class:`SetAside`). Nothing here reads or writes the database, so an error raised here is the
schedule's, never the database's."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from queue_core import errors as qe
from queue_core.rules import strict_json
from queue_core.rules.validate import cap_text, check_name, check_queue, check_tags, check_time, encode_data
from queue_core.store.protocol import rowcheck

from . import catchup as catchup_mod
from . import cron as cronlib
from .errors import ValidationError

MAX_DELAY = 366 * 86400
#: a task key adds ".<time>" (up to 15 characters) to the schedule key; task keys hold 255
MAX_KEY_LENGTH = 240
#: what computing a row raises when a column holds what no check foresaw (json, zoneinfo and
#: datetime errors; a wrong type read from a column SQLite let through)
CANNOT_COMPUTE = (ValueError, TypeError, ArithmeticError, LookupError, RecursionError)
#: bytes of the reason a row cannot be computed (cut with a marker: ``validate.cap_text``)
MAX_REASON = 2000


def check_key(key: Any) -> str:
    check_name(key, "schedule key")
    if len(key) > MAX_KEY_LENGTH:
        raise ValidationError(f"schedule key is longer than {MAX_KEY_LENGTH} characters (task keys add '.<time>')")
    return key


def _delay(delay: Any) -> int:
    if isinstance(delay, bool) or not isinstance(delay, int) or not (0 <= delay <= MAX_DELAY):
        raise ValidationError(f"delay must be whole seconds between 0 and {MAX_DELAY}, not {delay!r}")
    return delay


def _catchup(catchup: Any) -> str:
    if catchup not in catchup_mod.POLICIES:
        raise ValidationError(f"catchup must be one of {', '.join(catchup_mod.POLICIES)}, not {catchup!r}")
    return catchup


def _timezone(name: Any) -> str:
    return cronlib.validate_timezone(name).key


#: the checks of a schedule's spec, by column, in the order ``add`` applies them
SPEC: dict[str, Callable[[Any], Any]] = {
    "cron": cronlib.validate_cron,
    "timezone": _timezone,
    "delay": _delay,
    "catchup": _catchup,
    "dst": cronlib.validate_dst,
}


def check_spec(cron: Any, timezone: Any, delay: Any, catchup: Any, dst: Any) -> tuple[str, str, int, str, str]:
    """The cron expression, timezone, delay, catch-up and DST policies, normalised (or ValidationError)."""
    return cronlib.validate_cron(cron), _timezone(timezone), _delay(delay), _catchup(catchup), cronlib.validate_dst(dst)


@dataclass(frozen=True)
class Checked:
    """A schedule row each column of which the scheduler reads was checked."""

    key: str
    type: str
    spec: dict  # cron, timezone, delay, catchup, dst (normalised)
    data: dict
    next_time: int
    next_run_time: float
    queue: str = "default"
    tags: tuple[str, ...] = ()


def _data(text: Any, limit: int) -> dict:
    try:
        data = strict_json.loads(text) if text else {}
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"data is not valid JSON: {exc}") from None
    encode_data(data, limit)  # a JSON object of at most max_data_size bytes, as add requires
    return data


def _column(name: str, check: Callable[[Any], Any], value: Any) -> Any:
    """``check(value)``. Its ValidationError, which names what it checked in its own words
    (``invalid cron ...``, ``delay must be ...``), propagates as it is; another error (a wrong type
    that ``json`` or ``zoneinfo`` raise on) becomes one naming the column."""
    try:
        return check(value)
    except qe.ValidationError:
        raise
    except CANNOT_COMPUTE as exc:
        raise ValidationError(f"column {name}: {reason(exc)}") from None


def _tags(text: Any) -> tuple[str, ...]:
    """A schedule's tags as stored (JSON list text, or NULL: none)."""
    try:
        return () if text is None else check_tags(strict_json.loads(text))
    except qe.ValidationError as exc:
        raise ValidationError(f"column tags: {exc}") from None


def tags_text(tags: Any) -> str | None:
    """Tags as a schedule stores them: a sorted JSON list, or None for none."""
    checked = check_tags(tags)
    return json.dumps(list(checked)) if checked else None


def _whole_time(value: Any) -> int:
    t = check_time(value, "next_time")
    if not t.is_integer():
        raise ValidationError(f"next_time {value!r} is not whole seconds")
    return int(t)


def check(row: Mapping, max_data_size: int) -> Checked:
    """The row checked as ``add`` checks its arguments, its next occurrence computable, every
    column holding a value perfectsched writes; else a ValidationError naming the column."""
    type_ = _column("type", lambda v: check_name(v, "schedule type"), row["type"])
    spec = {name: _column(name, spec_check, row[name]) for name, spec_check in SPEC.items()}
    next_time = _column("next_time", _whole_time, row["next_time"])
    _column("next_time", lambda t: cronlib.next_time(spec["cron"], t, spec["timezone"], spec["dst"]), next_time)
    checked = Checked(
        key=_column("key", check_key, row["key"]),
        type=type_,
        spec=spec,
        data=_column("data", lambda v: _data(v, max_data_size), row["data"]),
        next_time=next_time,
        next_run_time=_column("next_run_time", lambda v: check_time(v, "next_run_time"), row["next_run_time"]),
        queue=_column("queue", check_queue, row["queue"]),
        tags=_column("tags", _tags, row.get("tags")),
    )
    found = rowcheck.problem(row, rowcheck.SCHEDULE_COLUMNS)
    if found is not None:
        column, wrong = found
        raise ValidationError(f"column {column}: {wrong} (perfectsched never writes that: edited by hand?)")
    return checked


def problem(row: Mapping, max_data_size: int) -> str | None:
    """Why the stored ``row`` cannot be computed (:func:`check`, in one line); None when it can."""
    try:
        check(row, max_data_size)
    except CANNOT_COMPUTE as exc:
        return reason(exc)
    return None


def reason(exc: BaseException) -> str:
    """Why a row cannot be computed, in one line."""
    text = str(exc) if isinstance(exc, qe.ValidationError) else f"{type(exc).__name__}: {exc}"
    return cap_text(" ".join(text.split()), MAX_REASON)


@dataclass(frozen=True)
class Fire:
    """Submit ``tasks`` (none: skipped by the catch-up policy), then advance: ``advance`` is
    ``(key, expected next_time, next_time, next_run_time)`` as ``ScheduleStore.schedule_advance_many`` takes."""

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
        tasks = [
            new_task(key=f"{r.key}.{o}", type=r.type, data=r.data, run_at=at, queue=r.queue, tags=r.tags)
            for o, at in runs
        ]
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
