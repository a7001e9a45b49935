"""The Store interface: every operation the layers above the store may call (the API, the worker,
the CLIs, perfectsched, pqflow and pqweb), named noun first, and the values they pass.

One protocol per kind of table, each with the operations on its tables (:class:`Tables`):
:class:`Store` for a queue table (its tasks, the rows of its workflow runs, its named queues,
workers, events, statistics), implemented by :class:`~queue_core.store.tasks.SqlStore`, and
:class:`ScheduleStore` for a perfectsched schedule table, implemented by
:class:`~queue_core.store.schedules.SqlScheduleStore`. Both behave alike on SQLite, MySQL/MariaDB
and PostgreSQL; what differs between those lives in the dialect modules. The conformance suite
(``tests/conformance``) runs the operations on the three databases.

Every operation takes its times (``now``) from the caller and returns plain values; one that takes
``conn`` runs in the caller's transaction; a write is a named transition of ``transitions.py``,
fenced by its precondition, and reports whether it applied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from . import rowcheck
from .browse import BrowseFilter
from .database import Database, isolated, load_driver
from .queues import QUEUE_STATUSES, QueueSettings
from .schedules import NewSchedule, SqlScheduleStore, due_times
from .schema import DEFAULT_QUEUE, EVENT_KINDS, OUTCOMES
from .settles import HeldAttempt, Settled
from .stats import BucketKey, Tally
from .submits import NewTask
from .task_changes import UNSET
from .tasks import SqlStore
from .workers import WorkerIdentity

__all__ = [
    "DEFAULT_QUEUE",
    "EVENT_KINDS",
    "OUTCOMES",
    "QUEUE_STATUSES",
    "UNSET",
    "BrowseFilter",
    "Database",
    "due_times",
    "HeldAttempt",
    "isolated",
    "load_driver",
    "NewSchedule",
    "NewTask",
    "open_schedule_store",
    "open_store",
    "QueueSettings",
    "rowcheck",
    "ScheduleStore",
    "Settled",
    "Store",
    "Tables",
    "WorkerIdentity",
]


class Tables(Protocol):
    """What every store does with its tables (a queue table's, a schedule table's)."""

    #: the table's name
    name: str
    #: what kind of table this is, as errors name it ("a pq queue table")
    kind: str

    def tables_check_writable(self) -> None:
        """AccessDeniedError when this account or database refuses writes to the main table."""

    def tables_exist(self, conn, tables: tuple[sa.Table, ...] = ...) -> bool:
        """Whether the main table (and ``tables``) exist (False: not yet, ``init`` makes them)."""

    def tables_init(self, force: bool = ...) -> None:
        """Create the tables (idempotent); ``force`` drops and recreates them."""

    def tables_missing_indexes(self, conn) -> set[str]:
        """Indexes of this release the tables lack (made by an earlier one, before ``init``)."""

    def tables_require_current(self) -> None:
        """SchemaError when the tables were made by an older release and ``init`` has not upgraded them yet."""

    def tables_version(self) -> int | None:
        """The version recorded in the meta table (None before init)."""


class Store(Tables, Protocol):
    """The operations on a queue table and the tables beside it (see the module)."""

    #: the channel of the database's notifications of new tasks (None: the database has none, or
    #: they are turned off): :meth:`wakeup_listen` waits on it
    channel: str | None
    #: how long finished rows are kept (seconds), and failed ones
    retention_time: float
    failure_retention: float | None
    #: the submission receipts of this table (idempotent submits across a lost acknowledgement)
    receipts: Any
    #: the names :meth:`run_name_register` recorded from this process (committed)
    run_names_registered_here: set[tuple[str, str]]

    # -- tasks ---------------------------------------------------------------------------------
    def task_browse_page(self, f: BrowseFilter, *, before_id: int | None, limit: int, now: float) -> list[dict]:
        """Up to ``limit`` task rows matching ``f`` with an id below ``before_id``."""

    def task_cancel(self, key: str, now: float, purge_at: float, conn=...) -> str:
        """Cancel a waiting task at once; flag a running one."""

    def task_cancel_many(self, ids: Sequence[int], now: float, purge_at: float) -> list[int]:
        """Cancel the plain tasks ``ids`` that nobody runs at ``now``; the ids it cancelled."""

    def task_claim(
        self,
        n: int,
        alive_time: float,
        now: float,
        owner: str,
        settle: Sequence[Settled] = ...,
        lost: list[Settled] | None = ...,
        also=...,
        types: Sequence[str] | None = ...,
        queues: Sequence[str] = ...,
        notes: dict | None = ...,
        clock: Callable[[], float] | None = ...,
        start_within: float = ...,
        announce: Callable[[int], None] | None = ...,
        owned_ended: Callable[[Any, list[dict]], None] | None = ...,
    ) -> list[dict]:
        """Lease up to ``n`` due tasks; first, in the same transaction, finish ``settle``."""

    def task_counts(self, now: float, queue: str | None = ...) -> list[tuple[str, str, str | None, int]]:
        """Counts by (type, status, outcome); status ``corrupt state``/``corrupt leased``: a state or lease
        flag pq never writes."""

    def task_finish(
        self,
        id_: int,
        token: int,
        outcome: str,
        error: str | None,
        purge_at: float,
        now: float,
        data: str | None = ...,
        conn=...,
        traceback: str | None = ...,
    ) -> None:
        """The holder finishes the task (``traceback``: of the error it failed with, kept by the event that
        ends its attempt)."""

    def task_force_finish(self, key: str, now: float, purge_at: float, outcome: str = ...) -> None: ...

    def task_get(self, key: str, conn=..., tags: bool = ...) -> dict | None:
        """The row of task ``key`` (None: no such task); with ``tags``, its ``tags`` too."""

    def task_give_back_unstarted(self, id_: int, token: int, start_by: float, now: float) -> None:
        """The holder gives back unrun, due ``now``, a rate-limited task it decided not to start, and deletes
        the start its claim counted at ``start_by``, in one transaction fenced by the lease: a handler that
        never started spends none of the limit's starts."""

    def task_group_rows(self, conn, group: str, with_data: bool = ...) -> list[dict]: ...

    def task_heartbeat(
        self, id_: int, token: int, alive: float, now: Callable[[], float], data: str | None = ...
    ) -> tuple[float, bool]:
        """Extend the lease, unexpired at ``now()``, to ``now() + alive``."""

    def task_history(self, key: str) -> tuple[dict, list[dict]] | None:
        """The row of task ``key`` and its events, oldest first, read together (None: no such task)."""

    def task_insert(self, conn, tasks: Sequence[NewTask], now: float) -> int:
        """Insert tasks whose key is free; returns how many were new."""

    def task_list(
        self,
        *,
        status=...,
        type=...,
        user=...,
        group=...,
        queue=...,
        tag=...,
        tracked=...,
        limit=...,
        now: float,
        after_id: int | None = ...,
        with_data: bool = ...,
    ) -> list[dict]:
        """Task rows matching every filter given, in id order after ``after_id``, with their ``tags``."""

    def task_lock(self, conn, key: str) -> dict | None: ...

    def task_lost_before_start(self, id_: int, key: str, created: float, token: int, now: float) -> str:
        """The lease ``token`` of task ``key`` was lost before its handler started."""

    def task_move(self, key: str, queue: str, now: float) -> None:
        """Move a task nobody runs (pending, waiting, or its lease expired) to queue ``queue``."""

    def task_purge(self, now: float, batch: int = ...) -> int:
        """Delete finished rows past retention, by primary key in small batches."""

    def task_release(self, id_: int, token: int, now: float, conn=...) -> None:
        """The holder gives the task back unrun, due ``now``: the lease's attempt is given back."""

    def task_release_batch(self, ids: Sequence[int] | None, token: int, now: float) -> list[int]:
        """The holder of a batch (one claim's token) gives back those of its tasks it has not run."""

    def task_retry(
        self, id_: int, token: int, run_at: float, now: float, error: Any = ..., conn=..., traceback: str | None = ...
    ) -> None:
        """The holder gives the task back at ``now``, due at ``run_at``."""

    def task_rows_by_keys(self, conn, keys: Sequence[str], with_data: bool = ...) -> list[dict]: ...

    def task_set_data(self, conn, key: str, data: str) -> bool:
        """Replace the data (JSON text) of a row the caller's transaction has locked, in any state."""

    def task_set_tracked(self, key: str, tracked: bool) -> None:
        """Track (or stop tracking) task ``key``, in any state; NotFoundError when there is none."""

    def task_settle(self, settled: Sequence[Settled], now: float, also=...) -> list[Settled]:
        """Finish a batch of held tasks in one transaction."""

    def task_submit(self, tasks: Sequence[NewTask], now: float) -> int: ...

    def task_submit_one(self, task: NewTask, now: float) -> bool:
        """Insert ``task`` unless its key is taken; whether this call inserted it."""

    def task_waiting_page(
        self, now: float, *, queue=..., type=..., tag=..., after_id: int = ..., limit: int = ...
    ) -> list[dict]:
        """A page of the plain tasks nobody runs at ``now`` (waiting, or their lease expired)."""

    # -- tags ----------------------------------------------------------------------------------
    def tag_change(self, key: str, add: Sequence[str] = ..., remove: Sequence[str] = ...) -> list[str]:
        """Add ``add`` and remove ``remove`` (validated tags) on task ``key``, any state; its tags after."""

    # -- named queues --------------------------------------------------------------------------
    def queue_counts(self, now: float) -> dict[str, dict[str, float]]:
        """Per queue that has rows: its rows by status, and ``oldest_due`` (of its due waiting rows)."""

    def queue_known(self, name: str) -> bool:
        """Whether queue ``name`` has settings or tasks (any state)."""

    def queue_live_counts(self, now: float) -> dict[str, dict[str, Any]]:
        """:meth:`queue_counts` without the finished rows."""

    def queue_set_limits(
        self,
        name: str,
        now: float,
        *,
        concurrency: int | None,
        rate_limit: int | None,
        rate_window: float | None,
        rate_key: str | None,
    ) -> QueueSettings:
        """Set (None: lift) the concurrency and rate limits of queue ``name``; returns its settings."""

    def queue_set_paused(self, name: str, paused: bool, now: float) -> QueueSettings:
        """Pause queue ``name`` (no claim leases its tasks) or resume it; returns its settings."""

    def queue_settings_all(self) -> dict[str, QueueSettings]: ...

    # -- workers -------------------------------------------------------------------------------
    def worker_register(self, worker: WorkerIdentity, now: float) -> None:
        """Write the row of a worker that starts at ``now`` (or starts again: its old row replaced)."""

    def worker_remove(self, owner: str) -> None: ...

    def worker_renew(self, worker: WorkerIdentity, started_at: float, now: float) -> None:
        """Renew ``last_seen`` of a running worker; write its row again when it is gone (swept)."""

    def worker_rows(self, seen_since: float, now: float) -> list[dict]:
        """The workers seen since ``seen_since``, oldest first, each with ``held``."""

    def worker_sweep(self, silent_since: float) -> int:
        """Delete the rows of workers not seen since ``silent_since``; how many."""

    # -- events --------------------------------------------------------------------------------
    def event_last_tracebacks(self, conn, ids: Sequence[int]) -> dict[int, dict]:
        """The traceback each of the tasks ``ids`` kept last."""

    def event_newest(self, limit: int) -> list[dict]:
        """The newest ``limit`` events (by id, read backwards along the primary key)."""

    def event_record(self, conn, events: Sequence[dict]) -> None:
        """Append ``events`` (dicts of every column of :data:`COLUMNS`)."""

    # -- streams of events and tasks -----------------------------------------------------------
    def stream_end(self, source: str) -> int:
        """The highest id of ``source`` now (a reader that starts now starts after it)."""

    def stream_rows(self, source: str, after: int, missing: Sequence[int], limit: int) -> list[dict]:
        """Rows of stream ``source`` after ``after`` (and those of ``missing``: ids a reader passed over)."""

    def stream_start(self, source: str, since: float) -> int:
        """The position in ``source`` before its first row at or after ``since`` (epoch seconds)."""

    # -- statistics ----------------------------------------------------------------------------
    def stats_live_counts(self, now: float) -> dict[tuple[str, str], dict]:
        """The tasks not finished per (queue, type) by status (:func:`count_live`), read through the indexes."""

    def stats_prune(self, spans_before: Sequence[tuple[int, float]]) -> int:
        """Delete the buckets of each ``(span, before)`` that start before ``before``."""

    def stats_roll_up(self, now: float, gap_timeout: float, batch: int = ...) -> int:
        """Count the events no roll-up or delete has counted yet; how many (0 while another process rolls up)."""

    def stats_rows(
        self,
        span: int,
        since: float,
        until: float,
        queue: str | None = ...,
        type_: str | None = ...,
        *,
        uncounted: bool = ...,
    ) -> list[tuple[BucketKey, Tally]]:
        """The buckets of ``span`` that overlap [since, until), oldest first (of ``queue`` and ``type_`` only,
        if given); ``uncounted``: with what the events no roll-up has counted yet add to them."""

    def stats_totals(self, *, uncounted: bool = ...) -> list[tuple[BucketKey, Tally]]:
        """The all-time buckets, one per queue and type."""

    # -- failures ------------------------------------------------------------------------------
    def failure_heads(self, *, queue: str | None = ..., type: str | None = ..., tag: str | None = ...) -> list[dict]:
        """Per queue, type and error head of the failed tasks (of ``queue``, ``type``, ``tag`` if given)."""

    def failure_page(self, *, queue=..., type=..., tag=..., after_id: int = ..., limit: int = ...) -> list[dict]:
        """A page of the tasks that ended as failure."""

    def failure_requeue(self, ids: Sequence[int], now: float) -> list[int]:
        """Run the failed plain tasks ``ids`` again."""

    def failure_samples(self, ids: Sequence[int]) -> dict[int, dict]:
        """The key and error (cut at DETAIL_LENGTH, as UTF-8 bytes) of the tasks ``ids``, by id."""

    # -- wake-ups ------------------------------------------------------------------------------
    def wakeup_listen(self, on_notify, stop, timeout: float = ..., probe_interval: float = ...) -> None:
        """Block, calling ``on_notify()`` when tasks may have been submitted, until ``stop`` is set or the
        connection fails (raises DatabaseError; the caller waits and listens again): by notification
        (:attr:`channel`), else by reading the highest id every ``probe_interval`` seconds
        (``store/watch.py``)."""

    # -- workflow runs -------------------------------------------------------------------------
    def run_adopt(self, conn, id_: int, token: int, workflow: str, definition: str, group: str, now: float) -> bool:
        """A run row submitted as a plain task, held by the decider: live -> pending run."""

    def run_cancel_waiting(self, conn, group: str, now: float) -> list[dict]:
        """Cancel the waiting (not running) rows of a run; flag the running ones."""

    def run_close(
        self,
        conn,
        id_: int,
        outcome: str,
        now: float,
        *,
        workflow: str | None = ...,
        error: str | None = ...,
        purge_at: float = ...,
    ) -> bool:
        """A pending row ends without running (a skipped step, a map whose items are done, the run row when
        its run ends): pending -> finished."""

    def run_close_many(self, conn, rows: Sequence[dict], now: float) -> int:
        """Pending rows that end without running (skipped steps, maps whose items are done, run rows whose run
        ended): each dict holds id, outcome, workflow, error and optionally purge_at (default: kept until
        their run ends)."""

    def run_finish_held(
        self,
        conn,
        id_: int,
        token: int,
        outcome: str,
        now: float,
        *,
        error: str | None,
        result: str | None,
        workflow: str | None = ...,
        purge_at: float = ...,
        traceback: str | None = ...,
    ) -> bool:
        """The holder of a step's lease finishes it (fenced; PreemptedError when not ours)."""

    def run_finish_held_many(
        self, conn, entries: Sequence[dict], now: float, *, retried: bool = ...
    ) -> tuple[list[int], list[int]]:
        """Several holders' finishes at once (each dict: id, token, outcome, error, result), fenced like
        :meth:`run_finish_held`."""

    def run_group_clear(self, conn, group: str) -> int:
        """Delete the workflow rows of a group: those of an earlier run with this id (a run starts with an
        empty group), or a map's old items."""

    def run_group_count(self, conn, group: str, now: float) -> dict[str, int]:
        """How many rows of a group are pending, waiting, running, or finished by outcome."""

    def run_group_keep(self, conn, groups: Sequence[str], purge_at: float = ...) -> int:
        """The finished rows of these runs' groups are purged at ``purge_at`` (runs that ended), or never."""

    def run_group_read(self, conn, group: str, *, data: bool = ..., result: bool = ...) -> list[dict]:
        """The rows of a group (a run's steps, a map's items), by id."""

    def run_group_results(self, conn, group: str):
        """(key, state, outcome, workflow, result) of each row of a group, as plain tuples."""

    def run_mark(self, conn, id_: int, group: str, workflow: str) -> bool:
        """Make a row not yet picked up by a decider known as a run (listed with the runs)."""

    def run_name_register(self, conn, kind: str, name: str) -> None:
        """Remember a name (a workflow served or started here) in the meta table, once."""

    def run_names_registered(self, conn, kind: str) -> list[str]: ...

    def run_newest(
        self, conn, group: str, types: Sequence[str], before_id: int | None, limit: int, sep: str
    ) -> list[dict]:
        """Up to ``limit`` run rows of the workflows ``types`` with an id below ``before_id``."""

    def run_next_waiting(self, conn, group: str, now: float) -> dict | None:
        """The waiting row of a group due first (its ``run_at`` and ``workflow``), None when none waits."""

    def run_open_rows(self, conn, groups: Sequence[str], limit: int | None = ...) -> list[dict]:
        """The workflow rows of these groups that have not finished (key, grp, workflow)."""

    def run_promote(self, conn, updates: Sequence[tuple[int, str]], now: float) -> int:
        """Steps whose parents are done: pending -> waiting, due now."""

    def run_read(
        self,
        conn,
        keys: Sequence[str],
        *,
        data: bool = ...,
        result: bool = ...,
        definition: bool = ...,
        lock: bool = ...,
    ) -> dict[str, dict]:
        """Rows by key; with ``lock``, row locks held to commit, taken in key order."""

    def run_reopen(self, conn, id_: int, workflow: str, now: float) -> bool:
        """A finished run row that is retried at ``now``: -> pending."""

    def run_reopen_steps(self, conn, ids: Sequence[int], now: float, *, pending: bool = ...) -> int:
        """Finished rows of a run that is retried: -> waiting (due now, fresh attempts) or pending."""

    def run_retry_held(
        self,
        conn,
        id_: int,
        token: int,
        run_at: float,
        now: float,
        *,
        error: str | None,
        workflow: str,
        traceback: str | None = ...,
    ) -> None:
        """The holder gives a failed step back at ``now`` for another try at ``run_at``."""

    def run_set_workflow(self, conn, id_: int, workflow: str, *, state: int = ...) -> bool:
        """New bookkeeping of a row that is still in ``state`` (tallies of a pending step, run state)."""

    def run_set_workflow_many(self, conn, updates: Sequence[tuple[int, str]], *, state: int = ...) -> int: ...

    def run_start_maps(self, conn, starts: Sequence[tuple[int, str, str]]) -> int:
        """Maps whose items were just submitted: each (id, bookkeeping as read, bookkeeping with the item
        count) is written only while the pending row's bookkeeping is still the one read, so a map starts
        once, however many decisions race for it."""


