"""Tasks as the queue API shows them: TaskMetadata (a snapshot of a row), Task (a reference by
key) and AcquiredTask (a task this process leases, with the holder's operations)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import CancelRequestedError, NotFoundError, ValidationError
from ..rules import policy
from ..rules.task_states import status_of
from ..rules.tracebacks import traceback_text
from ..rules.validate import _error_text, check_duration, check_tags, decode_data, encode_data
from ..store.protocol import OUTCOMES, UNSET, HeldAttempt, Store, rowcheck
from . import deferred as deferred_mod
from . import task_history as history_mod
from .task_history import TaskEvent


class TaskQueue(Protocol):
    """What a task needs of the queue it came from (:class:`queue_core.Queue` is one)."""

    store: Store
    config: dict
    rng: policy.RandomSource

    def now(self, now: float | None = None) -> float: ...

    def _alive(self, alive_time: float | None) -> float: ...

    def backoff_policy(self) -> policy.Backoff: ...


#: pending: the row exists but waits for an event, not a time (a workflow step whose parents
#: are not done); it is never claimed until its owner makes it waiting
#: OUTCOMES: skipped is a finish without running because it never could (a workflow step whose
#: trigger cannot hold)


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
    #: the name of its queue
    queue_name: str = "default"
    #: its tags, sorted
    tags: tuple[str, ...] = ()
    #: whether an operator tracks it
    tracked: bool = False
    #: a row of a workflow run (the run's own, a step's, a map item's): pqflow retries it
    in_workflow: bool = False

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def waiting(self) -> bool:
        return self.status == "waiting"

    # ``timeout`` is one time whose meaning is the status's (rules/task_states.py): named here

    @property
    def due_at(self) -> float | None:
        """When a waiting task is due (claimable from then); None in another status."""
        return self.timeout if self.status == "waiting" else None

    @property
    def lease_expires_at(self) -> float | None:
        """When a running task's lease expires (unless its holder heartbeats); None otherwise."""
        return self.timeout if self.status == "running" else None

    @property
    def purge_at(self) -> float | None:
        """When a finished task (and its key) is purged; None in another status."""
        return self.timeout if self.status == "finished" else None

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def row_status(row: Mapping, now: float) -> str:
    """The status a reader sees of ``row`` at ``now`` (``rules/task_states.py``)."""
    return status_of(row["state"], row["leased"], row["timeout"], now)


