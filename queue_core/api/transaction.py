"""Several queue operations committed in one transaction (perfectsched and pqflow use it), and
the deferred finishes of a worker's batch written inside one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ..rules import policy
from ..rules.task_states import LIVE, PENDING
from ..rules.tracebacks import traceback_text
from ..rules.validate import _error_text, encode_data
from ..store.protocol import UNSET, Database, NewTask, Store, isolated
from . import deferred as deferred_mod
from .task import AcquiredTask, TaskMetadata, TaskQueue, metadata_from_row


class TransactionQueue(TaskQueue, Protocol):
    """What a transaction needs of its queue (:class:`queue_core.Queue` is one)."""

    db: Database

    def _new_task(
        self,
        key: Any,
        type: Any,
        data: Any = None,
        *,
        user: Any = None,
        max_running: Any = None,
        run_at: Any = None,
        priority: Any = 0,
        max_attempts: Any = None,
        now: float,
        group: Any = None,
        queue: Any = ...,
    ) -> NewTask:
        """A task row of checked values (ValidationError for a bad one)."""


class Transaction:
    """Several queue operations committed together (used by perfectsched and pqflow)."""

    def __init__(self, queue: TransactionQueue, conn, now: float):
        self.queue, self.conn, self.now = queue, conn, now
        self._after_commit: list[Callable[[], None]] = []

    @property
    def store(self) -> Store:
        """The store of this transaction's queue (its operations take :attr:`conn`)."""
        return self.queue.store

    @property
    def retried(self) -> bool:
        """Whether this is a second (or later) attempt of the transaction: the first one failed
        with a transient error, and may have committed before its acknowledgement was lost."""
        return self.queue.db.last_run_retried()

    def isolated(self, fn: Callable[[], object]) -> Exception | None:
        """Run ``fn()`` in a savepoint of this transaction: an error that is not the database's
        rolls back ``fn``'s writes alone and is returned; a database error propagates (the
        transaction is retried whole)."""
        return isolated(self.conn, fn)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after the transaction committed (not if it rolled back)."""
        self._after_commit.append(callback)

    def get(self, key: str) -> TaskMetadata | None:
        row = self.store.task_get(key, self.conn)
        return metadata_from_row(row, self.now, table=self.store.name) if row else None

    def lock(self, key: str) -> TaskMetadata | None:
        """Read a task and lock its row until commit (serialises decisions about it)."""
        row = self.store.task_lock(self.conn, key)
        return metadata_from_row(row, self.now, table=self.store.name) if row else None

    def group(self, group: str, *, with_data: bool = False) -> list[TaskMetadata]:
        return [
            metadata_from_row(r, self.now, table=self.store.name)
            for r in self.store.task_group_rows(self.conn, group, with_data)
        ]

    def get_many(self, keys: Iterable[str]) -> dict[str, TaskMetadata]:
        rows = self.store.task_rows_by_keys(self.conn, list(keys))
        return {r["key"]: metadata_from_row(r, self.now, table=self.store.name) for r in rows}

    def submit(self, key: str, type: str, data: Any = None, **opts: Any) -> bool:
        """Insert if the key is free; returns True when a row was added."""
        task = self.queue._new_task(key, type, data, now=self.now, **opts)
        return self.store.task_insert(self.conn, [task], self.now) == 1

    def submit_many(self, items: Iterable[Mapping]) -> int:
        return self.insert([self.new_task(**dict(item)) for item in items])

    def new_task(self, key: str, type: str, data: Any = None, **opts: Any) -> NewTask:
        """A task checked as :meth:`submit` checks it (ValidationError), to :meth:`insert` later:
        a caller inserting many tells which of them is refused before it writes any."""
        return self.queue._new_task(key, type, data, now=self.now, **opts)

    def insert(self, tasks: Iterable[NewTask]) -> int:
        """Insert tasks made by :meth:`new_task` whose key is free; returns how many were new."""
        return self.store.task_insert(self.conn, list(tasks), self.now)

    def submit_rows(self, items: Iterable[Mapping]) -> int:
        """Insert the rows of a workflow run: each item holds submit options plus ``workflow``
        (the run's bookkeeping, JSON text), ``pending`` (inserted not claimable) and, for a run
        row, ``definition`` (its DAG snapshot, JSON text)."""
        tasks = []
        for item in items:
            opts = dict(item)
            workflow, pending = opts.pop("workflow"), opts.pop("pending", False)
            definition = opts.pop("definition", None)
            task = self.queue._new_task(now=self.now, **opts)
            # never attempt-limited by the queue: the run's decider decides how a step ends
            tasks.append(
                dataclasses.replace(
                    task,
                    workflow=workflow,
                    definition=definition,
                    max_attempts=None,
                    state=PENDING if pending else LIVE,
                )
            )
        return self.store.task_insert(self.conn, tasks, self.now)

    def finish(
        self,
        task: AcquiredTask,
        outcome: str = "success",
        *,
        error: Any = UNSET,
        data: Mapping | None = None,
        retention_time: float | None = None,
    ) -> None:
        """Fenced finish of a task this process holds, inside the transaction."""
        config = self.queue.config
        retention = (
            policy.retention(outcome, config["retention_time"], config["failure_retention"])
            if retention_time is None
            else retention_time
        )
        err = task.error if error is UNSET else _error_text(error)
        text = None if data is None else encode_data(data, self.queue.config["max_data_size"])
        trace = None if error is UNSET else traceback_text(error)
        purge_at = self.now + retention
        self.store.task_finish(
            task._id, task._token, outcome, err, purge_at, self.now, data=text, conn=self.conn, traceback=trace
        )
        self._after_commit.append(lambda: task._mark_finished(outcome, err, self.now))

    def retry(self, task: AcquiredTask, retry_wait: float, error: Any = None) -> None:
        err = UNSET if error is None else _error_text(error)
        trace = traceback_text(error)
        self.store.task_retry(
            task._id, task._token, self.now + retry_wait, self.now, err, conn=self.conn, traceback=trace
        )

        def mark():
            task.status, task.done = "waiting", True

        self._after_commit.append(mark)

    def update_data(self, key: str, data: Mapping) -> bool:
        """Replace a task's data, in any state (not fenced by a lease: for rows this transaction
        has locked). Returns whether the task exists."""
        text = encode_data(data, self.queue.config["max_data_size"])
        return self.store.task_set_data(self.conn, key, text)

    def cancel(self, key: str) -> str:
        return self.store.task_cancel(key, self.now, self.now + self.queue.config["retention_time"], conn=self.conn)


class _DeferredBatch:
    """The deferred finishes of one batch: written inside its transaction, marked after it."""

    def __init__(self, queue: TransactionQueue, tasks: list[AcquiredTask], now: float):
        self.queue, self.tasks, self.now = queue, tasks, now
        self.lost: list[AcquiredTask] = []
        self.failed: list[AcquiredTask] = []
        self.write = self._write if tasks else None

    def _write(self, conn) -> None:
        tx = Transaction(self.queue, conn, self.now)
        self.lost, self.failed = deferred_mod.write(tx, self.tasks, lambda fn: isolated(conn, fn))

    def mark(self, now: float) -> list[AcquiredTask]:
        """After commit: written ones are done, lost ones flagged; returns the lost ones."""
        lost, failed = {id(t) for t in self.lost}, {id(t) for t in self.failed}
        for t in self.tasks:
            if id(t) in lost:
                t.lost = True
            elif id(t) not in failed:
                t.done = True
        deferred_mod.after_commit([t for t in self.tasks if id(t) not in failed])
        return [t for t in self.tasks if t.lost]
