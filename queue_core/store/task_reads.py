"""Reads of the task table for callers (store layer): one task, lists by filter (tags through
the tag table: ``tags.py``), a group's rows, counts by status. A part of
:class:`~queue_core.store.tasks.SqlStore` (its ``reads``)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

import sqlalchemy as sa

from ..rules.task_states import FINISHED, LIVE, PENDING
from .database import Database
from .tags import TaskTags
from .transitions import lease_held, status_where


class TaskReads:
    """Reads of the task table ``t``; rows with their tags through ``tags`` (the store's part,
    set once it is made: it reads a task through :meth:`task_get`)."""

    tags: TaskTags

    def __init__(self, db: Database, t: sa.Table):
        self.db, self.t = db, t

    def task_get(self, key: str, conn=None, tags: bool = False) -> dict | None:
        """The row of task ``key`` (None: no such task); with ``tags``, its ``tags`` too."""
        stmt = sa.select(self.t).where(self.t.c.key == key)
        if conn is not None:
            r = conn.execute(stmt).first()
            if r is None:
                return None
            return self.tags.with_tags(conn, [dict(r._mapping)])[0] if tags else dict(r._mapping)
        return self.db.run(lambda c: self.task_get(key, c, tags), write=False, what="get")

    def task_list(
        self,
        *,
        status=None,
        type=None,
        user=None,
        group=None,
        queue=None,
        tag=None,
        tracked=False,
        limit=None,
        now: float,
        after_id: int | None = None,
        with_data: bool = True,
    ) -> list[dict]:
        """Task rows matching every filter given, in id order after ``after_id``, with their
        ``tags``. With ``tag``: read from the tag's range of the tag table (never a scan);
        ``tracked``: through the tracked index."""
        t = self.t
        cols = list(t.c) if with_data else [c for c in t.c if c.name != "data"]
        if tag is not None:
            stmt = self.tags.tagged_page(tag, after_id, limit if limit is not None else 2**31 - 1, cols)
            after_id, limit = None, None
        else:
            stmt = sa.select(*cols).order_by(t.c.id)
        if tracked:
            stmt = stmt.where(t.c.tracked == 1)
        if status is not None:
            stmt = stmt.where(status_where(self.t, status, now))
        if type is not None:
            stmt = stmt.where(t.c.type == type)
        if user is not None:
            stmt = stmt.where(t.c.resource == user)
        if group is not None:
            stmt = stmt.where(t.c.grp == group)
        if queue is not None:
            stmt = stmt.where(t.c.queue == queue)
        if after_id is not None:
            stmt = stmt.where(t.c.id > after_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        return self.db.run(
            lambda c: self.tags.with_tags(c, [dict(r._mapping) for r in c.execute(stmt)]), write=False, what="list"
        )

    def task_group_rows(self, conn, group: str, with_data: bool = False) -> builtins.list[dict]:
        t = self.t
        cols = list(t.c) if with_data else [c for c in t.c if c.name != "data"]
        return [dict(r._mapping) for r in conn.execute(sa.select(*cols).where(t.c.grp == group).order_by(t.c.id))]

    def task_rows_by_keys(self, conn, keys: Sequence[str], with_data: bool = True) -> builtins.list[dict]:
        t = self.t
        cols = list(t.c) if with_data else [c for c in t.c if c.name != "data"]
        out = []
        for i in range(0, len(keys), 500):
            out += [
                dict(r._mapping) for r in conn.execute(sa.select(*cols).where(t.c.key.in_(list(keys[i : i + 500]))))
            ]
        return out

    def task_lock(self, conn, key: str) -> dict | None:
        r = conn.execute(self.db.dialect.lock_rows(sa.select(self.t).where(self.t.c.key == key))).first()
        return dict(r._mapping) if r else None

    def task_counts(self, now: float, queue: str | None = None) -> builtins.list[tuple[str, str, str | None, int]]:
        """Counts by (type, status, outcome); status ``corrupt state``/``corrupt leased``: a
        state or lease flag pq never writes."""
        t = self.t
        status = sa.case(
            (t.c.state.not_in([LIVE, FINISHED, PENDING]), "corrupt state"),
            (t.c.leased.not_in([0, 1]), "corrupt leased"),
            (t.c.state == FINISHED, "finished"),
            (t.c.state == PENDING, "pending"),
            (lease_held(t, now), "running"),
            else_="waiting",
        ).label("status")
        stmt = sa.select(t.c.type, status, t.c.outcome, sa.func.count()).group_by(t.c.type, status, t.c.outcome)
        if queue is not None:
            stmt = stmt.where(t.c.queue == queue)
        return self.db.run(
            lambda c: [(r[0], r[1], r[2], int(r[3])) for r in c.execute(stmt)], write=False, what="stats"
        )
