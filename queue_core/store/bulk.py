"""What an operator does to many tasks at once (store layer): read the failed tasks, and the
waiting ones, page by page; run failed tasks again (``requeue``) and cancel waiting ones, a
bounded batch per transaction, each row fenced by its transition's precondition so that a
batch run twice, or racing a worker, changes each row at most once. A part of
:class:`~queue_core.store.tasks.SqlStore` (its ``bulk``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from ..rules.task_states import FINISHED, LIVE
from .database import Database
from .events import TaskEvents
from .failures import FailureReads
from .receipts import Receipts
from .schema import DETAIL_LENGTH
from .transitions import TASK_EVENTS, task_where


class BulkChanges:
    """The operator's changes of many tasks of the task table ``t`` (tags in ``tags_t``), each
    batch with its receipt and its events; ``purge_time`` gives a finished row its purge time."""

    def __init__(
        self,
        db: Database,
        t: sa.Table,
        tags_t: sa.Table,
        purge_time: Callable[[float], Any],
        parts: tuple[FailureReads, Receipts, TaskEvents],
    ):
        self.db, self.t, self.tags_t, self.purge_time = db, t, tags_t, purge_time
        self.failures, self.receipts, self.events = parts

    def _page(self, where: list, tag: str | None, after_id: int, limit: int) -> list[dict]:
        t = self.t
        cols = [
            t.c.id,
            t.c.key,
            t.c.queue,
            t.c.type,
            sa.func.substr(t.c.error, 1, DETAIL_LENGTH).label("error"),
            t.c.finished_at,
            t.c.workflow.is_not(None).label("in_run"),
        ]
        stmt = sa.select(*cols).where(*where, t.c.id > after_id)
        if tag is not None:
            tg = self.tags_t
            stmt = stmt.where(t.c.id.in_(sa.select(tg.c.task_id).where(tg.c.tag == tag)))
        stmt = stmt.order_by(t.c.id).limit(limit)
        return self.db.run(lambda c: [dict(r._mapping) for r in c.execute(stmt)], write=False, what="read tasks")

    def failure_page(self, *, queue=None, type=None, tag=None, after_id: int = 0, limit: int = 1000) -> list[dict]:
        """A page of the tasks that ended as failure (id, key, queue, type, error, finished_at,
        in_run), in id order after ``after_id``, of ``queue``, ``type`` and ``tag`` if given."""
        t = self.t
        where = [*self.failures.failed_where(), *_filters(t, queue, type)]
        return self._page(where, tag, after_id, limit)

    def task_waiting_page(
        self, now: float, *, queue=None, type=None, tag=None, after_id: int = 0, limit: int = 1000
    ) -> list[dict]:
        """A page of the plain tasks nobody runs at ``now`` (waiting, or their lease expired)."""
        t = self.t
        where = [
            t.c.state == LIVE,
            sa.or_(t.c.leased == 0, t.c.timeout <= now),
            t.c.workflow.is_(None),
            *_filters(t, queue, type),
        ]
        return self._page(where, tag, after_id, limit)

    def failure_requeue(self, ids: Sequence[int], now: float) -> list[int]:
        """Run the failed plain tasks ``ids`` again: waiting, due ``now``, fresh attempts (their
        last error kept until they run). Returns the ids it changed (the others were not failed
        plain tasks any more: requeued already, purged, or never)."""
        values = dict(
            state=LIVE,
            leased=0,
            timeout=now,
            run_at=now,
            attempts=0,
            outcome=None,
            finished_at=None,
            lease_token=None,
            cancel_requested=0,
            owner=None,
            started_at=None,
        )
        return self._change(ids, "requeue", values, now, {})

    def task_cancel_many(self, ids: Sequence[int], now: float, purge_at: float) -> list[int]:
        """Cancel the plain tasks ``ids`` that nobody runs at ``now``; the ids it cancelled."""
        values = dict(
            state=FINISHED,
            leased=0,
            outcome="cancelled",
            finished_at=now,
            timeout=self.purge_time(purge_at),
            lease_token=None,
            cancel_requested=1,
        )
        return self._change(ids, "cancel", values, now, {"now": now}, self.t.c.workflow.is_(None))

    def _change(self, ids: Sequence[int], name: str, values: dict, now: float, params: dict, *more) -> list[int]:
        """Transition ``name`` of the rows ``ids`` whose precondition holds, locked first so that
        exactly those get its event; in one transaction, with a receipt (a run of it again after a
        COMMIT whose outcome was unknown returns what the run that committed changed)."""
        t = self.t
        where = self.db.dialect.per_row([*task_where(t, name, **params), *more])
        kind = TASK_EVENTS[name]

        def work(conn) -> list[int]:
            lock = self.db.dialect.lock_rows(
                sa.select(*[t.c[n] for n in _ENDED_COLUMNS]).where(t.c.id.in_(list(ids)), *where)
            )
            rows = [dict(r._mapping) for r in conn.execute(lock)]
            changed = [r["id"] for r in rows]
            if changed:
                ended = self.events.ended_events(conn, rows, now)  # attempts whose lease expired unseen
                conn.execute(sa.update(t).where(t.c.id.in_(changed), *where).values(**values))
                self.events.event_record(conn, ended)
                self.events.record_ids(conn, kind, changed, now)
            return changed

        return self.db.run(work, what=name, receipt=self.receipts.at(now))


#: what an ``expired`` event needs of a row (``events.expired_events``)
_ENDED_COLUMNS = ("id", "key", "queue", "type", "attempts", "owner", "started_at", "run_at", "tracked", "leased")


def _filters(t: sa.Table, queue: str | None, type_: str | None) -> list:
    return [*([t.c.queue == queue] if queue is not None else []), *([t.c.type == type_] if type_ is not None else [])]
