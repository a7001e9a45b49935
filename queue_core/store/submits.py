"""Submissions to the task table (store layer): one task in one statement, many in batches,
a key whose finished row's retention ended freed and taken atomically. A part of
:class:`~queue_core.store.tasks.SqlStore` (its ``submits``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..rules.task_states import LIVE
from .database import Database
from .schema import DEFAULT_QUEUE, FOREVER
from .tags import TaskTags
from .transitions import task_where


@dataclass(frozen=True)
class NewTask:
    key: str
    type: str
    data: str  # JSON text
    resource: str | None = None
    max_running: int | None = None
    run_at: float = 0.0
    priority: int = 0
    max_attempts: int | None = None
    group: str | None = None
    state: int = LIVE  # or PENDING: inserted not claimable (a workflow step waiting on parents)
    workflow: str | None = None  # JSON bookkeeping of the workflow runtime (see schema.py)
    definition: str | None = None  # a workflow run row's DAG snapshot (JSON)
    queue: str = DEFAULT_QUEUE
    tags: tuple[str, ...] = ()  # validated, sorted (``<table>_tags``: store/tags.py)
    trace: str | None = None  # the submitter's trace context (tracing.py)


def task_row(task: NewTask, now: float) -> dict:
    """The row of the task table that submitting ``task`` at ``now`` inserts."""
    return {
        "key": task.key,
        "type": task.type,
        "data": task.data,
        "resource": task.resource,
        "max_running": task.max_running,
        "priority": task.priority,
        "state": task.state,
        "leased": 0,
        "timeout": task.run_at if task.state == LIVE else FOREVER,
        "run_at": task.run_at,
        "created_at": now,
        "attempts": 0,
        "max_attempts": task.max_attempts,
        "cancel_requested": 0,
        "grp": task.group,
        "workflow": task.workflow,
        "definition": task.definition,
        "queue": task.queue,
        "trace": task.trace,
    }


class TaskSubmits:
    """Inserts of new tasks into the task table ``t`` (their tags through ``tags``); ``task_get``
    reads a task row, ``forget_rows`` deletes what belongs to rows besides them (the store's).
    New due tasks are told on :attr:`channel` (None: not told)."""

    def __init__(
        self,
        db: Database,
        t: sa.Table,
        tags: TaskTags,
        task_get: Callable[..., dict | None],
        forget_rows: Callable[[Any, Sequence[int]], None],
    ):
        self.db, self.t, self.tags, self.task_get, self.forget_rows = db, t, tags, task_get, forget_rows
        self._insert_absent = db.dialect.insert_if_absent(t, "key")  # of many rows (the dialect's)
        self.channel = None

    @property
    def channel(self) -> str | None:
        """LISTEN/NOTIFY channel the inserts of due tasks tell, or None."""
        return self._channel

    @channel.setter
    def channel(self, name: str | None) -> None:
        self._channel = name
        self._insert_one_due = self.db.dialect.insert_one(self.t, "key", name)  # tells the listeners
        self._insert_one_later = self.db.dialect.insert_one(self.t, "key", None)  # of one row not due yet

    def task_insert(self, conn, tasks: Sequence[NewTask], now: float) -> int:
        """Insert tasks whose key is free; returns how many were new.

        A finished row whose retention has ended frees its key even before cleanup ran.
        """
        if not tasks:
            return 0
        inserted = 0
        for i in range(0, len(tasks), 500):
            chunk = tasks[i : i + 500]
            rows = [task_row(x, now) for x in chunk]
            n = self._insert_rows(conn, chunk, rows)
            if n < len(rows):
                # Keys taken: free those whose finished row's retention ended, and insert again
                # (also when another transaction's cleanup purged them first: PostgreSQL's
                # snapshot showed them, its INSERT sees them gone).
                self._purge_keys(conn, [x.key for x in chunk], now)
                n += self._insert_rows(conn, chunk, rows)
            inserted += n
        if inserted and self.channel and any(x.run_at <= now for x in tasks):
            self.db.dialect.notify(conn, self.channel)
        return inserted

    def _insert_rows(self, conn, chunk: Sequence[NewTask], rows: list[dict]) -> int:
        """Insert the rows whose key is free; how many. Tagged tasks: with the tags of exactly the
        rows this statement inserted (of a key given twice, the first: the one inserted)."""
        if not any(x.tags for x in chunk):
            return self.db.dialect.execute_insert(conn, self._insert_absent, rows, self.t.c.id)
        made = self.db.dialect.inserted_keys(conn, self._insert_absent, rows, self.t)
        first: dict[str, NewTask] = {}
        for x in chunk:
            first.setdefault(x.key, x)
        self.tags.insert_tags(conn, [(id_, first[key].tags) for id_, key in made])
        return len(made)

    def _purge_keys(self, conn, keys: list[str], now: float) -> int:
        """Purge the finished rows of ``keys`` whose retention ended (their keys are free again).
        Only when there are some: a submitter without DELETE can submit every other key."""
        t = self.t
        done = task_where(t, "purge", now=now)
        lock = self.db.dialect.lock_rows(sa.select(t.c.id).where(t.c.key.in_(keys), *self.db.dialect.per_row(done)))
        expired = [r[0] for r in conn.execute(lock)]  # locked: tag() waits, and they stay purgeable
        if not expired:
            return 0
        self.forget_rows(conn, expired)
        return conn.execute(sa.delete(t).where(t.c.id.in_(expired), *self.db.dialect.per_row(done))).rowcount

    def task_submit(self, tasks: Sequence[NewTask], now: float) -> int:
        return self.db.run(lambda c: self.task_insert(c, tasks, now), what="submit")

    def task_submit_one(self, task: NewTask, now: float) -> bool:
        """Insert ``task`` unless its key is taken; whether this call inserted it.

        The common case, a free key, is one statement in autocommit: one round trip, one commit.
        A taken key then goes through :meth:`task_insert` in a transaction of its own (a finished row
        whose retention ended frees its key: purged and inserted atomically). After a transient
        failure that may have hidden an applied insert (a lost acknowledgement:
        ``Database.commit_was_uncertain``), a taken key is ours when the row is the one we wrote
        (:meth:`same_submission`: same type, data and submission time); after one that applied
        nothing (the connection could not be opened) it is someone else's.
        """
        due = task.run_at <= now
        stmt = self._insert_one_due if due else self._insert_one_later

        def insert_one(conn) -> bool:
            return self.db.dialect.inserted_one(conn, stmt, task_row(task, now))

        if task.tags:  # with its tag rows: in one transaction
            return self._insert_in_transaction(task, now)
        if self.db.run(insert_one, what="submit", autocommit=True):
            return True
        if self.db.commit_was_uncertain() and self.same_submission(task, now):
            return True
        return self._insert_in_transaction(task, now)

    def _insert_in_transaction(self, task: NewTask, now: float) -> bool:
        if self.db.run(lambda c: self.task_insert(c, [task], now), what="submit"):
            return True
        return self.db.commit_was_uncertain() and self.same_submission(task, now)

    def same_submission(self, task: NewTask, now: float) -> bool:
        """After an ambiguous failure: is the existing row the one we just wrote?"""
        row = self.task_get(task.key)
        return bool(row and row["created_at"] == now and row["type"] == task.type and row["data"] == task.data)
