"""Every statement on the schedule table of perfectsched (store layer).

perfectsched computes cron times; this module only reads and writes rows. ``due`` locks due
schedules with ``FOR UPDATE SKIP LOCKED`` (SQLite: the write transaction) so concurrent
schedulers split the work, and every advance is a compare-and-set on ``next_time`` so an
occurrence can only be advanced once.
"""

from __future__ import annotations

import sqlalchemy as sa

from .base import VersionedTables
from .database import Database
from .schema import SCHEDULE_SCHEMA_VERSION, meta_table, schedule_table


class ScheduleStore(VersionedTables):
    current_version = SCHEDULE_SCHEMA_VERSION

    def __init__(self, db: Database, table: str):
        metadata = sa.MetaData()
        self.t = schedule_table(metadata, table)
        super().__init__(db, table, metadata, meta_table(metadata, table))
        self._insert_absent = db.dialect.insert_if_absent(self.t, "key")

    def insert(self, conn, row: dict) -> bool:
        return self.db.dialect.execute_insert(conn, self._insert_absent, [row], self.t.c.key) == 1

    def get(self, key: str, conn=None) -> dict | None:
        stmt = sa.select(self.t).where(self.t.c.key == key)
        if conn is None:
            return self.db.run(lambda c: self.get(key, c), write=False, what="get schedule")
        r = conn.execute(stmt).first()
        return dict(r._mapping) if r else None

    def lock(self, conn, key: str) -> dict | None:
        r = conn.execute(self.db.dialect.lock_rows(sa.select(self.t).where(self.t.c.key == key))).first()
        return dict(r._mapping) if r else None

    def list(self) -> list[dict]:
        stmt = sa.select(self.t).order_by(self.t.c.timeout, self.t.c.key)
        return self.db.run(lambda c: [dict(r._mapping) for r in c.execute(stmt)], write=False,
                           what="list schedules")

    def update(self, conn, key: str, **values) -> int:
        return conn.execute(sa.update(self.t).where(self.t.c.key == key).values(**values)).rowcount

    def delete(self, conn, key: str) -> int:
        return conn.execute(sa.delete(self.t).where(self.t.c.key == key)).rowcount

    def due(self, conn, now: float, limit: int) -> list[dict]:
        """Lock up to ``limit`` due schedules (skipping rows other schedulers hold)."""
        stmt = sa.select(self.t).where(self.t.c.timeout <= now).order_by(self.t.c.timeout).limit(limit)
        return [dict(r._mapping) for r in conn.execute(self.db.dialect.lock_candidates(stmt))]

    def advance_many(self, conn, advances: list[tuple[str, int, int, float]], now: float) -> int:
        """Advance locked schedules in one batched statement: ``(key, expected next_time,
        next_time, next_run_time)`` each, compare-and-set on next_time, lease cleared.

        Returns how many advanced.
        """
        if not advances:
            return 0
        t = self.t
        stmt = sa.update(t).where(t.c.key == sa.bindparam("b_key"), t.c.next_time == sa.bindparam("b_expected")) \
            .values(next_time=sa.bindparam("b_next"), next_run_time=sa.bindparam("b_run"),
                    timeout=sa.bindparam("b_run"), leased=0, lease_token=None, updated_at=now)
        params = [{"b_key": k, "b_expected": exp, "b_next": nxt, "b_run": run} for k, exp, nxt, run in advances]
        return conn.execute(stmt, params).rowcount

    def fenced_update(self, conn, key: str, token: int, **values) -> int:
        return conn.execute(sa.update(self.t).where(
            self.t.c.key == key, self.t.c.lease_token == token, self.t.c.leased == 1).values(**values)).rowcount

    def next_timeout(self) -> float | None:
        """The earliest time any schedule becomes due (uses the timeout index)."""
        stmt = sa.select(sa.func.min(self.t.c.timeout))
        return self.db.run(lambda c: c.execute(stmt).scalar(), write=False, what="next due schedule")

    def count_due(self, now: float) -> int:
        stmt = sa.select(sa.func.count()).select_from(self.t).where(self.t.c.timeout <= now)
        return int(self.db.run(lambda c: c.execute(stmt).scalar(), write=False, what="count schedules"))
