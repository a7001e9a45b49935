"""The queue API: Queue, Task, TaskMetadata, AcquiredTask and Transaction.

This layer validates arguments, resolves ``now`` from the clock, encodes data as JSON and
turns store rows into objects. It never builds SQL (that is ``queue_core.store``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import config as config_mod
from . import deferred as deferred_mod
from . import policy
from .clock import Clock, ServerClock, SystemClock, resolve_now
from .errors import (
    CancelRequestedError,
    IdempotentAlreadyExistsError,
    NotFoundError,
    ValidationError,
)
from .store.database import Database
from .store.runs import RunRows
from .store.tasks import FINISHED, LIVE, PENDING, UNSET, NewTask, Settled, TaskStore

T = TypeVar("T")

#: pending: the row exists but waits for an event, not a time (a workflow step whose parents
#: are not done); it is never claimed until its owner makes it waiting
STATUSES = ("pending", "waiting", "running", "finished")
#: skipped: finished without running because it never could (a workflow step whose trigger
#: cannot hold)
OUTCOMES = ("success", "failure", "cancelled", "skipped")


from .validate import (  # noqa: E402,F401 - re-exported: callers import them from here
    MAX_DATA_DEPTH,
    MAX_DURATION,
    MAX_ERROR_BYTES,
    _error_text,
    _shown,
    check_duration,
    check_int,
    check_name,
    check_time,
    check_types,
    decode_data,
    encode_data,
)


# -- value objects --------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskMetadata:
    """A snapshot of one task row, read at ``now``."""

    key: str
    type: str
    data: dict
    user: str | None
    status: str
    outcome: str | None
    priority: int
    max_running: int | None
    attempts: int
    created_at: float
    run_at: float
    timeout: float
    error: str | None
    max_attempts: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    owner: str | None = None
    cancel_requested: bool = False
    group: str | None = None
    #: what the task returned (workflow steps), decoded from JSON
    result: Any = None

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def waiting(self) -> bool:
        return self.status == "waiting"

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def row_status(row: Mapping, now: float) -> str:
    if row["state"] == FINISHED:
        return "finished"
    if row["state"] == PENDING:
        return "pending"
    if policy.lease_held(row["leased"], row["timeout"], now):
        return "running"
    return "waiting"


def metadata_from_row(row: Mapping, now: float) -> TaskMetadata:
    return TaskMetadata(
        key=row["key"], type=row["type"], data=decode_data(row.get("data")), user=row["resource"],
        status=row_status(row, now), outcome=row["outcome"], priority=row["priority"],
        max_running=row["max_running"], attempts=row["attempts"], created_at=row["created_at"],
        run_at=row["run_at"], timeout=row["timeout"], error=row["error"],
        max_attempts=row["max_attempts"], started_at=row["started_at"], finished_at=row["finished_at"],
        owner=row["owner"], cancel_requested=bool(row["cancel_requested"]), group=row["grp"],
        result=json.loads(row["result"]) if row.get("result") else None,
    )


class Task:
    """A reference to a task by key; no query runs until a method is called."""

    def __init__(self, queue: Queue, key: str):
        self.queue = queue
        self.key = key

    def __repr__(self) -> str:
        return f"<Task {self.key!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.key == self.key and other.queue is self.queue

    def __hash__(self) -> int:
        return hash(self.key)

    def exists(self, now: float | None = None) -> bool:
        """Whether a row with this key exists (waiting, running, or finished and not yet purged)."""
        return self.queue.store.get(self.key) is not None

    def metadata(self, now: float | None = None) -> TaskMetadata:
        now = self.queue.now(now)
        row = self.queue.store.get(self.key)
        if row is None:
            raise NotFoundError(f"task {self.key!r} not found")
        return metadata_from_row(row, now)

    def force_finish(self, now: float | None = None) -> None:
        now = self.queue.now(now)
        self.queue.store.force_finish(self.key, now, now + self.queue.config["retention_time"])

    def cancel_request(self, now: float | None = None) -> str:
        """Cancel: a waiting task finishes as cancelled now; a running one is told. Returns the
        status after the call ("finished" or "running")."""
        now = self.queue.now(now)
        res = self.queue.store.cancel(self.key, now, now + self.queue.config["retention_time"])
        return "finished" if res == "cancelled" else "running"

    cancel = cancel_request


class AcquiredTask:
    """A task leased by this process: the metadata fields plus the holder operations."""

    def __init__(self, queue: Queue, row: dict, now: float):
        self.queue = queue
        self._id = row["id"]
        self._token = row["lease_token"]
        self.key: str = row["key"]
        self.type: str = row["type"]
        self.data: dict = decode_data(row["data"])
        self.user: str | None = row["resource"]
        self.priority: int = row["priority"]
        self.max_running: int | None = row["max_running"]
        self.attempts: int = row["attempts"]
        self.max_attempts: int | None = row["max_attempts"]
        self.created_at: float = row["created_at"]
        self.run_at: float = row["run_at"]
        self.timeout: float = row["timeout"]
        self.error: str | None = row["error"]
        self.started_at: float | None = row["started_at"]
        self.owner: str | None = row["owner"]
        self.group: str | None = row["grp"]
        #: JSON bookkeeping of the workflow run this row belongs to (None for plain tasks)
        self.workflow: str | None = row.get("workflow")
        self.status = "running"
        self.outcome: str | None = None
        self.finished_at: float | None = None
        self.cancel_requested = bool(row["cancel_requested"])
        #: set when this holder finished, retried or released the task
        self.done = False
        #: set when the lease was found taken over (by the worker or a batched finish)
        self.lost = False
        #: set by a handler that leaves its finish to the worker's next batch (a workflow step)
        self.deferred: deferred_mod.Deferred | None = None
        #: what the handler class's ``prefetch`` read for this task with the rest of its batch
        self.prefetched: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<AcquiredTask {self.key!r} type={self.type!r} attempt={self.attempts}>"

    @property
    def lease_token(self) -> int:
        return self._token

    @property
    def row_id(self) -> int:
        return self._id

    @property
    def owned(self) -> bool:
        """A row of a workflow run: its handler decides every outcome, a cancelled one too."""
        return self.workflow is not None

    def heartbeat(self, alive_time: float | None = None, now: float | None = None) -> None:
        now = self.queue.now(now)
        alive = self.queue._alive(alive_time)
        try:
            self.queue.store.heartbeat(self._id, self._token, now + alive)
        except CancelRequestedError:
            self.cancel_requested = True
            self.timeout = now + alive
            raise
        self.timeout = now + alive

    def update_data(self, data: Mapping, now: float | None = None, alive_time: float | None = None) -> None:
        """Shallow-merge ``data`` into the task's data, persist it and extend the lease."""
        if not isinstance(data, Mapping):
            raise ValidationError("update_data takes a dict")
        merged = {**self.data, **data}
        text = encode_data(merged, self.queue.config["max_data_size"])
        now = self.queue.now(now)
        alive = self.queue._alive(alive_time)
        try:
            self.queue.store.heartbeat(self._id, self._token, now + alive, data=text)
        except CancelRequestedError:
            self.cancel_requested = True
            self.data = merged
            raise
        self.data = merged
        self.timeout = now + alive

    def _finish(self, outcome: str, error: str | None, now, retention_time) -> None:
        now = self.queue.now(now)
        retention = self.queue.config["retention_time"] if retention_time is None else \
            check_duration(retention_time, "retention_time")
        with self._lock:
            self.queue.store.finish(self._id, self._token, outcome, error, now + retention, now)
            self._mark_finished(outcome, error, now)

    def _mark_finished(self, outcome, error, now) -> None:
        self.status, self.outcome, self.error, self.finished_at, self.done = "finished", outcome, error, now, True

    def finish(self, now: float | None = None, retention_time: float | None = None,
               outcome: str = "success") -> None:
        if outcome not in OUTCOMES:
            raise ValidationError(f"outcome must be one of {', '.join(OUTCOMES)}")
        self._finish(outcome, self.error, now, retention_time)

    def fail(self, error: Any = None, now: float | None = None, retention_time: float | None = None) -> None:
        self._finish("failure", _error_text(error), now, retention_time)

    def cancelled(self, now: float | None = None, retention_time: float | None = None) -> None:
        self._finish("cancelled", self.error, now, retention_time)

    def retry(self, retry_wait: float | None = None, now: float | None = None, error: Any = None) -> None:
        now = self.queue.now(now)
        wait = self.queue.config["retry_wait"] if retry_wait is None else check_duration(retry_wait, "retry_wait")
        err = UNSET if error is None else _error_text(error)
        with self._lock:
            self.queue.store.retry(self._id, self._token, now + wait, err)
            self.status, self.done, self.run_at = "waiting", True, now + wait
            if error is not None:
                self.error = err

    def release(self, now: float | None = None) -> None:
        now = self.queue.now(now)
        with self._lock:
            self.queue.store.release(self._id, self._token, now)  # policy: a release spends no attempt
            self.status, self.done, self.run_at = "waiting", True, now
            self.attempts = policy.attempts_after(policy.LeaseEnd.RELEASED, self.attempts)

    def lost_before_start(self) -> None:
        """Its lease was taken over while it waited in its batch: give back the attempt it counted."""
        if not policy.spends_attempt(policy.LeaseEnd.LOST_BEFORE_START):
            self.queue.store.return_attempt(self._id, self._token)

    def backoff(self) -> float:
        """The retry delay after this attempt (:func:`queue_core.policy.backoff`)."""
        return policy.backoff(self.queue.backoff_policy(), self.attempts, self.queue.rng)

    def retry_or_fail(self, error: Any, now: float | None = None) -> str:
        """What a worker does when a handler raised: retry with backoff or, at max_attempts, fail."""
        verdict = policy.after_error(self.attempts, self.max_attempts, self.queue.backoff_policy(), self.queue.rng)
        if isinstance(verdict, policy.GiveUp):
            self.fail(error, now=now)
            return "failure"
        self.retry(verdict.wait, now=now, error=error)
        return "retry"