class ScheduleStore(Tables, Protocol):
    """The operations on a perfectsched schedule table (see the module)."""

    # -- schedules -----------------------------------------------------------------------------
    def schedule_add(self, conn, schedule: NewSchedule, now: float) -> bool:
        """Insert if the key is free (idle, due at its next run time); returns whether it was."""

    def schedule_advance_many(self, conn, advances: list[tuple[str, int, int, float]], now: float) -> int:
        """Advance due schedules in one batched statement."""

    def schedule_check(self, row: dict) -> dict:
        """``row`` itself, or CorruptRowError naming the table, the key and the first column holding a value
        perfectsched never writes (:mod:`.rowcheck`)."""

    def schedule_configure(
        self,
        conn,
        key: str,
        now: float,
        *,
        type: str | None = ...,
        data: str | None = ...,
        catchup: str | None = ...,
        queue: str | None = ...,
        tags: str | None = ...,
    ) -> bool:
        """New type, data (JSON text), catch-up policy, queue or tags (JSON text)"""

    def schedule_count_due(self, now: float) -> int: ...

    def schedule_delete(self, conn, key: str) -> bool: ...

    def schedule_due(self, conn, now: float, limit: int) -> list[dict]:
        """Lock up to ``limit`` due schedules (skipping rows other schedulers hold; never a set-aside one)."""

    def schedule_finish(self, conn, key: str, token: int, next_time: int, next_run_time: float, now: float) -> bool:
        """The holder moves the schedule on to ``next_time``."""

    def schedule_get(self, key: str, conn=...) -> dict | None:
        """The schedule's row as stored (None: no such key)."""

    def schedule_heartbeat(self, conn, key: str, token: int, expires: float, now: float) -> bool:
        """Extend the lease, unexpired at ``now``, to ``expires`` (an expired one is never revived)."""

    def schedule_lease(
        self, conn, key: str, expected: int, occurrence: int, now: float, expires: float, token: int
    ) -> bool:
        """Lease the due schedule still at ``expected`` for its occurrence ``occurrence``."""

    def schedule_leased_under(self, conn, token: int, expires: float) -> dict | None:
        """The schedule a poll with ``token`` leased until ``expires``, if an earlier run of its transaction
        committed (its acknowledgement lost); found through the timeout index."""

    def schedule_list(self) -> list[dict]:
        """Every schedule's row as stored, next due first (one edited by hand among them too)."""

    def schedule_lock(self, conn, key: str) -> dict | None: ...

    def schedule_next_due(self) -> tuple[str, float, int, str] | None:
        """The schedule that becomes due first, as (key, due time, its occurrence's scheduled time, its timezone)."""

    def schedule_next_due_time(self) -> float | None:
        """The earliest time any schedule becomes due (uses the timeout index)."""

    def schedule_release(self, conn, key: str, token: int, now: float) -> bool:
        """The holder gives its occurrence back, due now."""

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
        type: str | None = ...,
        data: str | None = ...,
        catchup: str | None = ...,
        queue: str | None = ...,
        tags: str | None = ...,
    ) -> bool:
        """New times: due at ``next_time + delay``, any lease dropped (its holder is fenced out), a set-aside
        schedule brought back (its error cleared)."""

    def schedule_resume(self, conn, key: str, expected: int, now: float) -> bool:
        """Bring back the set-aside schedule still at occurrence ``expected``."""

    def schedule_retry(self, conn, key: str, token: int, due_at: float) -> bool:
        """The holder gives its occurrence back, due again at ``due_at``."""

    def schedule_set_aside(self, conn, key: str, expected, error: str, now: float) -> bool:
        """Set aside the due schedule still at occurrence ``expected``."""

    def schedule_token(self) -> int: ...


def open_store(db: Database, table: str) -> Store:
    """The store of the queue table ``table`` on ``db`` (nothing is read or written yet)."""
    return SqlStore(db, table)


def open_schedule_store(db: Database, table: str) -> ScheduleStore:
    """The store of the schedule table ``table`` on ``db`` (nothing is read or written yet)."""
    return SqlScheduleStore(db, table)
