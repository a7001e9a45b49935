"""The event stream (``Queue.events``): every task's submission and later changes, in order,
none missed, from any position a reader got to before.

Two sources, each read by id: the task rows (a row is its submission) and the event rows
(``store/events.py``). Ids are handed out when a row is inserted but become visible when its
transaction commits, so a reader can see id 12 before id 11 commits; and some ids never commit
(a rolled-back transaction, a submission whose key was taken). A reader therefore remembers the
ids it passed over (:class:`Position`, ``missing``), reads them again at every poll, delivers any
that appeared, and forgets one after ``gap_timeout`` seconds (longer than any transaction of
pq's lasts) or when more than :data:`MAX_MISSING` are pending. The position after each event
(:attr:`TaskEvent.cursor`) carries both sources' positions and the ids still missing there, so
that a reader that resumes from it (``since=cursor``) misses nothing still retained and gets
nothing twice.

The decisions (where a page leaves a position, how a cursor reads) are pure functions here; the
loop that polls is :func:`follow`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ValidationError
from .task_history import TaskEvent, carried_claim, carries_claim, recorded_event, submitted_event

#: the sources of the stream, in the order a cursor names them
SOURCES = ("tasks", "events")
#: the most ids a position remembers as missing per source (the oldest are forgotten first)
MAX_MISSING = 1000
_CURSOR = re.compile(
    r"t([0-9]{1,19})((?:-[0-9]{1,19})*)\.e([0-9]{1,19})((?:-[0-9]{1,19})*)((?:c[0-9]{1,19}){0,8})", re.ASCII
)
#: the largest id a cursor may name (a 64-bit signed id column's)
MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class Position:
    """Where a reader is in one source: every id up to ``after`` delivered except ``missing``;
    ``claims``: event rows not yet delivered whose carried claims were (a reader stopped between
    a claim and the end that carries it; at most a few)."""

    after: int = 0
    missing: tuple[int, ...] = ()
    claims: tuple[int, ...] = ()


@dataclass(frozen=True)
class Cursor:
    """A reader's position in both sources."""

    tasks: Position = field(default_factory=Position)
    events: Position = field(default_factory=Position)

    def __str__(self) -> str:
        def part(letter: str, p: Position) -> str:
            claims = "".join(f"c{c}" for c in p.claims)
            return letter + str(p.after) + "".join(f"-{m}" for m in p.missing) + claims

        return part("t", self.tasks) + "." + part("e", self.events)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor a :attr:`TaskEvent.cursor` string names; ValidationError otherwise."""
        m = _CURSOR.fullmatch(text) if isinstance(text, str) and len(text) < 50_000 else None
        if m is None:
            raise ValidationError(f"not an event cursor: {str(text)[:80]!r} (expected the cursor of an event)")

        def position(after: str, missing: str, claims: str = "") -> Position:
            ids = tuple(sorted({int(x) for x in missing.split("-")[1:]}))
            if int(after) > MAX_ID or len(ids) > MAX_MISSING or (ids and ids[-1] >= int(after)):
                raise ValidationError(
                    f"not an event cursor: {text[:80]!r} (its missing ids are not before its position)"
                )
            return Position(int(after), ids, tuple(sorted({min(int(c), MAX_ID) for c in claims.split("c")[1:]})))

        return cls(position(m[1], m[2]), position(m[3], m[4], m[5]))


def passed_over(position: Position, ids: Sequence[int]) -> tuple[int, ...]:
    """The ids a page of new rows ``ids`` (ascending, all after ``position.after``) skips."""
    out: list[int] = []
    last = position.after
    for i in ids:
        out.extend(range(last + 1, i))
        last = i
    return tuple(out)


@dataclass
class SourceReader:
    """The position of a reader in one source, with when it first missed each id (its clock)."""

    position: Position
    first_missed: dict[int, float] = field(default_factory=dict)

    def take(self, rows: Sequence[Mapping], now: float, gap_timeout: float) -> list[Mapping]:
        """The rows of a read (late ones of ``missing`` first, then new ones in id order) that are
        new to this reader, in the order to deliver them; its position moves past them."""
        missing = set(self.position.missing)
        late = [r for r in rows if r["id"] in missing]
        new = [r for r in rows if r["id"] > self.position.after]
        for i in passed_over(self.position, [r["id"] for r in new]):
            self.first_missed.setdefault(i, now)
        found = {r["id"] for r in late}
        for i in found:
            self.first_missed.pop(i, None)
        keep = sorted(
            i
            for i in (missing - found) | set(passed_over(self.position, [r["id"] for r in new]))
            if now - self.first_missed.setdefault(i, now) < gap_timeout
        )[-MAX_MISSING:]
        self.first_missed = {i: self.first_missed[i] for i in keep}
        after = new[-1]["id"] if new else self.position.after
        self.position = Position(after, tuple(keep))
        return [*late, *new]


def merged(tasks: Sequence[Mapping], events: Sequence[Mapping]) -> list[tuple[str, Mapping]]:
    """The rows of both sources as one sequence by time, each source's rows kept in their order
    (so that the position after any of them is exact)."""
    out: list[tuple[str, Mapping]] = []
    i = j = 0
    while i < len(tasks) or j < len(events):
        take_task = j >= len(events) or (i < len(tasks) and tasks[i]["created_at"] <= events[j]["at"])
        if take_task:
            out.append(("tasks", tasks[i]))
            i += 1
        else:
            out.append(("events", events[j]))
            j += 1
    return out


@dataclass(frozen=True)
class StreamFilter:
    """What a reader wants: events of ``queue``, of tracked tasks, of these ``kinds``, of ``key``,
    at or after ``not_before`` (a read since a time: a claim carried by a later event, or a
    change whose transaction committed late, may be older)."""

    queue: str | None = None
    tracked: bool = False
    kinds: frozenset[str] | None = None
    key: str | None = None
    not_before: float | None = None

    def wants(self, event: TaskEvent, tracked: bool) -> bool:
        return (
            (self.queue is None or event.queue == self.queue)
            and (not self.tracked or tracked)
            and (self.kinds is None or event.kind in self.kinds)
            and (self.key is None or event.key == self.key)
            and (self.not_before is None or event.at >= self.not_before)
        )


def follow(
    store,
    start: Cursor,
    wanted: StreamFilter,
    *,
    clock: Callable[[], float],
    follow: bool,
    wait: Callable[[float], object],
    poll_interval: float,
    gap_timeout: float,
    stop: threading.Event | None = None,
    page: int = 500,
) -> Iterator[TaskEvent]:
    """The events after ``start`` that ``wanted`` wants, each with the cursor after it; with
    ``follow``, forever (until ``stop``), waiting with ``wait(seconds)`` (woken early by a
    notification where the database sends them) when it has read everything there is."""
    readers = {"tasks": SourceReader(start.tasks), "events": SourceReader(start.events)}
    while stop is None or not stop.is_set():
        before = {name: r.position for name, r in readers.items()}
        got = {
            name: r.take(store.stream_rows(name, r.position.after, r.position.missing, page), clock(), gap_timeout)
            for name, r in readers.items()
        }
        yield from _deliver(got, before, {name: r.position for name, r in readers.items()}, wanted)
        full = any(len(rows) >= page for rows in got.values())
        if not full and not follow:
            return
        if not full:
            wait(poll_interval)


def _deliver(got: dict, before: dict, ends: dict, wanted: StreamFilter) -> Iterator[TaskEvent]:
    """The events of one read, in time order, each with the exact cursor after it: the
    position of its source moves from where the read began (``before``) to where it ended
    (``ends``) one row at a time, the other source's stays where it is."""
    done = {name: _start(before[name], ends[name], got[name]) for name in SOURCES}
    for name, row in merged(got["tasks"], got["events"]):
        if name == "events" and _shows_claim(row, done["events"]):
            at = done["events"]
            at_claim = Position(at.after, at.missing, tuple(sorted({*at.claims, row["id"]})))
            claim = carried_claim(row, str(Cursor(done["tasks"], at_claim)))
            if claim is not None and wanted.wants(claim, bool(row["tracked"])):
                yield claim
        done[name] = _after_row(done[name], row["id"], ends[name])
        cursor = str(Cursor(done["tasks"], done["events"]))
        event = submitted_event(row, cursor) if name == "tasks" else recorded_event(row, cursor)
        if wanted.wants(event, bool(row["tracked"])):
            yield event