def metadata_from_row(row: Mapping, now: float, *, table: str) -> TaskMetadata:
    """The snapshot of ``row`` of table ``table``; CorruptRowError when a column holds a value
    pq never writes."""
    rowcheck.check_task(row, table)
    return TaskMetadata(
        key=row["key"],
        type=row["type"],
        data=decode_data(row.get("data")),
        user=row["resource"],
        status=row_status(row, now),
        outcome=row["outcome"],
        priority=row["priority"],
        max_running=row["max_running"],
        attempts=row["attempts"],
        created_at=row["created_at"],
        run_at=row["run_at"],
        timeout=row["timeout"],
        error=row["error"],
        max_attempts=row["max_attempts"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        owner=row["owner"],
        cancel_requested=bool(row["cancel_requested"]),
        group=row["grp"],
        result=json.loads(row["result"]) if row.get("result") else None,
        queue_name=row["queue"],
        tags=tuple(row.get("tags", ())),
        tracked=bool(row["tracked"]),
        in_workflow=row.get("workflow") is not None,
    )


class Task:
    """A reference to a task by key; no query runs until a method is called."""

    def __init__(self, queue: TaskQueue, key: str):
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
        return self.queue.store.task_get(self.key) is not None

    def metadata(self, now: float | None = None) -> TaskMetadata:
        now = self.queue.now(now)
        row = self.queue.store.task_get(self.key, tags=True)
        if row is None:
            raise NotFoundError(f"task {self.key!r} not found")
        return metadata_from_row(row, now, table=self.queue.store.name)

    def history(self) -> list[TaskEvent]:
        """What happened to the task, oldest first: its submission, then each state change
        (claimed, retried, finished, ...; a long history keeps its first and last entries).
        NotFoundError when it does not exist (never submitted, or purged with its history)."""
        return history_mod.read_history(self.queue.store, self.key)

    def tag(self, *tags: str) -> list[str]:
        """Add ``tags`` (in any state of the task); its tags after, sorted. NotFoundError when it
        does not exist; ValidationError (nothing changed) for a bad tag or past 32 tags."""
        return self.queue.store.tag_change(self.key, add=check_tags(tags))

    def untag(self, *tags: str) -> list[str]:
        """Remove ``tags`` (those it has); its tags after, sorted."""
        return self.queue.store.tag_change(self.key, remove=check_tags(tags))

    def track(self) -> None:
        """Track the task: ``list(tracked=True)`` lists it. NotFoundError when it does not exist."""
        self.queue.store.task_set_tracked(self.key, True)

    def untrack(self) -> None:
        self.queue.store.task_set_tracked(self.key, False)

    def force_finish(self, now: float | None = None) -> None:
        now = self.queue.now(now)
        self.queue.store.task_force_finish(self.key, now, now + self.queue.config["retention_time"])

    def cancel_request(self, now: float | None = None) -> str:
        """Cancel: a waiting task finishes as cancelled now; a running one is told. Returns the
        status after the call ("finished" or "running")."""
        now = self.queue.now(now)
        res = self.queue.store.task_cancel(self.key, now, now + self.queue.config["retention_time"])
        return "finished" if res == "cancelled" else "running"

    cancel = cancel_request


class AcquiredTask:
    """A task leased by this process: the metadata fields plus the holder operations."""

    def __init__(self, queue: TaskQueue, row: dict, now: float):
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
        #: the name of its queue (``queue`` is the Queue it was leased from)
        self.queue_name: str = row["queue"]
        #: JSON bookkeeping of the workflow run this row belongs to (None for plain tasks)
        self.workflow: str | None = row.get("workflow")
        #: the submitter's trace context (``tracing.py``), None without one
        self.trace: str | None = row.get("trace")
        #: when this process leased it
        self.claimed_at = now
        #: a task of a rate-limited queue: the latest time its handler may start, when its start
        #: was counted (``poll_multi(start_within=)``); None: no rate limit
        self.start_by: float | None = row.get("start_by")
        self.status = "running"
        self.outcome: str | None = None
        self.finished_at: float | None = None
        self.cancel_requested = bool(row["cancel_requested"])
        #: what the claim wrote on the row (None: tracked then), apart from what a handler may change
        self.held_attempt: HeldAttempt | None = HeldAttempt.of(row)
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
        self._extend(alive_time, now)

    def _extend(self, alive_time: float | None, now: float | None, data: str | None = None) -> None:
        """Extend the lease (the store asks the clock in each run of its transaction, unless
        ``now`` is given); CancelRequestedError after extending it when a cancel was requested."""
        alive = self.queue._alive(alive_time)
        clock = functools.partial(self.queue.now, now)
        self.timeout, cancel = self.queue.store.task_heartbeat(self._id, self._token, alive, clock, data=data)
        if cancel:
            self.cancel_requested = True
            raise CancelRequestedError("cancel requested")

    def update_data(self, data: Mapping, now: float | None = None, alive_time: float | None = None) -> None:
        """Shallow-merge ``data`` into the task's data, persist it and extend the lease."""
        if not isinstance(data, Mapping):
            raise ValidationError("update_data takes a dict")
        merged = {**self.data, **data}
        text = encode_data(merged, self.queue.config["max_data_size"])
        try:
            self._extend(alive_time, now, data=text)
        except CancelRequestedError:
            self.data = merged  # written with the extension
            raise
        self.data = merged

    def _finish(self, outcome: str, error: str | None, now, retention_time, traceback: str | None = None) -> None:
        now = self.queue.now(now)
        config = self.queue.config
        retention = (
            policy.retention(outcome, config["retention_time"], config["failure_retention"])
            if retention_time is None
            else check_duration(retention_time, "retention_time")
        )
        with self._lock:
            self.queue.store.task_finish(
                self._id, self._token, outcome, error, now + retention, now, traceback=traceback
            )
            self._mark_finished(outcome, error, now)

    def _mark_finished(self, outcome, error, now) -> None:
        self.status, self.outcome, self.error, self.finished_at, self.done = "finished", outcome, error, now, True

    def finish(self, now: float | None = None, retention_time: float | None = None, outcome: str = "success") -> None:
        if outcome not in OUTCOMES:
            raise ValidationError(f"outcome must be one of {', '.join(OUTCOMES)}")
        self._finish(outcome, self.error, now, retention_time)

    def fail(self, error: Any = None, now: float | None = None, retention_time: float | None = None) -> None:
        self._finish("failure", _error_text(error), now, retention_time, traceback_text(error))

    def cancelled(self, now: float | None = None, retention_time: float | None = None) -> None:
        self._finish("cancelled", self.error, now, retention_time)

    def retry(self, retry_wait: float | None = None, now: float | None = None, error: Any = None) -> None:
        now = self.queue.now(now)
        given = None if retry_wait is None else check_duration(retry_wait, "retry_wait")
        wait = policy.requested_wait(given, self.queue.config["retry_wait"])
        err = UNSET if error is None else _error_text(error)
        with self._lock:
            self.queue.store.task_retry(self._id, self._token, now + wait, now, err, traceback=traceback_text(error))
            self.status, self.done, self.run_at = "waiting", True, now + wait
            if error is not None:
                self.error = err

    def release(self, now: float | None = None) -> None:
        now = self.queue.now(now)
        with self._lock:
            self.queue.store.task_release(self._id, self._token, now)  # policy: a release spends no attempt
            self._mark_released(now)

    def give_back_unstarted(self, now: float | None = None) -> None:
        """Give back unrun a rate-limited task whose handler was not started (too late to start it
        within its start grace): released like :meth:`release`, and the start its claim counted
        deleted with it, so that the limit's window has that start again."""
        if self.start_by is None:
            return self.release(now)
        now = self.queue.now(now)
        with self._lock:
            self.queue.store.task_give_back_unstarted(self._id, self._token, self.start_by, now)
            self._mark_released(now)

    def _mark_released(self, now: float) -> None:
        self.status, self.done, self.run_at = "waiting", True, now
        self.attempts = policy.attempts_after(policy.LeaseEnd.RELEASED, self.attempts)

    def lost_before_start(self, now: float | None = None) -> str:
        """Its lease was lost while it waited in its batch, before its handler started: give back
        the attempt it counted (releasing the task if nobody took it over meanwhile). Returns what
        the store did: ``"released"``, ``"returned"`` or ``""``."""
        at = self.queue.now(now)
        done = self.queue.store.task_lost_before_start(self._id, self.key, self.created_at, self._token, at)
        if done == "released":
            self._mark_released(at)
        return done

    def backoff(self) -> float:
        """The retry delay after this attempt (:func:`queue_core.rules.policy.backoff`)."""
        return policy.backoff(self.queue.backoff_policy(), self.attempts, self.queue.rng)

    def retry_or_fail(self, error: Any, now: float | None = None) -> str:
        """What a worker does when a handler raised: retry with backoff or, at max_attempts, fail."""
        backoff = self.queue.backoff_policy()
        verdict = policy.after_error(self.attempts, self.max_attempts, backoff, self.queue.rng, error)
        if isinstance(verdict, policy.GiveUp):
            self.fail(error, now=now)
            return "failure"
        self.retry(verdict.wait, now=now, error=error)
        return "retry"
