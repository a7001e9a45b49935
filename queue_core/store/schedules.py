"""Every statement on the schedule table of perfectsched (store layer).

perfectsched computes cron times; this module only reads and writes rows. ``due`` locks due
schedules with ``FOR UPDATE SKIP LOCKED`` (SQLite: the write transaction) so concurrent
schedulers split the work, and every advance is a compare-and-set on ``next_time`` so an
occurrence can only be advanced once. Every write is a named transition of
:data:`~queue_core.store.transitions.SCHEDULE_TRANSITIONS` whose precondition (lease state,
lease token, due time, expected occurrence) is in its WHERE clause; each reports whether it
applied, and perfectsched says why when it did not.
"""

from __future__ import annotations

import builtins
from dataclasses import asdict, dataclass

import sqlalchemy as sa

from . import rowcheck
from .base import VersionedTables
from .claim import new_token
from .database import Database
from .schema import DEFAULT_QUEUE, FOREVER, SCHEDULE_ADDED_COLUMNS, SCHEDULE_SCHEMA_VERSION, meta_table, schedule_table
from .transitions import schedule_where


@dataclass(frozen=True)
class NewSchedule:
    key: str
    type: str
    cron: str
    delay: int
    timezone: str
    data: str  # JSON text
    next_time: int
    next_run_time: float
    catchup: str
    dst: str
    queue: str = DEFAULT_QUEUE
    tags: str | None = None  # JSON list of tags (None: none)


