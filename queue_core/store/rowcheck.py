"""What a row read back may hold (store layer): every column's values as pq writes them.

A row outside them was edited by hand (or written by another program): a state or a flag out of
range, a number pq refuses at its input, text in a number column (SQLite keeps it), data that
is not JSON, a name that is not valid UTF-8 (MySQL's VARBINARY keeps any bytes). Task readers turn
such a row into :class:`~queue_core.errors.CorruptRowError` naming the table, the row's key and
the column; the claim sets a due one aside instead of leasing it (``ClaimScreen.screen``). A
schedule row is one more schedule that cannot be computed (``perfectsched.rows.check``): the
scheduler sets it aside with the reason, reads show it as stored, and only
``SqlScheduleStore.schedule_check`` (``Schedule.metadata``) raises CorruptRowError.

Only what pq never writes counts. Odd values of pq's own ranges are not corrupt: a run_at in
1970 or 9999, a priority of -2**31, attempts past max_attempts (the claim gives that row up),
a lease token equal to another row's (a batch's rows share one).
"""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import CorruptRowError, ValidationError
from ..rules import strict_json
from ..rules.task_states import FINISHED, LIVE, PENDING
from ..rules.validate import INT32_MAX, MAX_TIME, QUEUE_NAME, check_tags
from .schema import (
    FOREVER,
    MAX_KEY_LENGTH,
    OUTCOMES,
    SCHEDULE_CATCHUP,
    SCHEDULE_DST,
    SCHEDULE_MAX_DELAY,
)

INT32 = INT32_MAX
#: the latest time pq accepts as an input (``validate.check_time``): a schedule's next occurrence
MAX_INPUT_TIME = MAX_TIME