class Transaction:
    """Several queue operations committed together (used by perfectsched and pqflow)."""

    def __init__(self, queue: Queue, conn, now: float):
        self.queue, self.conn, self.now = queue, conn, now
        self._after_commit: list[Callable[[], None]] = []

    @property
    def _store(self) -> TaskStore:
        return self.queue.store

    @property
    def retried(self) -> bool:
        """Whether this is a second (or later) attempt of the transaction: the first one failed
        with a transient error, and may have committed before its acknowledgement was lost."""
        return self.queue.db.last_run_retried()

    @property
    def runs(self) -> RunRows:
        """The named transitions of workflow-run rows (pqflow), on this transaction's connection."""
        return self.queue.runs

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after the transaction committed (not if it rolled back)."""
        self._after_commit.append(callback)

    def get(self, key: str) -> TaskMetadata | None:
        row = self._store.get(key, self.conn)
        return metadata_from_row(row, self.now) if row else None

    def lock(self, key: str) -> TaskMetadata | None:
        """Read a task and lock its row until commit (serialises decisions about it)."""
        row = self._store.lock_key(self.conn, key)
        return metadata_from_row(row, self.now) if row else None

    def group(self, group: str, *, with_data: bool = False) -> list[TaskMetadata]:
        return [metadata_from_row(r, self.now) for r in self._store.group_rows(self.conn, group, with_data)]

    def get_many(self, keys: Iterable[str]) -> dict[str, TaskMetadata]:
        rows = self._store.rows_by_keys(self.conn, list(keys))
        return {r["key"]: metadata_from_row(r, self.now) for r in rows}

    def submit(self, key: str, type: str, data: Any = None, **opts: Any) -> bool:
        """Insert if the key is free; returns True when a row was added."""
        task = self.queue._new_task(key, type, data, now=self.now, **opts)
        return self._store.insert(self.conn, [task], self.now) == 1

    def submit_many(self, items: Iterable[Mapping]) -> int:
        tasks = [self.queue._new_task(now=self.now, **dict(item)) for item in items]
        return self._store.insert(self.conn, tasks, self.now)

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
            tasks.append(dataclasses.replace(task, workflow=workflow, definition=definition, max_attempts=None,
                                             state=PENDING if pending else LIVE))
        return self._store.insert(self.conn, tasks, self.now)

    def finish(self, task: AcquiredTask, outcome: str = "success", *, error: Any = UNSET,
               data: Mapping | None = None, retention_time: float | None = None) -> None:
        """Fenced finish of a task this process holds, inside the transaction."""
        retention = self.queue.config["retention_time"] if retention_time is None else retention_time
        err = task.error if error is UNSET else _error_text(error)
        text = None if data is None else encode_data(data, self.queue.config["max_data_size"])
        self._store.finish(task._id, task._token, outcome, err, self.now + retention, self.now, data=text,
                           conn=self.conn)
        self._after_commit.append(lambda: task._mark_finished(outcome, err, self.now))

    def retry(self, task: AcquiredTask, retry_wait: float, error: Any = None) -> None:
        err = UNSET if error is None else _error_text(error)
        self._store.retry(task._id, task._token, self.now + retry_wait, err, conn=self.conn)

        def mark():
            task.status, task.done = "waiting", True
        self._after_commit.append(mark)

    def update_data(self, key: str, data: Mapping) -> bool:
        """Replace a task's data, in any state (not fenced by a lease: for rows this transaction
        has locked). Returns whether the task exists."""
        text = encode_data(data, self.queue.config["max_data_size"])
        return self._store.set_data(self.conn, key, text)

    def cancel(self, key: str) -> str:
        return self._store.cancel(key, self.now, self.now + self.queue.config["retention_time"], conn=self.conn)


class _DeferredBatch:
    """The deferred finishes of one batch: written inside its transaction, marked after it."""

    def __init__(self, queue: Queue, tasks: list[AcquiredTask], now: float):
        self.queue, self.tasks, self.now = queue, tasks, now
        self.lost: list[AcquiredTask] = []
        self.failed: list[AcquiredTask] = []
        self.write = self._write if tasks else None

    def _write(self, conn) -> None:
        tx = Transaction(self.queue, conn, self.now)
        self.lost, self.failed = deferred_mod.write(tx, self.tasks, lambda fn: self.queue.store.isolated(conn, fn))

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


# -- the queue --------------------------------------------------------------------------
class Queue:
    """A task queue stored in one table. Thread-safe; open one per process after fork."""

    def __init__(self, url: str | None = None, table: str | None = None, *, clock: Clock | None = None,
                 rng: policy.RandomSource | None = None, **config: Any):
        if table is not None:
            config["table"] = table
        if url is not None:
            config["url"] = url
        self.config = config_mod.build(config)
        #: retry jitter's random source: the ``random`` module (reseeded in a forked child), or an injected one
        self.rng: policy.RandomSource = rng or random
        self.db = Database(
            self.config["url"], max_retry_count=self.config["max_retry_count"],
            sqlite_synchronous=self.config["sqlite_synchronous"], pool_size=self.config["pool_size"],
            connect_timeout=self.config["connect_timeout"],
        )
        self.clock: Clock = clock or self.real_clock()
        self.table = self.config["table"]
        self.store = TaskStore(self.db, self.table)
        self.store.retention_time = self.config["retention_time"]
        self.runs = RunRows(self.store)
        if not self.config["notify"]:
            self.store.channel = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}"

    # context manager
    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def __repr__(self) -> str:
        return f"<Queue {self.db.masked_url} table={self.table}>"

    @property
    def url(self) -> str:
        return self.db.masked_url

    def now(self, now: float | None = None) -> float:
        return resolve_now(now, self.clock)

    def real_clock(self) -> Clock:
        """The clock of a queue given none: the server's (MySQL, PostgreSQL), else this host's."""
        return ServerClock(self.db.server_time) if self.db.has_server_clock else SystemClock()

    def backoff_policy(self) -> policy.Backoff:
        """The retry waits of a handler error, from ``retry_wait`` and ``max_retry_wait`` (0: no cap)."""
        return policy.Backoff(self.config["retry_wait"], cap=self.config["max_retry_wait"] or None)

    def _alive(self, alive_time: float | None) -> float:
        if alive_time is None:
            return self.config["alive_time"]
        return check_duration(alive_time, "alive_time", positive=True)

    def init(self, force: bool = False) -> None:
        self.store.init(force=force)

    # -- submit ---------------------------------------------------------------------------
    def _new_task(self, key, type, data=None, *, user=None, max_running=None, run_at=None, priority=0,
                  max_attempts=None, now, group=None) -> NewTask:
        check_name(key, "task key")
        check_name(type, "task type")
        check_name(user, "user", optional=True)
        check_name(group, "group", optional=True)
        max_running = check_int(max_running, "max_running", minimum=1, optional=True)
        priority = check_int(priority, "priority")
        if max_attempts is None:
            max_attempts = self.config["max_attempts"]
        max_attempts = check_int(max_attempts, "max_attempts", minimum=1, optional=True)
        run_at = now if run_at is None else check_time(run_at, "run_at")
        return NewTask(key=key, type=type, data=encode_data(data, self.config["max_data_size"]),
                       resource=user, max_running=max_running, run_at=run_at, priority=priority,
                       max_attempts=max_attempts, group=group)

    def submit(self, key: str, type: str, data: Mapping | None = None, *, user: str | None = None,
               max_running: int | None = None, run_at: float | None = None, priority: int = 0,
               max_attempts: int | None = None, now: float | None = None, group: str | None = None) -> Task:
        """Add a task. A key that exists (waiting, running, or finished within retention)
        raises IdempotentAlreadyExistsError."""
        now = self.now(now)
        task = self._new_task(key, type, data, user=user, max_running=max_running, run_at=run_at,
                              priority=priority, max_attempts=max_attempts, now=now, group=group)
        if self.store.submit([task], now) != 1:
            if not (self.db.last_run_retried() and self.store.same_submission(task, now)):
                raise IdempotentAlreadyExistsError(f"task {key!r} already exists")
        return Task(self, key)

    def submit_many(self, items: Iterable[Mapping], *, now: float | None = None) -> int:
        """Submit many tasks in one transaction; keys that exist are skipped. Returns how many were new."""
        now = self.now(now)
        tasks = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError(f"submit_many item {i} must be a dict")
            opts = dict(item)
            opts.pop("now", None)
            try:
                tasks.append(self._new_task(now=now, **opts))
            except TypeError as exc:
                raise ValidationError(f"submit_many item {i}: {exc}") from None
        return self.store.submit(tasks, now)

    # -- poll -----------------------------------------------------------------------------
    def poll(self, *, alive_time: float | None = None, now: float | None = None,
             types: Iterable[str] | None = None) -> AcquiredTask | None:
        tasks = self.poll_multi(1, alive_time=alive_time, now=now, types=types)
        return tasks[0] if tasks else None

    def poll_multi(self, max_acquire: int, *, alive_time: float | None = None, now: float | None = None,
                   finish: Sequence[AcquiredTask] = (), types: Iterable[str] | None = None) -> list[AcquiredTask]:
        """Lease up to ``max_acquire`` tasks (with ``types``: only tasks of those types).

        ``finish``: held tasks to finish with outcome success in the same transaction, before
        the claim (a worker settles its last batch and leases the next one in one commit).
        Each is fenced as ``finish()`` is; one whose lease was lost is not finished and gets
        ``task.lost = True``.
        """
        n = check_int(max_acquire, "max_acquire", minimum=0 if finish else 1)
        types = None if types is None else check_types(types)
        now = self.now(now)
        alive = self._alive(alive_time)
        plain, deferred = self._split(finish)
        entries, lost, more = self._settle_entries(plain, now), [], _DeferredBatch(self, deferred, now)
        rows = self.store.claim(n, alive, now, self.owner, settle=entries, lost=lost, also=more.write, types=types)
        self._mark_settled(plain, lost, now)
        more.mark(now)
        return [AcquiredTask(self, r, now) for r in rows]

    def finish_many(self, tasks: Sequence[AcquiredTask], *, now: float | None = None) -> list[AcquiredTask]:
        """Finish several held tasks (outcome success, or their deferred finish) in one transaction.

        Returns the tasks that were not finished because their lease was lost (``task.lost``).
        """
        now = self.now(now)
        plain, deferred = self._split(tasks)
        more = _DeferredBatch(self, deferred, now)
        lost = self.store.settle(self._settle_entries(plain, now), now, also=more.write)
        return self._mark_settled(plain, lost, now) + more.mark(now)

    def _split(self, tasks: Sequence[AcquiredTask]) -> tuple[list[AcquiredTask], list[AcquiredTask]]:
        """The plain and the deferred finishes of ``tasks``, each task once (listed twice: finished once)."""
        tasks = list({id(t): t for t in tasks}.values())
        for t in tasks:
            if not isinstance(t, AcquiredTask) or t.queue is not self:
                raise ValidationError("finish takes tasks leased from this queue")
        return deferred_mod.split(tasks)

    def _settle_entries(self, tasks: Sequence[AcquiredTask], now: float) -> list[Settled]:
        purge_at = now + self.config["retention_time"]
        return [Settled(t._id, t._token, purge_at) for t in tasks]

    @staticmethod
    def _mark_settled(tasks: Sequence[AcquiredTask], lost: Sequence[Settled], now: float) -> list[AcquiredTask]:
        lost_ids = {s.id for s in lost}
        out = []
        for t in tasks:
            if t._id in lost_ids:
                t.lost = True
                out.append(t)
            else:
                t._mark_finished("success", t.error, now)
        return out

    @property
    def notifies(self) -> bool:
        """Whether submissions wake listening workers at once (PostgreSQL, ``notify`` on)."""
        return self.store.channel is not None

    def listen(self, on_notify: Callable[[], None], stop: threading.Event, *, timeout: float = 1.0) -> None:
        """Call ``on_notify()`` whenever runnable tasks are submitted, until ``stop`` is set. Blocks;
        raises DatabaseError when the connection fails (listen again after a pause). Only for
        queues where :attr:`notifies` is true."""
        if not self.notifies:
            raise ValidationError("this queue has no notifications (PostgreSQL with notify = true only)")
        self.store.listen(on_notify, stop, timeout)

    # -- reads ----------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Task:
        check_name(key, "task key")
        return Task(self, key)

    def list(self, *, status: str | None = None, type: str | None = None, user: str | None = None,
             limit: int | None = None, now: float | None = None, group: str | None = None
             ) -> Iterator[TaskMetadata]:
        now = self.now(now)
        if status is not None and status not in STATUSES:
            raise ValidationError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if limit is not None:
            check_int(limit, "limit", minimum=0)
        remaining = limit
        after = None
        while remaining is None or remaining > 0:
            page = 1000 if remaining is None else min(1000, remaining)
            rows = self.store.list(status=status, type=type, user=user, group=group, limit=page,
                                   now=now, after_id=after)
            for r in rows:
                yield metadata_from_row(r, now)
            if len(rows) < page:
                return
            after = rows[-1]["id"]
            if remaining is not None:
                remaining -= len(rows)

    def stats(self, *, now: float | None = None) -> dict:
        now = self.now(now)
        out: dict = {s: 0 for s in STATUSES}
        out["outcomes"] = {o: 0 for o in OUTCOMES}
        out["types"] = {}
        for type_, status, outcome, n in self.store.stats(now):
            out[status] += n
            per = out["types"].setdefault(type_, {s: 0 for s in STATUSES})
            per[status] += n
            if outcome:
                out["outcomes"][outcome] = out["outcomes"].get(outcome, 0) + n
        out["total"] = sum(out[s] for s in STATUSES)
        return out

    def cleanup(self, *, now: float | None = None) -> int:
        return self.store.cleanup(self.now(now))

    # -- transactions ---------------------------------------------------------------------
    def transaction(self, fn: Callable[[Transaction], T], *, now: float | None = None,
                    what: str = "transaction", write: bool = True) -> T:
        """Run ``fn(tx)`` in one database transaction (retried as a whole on transient errors).
        ``write=False``: it only reads (on SQLite it then does not take the write lock)."""
        now = self.now(now)
        holder: dict = {}

        def work(conn):
            tx = Transaction(self, conn, now)
            holder["tx"] = tx
            return fn(tx)

        result = self.db.run(work, what=what, write=write)
        for cb in holder["tx"]._after_commit:
            cb()
        return result


def open(url: str | None = None, table: str = "pq_tasks", *, clock: Clock | None = None,
         rng: policy.RandomSource | None = None, **config: Any) -> Queue:
    """Open a queue. ``url`` is a SQLAlchemy URL; default: SQLite file ``pq.db`` here."""
    return Queue(url, table, clock=clock, rng=rng, **config)
