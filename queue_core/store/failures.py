"""The read behind the failure groups (store layer): the tasks that ended as failure, counted in
the database per queue, type and error head (an error's text before its first colon, where an
exception's class is written), and the newest task of each such group read by id. A part of
:class:`~queue_core.store.tasks.SqlStore`; the groups themselves are ``failures.py``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from .database import Database
from .schema import DETAIL_LENGTH, failed_rows

#: the longest error head counted (``failures.CLASS_LENGTH``: a longer one names no class)
HEAD_LENGTH = 200


class FailureReads:
    """The failed tasks of a store's task table ``t`` (with ``tags_t`` and ``failed_t`` beside it).

    The failed tasks are found through an index of their own: a partial index of the task table
    where the database has them (SQLite, PostgreSQL), else the ids in ``<table>_failed_ids`` (MySQL,
    MariaDB), noted by every change that ends tasks (``TaskEvents.record_ids``: the one place
    that sees them all) and deleted with the tasks (``forget_failed``)."""

    def __init__(self, db: Database, t: sa.Table, tags_t: sa.Table, failed_t: sa.Table):
        self.db, self.t, self.tags_t, self.failed_t = db, t, tags_t, failed_t

    @property
    def keeps_failed_ids(self) -> bool:
        """Whether this database keeps the failed tasks' ids in ``<table>_failed_ids``."""
        return self.db.dialect.name in self.failed_t.info["dialects"]

    def failed_where(self) -> list[Any]:
        """The failed tasks, read through their index (see the class)."""
        t = self.t
        if not self.keeps_failed_ids:
            return [failed_rows(t, self.db.dialect.name)]
        return [t.c.id.in_(sa.select(self.failed_t.c.failed_task_id)), failed_rows(t)]

    def note_failed(self, conn, which: Any) -> None:
        """Note the ids of those of the task rows ``which`` selects that ended as failure (rows
        the caller changed in this transaction)."""
        if self.keeps_failed_ids:
            failed = sa.select(self.t.c.id).where(which, failed_rows(self.t))
            conn.execute(
                self.db.dialect.insert_if_absent(self.failed_t, "failed_task_id").from_select(
                    ["failed_task_id"], failed
                )
            )

    def note_all_failed(self, conn) -> None:
        """Note every task that ended as failure (a table upgraded to keep their ids)."""
        self.note_failed(conn, sa.true())

    def forget_failed(self, conn, ids: Sequence[int]) -> None:
        """Forget the ids ``ids`` of tasks deleted in the same transaction."""
        if self.keeps_failed_ids:
            ids = list(ids)
            for i in range(0, len(ids), 500):
                conn.execute(sa.delete(self.failed_t).where(self.failed_t.c.failed_task_id.in_(ids[i : i + 500])))

    def failure_heads(self, *, queue: str | None = None, type: str | None = None, tag: str | None = None) -> list[dict]:
        """Per queue, type and error head of the failed tasks (of ``queue``, ``type``, ``tag`` if
        given): ``count``, ``first_seen`` and ``last_seen`` (their finish times), ``in_runs``
        (how many are workflow rows) and ``newest`` (the highest id). One statement; the rows
        themselves never leave the database. The head is UTF-8 bytes, grouped byte for byte."""
        t = self.t
        colon = self.db.dialect.position_of(t.c.error, ":")
        whole = sa.and_(colon > 1, colon <= HEAD_LENGTH + 1)
        head = self.db.dialect.as_bytes(sa.case((whole, sa.func.substr(t.c.error, 1, colon - 1)), else_=""))
        stmt = (
            sa.select(
                t.c.queue,
                t.c.type,
                head.label("head"),
                sa.func.count().label("count"),
                sa.func.min(t.c.finished_at).label("first_seen"),
                sa.func.max(t.c.finished_at).label("last_seen"),
                sa.func.sum(sa.case((t.c.workflow.is_not(None), 1), else_=0)).label("in_runs"),
                sa.func.max(t.c.id).label("newest"),
            )
            .where(*self._failed(queue, type, tag))
            .group_by(t.c.queue, t.c.type, sa.literal_column("head"))
        )
        return self.db.run(lambda c: [dict(r._mapping) for r in c.execute(stmt)], write=False, what="failures")

    def failure_samples(self, ids: Sequence[int]) -> dict[int, dict]:
        """The key and error (cut at DETAIL_LENGTH, as UTF-8 bytes) of the tasks ``ids``, by id."""
        t = self.t
        error = self.db.dialect.as_bytes(sa.func.substr(t.c.error, 1, DETAIL_LENGTH))
        cols = (t.c.id, t.c.key, error.label("error"))
        stmt = sa.select(*cols).where(t.c.id.in_(list(ids)))
        return self.db.run(lambda c: {r.id: dict(r._mapping) for r in c.execute(stmt)}, write=False, what="failures")

    def _failed(self, queue: str | None, type_: str | None, tag: str | None) -> list[Any]:
        t = self.t
        where: list[Any] = self.failed_where()
        where += [c == v for c, v in ((t.c.queue, queue), (t.c.type, type_)) if v is not None]
        if tag is not None:
            where.append(t.c.id.in_(sa.select(self.tags_t.c.task_id).where(self.tags_t.c.tag == tag)))
        return where
