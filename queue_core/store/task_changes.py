"""The transitions of a task row that its holder or an operator asks for (store layer): a part
of :class:`~queue_core.store.tasks.SqlStore` (its ``changes``).

Each method writes one transition of :data:`~queue_core.store.transitions.TASK_TRANSITIONS`
with the precondition the table gives it in its WHERE clause. Holder operations are fenced by
``(id, lease_token)``: they change nothing unless the caller still holds the lease, and a
refused call is diagnosed (preempted, already finished) from a re-read of the row and raised
as a typed error. Nothing is ever written by id alone after a refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import sqlalchemy as sa

from ..errors import (
    IdempotentAlreadyFinishedError,
    IdempotentNotFoundError,
    PreemptedError,
    TaskRunningError,
    ValidationError,
)
from ..rules import policy
from ..rules.task_states import FINISHED, LIVE, PENDING
from . import rowcheck
from .database import Database
from .events import TaskEvents
from .receipts import Receipts
from .transitions import TASK_EVENTS, task_where

UNSET: Any = object()


class TaskChanges:
    """The holder's and the operator's transitions of the task table ``t`` (named ``name``; the
    starts a rate limit counted in ``starts_t``), each with its events (``events``) and an
    operator's with its receipt (``receipts``); ``purge_time`` gives a finished row its purge
    time, ``forget_rows`` deletes what belongs to rows besides them (the store's)."""

    def __init__(
        self,
        db: Database,
        name: str,
        t: sa.Table,
        starts_t: sa.Table,
        receipts: Receipts,
        events: TaskEvents,
        purge_time: Callable[[float], sa.Case],
        forget_rows: Callable[[Any, Sequence[int]], None],
    ):
        self.db, self.name, self.t, self.starts_t = db, name, t, starts_t
        self.receipts, self.events, self.purge_time, self.forget_rows = receipts, events, purge_time, forget_rows

    # -- holder operations (fenced by the lease token) ------------------------------------
    def task_heartbeat(
        self, id_: int, token: int, alive: float, now: Callable[[], float], data: str | None = None
    ) -> tuple[float, bool]:
        """Extend the lease, unexpired at ``now()``, to ``now() + alive`` (and replace the data).
        ``now`` is asked in each run of the transaction: a run retried after a dropped connection
        judges the lease at its own time, never at the first run's. An expired lease is never
        revived (PreemptedError): another worker may hold the task, or its user's slot. Returns
        the lease's new end and whether a cancel was requested (the lease is extended all the same:
        the handler winds down under a live lease)."""
        t = self.t
        extra = {} if data is None else {"data": data}

        def extend(at: float) -> sa.Update:
            held = sa.update(t).where(t.c.id == id_, *task_where(t, "heartbeat", token=token, now=at))
            return held.values(timeout=at + alive, **extra)

        def alone(conn) -> float | None:
            at = now()
            return at + alive if conn.execute(extend(at).where(t.c.cancel_requested == 0)).rowcount == 1 else None

        def work(conn) -> tuple[float, bool]:
            at = now()
            if conn.execute(extend(at).where(t.c.cancel_requested == 0)).rowcount == 1:
                return at + alive, False
            if conn.execute(extend(at)).rowcount == 1:
                return at + alive, True
            self.diagnose(conn, id_, token, "heartbeat")

        # The common case is one statement in autocommit: it holds no lock between statements. On
        # SQLite a transaction of several statements holds the database's write lock until its
        # COMMIT, which waits for the GIL: a handler holding the GIL in a C call stalled every
        # worker's writes (and leases) for as long as it ran. A cancel or a refusal is the
        # transaction, which also diagnoses.
        if (until := self.db.run(alone, what="heartbeat", autocommit=True)) is not None:
            return until, False
        return self.db.run(work, what="heartbeat")

    def task_finish(
        self,
        id_: int,
        token: int,
        outcome: str,
        error: str | None,
        purge_at: float,
        now: float,
        data: str | None = None,
        conn=None,
        traceback: str | None = None,
    ) -> None:
        """The holder finishes the task (``traceback``: of the error it failed with, kept by the
        event that ends its attempt)."""
        values: dict = dict(
            state=FINISHED, leased=0, outcome=outcome, error=error, finished_at=now, timeout=self.purge_time(purge_at)
        )
        self._held(conn, id_, token, "finish", values | ({} if data is None else {"data": data}), now, traceback)

    def task_retry(
        self,
        id_: int,
        token: int,
        run_at: float,
        now: float,
        error: Any = UNSET,
        conn=None,
        traceback: str | None = None,
    ) -> None:
        """The holder gives the task back at ``now``, due at ``run_at`` (``error``: the new error
        text; ``traceback``: its traceback, kept by the event that ends the attempt)."""
        values: dict = dict(leased=0, timeout=run_at, run_at=run_at, owner=None)
        self._held(conn, id_, token, "retry", values | ({} if error is UNSET else {"error": error}), now, traceback)

    def task_release(self, id_: int, token: int, now: float, conn=None) -> None:
        """The holder gives the task back unrun, due ``now``: the lease's attempt is given back."""
        self._held(conn, id_, token, "release", self._released(now), now)

    def task_give_back_unstarted(self, id_: int, token: int, start_by: float, now: float) -> None:
        """The holder gives back unrun, due ``now``, a rate-limited task it decided not to start,
        and deletes the start its claim counted at ``start_by``, in one transaction fenced by the
        lease: a handler that never started spends none of the limit's starts."""
        st = self.starts_t

        def work(conn) -> None:
            self.task_release(id_, token, now, conn=conn)  # raises, deleting nothing, if not held
            conn.execute(sa.delete(st).where(st.c.task_id == id_, st.c.started_at == start_by))

        self.db.run(work, what="release")

    def task_release_batch(self, ids: Sequence[int] | None, token: int, now: float) -> list[int]:
        """The holder of a batch (the token of one claim) gives back those of its tasks it has not
        run, due ``now``, their attempts given back. Returns the ids it still held and released
        (the others were taken over or finished meanwhile: not its to release). ``ids`` None: every
        row still leased under ``token`` (a claim whose batch its holder never learnt), found by a
        read that locks nothing (a locking scan of the leased rows would wait for every holder's
        lock on MariaDB), then locked by id as ``ids`` are."""
        if ids is not None and not ids:
            return []
        t = self.t
        fence = self.db.dialect.per_row(task_where(t, "release", token=token))
        values = self._released(now)

        def work(conn) -> list[int]:
            which = t.c.id.in_(list(ids) if ids is not None else self._leased_under(conn, token))
            lock = self.db.dialect.lock_rows(sa.select(t.c.id, t.c.run_at, t.c.owner).where(which, *fence))
            dues = {r.id: (r.run_at, r.owner) for r in conn.execute(lock)}
            held = sorted(dues)
            if held:
                conn.execute(sa.update(t).where(t.c.id.in_(held), *fence).values(**values))
                self.record_again(conn, "released", held, now, dues)
            elif self.db.last_run_retried():  # an earlier run committed, its acknowledgement lost
                asked = t.c.id.in_(ids) if ids is not None else sa.true()
                mine = sa.select(t.c.id).where(asked, t.c.lease_token == token, t.c.leased == 0, t.c.timeout == now)
                held = [r[0] for r in conn.execute(mine)]
            return held

        return self.db.run(work, what="release")

    def _leased_under(self, conn, token: int) -> list[int]:
        """The rows leased under ``token`` now, read without a lock (through the leased-rows index)."""
        t = self.t
        return [i for (i,) in conn.execute(sa.select(t.c.id).where(*task_where(t, "release", token=token)))]

    def task_lost_before_start(self, id_: int, key: str, created: float, token: int, now: float) -> str:
        """The lease ``token`` of task ``key`` was lost before its handler started (it expired while
        the task waited in its batch): its attempt goes back, once. Still the row's lease (nobody
        took it over): the holder releases it, due ``now``. Taken over by a later lease: the row
        gives back one attempt (``return_attempt``, fenced by the task's key and submission time
        ``created`` too, since SQLite gives a purged row's id to a new one), unless an earlier run
        of this transaction may have committed it (its acknowledgement lost: nothing in the row
        tells, and twice would run the task past ``max_attempts``). Returns ``"released"``,
        ``"returned"`` or ``""`` (nothing to give back)."""
        t = self.t
        release = sa.update(t).where(t.c.id == id_, *task_where(t, "release", token=token))
        release = release.values(**self._released(now))
        later = sa.update(t).where(
            t.c.id == id_, t.c.attempts > 0, *task_where(t, "return_attempt", token=token, key=key, created=created)
        )

        def work(conn) -> str:
            dues = self.events.attempt_dues(conn, [id_])
            if conn.execute(release).rowcount == 1:
                self.record_again(conn, "released", [id_], now, dues)
                return "released"
            if self.applied_before(conn, id_, token, "release"):
                return "released"
            if self.db.commit_was_uncertain():
                return ""
            given_back = self._attempts_after(policy.LeaseEnd.LOST_BEFORE_START)
            if conn.execute(later.values(**given_back)).rowcount != 1:
                return ""
            self.events.record_ids(conn, "attempt_returned", [id_], now)
            return "returned"

        return self.db.run(work, what="return attempt")

    def _released(self, now: float) -> dict:
        """What a release writes (the holder's, a stopping batch's, a lease lost before start that
        nobody took): waiting, due ``now``, no owner, its attempt given back."""
        return dict(leased=0, timeout=now, run_at=now, owner=None) | self._attempts_after(policy.LeaseEnd.RELEASED)

    def record_again(
        self, conn, kind: str, ids: Sequence[int], now: float, dues: dict[int, tuple], traceback: str | None = None
    ) -> None:
        """The events of rows given back to run again (retried, released), whose histories may
        grow without end: trimmed to their first and last entries. ``dues``: when each one's
        attempt was due, read before the change moved it (:meth:`attempt_dues`)."""
        self.events.record_moved(conn, kind, dues, ids, now, traceback)
        self.events.trim_history(conn, ids)

    def _attempts_after(self, end: policy.LeaseEnd) -> dict:
        """The ``attempts`` a lease that ended so leaves, in SQL (:func:`policy.attempts_after`):
        unchanged when it spends its attempt, else one less, never below 0."""
        if policy.spends_attempt(end):
            return {}
        return {"attempts": sa.case((self.t.c.attempts > 0, self.t.c.attempts - 1), else_=0)}

    def _held(
        self, conn, id_: int, token: int, name: str, values: dict, now: float, traceback: str | None = None
    ) -> None:
        """The holder's transition ``name`` and its event (not when an earlier run of this
        transaction committed both, its acknowledgement lost), with the ``traceback`` of the
        error that ended the attempt, if any."""
        t = self.t
        stmt = sa.update(t).where(t.c.id == id_, *task_where(t, name, token=token)).values(**values)
        kind = TASK_EVENTS[name]

        def work(c) -> None:
            dues = {} if name == "finish" else self.events.attempt_dues(c, [id_])
            if c.execute(stmt).rowcount == 1:
                if name == "finish":
                    self.events.record_ids(c, kind, [id_], now, outcome=values.get("outcome"), traceback=traceback)
                else:
                    self.record_again(c, kind, [id_], now, dues, traceback)
            elif not self.applied_before(c, id_, token, name):
                self.diagnose(c, id_, token, name)

        if conn is not None:
            return work(conn)
        self.db.run(work, what=name)

    def applied_before(self, conn, id_: int, token: int, name: str) -> bool:
        """Whether an earlier run of this transaction applied the holder's ``name`` (finish, retry,
        release) and committed it, its acknowledgement lost: the row is settled under ``token``."""
        if not self.db.last_run_retried():
            return False
        t = self.t
        row = conn.execute(sa.select(t.c.state, t.c.lease_token, t.c.leased).where(t.c.id == id_)).first()
        if row is None or row.lease_token != token:
            return False
        return row.state == FINISHED if name == "finish" else (row.state != FINISHED and not row.leased)

    def diagnose(self, conn, id_: int, token: int, op: str) -> NoReturn:
        """Raise the reason why a fenced update of the holder of ``token`` matched nothing."""
        t = self.t
        row = conn.execute(sa.select(t.c.state, t.c.lease_token, t.c.leased, t.c.key).where(t.c.id == id_)).first()
        if row is None:
            raise PreemptedError(f"{op}: task no longer exists (purged or force-finished)")
        if row.state == FINISHED:
            if row.lease_token == token:
                raise IdempotentAlreadyFinishedError(f"{op}: task {row.key!r} is already finished")
            raise PreemptedError(f"{op}: task {row.key!r} was finished by someone else (force-finished or cancelled)")
        if row.lease_token != token:
            raise PreemptedError(f"{op}: the lease on task {row.key!r} was taken over by another worker")
        if not row.leased:
            raise PreemptedError(f"{op}: task {row.key!r} was already released or retried by this holder")
        raise PreemptedError(f"{op}: the lease on task {row.key!r} expired (held past alive_time)")

    # -- operator operations ----------------------------------------------------------------
    def task_force_finish(self, key: str, now: float, purge_at: float, outcome: str = "success") -> None:
        t = self.t
        stmt = (
            sa.update(t)
            .where(t.c.key == key, *task_where(t, "force_finish"))
            .values(state=FINISHED, leased=0, outcome=outcome, finished_at=now, timeout=purge_at, lease_token=None)
        )

        def work(conn):
            if conn.execute(stmt).rowcount == 1:
                self.events.record_key(conn, "force_finished", key, now)
            else:
                self._missing_or_finished(conn, key)

        self.db.run(work, what="force_finish", receipt=self.receipts.at(now))

    def task_move(self, key: str, queue: str, now: float) -> None:
        """Move a task nobody runs (pending, waiting, or its lease expired) to queue ``queue``;
        TaskRunningError for a running one, AlreadyFinishedError for a finished one."""
        t = self.t
        stmt = sa.update(t).where(t.c.key == key, *task_where(t, "move", now=now)).values(queue=queue)

        def work(conn):
            if conn.execute(stmt).rowcount != 1:
                self._not_movable(conn, key, now)
            self.events.record_key(conn, "moved", key, now)

        self.db.run(work, what="move", receipt=self.receipts.at(now))

    def _not_movable(self, conn, key: str, now: float):
        t = self.t
        row = conn.execute(sa.select(t.c.state, t.c.leased, t.c.timeout).where(t.c.key == key)).first()
        if row is not None and row.state == LIVE and policy.lease_held(row.leased, row.timeout, now):
            raise TaskRunningError(f"task {key!r} is running: only a waiting task can move to another queue")
        self._missing_or_finished(conn, key)

    def _missing_or_finished(self, conn, key):
        t = self.t
        row = conn.execute(sa.select(t.c.state, t.c.workflow, t.c.grp).where(t.c.key == key)).first()
        if row is None:
            raise IdempotentNotFoundError(f"task {key!r} not found")
        _check_state(self.name, key, row.state)
        if row.state != FINISHED and row.workflow is not None:
            raise owned_error(key, row.grp)
        raise IdempotentAlreadyFinishedError(f"task {key!r} is already finished")

    def task_cancel(self, key: str, now: float, purge_at: float, conn=None) -> str:
        """Cancel a waiting task at once; flag a running one. Returns the resulting status:
        ``cancelled``, ``running`` (flagged), or ``requested`` (a row of a workflow run: its
        decider settles it, through the run, as soon as a worker takes it; made due now)."""
        t = self.t

        def work(c):
            row = c.execute(self.db.dialect.lock_rows(sa.select(t).where(t.c.key == key))).first()
            _check_cancellable(self.name, key, row)
            running = row.state == LIVE and policy.lease_held(row.leased, row.timeout, now)
            if running or row.workflow is not None:
                due = {} if running else {"timeout": min(row.timeout, now)}
                self._by_id(c, row.id, "request_cancel", dict(cancel_requested=1, **due), now)
                return "running" if running else "requested"
            self._by_id(
                c,
                row.id,
                "cancel",
                dict(
                    state=FINISHED,
                    leased=0,
                    outcome="cancelled",
                    finished_at=now,
                    timeout=purge_at,
                    lease_token=None,
                    cancel_requested=1,
                ),
                now,
                ended=self.events.ended_events(c, [dict(row._mapping)], now),
                now=now,
            )
            return "cancelled"

        if conn is not None:
            return work(conn)
        return self.db.run(work, what="cancel", receipt=self.receipts.at(now))

    def _by_id(
        self, conn, id_: int, name: str, values: dict, at: float, ended: Sequence[dict] = (), **params: Any
    ) -> bool:
        """The transition ``name`` of row ``id_`` at ``at``, with its event, after the events
        ``ended`` (of the attempt an expired lease ended); whether it applied."""
        t = self.t
        stmt = sa.update(t).where(t.c.id == id_, *task_where(t, name, **params)).values(**values)
        if conn.execute(stmt).rowcount != 1:
            return False
        self.events.event_record(conn, ended)
        self.events.record_ids(conn, TASK_EVENTS[name], [id_], at, outcome=values.get("outcome"))
        return True

    def task_set_data(self, conn, key: str, data: str) -> bool:
        """Replace the data (JSON text) of a row the caller's transaction has locked, in any
        state; returns whether the row exists. A holder's own update goes with its heartbeat."""
        t = self.t
        return (
            conn.execute(sa.update(t).where(t.c.key == key, *task_where(t, "set_data")).values(data=data)).rowcount == 1
        )

    def task_purge(self, now: float, batch: int = 1000) -> int:
        """Delete finished rows past retention, by primary key in small batches."""
        t = self.t
        total = 0
        while True:

            def work(conn):
                # locked: a tag() or a run's keep_group of one of them waits, and they stay purgeable
                lock = self.db.dialect.lock_rows(sa.select(t.c.id).where(t.c.state == FINISHED, t.c.timeout <= now))
                ids = [r[0] for r in conn.execute(lock.limit(batch))]
                if ids:
                    self.forget_rows(conn, ids)
                    conn.execute(
                        sa.delete(t).where(t.c.id.in_(ids), *self.db.dialect.per_row(task_where(t, "purge", now=now)))
                    )
                return len(ids)

            n = self.db.run(work, what="cleanup")
            total += n
            if n < batch:
                return total


def _check_state(table: str, key: str, state) -> None:
    """CorruptRowError for a state pq never writes (no transition starts from it)."""
    wrong = rowcheck.TASK_COLUMNS["state"](state)
    if wrong is not None:
        raise rowcheck.corrupt("task", table, key, ("state", wrong))


def _check_cancellable(table: str, key: str, row) -> None:
    if row is None:
        raise IdempotentNotFoundError(f"task {key!r} not found")
    _check_state(table, key, row.state)
    if row.state == FINISHED:
        raise IdempotentAlreadyFinishedError(f"task {key!r} is already finished")
    if row.state == PENDING:  # a run row or a step not yet submitted: only its run decides
        raise owned_error(key, row.grp)


def owned_error(key: str, group: str | None) -> ValidationError:
    what = (
        "is a workflow run"
        if group == "#runs"
        else f"belongs to workflow run {group.split('#')[0]!r}"
        if group
        else "belongs to a workflow run"
    )
    return ValidationError(f"task {key!r} {what}: cancel or retry the run (pqflow cancel / pqflow retry) instead")
