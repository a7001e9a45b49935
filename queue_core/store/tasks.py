"""The store of a queue table (store layer): :class:`SqlStore`, which implements the ``Store``
protocol (``protocol.py``).

It is composed of parts, each holding the tables it needs, whose operations the store names
(``parts.PartOp``): ``reads`` (``task_reads.py``), ``submits`` (``submits.py``), ``changes`` (the
holder's and the operator's transitions: ``task_changes.py``), ``settles`` (batched finishes:
``settles.py``), ``runs`` (``runs.py``), ``workers``, ``failures``, ``stats`` (statistics),
``tags``, ``events``, ``browse`` (pages by filter) and ``bulk`` (operators' changes of many tasks).
``claim`` (the lease of due tasks: ``claim/``) and ``queues`` (queue settings and counts:
``queues.py``). Methods take plain values (``now`` explicit) and return plain dicts; every write
is a named transition of ``transitions.py`` whose precondition is in its WHERE clause.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sqlalchemy as sa

from ..errors import DatabaseError
from .base import VersionedTables
from .browse import TaskBrowse
from .bulk import BulkChanges
from .claim import ClaimScreen, ClaimTables, TaskClaim
from .database import Database
from .events import TaskEvents
from .failures import FailureReads
from .parts import PartOp
from .queues import QueueRows
from .receipts import Receipts
from .runs import RunRows
from .schema import (
    ADDED_COLUMNS,
    DROPPED_INDEXES,
    EVENT_ADDED_COLUMNS,
    FOREVER,
    RECOLLATED_COLUMNS,
    SCHEMA_VERSION,
    event_table,
    failed_id_table,
    meta_table,
    queue_table,
    receipt_table,
    start_table,
    stats_gap_table,
    stats_table,
    tag_table,
    task_table,
    worker_table,
)
from .settles import Settled, TaskSettles  # noqa: F401 - Settled: part of this module's API
from .stats import POSITION, TaskStatistics
from .submits import NewTask, TaskSubmits, task_row  # noqa: F401 - NewTask, task_row: part of this module's API
from .tags import TaskTags
from .task_changes import TaskChanges
from .task_reads import TaskReads
from .watch import watch_newest_id
from .workers import WorkerRows


class SqlStore(VersionedTables):
    current_version = SCHEMA_VERSION
    # the row capped fair-share claims lock; the position of the statistics roll-up
    meta_rows = (("fair_lock", ""), (POSITION, "0"))
    added_columns = ADDED_COLUMNS
    dropped_indexes = DROPPED_INDEXES
    recollated_columns = RECOLLATED_COLUMNS
    kind = "a pq queue table"

    # the operations of the parts this store is composed of (each in the attribute named: runs ...)
    (task_claim,) = PartOp.of("claim", 1)
    queue_settings_all, queue_set_paused, queue_set_limits, queue_known, queue_counts = PartOp.of("queues", 5)
    (queue_live_counts,) = PartOp.of("queues", 1)
    task_get, task_list, task_group_rows, task_rows_by_keys, task_lock, task_counts = PartOp.of("reads", 6)
    task_insert, task_submit, task_submit_one = PartOp.of("submits", 3)
    task_heartbeat, task_finish, task_retry, task_release, task_release_batch, task_cancel = PartOp.of("changes", 6)
    task_give_back_unstarted, task_lost_before_start, task_force_finish, task_move = PartOp.of("changes", 4)
    task_set_data, task_purge = PartOp.of("changes", 2)
    (task_settle,) = PartOp.of("settles", 1)
    worker_register, worker_remove, worker_renew, worker_sweep, worker_rows = PartOp.of("workers", 5)
    failure_heads, failure_samples = PartOp.of("failures", 2)
    stats_roll_up, stats_rows, stats_totals, stats_prune, stats_live_counts, event_newest = PartOp.of("stats", 6)
    tag_change, task_set_tracked = PartOp.of("tags", 2)
    failure_page, task_waiting_page, failure_requeue, task_cancel_many = PartOp.of("bulk", 4)
    (task_browse_page,) = PartOp.of("browse", 1)
    event_record, event_last_tracebacks, task_history, stream_rows, stream_start, stream_end = PartOp.of("events", 6)
    run_adopt, run_cancel_waiting, run_group_clear, run_close, run_close_many, run_group_count = PartOp.of("runs", 6)
    run_finish_held, run_finish_held_many, run_group_results, run_group_keep, run_mark = PartOp.of("runs", 5)
    run_newest, run_next_waiting, run_open_rows, run_promote, run_read, run_group_read = PartOp.of("runs", 6)
    run_name_register, run_names_registered, run_reopen_steps, run_reopen, run_retry_held = PartOp.of("runs", 5)
    run_set_workflow, run_set_workflow_many, run_start_maps = PartOp.of("runs", 3)

    def __init__(self, db: Database, table: str):
        metadata = sa.MetaData()
        self.t = task_table(metadata, table)
        self.queues_t = queue_table(metadata, table)
        self.starts_t = start_table(metadata, table)
        self.tags_t = tag_table(metadata, table)
        self.events_t = event_table(metadata, table)
        self.workers_t = worker_table(metadata, table)
        self.stats_t = stats_table(metadata, table)
        self.gaps_t = stats_gap_table(metadata, table)
        self.failed_t = failed_id_table(metadata, table)
        receipts_t = receipt_table(metadata, table)
        ready = functools.partial(self.require_ready, tables=(receipts_t,))
        self.receipts = Receipts(receipts_t, db.dialect, ready)
        super().__init__(db, table, metadata, meta_table(metadata, table))
        # the parts this store is composed of (the events' and submits' channel: set with the store's, below)
        self.runs = RunRows(self)
        self.workers = WorkerRows(db, self.t, self.workers_t)
        self.failures = FailureReads(db, self.t, self.tags_t, self.failed_t)
        self.stats = TaskStatistics(db, self.t, self.events_t, self.stats_t, self.gaps_t, self.meta)
        self.reads = TaskReads(db, self.t)
        self.tags = self.reads.tags = TaskTags(db, table, self.t, self.tags_t, self.reads.task_get)
        self.events = TaskEvents(db, self.t, self.events_t, self.stats, self.failures, None)
        self.browse = TaskBrowse(db, self.t, self.tags_t, self.tags, self.failures)
        self.bulk = BulkChanges(db, self.t, self.tags_t, self.purge_time, (self.failures, self.receipts, self.events))
        self.submits = TaskSubmits(db, self.t, self.tags, self.reads.task_get, self.forget_rows)
        self.changes = TaskChanges(
            db, table, self.t, self.starts_t, self.receipts, self.events, self.purge_time, self.forget_rows
        )
        screen = ClaimScreen(self.t, table, self.purge_time, self.events)
        claimed = (self.t, self.queues_t, self.starts_t, self.meta)
        self.claims = ClaimTables(db, claimed, self.events, screen, self.tables_missing_indexes)
        self.settles = TaskSettles(db, self.t, self.events, self.purge_time, self.claims.marked_claims)
        self.claim = TaskClaim(self.claims, self.settles)
        self.queues = QueueRows(db, self.t, self.queues_t, self.stats.stats_live_counts)
        self.channel = f"pq_{table}"[:63] if db.dialect.can_notify else None
        #: the names :meth:`run_name_register` recorded from this process (committed): not written again
        self.run_names_registered_here = self.runs.registered_here

    @property
    def retention_time(self) -> float:
        """How long a row the claim ends is kept (the queue sets its config's retention_time)."""
        return self.claims.screen.retention_time

    @retention_time.setter
    def retention_time(self, seconds: float) -> None:
        self.claims.screen.retention_time = seconds

    @property
    def failure_retention(self) -> float | None:
        """How long a row the claim ends as failure is kept (None: retention_time)."""
        return self.claims.screen.failure_retention

    @failure_retention.setter
    def failure_retention(self, seconds: float | None) -> None:
        self.claims.screen.failure_retention = seconds

    @property
    def channel(self) -> str | None:
        """LISTEN/NOTIFY channel of this table, or None when wake-ups are off or unsupported."""
        return self._channel

    @channel.setter
    def channel(self, name: str | None) -> None:
        self._channel = self.events.channel = self.submits.channel = name

    def purge_time(self, purge_at: float, table: sa.Table | None = None):
        """The purge time a row (of the task table, or ``table``: its marked copy) gets when it
        finishes: ``purge_at``, or never for a row of a workflow run (its run sets the retention
        of all its rows when it ends)."""
        t = self.t if table is None else table
        return sa.case((t.c.workflow.is_(None), purge_at), else_=FOREVER)

    def forget_rows(self, conn, ids: Sequence[int]) -> None:
        """Delete what belongs to the task rows ``ids`` besides the rows (their tags, their
        events, their entry among the failed ids), before the caller deletes the rows it has
        locked, in the same transaction."""
        self.tags.forget_tags(conn, ids)
        self.events.forget_events(conn, ids)
        self.failures.forget_failed(conn, ids)

    def after_init(self, conn) -> None:
        # <table>_failed_ids (MySQL/MariaDB): the failed tasks it does not hold yet — those of a
        # table made before it, or failed by a worker of an older release since
        self.failures.note_all_failed(conn)
        self.claims.type_indexes = None  # looked up again: init may have added them

    def upgraded_to(self, conn, version: int) -> None:
        if version == 9:  # MySQL/MariaDB: the claim mark (a fresh table is made with it: as_made)
            self.db.dialect.add_claim_mark(conn, self.t)
        added = EVENT_ADDED_COLUMNS.get(version, ())
        if added:  # unless this init made the event table (with every column)
            have = {c["name"].lower() for c in sa.inspect(conn).get_columns(self.events_t.name)}
            for name in added:
                if name not in have:
                    self.add_column(conn, self.events_t, name)

    def later_columns(self, table: sa.Table) -> frozenset[str]:
        if table is self.events_t:
            return frozenset(name for names in EVENT_ADDED_COLUMNS.values() for name in names)
        return super().later_columns(table)

    def as_made(self, table: sa.Table) -> sa.Table:
        return self.db.dialect.with_claim_mark(table) if table is self.t else table

    def wakeup_listen(self, on_notify, stop, timeout: float = 1.0, probe_interval: float = 0.0) -> None:
        """Block, calling ``on_notify()`` when tasks may have been submitted, until ``stop`` is set
        or the connection fails (raises DatabaseError; the caller waits and listens again): by
        notification (:attr:`channel`), else by reading the highest id every ``probe_interval``
        seconds (``store/watch.py``)."""
        if not self.channel:
            if probe_interval <= 0:
                raise ValueError("this table has no notifications and no wake-up probe")
            return watch_newest_id(self.db, self.t, on_notify, stop, probe_interval)
        try:
            self.db.dialect.listen(self.db.engine, self.channel, on_notify, stop, timeout)
        except Exception as exc:  # noqa: BLE001 - any driver failure: report it scrubbed
            raise DatabaseError(f"listen failed on {self.db.masked_url}: {self.db.scrub(exc)}") from None
