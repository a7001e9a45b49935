"""The history of a task as the queue API shows it: its submission (read from its row) and then
each state change the store recorded (``store/events.py``), oldest first; and the event stream's
entries, which are the same records of every task."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import NotFoundError
from ..rules.attempt_events import CARRY_CLAIM, carries_claim, claim_open, started_at


@dataclass(frozen=True)
class TaskEvent:
    """One state change of a task: what happened (``kind``: submitted, claimed, expired,
    finished, retried, released, cancelled, moved, ...; ``docs/operations.md``) and when."""

    kind: str
    at: float
    key: str
    queue: str
    type: str
    #: the task's attempts after the change (the running attempt for ``claimed``)
    attempt: int
    #: the worker (host:pid) that claimed it, whose lease expired, or that finished it
    owner: str | None = None
    #: how it ended (finished, gave_up, set_aside, force_finished, cancelled, closed)
    outcome: str | None = None
    #: the error of a retry or of a task that gave up (its text, cut at 1,000 characters)
    error: str | None = None
    #: seconds from due to start (claimed)
    waited: float | None = None
    #: seconds from start to end (finished, retried, gave_up)
    ran: float | None = None
    #: when it is due again (retried, released, promoted, reopened), or first due (submitted)
    due_at: float | None = None
    #: the traceback of the error that ended the attempt (retried, finished as failure; capped
    #: as stored), whose worker and attempt are ``owner`` and ``attempt``
    traceback: str | None = None
    #: the position of this event in the stream (``Queue.events(since=...)`` resumes after it);
    #: "" in a task's history
    cursor: str = ""

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


#: the events after which a row's run_at is no longer the one it was submitted with
_MOVES_DUE = frozenset({"claimed", "retried", "released", "promoted", "reopened"})
#: the state and lease of a row a worker holds (``store/schema.py``: live, leased)
_LIVE, _HELD = 0, 1


def submitted_event(row: Mapping, cursor: str = "") -> TaskEvent:
    """The submission of the task of ``row`` (a task row, or a row of its columns), due at the
    row's due time (right until a later change moved it: :func:`first_due`)."""
    return TaskEvent(
        kind="submitted",
        at=row["created_at"],
        key=row["key"],
        queue=row["queue"],
        type=row["type"],
        attempt=0,
        due_at=row["run_at"],
        cursor=cursor,
    )


def carried_claim(event: Mapping, cursor: str = "") -> TaskEvent | None:
    """The claim the event row ``event`` carries (the start of the attempt it ends), as the
    ``claimed`` event a tracked task records; None when it ends no holder's attempt. A release
    gives its attempt back: the claim's attempt is one more than the release's."""
    if not carries_claim(event):
        return None
    attempt = event["attempt"] + (1 if event["kind"] == "released" else 0)
    return _claim(event, started_at(event), attempt, event["owner"], event["waited"], cursor)


def running_claim(row: Mapping) -> TaskEvent | None:
    """The claim of the attempt the task of ``row`` (a task row) is in now, if a worker holds it."""
    if row["state"] != _LIVE or row["leased"] != _HELD or row["started_at"] is None:
        return None
    waited = max(0.0, row["started_at"] - row["run_at"])
    return _claim(row, row["started_at"], row["attempts"], row["owner"], waited, "")


def _claim(task: Mapping, at: float, attempt: int, owner: str | None, waited: float, cursor: str) -> TaskEvent:
    """A ``claimed`` event of the task ``task`` names (its key, queue and type)."""
    name = {"key": task["key"], "queue": task["queue"], "type": task["type"]}
    return TaskEvent(kind="claimed", at=at, attempt=attempt, owner=owner, waited=waited, cursor=cursor, **name)


def first_due(row: Mapping, entries: Sequence[TaskEvent]) -> float | None:
    """When the task was first due: the row's due time while no change has moved it; after its
    first claim, that claim's time less its wait; None when something else moved it first."""
    first = next((e for e in entries if e.kind in _MOVES_DUE), None)
    if first is None:
        return row["run_at"]
    if first.kind == "claimed" and first.waited is not None:
        return first.at - first.waited
    return None


def recorded_event(row: Mapping, cursor: str = "") -> TaskEvent:
    """The event of an event row (``<table>_events``)."""
    return TaskEvent(
        kind=row["kind"],
        at=row["at"],
        key=row["key"],
        queue=row["queue"],
        type=row["type"],
        attempt=row["attempt"],
        owner=row["owner"],
        outcome=row["outcome"],
        error=row["detail"],
        waited=row["waited"],
        ran=row["ran"],
        due_at=row["due_at"],
        traceback=row.get("traceback"),
        cursor=cursor,
    )


def history(row: Mapping, events: Sequence[Mapping]) -> list[TaskEvent]:
    """The history of the task of ``row``: its submission, then its recorded events in order,
    each attempt's claim among them — recorded (a tracked task's), else carried by the event
    that ended the attempt, or the row's own while a worker holds it — where its time puts it."""
    entries: list[TaskEvent] = []
    for e in events:
        if (claim := carried_claim(e)) is not None:
            _place(entries, claim)
        entries.append(recorded_event(e))
    if not claim_open(events) and (now := running_claim(row)) is not None:
        _place(entries, now)
    submitted = submitted_event(row)
    if (due := first_due(row, entries)) != row["run_at"]:
        submitted = dataclasses.replace(submitted, due_at=due)
    return [submitted, *entries]


def _place(entries: list[TaskEvent], claim: TaskEvent) -> None:
    """Put ``claim`` into ``entries`` (the history so far) before the later entries of its own
    attempt (an operator's change while it ran), never before an earlier attempt's end."""
    i = len(entries)
    while i and entries[i - 1].at > claim.at and entries[i - 1].kind not in CARRY_CLAIM | {"claimed"}:
        i -= 1
    entries.insert(i, claim)


def trimmed_after(entries: list[TaskEvent]) -> int | None:
    """The index after which a history was trimmed (its middle entries deleted, a task that ran
    many times): where the attempt jumps by more than one; None when nothing is missing."""
    for i in range(1, len(entries)):
        if entries[i].attempt > entries[i - 1].attempt + 1:
            return i - 1
    return None


def read_history(store, key: str) -> list[TaskEvent]:
    """The history of task ``key`` in ``store`` (a Store); NotFoundError when there is no
    such task (never submitted, or purged with its history)."""
    found = store.task_history(key)
    if found is None:
        raise NotFoundError(f"task {key!r} not found")
    row, events = found
    return history(row, events)