class SqlScheduleStore(VersionedTables):
    current_version = SCHEDULE_SCHEMA_VERSION
    added_columns = SCHEDULE_ADDED_COLUMNS
    kind = "a perfectsched schedule table"

    def __init__(self, db: Database, table: str):
        metadata = sa.MetaData()
        self.t = schedule_table(metadata, table)
        super().__init__(db, table, metadata, meta_table(metadata, table))
        self._insert_absent = db.dialect.insert_if_absent(self.t, "key")

    def schedule_add(self, conn, schedule: NewSchedule, now: float) -> bool:
        """Insert if the key is free (idle, due at its next run time); returns whether it was."""
        row = asdict(schedule) | {"timeout": schedule.next_run_time, "leased": 0, "created_at": now, "updated_at": now}
        return self.db.dialect.execute_insert(conn, self._insert_absent, [row], self.t.c.key) == 1

    def schedule_get(self, key: str, conn=None) -> dict | None:
        """The schedule's row as stored (None: no such key); any column may hold a value edited
        by hand (:meth:`schedule_check`)."""
        stmt = sa.select(self.t).where(self.t.c.key == key)
        if conn is None:
            return self.db.run(lambda c: self.schedule_get(key, c), write=False, what="get schedule")
        r = conn.execute(stmt).first()
        return dict(r._mapping) if r else None

    def schedule_check(self, row: dict) -> dict:
        """``row`` itself, or CorruptRowError naming the table, the key and the first column
        holding a value perfectsched never writes (:mod:`.rowcheck`)."""
        return dict(rowcheck.check_schedule(row, self.name))

    def schedule_lock(self, conn, key: str) -> dict | None:
        r = conn.execute(self.db.dialect.lock_rows(sa.select(self.t).where(self.t.c.key == key))).first()
        return dict(r._mapping) if r else None

    def schedule_list(self) -> list[dict]:
        """Every schedule's row as stored, next due first (one edited by hand among them too)."""
        stmt = sa.select(self.t).order_by(self.t.c.timeout, self.t.c.key)
        return self.db.run(lambda c: [dict(r._mapping) for r in c.execute(stmt)], write=False, what="list schedules")

    def _write(self, conn, key: str, name: str, values: dict, **params) -> bool:
        t = self.t
        return (
            conn.execute(
                sa.update(t).where(t.c.key == key, *schedule_where(t, name, **params)).values(**values)
            ).rowcount
            == 1
        )

    def schedule_configure(
        self,
        conn,
        key: str,
        now: float,
        *,
        type: str | None = None,
        data: str | None = None,
        catchup: str | None = None,
        queue: str | None = None,
        tags: str | None = None,
    ) -> bool:
        """New type, data (JSON text), catch-up policy, queue or tags (JSON text) (None:
        unchanged); times and lease stay."""
        given = {"type": type, "data": data, "catchup": catchup, "queue": queue, "tags": tags}
        return self._write(
            conn, key, "configure", {k: v for k, v in given.items() if v is not None} | {"updated_at": now}
        )

    def schedule_reschedule(
        self,
        conn,
        key: str,
        now: float,
        *,
        cron: str,
        timezone: str,
        delay: int,
        dst: str,
        next_time: int,
        type: str | None = None,
        data: str | None = None,
        catchup: str | None = None,
        queue: str | None = None,
        tags: str | None = None,
    ) -> bool:
        """New times: due at ``next_time + delay``, any lease dropped (its holder is fenced out),
        a set-aside schedule brought back (its error cleared)."""
        given = {"type": type, "data": data, "catchup": catchup, "queue": queue, "tags": tags}
        return self._write(
            conn,
            key,
            "reschedule",
            {k: v for k, v in given.items() if v is not None}
            | dict(
                cron=cron,
                timezone=timezone,
                delay=delay,
                dst=dst,
                next_time=next_time,
                next_run_time=next_time + delay,
                timeout=next_time + delay,
                leased=0,
                lease_token=None,
                error=None,
                updated_at=now,
            ),
        )

    def schedule_set_aside(self, conn, key: str, expected, error: str, now: float) -> bool:
        """Set aside the due schedule still at occurrence ``expected`` (the ``next_time`` the caller
        read) because it cannot be computed: ``error`` recorded, never due (timeout FOREVER) until
        ``resume`` or ``reschedule``, any expired lease dropped; ``next_time`` kept. Returns whether
        it applied."""
        values = dict(error=error, timeout=FOREVER, leased=0, lease_token=None, updated_at=now)
        return self._write(conn, key, "set_aside", values, now=now, expected=expected)

    def schedule_resume(self, conn, key: str, expected: int, now: float) -> bool:
        """Bring back the set-aside schedule still at occurrence ``expected``: error cleared, due
        at its ``next_run_time`` (the catch-up policy decides about the missed occurrences)."""
        values = dict(error=None, timeout=self.t.c.next_run_time, updated_at=now)
        return self._write(conn, key, "resume", values, expected=expected)

    def schedule_delete(self, conn, key: str) -> bool:
        return conn.execute(sa.delete(self.t).where(self.t.c.key == key)).rowcount == 1

    #: a new lease token: ``poll`` draws it before its transaction (see :meth:`schedule_leased_under`)
    schedule_token = staticmethod(new_token)

    def schedule_lease(
        self, conn, key: str, expected: int, occurrence: int, now: float, expires: float, token: int
    ) -> bool:
        """Lease the due schedule still at ``expected`` for its occurrence ``occurrence`` (at or
        after ``expected``: the catch-up policy may skip some) until ``expires`` under ``token``;
        returns whether it applied (False: the schedule was not so)."""
        return self._write(
            conn,
            key,
            "lease",
            dict(next_time=occurrence, leased=1, lease_token=token, timeout=expires),
            now=now,
            expected=expected,
        )

    def schedule_leased_under(self, conn, token: int, expires: float) -> dict | None:
        """The schedule a poll with ``token`` leased until ``expires``, if an earlier run of its
        transaction committed (its acknowledgement lost); found through the timeout index."""
        t = self.t
        held = sa.select(t).where(t.c.timeout == expires, t.c.lease_token == token, t.c.leased == 1)
        r = conn.execute(held).first()
        return dict(r._mapping) if r else None

    def schedule_heartbeat(self, conn, key: str, token: int, expires: float, now: float) -> bool:
        """Extend the lease, unexpired at ``now``, to ``expires`` (an expired one is never revived)."""
        return self._write(conn, key, "heartbeat", {"timeout": expires}, token=token, now=now)

    def schedule_finish(self, conn, key: str, token: int, next_time: int, next_run_time: float, now: float) -> bool:
        """The holder moves the schedule on to ``next_time``; its token stays to tell a second
        finish of the same occurrence (already finished) from a lost lease."""
        return self._write(
            conn,
            key,
            "finish",
            dict(next_time=next_time, next_run_time=next_run_time, timeout=next_run_time, leased=0, updated_at=now),
            token=token,
        )

    def schedule_retry(self, conn, key: str, token: int, due_at: float) -> bool:
        """The holder gives its occurrence back, due again at ``due_at``."""
        return self._write(conn, key, "retry", dict(timeout=due_at, leased=0), token=token)

    def schedule_release(self, conn, key: str, token: int, now: float) -> bool:
        """The holder gives its occurrence back, due now."""
        return self._write(conn, key, "release", dict(timeout=now, leased=0), token=token)

    def schedule_due(self, conn, now: float, limit: int) -> builtins.list[dict]:
        """Lock up to ``limit`` due schedules (skipping rows other schedulers hold; never a set-aside one)."""
        stmt = sa.select(self.t).where(*self._due(now)).order_by(self.t.c.timeout).limit(limit)
        return [dict(r._mapping) for r in conn.execute(self.db.dialect.lock_candidates(stmt))]

    def schedule_advance_many(self, conn, advances: builtins.list[tuple[str, int, int, float]], now: float) -> int:
        """Advance due schedules in one batched statement: ``(key, expected next_time,
        next_time, next_run_time)`` each, compare-and-set on next_time, lease dropped (token too).

        Returns how many advanced.
        """
        if not advances:
            return 0
        t = self.t
        fence = schedule_where(t, "advance", now=now, expected=sa.bindparam("b_expected"))
        stmt = (
            sa.update(t)
            .where(t.c.key == sa.bindparam("b_key"), *fence)
            .values(
                next_time=sa.bindparam("b_next"),
                next_run_time=sa.bindparam("b_run"),
                timeout=sa.bindparam("b_run"),
                leased=0,
                lease_token=None,
                updated_at=now,
            )
        )
        params = [{"b_key": k, "b_expected": exp, "b_next": nxt, "b_run": run} for k, exp, nxt, run in advances]
        return conn.execute(stmt, params).rowcount

    def schedule_next_due_time(self) -> float | None:
        """The earliest time any schedule becomes due (uses the timeout index)."""
        stmt = sa.select(sa.func.min(self.t.c.timeout))
        return self.db.run(lambda c: c.execute(stmt).scalar(), write=False, what="next due schedule")

    def schedule_next_due(self) -> tuple[str, float, int, str] | None:
        """The schedule that becomes due first, as (key, due time, its occurrence's scheduled
        time, its timezone); None without schedules (uses the timeout index)."""
        t = self.t
        stmt = sa.select(t.c.key, t.c.timeout, t.c.next_time, t.c.timezone).order_by(t.c.timeout, t.c.key).limit(1)
        row = self.db.run(lambda c: c.execute(stmt).first(), write=False, what="next due schedule")
        return None if row is None else (row[0], float(row[1]), int(row[2]), row[3])

    def _due(self, now: float) -> builtins.list:
        return [self.t.c.timeout <= now, self.t.c.error.is_(None)]

    def schedule_count_due(self, now: float) -> int:
        stmt = sa.select(sa.func.count()).select_from(self.t).where(*self._due(now))
        return int(self.db.run(lambda c: c.execute(stmt).scalar_one(), write=False, what="count schedules"))


def due_times(db: Database, table: str) -> builtins.list[tuple[str, float, str | None]]:
    """Every schedule of ``table`` as (key, due time of its next occurrence, why it is set aside
    or None), by key; none when the table does not exist. A plain read for the metrics: no store
    is made (each would add a check before every statement of ``db``)."""
    t = schedule_table(sa.MetaData(), table)
    read = sa.select(t.c.key, t.c.next_run_time, t.c.error).order_by(t.c.key)

    def rows(conn) -> builtins.list[tuple[str, float, str | None]]:
        if not sa.inspect(conn).has_table(t.name):
            return []
        return [(r[0], r[1], r[2]) for r in conn.execute(read)]

    return db.run(rows, write=False, what="read schedules")
