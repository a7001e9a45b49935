"""The read behind the failure groups (store layer): the tasks that ended as failure, counted in
the database per queue, type and error head (an error's text before its first colon, where an
exception's class is written), and the newest task of each such group read by id. A mixin of
:class:`~queue_core.store.tasks.TaskStore`; the groups themselves are ``failures.py``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from .database import Database
from .events import DETAIL_LENGTH
from .schema import failed_rows

#: the longest error head counted (``failures.CLASS_LENGTH``: a longer one names no class)
HEAD_LENGTH = 200


class FailureReads:
    """Needs ``t`` (the task table), ``tags_t`` and ``db``."""

    t: sa.Table
    tags_t: sa.Table
    db: Database

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
        where: list[Any] = [failed_rows(t, self.db.dialect.name)]
        where += [c == v for c, v in ((t.c.queue, queue), (t.c.type, type_)) if v is not None]
        if tag is not None:
            where.append(t.c.id.in_(sa.select(self.tags_t.c.task_id).where(self.tags_t.c.tag == tag)))
        return where