#: a column's check: None when the value is one pq writes, else what is wrong with it
Check = Callable[[Any], "str | None"]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def name(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{_shown(value)}, not text"
    if not 1 <= len(value) <= MAX_KEY_LENGTH:
        return f"{len(value)} characters (pq writes 1 to {MAX_KEY_LENGTH})"
    if "\x00" in value:
        return "a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "bytes that are not UTF-8"
    return None


def queue_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{_shown(value)}, not text"
    return None if QUEUE_NAME.fullmatch(value) else f"{_shown(value)}, not a queue name"


def text(value: Any) -> str | None:
    return None if isinstance(value, str) else f"{_shown(value)}, not text"


def _json(value: Any) -> tuple[Any, str | None]:
    """The JSON value of text ``value`` (strict: no NaN or Infinity), or what is wrong with it."""
    if not isinstance(value, str):
        return None, f"{_shown(value)}, not JSON text"
    try:
        return strict_json.loads(value), None
    except (ValueError, RecursionError):
        return None, f"{_shown(value)}, not JSON"


def json_value(value: Any) -> str | None:
    """Any JSON value (a result)."""
    return _json(value)[1]


def json_object(value: Any) -> str | None:
    """A JSON object (task and schedule data: submit and add refuse anything else)."""
    decoded, wrong = _json(value)
    if wrong is None and not isinstance(decoded, dict):
        return f"{_shown(value)}, not a JSON object"
    return wrong


def tag_list(value: Any) -> str | None:
    """A JSON list of tags, each valid, sorted, once (a schedule's tags)."""
    decoded, wrong = _json(value)
    if wrong is not None:
        return wrong
    try:
        if not isinstance(decoded, list) or list(check_tags(decoded)) != decoded:
            return f"{_shown(value)}, not a sorted JSON list of tags"
    except ValidationError as exc:
        return f"{_shown(value)}: {exc}"
    return None


def integer(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{_shown(value)}, not an integer"
        if not low <= value <= high:
            return f"{value}, outside {low}..{high}"
        return None

    return check


def one_of(*allowed: Any) -> Check:
    def check(value: Any) -> str | None:
        return None if value in allowed and not isinstance(value, float) else f"{_shown(value)}, not one of {allowed}"

    return check


def epoch(high: float = FOREVER) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{_shown(value)}, not a number"
        if not math.isfinite(value) or not 0 <= value <= high:
            return f"{value!r}, not a time pq writes (0 to {high:g} epoch seconds)"
        return None

    return check


def timezone(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{_shown(value)}, not a timezone name"
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return f"{_shown(value)}, not a known IANA timezone"
    return None


def cron(value: Any) -> str | None:
    """The cron text as perfectsched stores it (normalised, printable; its parser checks more)."""
    if not isinstance(value, str) or not value or len(value) > 255:
        return f"{_shown(value)}, not a cron expression"
    if not value.isprintable() or value != " ".join(value.split()):
        return f"{_shown(value)}, not a cron expression as perfectsched stores one"
    return None


def optional(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


TASK_COLUMNS: dict[str, Check] = {
    "id": integer(1, 2**63 - 1),
    "key": name,
    "type": name,
    "data": json_object,
    "resource": optional(name),
    "max_running": optional(integer(1, INT32)),
    "priority": integer(-INT32 - 1, INT32),
    "state": one_of(LIVE, FINISHED, PENDING),
    "leased": one_of(0, 1),
    "timeout": epoch(),
    "run_at": epoch(),
    "created_at": epoch(),
    "started_at": optional(epoch()),
    "finished_at": optional(epoch()),
    "attempts": integer(0, INT32),
    "max_attempts": optional(integer(1, INT32)),
    "lease_token": optional(integer(1, 2**63 - 1)),
    "owner": optional(text),
    "outcome": optional(one_of(*OUTCOMES)),
    "cancel_requested": one_of(0, 1),
    "error": optional(text),
    "grp": optional(name),
    "result": optional(json_value),
    "workflow": optional(text),  # the workflow runtime's JSON: the queue never reads into it
    "definition": optional(text),
    "queue": queue_name,
    "tracked": one_of(0, 1),
    "trace": lambda _value: None,  # whatever it holds, a worker that cannot read it starts a trace of its own
}

SCHEDULE_COLUMNS: dict[str, Check] = {
    "key": name,
    "type": name,
    "cron": cron,
    "delay": integer(0, SCHEDULE_MAX_DELAY),
    "timezone": timezone,
    "data": json_object,
    "next_time": integer(0, int(MAX_INPUT_TIME)),
    "next_run_time": epoch(),
    "timeout": epoch(),
    "catchup": one_of(*SCHEDULE_CATCHUP),
    "dst": one_of(*SCHEDULE_DST),
    "leased": one_of(0, 1),
    "lease_token": optional(integer(1, 2**63 - 1)),
    "created_at": epoch(),
    "updated_at": epoch(),
    "error": optional(text),  # why it was set aside (schema version 2)
    "queue": queue_name,
    "tags": optional(tag_list),  # schema version 4
}


def sql_order(value: Any) -> tuple:
    """A value's place in SQL's order, numbers below text below bytes (SQLite's, whose columns
    keep any type): a priority level edited by hand to text must not stop the claim's walk over
    the levels (due, its row is set aside: ``ClaimScreen.screen``)."""
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, value) if isinstance(value, str) else (2, bytes(value))


def _task_states(row: Mapping) -> tuple[str, str] | None:
    """Columns that contradict each other: a lease or an outcome in a state that has none."""
    if row.get("leased") == 1 and row.get("state") != LIVE:
        return "leased", f"1 in state {row.get('state')} (only a live row is leased)"
    if "outcome" in row and (row["state"] == FINISHED) != (row["outcome"] is not None):
        shown = "no outcome" if row["outcome"] is None else f"outcome {row['outcome']!r}"
        return "outcome", f"{shown} in state {row['state']} (a row has one exactly when finished)"
    return None


def problem(row: Mapping, columns: Mapping[str, Check]) -> tuple[str, str] | None:
    """The first column of ``row`` (those it has) holding a value pq never writes, and what it
    holds; None when every one holds such a value."""
    for column, check in columns.items():
        if column in row:
            wrong = check(row[column])
            if wrong is not None:
                return column, wrong
    return _task_states(row) if columns is TASK_COLUMNS else None


def corrupt(what: str, table: str, key: Any, found: tuple[str, str]) -> CorruptRowError:
    column, wrong = found
    shown = _shown(key) if isinstance(key, str) else f"(key {_shown(key)})"
    return CorruptRowError(
        f"{what} {shown} in table {table}: column {column} holds {wrong}; pq never writes that "
        f"(edited by hand?): correct or delete the row"
    )


def check_task(row: Mapping, table: str) -> Mapping:
    """``row`` itself, or CorruptRowError naming its first impossible column."""
    found = problem(row, TASK_COLUMNS)
    if found is not None:
        raise corrupt("task", table, row.get("key"), found)
    return row


def check_schedule(row: Mapping, table: str) -> Mapping:
    """``row`` itself, or CorruptRowError naming its first impossible column."""
    found = problem(row, SCHEDULE_COLUMNS)
    if found is not None:
        raise corrupt("schedule", table, row.get("key"), found)
    return row