def _shows_claim(row: Mapping, position: Position) -> bool:
    """Whether the event row ``row`` is delivered after the claim it carries: it ends an
    attempt whose claim has no row of its own, and the reader at ``position`` has not had that
    claim yet (it resumed from the claim's cursor)."""
    return carries_claim(row) and row["id"] not in position.claims


def _start(before: Position, end: Position, rows: Sequence[Mapping]) -> Position:
    """The position before any of a read's ``rows`` is delivered: where it began, missing what
    it still misses at its end (``end``: what timed out is forgotten) and the late rows it has
    yet to deliver."""
    late = {r["id"] for r in rows if r["id"] <= before.after}
    kept = {i for i in end.missing if i <= before.after}
    return Position(before.after, tuple(sorted(kept | late)), before.claims)


def _after_row(pos: Position, id_: int, end: Position) -> Position:
    """The position once the row ``id_`` is delivered too (a source's rows come in the order
    the reader took them: late ones, then new ones by id, the ids between them missing); the
    claims of rows still to come stay named."""
    claims = tuple(c for c in pos.claims if c != id_)
    if id_ <= pos.after:
        return Position(pos.after, tuple(i for i in pos.missing if i != id_), claims)
    skipped = {i for i in end.missing if pos.after < i < id_}
    return Position(id_, tuple(sorted(set(pos.missing) | skipped)), claims)
