"""The events of tasks (store layer): a row of ``<table>_events`` per state change after a task's
submission, appended in the same transaction as the change, so that a change and its event
commit together or not at all. A part of :class:`~queue_core.store.tasks.SqlStore`.

Each transition of ``transitions.py`` names the event it writes (``Transition.event``); its
store method calls :meth:`TaskEvents.event_record` (rows in hand: the claim) or
:meth:`TaskEvents.record_ids` (the rows it changed, read back in the same statement where the
database can: INSERT ... SELECT) only for the rows its own statement changed, never for rows an
earlier run of a retried transaction committed (their events committed with them).

A task's history is bounded: past :data:`HISTORY_TRIM_AT` entries, a retry or release keeps its
first :data:`HISTORY_FIRST` and last :data:`HISTORY_LAST` entries (``attempt_events.trim_cut``).
Events are deleted with their task (purge, key reuse, a run's cleared group).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from ..rules.attempt_events import CARRY_CLAIM, open_claims, trim_cut
from .database import Database
from .failures import FailureReads
from .schema import DETAIL_LENGTH, ErrorText
from .stats import TaskStatistics

#: a task's history keeps its first and its last events (``docs/operations.md``)
HISTORY_FIRST = 10
HISTORY_LAST = 40
#: trimmed back to HISTORY_FIRST + HISTORY_LAST once it holds more than this many
HISTORY_TRIM_AT = 60
#: the kinds that end a task (it is finished after them, with an outcome)
ENDS = frozenset({"finished", "gave_up", "set_aside", "force_finished", "cancelled", "closed"})
#: the columns of an event row, in the order :func:`event_columns` gives them
COLUMNS = (
    *("task_id", "key", "queue", "type", "kind", "at", "attempt"),
    *("owner", "outcome", "detail", "waited", "ran", "due_at", "tracked", "traceback"),
)


def event_columns(
    t: sa.Table, e: sa.Table, kind: str, with_detail: bool = False, with_due: bool = False, with_traceback: bool = False
) -> list:
    """The SELECT list (over the task table ``t``, as a change left its row; ``e``: the event
    table) of the event ``kind``: what each kind keeps of the row besides its identity and
    attempt. Its time is the bound parameter ``event_at``; with ``with_detail``, its detail is
    ``event_detail`` (else the row's error, where the kind keeps one); with ``with_due``, the due
    time of the attempt it ends is ``event_due`` (a change that moved the row's own: a retry, a
    release); with ``with_traceback``, the traceback of the error that ended the attempt is
    ``event_traceback`` (else NULL: a success, or a change no error made)."""
    at: Any = sa.bindparam("event_at", type_=sa.Double())
    ended = kind in ENDS
    failed = sa.case((t.c.outcome == "failure", sa.func.substr(t.c.error, 1, DETAIL_LENGTH)), else_=None)
    again = kind in ("retried", "released", "promoted", "reopened", "requeued")
    ran = sa.case((t.c.started_at.is_(None), None), else_=at - t.c.started_at)
    error: Any = sa.func.substr(t.c.error, 1, DETAIL_LENGTH)
    if with_detail:
        error = sa.bindparam("event_detail", type_=ErrorText())
    carried = _carried_claim(t, e, kind, with_due)
    return [
        t.c.id,
        t.c.key,
        t.c.queue,
        t.c.type,
        sa.literal(kind),
        at,
        t.c.attempts,
        _owner(t, kind, with_due),
        t.c.outcome if ended else sa.null(),
        error
        if with_detail or kind in ("retried", "gave_up", "set_aside")
        else failed
        if kind == "finished"
        else sa.null(),
        carried if carried is not None else sa.null(),
        _ran(t, kind, ran),
        t.c.timeout if again else sa.null(),
        t.c.tracked,
        sa.bindparam("event_traceback", type_=ErrorText()) if with_traceback else sa.null(),
    ]


def _owner(t: sa.Table, kind: str, with_due: bool) -> Any:
    """Who held the attempt an event ``kind`` ends: the row's owner, or the bound
    ``event_owner`` where the change cleared it (``with_due``: a retry, a release)."""
    if with_due:
        return sa.bindparam("event_owner", type_=sa.String())
    return t.c.owner if kind in ("finished", "force_finished") else sa.null()


def _ran(t: sa.Table, kind: str, ran: Any) -> Any:
    """The seconds the attempt an event ``kind`` ends ran (start -> the event), in SQL; a
    force-finish's only when the row was held."""
    if kind == "force_finished":
        return sa.case((t.c.owner.is_(None), None), else_=ran)
    return ran if kind in ("finished", "retried", "gave_up", "released") else sa.null()


def _carried_claim(t: sa.Table, e: sa.Table, kind: str, with_due: bool) -> Any:
    """The wait of the attempt an event ``kind`` ends, in SQL over the row as the change left it
    (None: the kind carries no claim, or the attempt's claim has a row of its own: the task was
    tracked when claimed). The attempt's due time is the row's ``run_at`` (a claim sets it)
    unless the change moved it (``with_due``: the bound ``event_due``); a force-finish carries
    one only when the row was held (its owner is still on it)."""
    if kind not in CARRY_CLAIM or kind == "expired":
        return None
    due: Any = sa.bindparam("event_due", type_=sa.Double()) if with_due else t.c.run_at
    recorded = _claim_recorded(t, e)
    waited = sa.case((t.c.started_at.is_(None), None), (recorded, None), else_=t.c.started_at - due)
    if kind == "force_finished":
        return sa.case((t.c.owner.is_(None), None), else_=waited)
    return waited


def _claim_recorded(t: sa.Table, e: sa.Table) -> Any:
    """SQL: whether the attempt the row of ``t`` is in has a ``claimed`` row of its own: one at
    its start that no end of an attempt followed (an earlier attempt claimed at the same instant,
    tracked then and since ended, is not this one's)."""
    claim, end = e.alias("claim"), e.alias("attempt_end")
    ends = sorted(CARRY_CLAIM)
    ended = sa.exists().where(end.c.task_id == claim.c.task_id, end.c.id > claim.c.id, end.c.kind.in_(ends))
    return sa.exists().where(claim.c.task_id == t.c.id, claim.c.kind == "claimed", claim.c.at == t.c.started_at, ~ended)


def claimed_events(rows: Iterable[dict], at: float, owner: str, recorded: Collection[int] = ()) -> list[dict]:
    """The events of a claim of ``rows`` (as they were before it): an ``expired`` for each whose
    lease had expired (its holder was silent past its lease: the end of that attempt, carrying
    its claim unless its task id is in ``recorded``), then ``claimed`` for each tracked one."""
    rows = list(rows)
    out = expired_events(rows, at, recorded)
    for r in rows:
        if r["tracked"]:
            waited = max(0.0, at - r["timeout"])
            claim = {"kind": "claimed", "attempt": r["attempts"] + 1, "owner": owner, "waited": waited}
            out.append(_event_base(r, at) | claim)
    return out


def expired_events(rows: Iterable[dict], at: float, recorded: Collection[int] = ()) -> list[dict]:
    """The ``expired`` events of those of ``rows`` (as a claim or a change found them) whose
    lease expired: the attempt's owner, how long ago it started, and its wait (due -> start)
    unless its claim has a row of its own (its task id in ``recorded``:
    :meth:`TaskEvents.recorded_claims`)."""
    out = []
    for r in rows:
        if r["leased"] and r["started_at"] is not None:
            waited = None if r["id"] in recorded else max(0.0, r["started_at"] - r["run_at"])
            ran = max(0.0, at - r["started_at"])
            end = {"kind": "expired", "attempt": r["attempts"], "owner": r["owner"], "waited": waited, "ran": ran}
            out.append(_event_base(r, at) | end)
    return out


def finished_events(held: Iterable[tuple[int, Any]], at: float, outcome: str) -> list[dict]:
    """The ``finished`` events of tasks untracked when claimed, settled with ``outcome`` at
    ``at``, from what their holder keeps of each claim (``(task id, HeldAttempt)``): the values
    :func:`event_columns` reads from rows still as claimed (its wait ``started_at - due_at``, no
    claim row of its own; its run ``at - started_at``; a detail only for a failure, which is not
    settled this way)."""
    return [
        {
            "task_id": i,
            "key": h.key,
            "queue": h.queue,
            "type": h.type,
            "kind": "finished",
            "at": at,
            "attempt": h.attempt,
            "owner": h.owner,
            "outcome": outcome,
            "detail": None,
            "waited": h.started_at - h.due_at,
            "ran": at - h.started_at,
            "due_at": None,
            "tracked": 0,
            "traceback": None,
        }
        for i, h in held
    ]


def _event_base(r: dict, at: float) -> dict:
    base = {"task_id": r["id"], "key": r["key"], "queue": r["queue"], "type": r["type"], "at": at}
    return base | dict.fromkeys(("outcome", "detail", "ran", "due_at", "traceback")) | {"tracked": r["tracked"]}


class TaskEvents:
    """The events part of a store: the event table ``events_t`` of the task table ``t``; an event of
    a task that ends is counted by ``stats`` if it is deleted first, and a failure noted by
    ``failures``; tracked tasks' events are announced on ``channel`` (None: not announced)."""

    def __init__(
        self,
        db: Database,
        t: sa.Table,
        events_t: sa.Table,
        stats: TaskStatistics,
        failures: FailureReads,
        channel: str | None,
    ):
        self.db, self.t, self.events_t, self.stats, self.failures = db, t, events_t, stats, failures
        self.channel = channel

    def recorded_claims(self, conn, rows: Sequence[dict]) -> set[int]:
        """The ids of those of the task ``rows`` holding a lease whose claim has an event row of
        its own (the task was tracked when claimed): its ``at`` is the row's ``started_at``, and
        no end of an attempt followed it (:func:`open_claims`)."""
        held = {r["id"]: r["started_at"] for r in rows if r["leased"] and r["started_at"] is not None}
        if not held:
            return set()
        e = self.events_t
        kinds = ["claimed", *sorted(CARRY_CLAIM)]
        stmt = sa.select(e.c.task_id, e.c.kind, e.c.at).where(e.c.task_id.in_(list(held)), e.c.kind.in_(kinds))
        claims = open_claims(conn.execute(stmt.order_by(e.c.id)).all())
        return {task_id for task_id, at in claims.items() if held[task_id] == at}

    def ended_events(self, conn, rows: Sequence[dict], at: float) -> list[dict]:
        """The ``expired`` events of those of ``rows`` (task rows as read before a change that
        ends them) whose lease expired: their last attempt ended unseen."""
        return expired_events(rows, at, self.recorded_claims(conn, rows))

    def event_record(self, conn, events: Sequence[dict]) -> None:
        """Append ``events`` (dicts of every column of :data:`COLUMNS`); announce those of
        tracked tasks (:meth:`_announce`)."""
        if events:
            self.db.dialect.insert_rows(conn, self.events_t, COLUMNS, events)
            self._announce(conn, [e["tracked"] for e in events])

    def record_ids(
        self,
        conn,
        kind: str,
        ids: Sequence[int],
        at: float,
        detail: Any = None,
        due: tuple | None = None,
        outcome: str | None = None,
        traceback: str | None = None,
    ) -> None:
        """Append the event ``kind`` of each of the rows ``ids`` (changed by the caller's statement
        in this transaction: read as it left them). ``due``: when the attempt the change ended
        was due and who held it, for a change that moved the row's due time and cleared its
        owner (:meth:`attempt_dues`). One statement per 500 rows, built once per kind (a
        claim's settle runs it at every batch). A change that ends tasks notes those that ended
        as failure (``FailureReads.note_failed``) unless it says they all had another
        ``outcome``. ``traceback``: that of the error that ended the attempt (a retry, a failure)."""
        stmt = self._event_insert(kind, "ids", detail is not None, due is not None, traceback is not None)
        ids = list(ids)
        run_at, owner = due if due is not None else (None, None)
        params = {"event_at": at, "event_detail": detail, "event_due": run_at, "event_owner": owner}
        params["event_traceback"] = traceback
        for i in range(0, len(ids), 500):
            self._record_selected(conn, stmt, params | {"event_ids": ids[i : i + 500]})
            if kind in ENDS and outcome in (None, "failure"):
                self.failures.note_failed(conn, self.t.c.id.in_(ids[i : i + 500]))

    def record_key(self, conn, kind: str, key: str, at: float, detail: Any = None) -> None:
        """The same for the row of ``key`` (a change an operator made by key)."""
        stmt = self._event_insert(kind, "key", detail is not None, False)
        self._record_selected(conn, stmt, {"event_key": key, "event_at": at, "event_detail": detail})
        if kind in ENDS:
            self.failures.note_failed(conn, self.t.c.key == key)

    def attempt_dues(self, conn, ids: Sequence[int]) -> dict[int, tuple]:
        """When the running attempts of the rows ``ids`` were due (their ``run_at``, which a claim
        sets) and who holds them, read before a change that moves the one and clears the other
        (a retry, a release) so that its event still carries the attempt's claim."""
        t = self.t
        rows = conn.execute(sa.select(t.c.id, t.c.run_at, t.c.owner).where(t.c.id.in_(list(ids))))
        return {r.id: (r.run_at, r.owner) for r in rows}

    def record_moved(
        self, conn, kind: str, dues: dict[int, tuple], ids: Sequence[int], at: float, traceback: str | None = None
    ) -> None:
        """:meth:`record_ids` of the rows ``ids`` whose change moved their due time: each with the
        due time and holder of the attempt it ended (``dues``, from :meth:`attempt_dues`)."""
        by_due: dict[tuple | None, list[int]] = {}
        for i in ids:
            by_due.setdefault(dues.get(i, (None, None)), []).append(i)
        for due, some in by_due.items():
            self.record_ids(conn, kind, some, at, due=due, traceback=traceback)

    def _event_insert(self, kind: str, by: str, with_detail: bool, with_due: bool, with_traceback: bool = False):
        """INSERT ... SELECT of the events ``kind`` of the task rows chosen ``by`` their ids (the
        bound list ``event_ids``) or their key (``event_key``); returning ``tracked`` when changes
        are announced. Built once per shape."""
        shape = (kind, by, with_detail, with_due, with_traceback, bool(self.channel))
        cache = self.__dict__.setdefault("_event_inserts", {})
        if shape not in cache:
            t = self.t
            which = (
                t.c.id.in_(sa.bindparam("event_ids", expanding=True))
                if by == "ids"
                else t.c.key == sa.bindparam("event_key")
            )
            columns = event_columns(t, self.events_t, kind, with_detail, with_due, with_traceback)
            rows = sa.select(*columns).where(which)
            cache[shape] = self.db.dialect.insert_selected(self.events_t, COLUMNS, rows, self._returning)
        return cache[shape]

    @property
    def _returning(self) -> str:
        return "tracked" if self.channel else ""

    def _record_selected(self, conn, plan, params: dict) -> None:
        self._announce(conn, self.db.dialect.run_insert_selected(conn, plan, params, self._returning))

    def _announce(self, conn, tracked: Sequence[int]) -> None:
        """Tell the listeners (PostgreSQL NOTIFY on :attr:`channel`, sent as the transaction
        commits) when a tracked task changed: followers of the event stream read at once. Other
        changes reach them at their next poll: a NOTIFY in every claim would serialise the
        commits of all workers."""
        if self.channel and any(tracked):
            self.db.dialect.notify(conn, self.channel)

    def trim_history(self, conn, ids: Sequence[int]) -> None:
        """Cut the histories of ``ids`` that grew past HISTORY_TRIM_AT back to their first and
        last events (a task retried or released over and over)."""
        e = self.events_t
        long = (  # a row shows at most two entries (its attempt's claim and itself)
            sa.select(e.c.task_id)
            .where(e.c.task_id.in_(list(ids)))
            .group_by(e.c.task_id)
            .having(sa.func.count() > HISTORY_TRIM_AT // 2)
        )
        for (task_id,) in conn.execute(long).all():
            rows = conn.execute(sa.select(e.c.id, e.c.kind, e.c.waited).where(e.c.task_id == task_id).order_by(e.c.id))
            cut = trim_cut([r._mapping for r in rows], HISTORY_FIRST, HISTORY_LAST, HISTORY_TRIM_AT)
            if not cut:
                continue
            self.stats.count_before_delete(conn, e.c.id.in_(cut))
            conn.execute(sa.delete(e).where(e.c.id.in_(cut)))

    def forget_events(self, conn, ids: Sequence[int]) -> None:
        """Delete the events of the tasks ``ids`` (deleted in the same transaction)."""
        ids = list(ids)
        for i in range(0, len(ids), 500):
            of_these = self.events_t.c.task_id.in_(ids[i : i + 500])
            self.stats.count_before_delete(conn, of_these)
            conn.execute(sa.delete(self.events_t).where(of_these))

    def events_of(self, conn, task_id: int) -> list[dict]:
        """The events of task ``task_id``, oldest first."""
        e = self.events_t
        stmt = sa.select(e).where(e.c.task_id == task_id).order_by(e.c.id)
        return [dict(r._mapping) for r in conn.execute(stmt)]

    def event_last_tracebacks(self, conn, ids: Sequence[int]) -> dict[int, dict]:
        """The traceback each of the tasks ``ids`` kept last (of the error that ended its latest
        failed attempt), with that attempt (``attempt``) and its worker (``owner``)."""
        e = self.events_t
        cols = (e.c.task_id, e.c.attempt, e.c.owner, e.c.traceback)
        stmt = sa.select(*cols).where(e.c.task_id.in_(list(ids)), e.c.traceback.is_not(None)).order_by(e.c.id)
        return {r.task_id: dict(r._mapping) for r in conn.execute(stmt)} if ids else {}

    def task_history(self, key: str) -> tuple[dict, list[dict]] | None:
        """The row of task ``key`` and its events, oldest first, read together (None: no such task)."""
        t = self.t

        def read(conn):
            row = conn.execute(sa.select(t).where(t.c.key == key)).first()
            return None if row is None else (dict(row._mapping), self.events_of(conn, row.id))

        return self.db.run(read, write=False, what="history")

    # -- the event stream: both sources by id ---------------------------------------------------
    def _source(self, name: str) -> tuple[sa.Table, list]:
        """The table of a stream source and the columns a reader takes: ``tasks`` (their
        submissions: the rows themselves) or ``events`` (every later change)."""
        if name == "tasks":
            t = self.t
            return t, [t.c.id, t.c.key, t.c.queue, t.c.type, t.c.created_at, t.c.run_at, t.c.tracked]
        return self.events_t, list(self.events_t.c)

    def stream_rows(self, source: str, after: int, missing: Sequence[int], limit: int) -> list[dict]:
        """Rows of stream ``source``: those of ``missing`` (ids a reader passed over, that may
        have committed since) that exist now, then up to ``limit`` of those after ``after``, in
        id order (each read through the primary key)."""
        table, cols = self._source(source)
        id_ = table.c.id

        def read(conn) -> list[dict]:
            late = []
            if missing:
                late = conn.execute(sa.select(*cols).where(id_.in_(list(missing))).order_by(id_)).all()
            page = conn.execute(sa.select(*cols).where(id_ > after).order_by(id_).limit(limit)).all()
            return [dict(r._mapping) for r in (*late, *page)]

        return self.db.run(read, write=False, what="read events")

    def stream_start(self, source: str, since: float) -> int:
        """The position in ``source`` before its first row at or after ``since`` (epoch seconds):
        a binary search over the ids, whose times grow with them (to within a transaction's
        length)."""
        table, _ = self._source(source)
        id_, at = table.c.id, table.c.created_at if source == "tasks" else table.c.at

        def read(conn) -> int:
            lo = conn.execute(sa.select(sa.func.min(id_))).scalar()
            hi = conn.execute(sa.select(sa.func.max(id_))).scalar()
            if lo is None:
                return 0
            first_at = sa.select(id_, at).where(id_ >= sa.bindparam("from")).order_by(id_).limit(1)
            end = hi
            while lo < hi:  # the least x whose first row at or after id x is at or after since
                mid = (lo + hi) // 2
                row = conn.execute(first_at, {"from": mid}).one()
                lo, hi = (lo, mid) if row[1] >= since else (row[0] + 1, hi)
            row = conn.execute(first_at, {"from": lo}).first()
            return end if row is None or row[1] < since else row[0] - 1

        return self.db.run(read, write=False, what="find events since")

    def stream_end(self, source: str) -> int:
        """The highest id of ``source`` now (a reader that starts now starts after it)."""
        table, _ = self._source(source)
        return self.db.run(
            lambda c: c.execute(sa.select(sa.func.max(table.c.id))).scalar() or 0,
            write=False,
            what="find the end of the events",
        )
