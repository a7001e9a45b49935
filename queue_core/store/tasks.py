"""The store of a queue table (store layer): :class:`SqlStore`, which implements the ``Store``
protocol (``protocol.py``); its claim is here.

It is composed of parts, each holding the tables it needs, whose operations the store names
(``parts.PartOp``): ``reads`` (``task_reads.py``), ``submits`` (``submits.py``), ``changes`` (the
holder's and the operator's transitions: ``task_changes.py``), ``settles`` (batched finishes:
``settles.py``), ``runs`` (``runs.py``), ``workers``, ``failures``, ``stats`` (statistics),
``tags``, ``events``, ``browse`` (pages by filter) and ``bulk`` (operators' changes of many tasks).
The claim shares its tables and views with three mixins: named queues (``queues.py``), claims by
type (``typed_claims.py``) and the claim's screen of picked rows (``claim_screen.py``). Methods
take plain values (``now`` explicit) and return plain dicts; every write is a named transition of
``transitions.py`` whose precondition is in its WHERE clause.
"""

from __future__ import annotations

import copy
import functools
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from ..errors import DatabaseError
from ..rules import policy
from ..rules.task_states import LIVE
from . import lost_claims, rowcheck
from .base import VersionedTables
from .browse import TaskBrowse
from .bulk import BulkChanges
from .claim_screen import ClaimScreen
from .database import Database, isolated
from .events import TaskEvents, claimed_events
from .failures import FailureReads
from .parts import PartOp
from .queues import NamedQueues
from .receipts import Receipts
from .runs import RunRows
from .schema import (
    ADDED_COLUMNS,
    DEFAULT_QUEUE,
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
from .transitions import lease_counted, task_where
from .typed_claims import TypedReads
from .watch import watch_newest_id
from .workers import WorkerRows

#: how often a claim looks again at the table's claim mark (``claim_table``): a mark altered by
#: hand is trusted at most this long after (docs/reliability.md)
MARK_CHECK_INTERVAL = 10.0


def new_token() -> int:
    return secrets.randbits(62) + 1


class SqlStore(NamedQueues, ClaimScreen, TypedReads, VersionedTables):
    current_version = SCHEMA_VERSION
    # the row capped fair-share claims lock; the position of the statistics roll-up
    meta_rows = (("fair_lock", ""), (POSITION, "0"))
    added_columns = ADDED_COLUMNS
    dropped_indexes = DROPPED_INDEXES
    recollated_columns = RECOLLATED_COLUMNS
    #: what the claim reads of this store are limited to: every queue here, one in :meth:`in_queue`'s views
    scope: Any = sa.true()
    kind = "a pq queue table"

    # the operations of the parts this store is composed of (each in the attribute named: runs ...)
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
        self.settles = TaskSettles(db, self.t, self.events, self.purge_time, self.marked_claims)
        self._fair_lock = sa.select(self.meta.c.name).where(self.meta.c.name == "fair_lock")
        self._claim_reads()
        self.channel = f"pq_{table}"[:63] if db.dialect.can_notify else None
        #: the task table as a claim's UPDATE writes it (decided by the first claim: :meth:`claim_table`)
        self._claim_t: sa.Table | None = None
        self._mark_checked = 0.0
        #: the names :meth:`run_name_register` recorded from this process (committed): not written again
        self.run_names_registered_here = self.runs.registered_here

    def _claim_reads(self) -> None:
        """The statements every claim runs, in this store's :attr:`scope`."""
        # The highest priority of live rows: ORDER BY ... LIMIT 1 in index order (MariaDB
        # answers MAX() over a descending index column with a scan).
        self._top_level = sa.select(self.t.c.priority).where(self._live()).order_by(self.t.c.priority.desc()).limit(1)
        self._user_and_top = sa.select(*self.entry_columns())

    def entry_columns(self) -> tuple:
        """What a claim's walk reads first: a due user (any), the best level of live rows. The
        due user in the order of the user index (state, queue, resource, timeout), its first
        entry: else SQLite walks every due row of the purge index looking for one with a user
        (``likely``), and PostgreSQL, before it has statistics, a type index's range."""
        t = self.t
        users_due = self.db.dialect.likely(t.c.timeout <= sa.bindparam("now"))
        order = self.db.dialect.index_order([t.c.state, t.c.queue], [t.c.resource, t.c.timeout])
        due_user = sa.select(t.c.resource).where(self._live(t.c.resource.is_not(None), users_due)).order_by(*order)
        return due_user.limit(1).scalar_subquery(), self._top_level.scalar_subquery()

    def _live(self, *more):
        """Live rows of this store's :attr:`scope` (and ``more``): the claim reads nothing else."""
        return sa.and_(self.t.c.state == LIVE, self.scope, *more)

    def in_queue(self, name: str) -> SqlStore:
        """This store with its claim reads limited to the queue ``name`` (a view sharing its
        database and tables; kept, a claim reads the same queues at every poll)."""
        views = self.__dict__.setdefault("_views", {})
        view = views.get(name)
        if view is None:
            if len(views) >= 256:
                views.clear()
            view = views[name] = self._view(self.t.c.queue == name)
        return view

    def narrowed(self, *clauses) -> SqlStore:
        """This view with its claim reads further limited by ``clauses`` (built for one claim)."""
        return self._view(sa.and_(self.scope, *clauses))

    def _view(self, scope) -> SqlStore:
        view = copy.copy(self)
        for own in ("_views", "_probe_cache", "_entry_probes"):
            view.__dict__.pop(own, None)
        view.scope = scope
        view._claim_reads()
        return view

    @property
    def retention_time(self) -> float:
        """How long a row the claim ends is kept (the queue sets its config's retention_time)."""
        return self.__dict__.get("_retention_time", 300.0)

    @retention_time.setter
    def retention_time(self, seconds: float) -> None:
        self._retention_time = seconds
        self.__dict__.pop("_views", None)  # views copied the old value

    @property
    def failure_retention(self) -> float | None:
        """How long a row the claim ends as failure is kept (None: retention_time)."""
        return self.__dict__.get("_failure_retention")

    @failure_retention.setter
    def failure_retention(self, seconds: float | None) -> None:
        self._failure_retention = seconds
        self.__dict__.pop("_views", None)

    @property
    def channel(self) -> str | None:
        """LISTEN/NOTIFY channel of this table, or None when wake-ups are off or unsupported."""
        return self._channel

    @channel.setter
    def channel(self, name: str | None) -> None:
        self._channel = self.events.channel = self.submits.channel = name
        self.__dict__.pop("_views", None)  # views copied the old channel

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

    def claim_table(self, conn) -> sa.Table:
        """The task table as a claim's UPDATE writes it: with the dialect's claim mark where the
        table has it as ``init`` makes it (``Dialect.claim_mark_usable``). Looked at again by a
        claim every :data:`MARK_CHECK_INTERVAL` seconds: a table ``init`` upgrades is marked from
        then on, and a mark altered by hand is no longer trusted from then on."""
        at = time.monotonic()
        if self._claim_t is None or at >= self._mark_checked + MARK_CHECK_INTERVAL:
            usable = self.db.dialect.claim_mark_usable(conn, self.t)
            self._claim_t, self._mark_checked = (self._marked_t if usable else self.t), at
        return self._claim_t

    @functools.cached_property
    def _marked_t(self) -> sa.Table:
        """The task table with the dialect's claim mark: one copy, whose statements stay cached."""
        return self.db.dialect.with_claim_mark(self.t)

    def marked_claims(self) -> sa.Table | None:
        """The task table with its claim mark, when this store's claims mark their rows."""
        return None if self._claim_t is None or self._claim_t is self.t else self._claim_t

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

    # -- claim -------------------------------------------------------------------------
    def task_claim(
        self,
        n: int,
        alive_time: float,
        now: float,
        owner: str,
        settle: Sequence[Settled] = (),
        lost: list[Settled] | None = None,
        also=None,
        types: Sequence[str] | None = None,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        notes: dict | None = None,
        clock: Callable[[], float] | None = None,
        start_within: float = 0.0,
        announce: Callable[[int], None] | None = None,
        owned_ended: Callable[[Any, list[dict]], None] | None = None,
    ) -> list[dict]:
        """Lease up to ``n`` due tasks; first, in the same transaction, finish ``settle``.

        ``now``: the time the claim judges which rows are due and which leases count. ``clock()``
        (default: ``now``): asked once the locks a queue's walk may wait for are held (on SQLite
        the write lock of ``BEGIN IMMEDIATE``, elsewhere a limited queue's settings row and the
        fair lock), for the time the claim writes: the lease's expiry and ``started_at``, the
        claim events, a rate limit's starts. A claim that waited for a lock never writes the time
        it read before the wait: a lease born expired would run twice at once. ``start_within``:
        the seconds within which the caller starts the handler of a rate-limited task (each such
        row's ``start_by``: its start is counted then; ``store/queues.py``).

        ``queues``: the queues to lease from, best first (a queue's tasks are taken before the
        next queue's; paused ones are passed over, limited ones give at most their free slots:
        ``store/queues.py``, which also fills ``notes``). ``types``: lease only rows of these task
        types (exact, validated strings); None: any. ``notes["ended_rows"]``: nothing leased
        after four rounds that only ended rows (given up, set aside): more may be due, claim again.

        Settling the previous batch together with the next claim makes a drain cost one
        transaction per batch instead of two per task, with the same fencing as ``finish``:
        a settled task whose lease was taken over is not finished, and its ``Settled`` entry
        is appended to ``lost``. ``also(conn)``: more writes of the settled batch, in the same
        transaction before the claim (deferred finishes of workflow steps).

        The lease token is drawn before the transaction: when it runs again after a transient
        error that may have hidden its COMMIT (a lost acknowledgement), the rows it already
        leased under that token are delivered instead of being left to expire unknown.
        ``announce(token)``: told each token before the transaction that leases under it (a worker
        child keeps it where its successor finds it, should it die before it records its batch).
        ``owned_ended(conn, rows)``: told, in the claim's transaction, the rows of workflow runs
        the claim ended instead of leasing (set aside, given up; each as it ended), so that their
        runs decide what follows in the same commit; what it raises is logged, and rolled back alone."""
        pending = list(settle)
        token = 0
        read = clock or (lambda: now)
        stamps: list[float] = []  # the times its runs leased at: a retried run finds its own leases

        def stamp() -> float:
            at = max(now, read())
            stamps.append(at)
            return at

        def work(conn):
            self.claim_table(conn)
            if pending:
                gone = self.settles.settle(conn, pending, now)
                if lost is not None:
                    lost[:] = gone
            if also is not None:
                also(conn)
            if self.db.last_run_retried() and stamps:
                expiries = [at + alive_time for at in stamps]
                if mine := lost_claims.renewed_under(self.t, conn, token, expiries, stamp, alive_time):
                    return self.with_start_by(conn, mine, start_within), []
            if not n:
                return [], []

            def claim_one(view, room, behind, admit, entry):
                return view._claim(conn, room, alive_time, now, owner, types, token, stamp, behind, admit, entry)

            rows, ended = self._claim_queues(conn, n, now, queues, claim_one, notes, start_within)
            self.tell_owners(conn, owned_ended, ended)
            return rows, ended

        for _ in range(4):
            token = new_token()
            if announce is not None:
                announce(token)
            rows, consumed = self.db.run(work, what="poll")
            pending, also = [], None
            if rows or not consumed:
                return rows
        if notes is not None:  # only ended rows, four times: more may be due behind them
            notes["ended_rows"] = True
        return []

    isolated = staticmethod(isolated)

    def _claim(
        self, conn, n, alive_time, now, owner, types, token, stamp, behind=False, admit=None, entry=None
    ) -> tuple[list[dict], list[dict], bool]:
        """Lease up to ``n`` due rows of this store's scope (a queue); returns them, the picked
        rows the claim ended instead, and whether the batch was cut before a row with
        ``max_attempts`` (``behind``: other rows come first in the batch). Rows are picked as due
        at ``now``; what the claim writes of them is at ``stamp()``, read once they are locked
        (every lock this walk may wait for is held then). ``admit(rows)``: those
        of the rows a limit lets start (a rate limit per user or type). ``entry``: what
        :attr:`_user_and_top` reads, read already in this transaction (several queues served)."""
        t = self.t
        tops: dict | None = None  # the best level of each type ({None: level}: of any type)
        if types is not None:  # from here on, only the types that have live rows
            tops = self._live_tops(conn, types)
            types = sorted(tops)
            if not types:
                return [], [], False
        user_types = self._with_due_users(conn, types, now)
        if types is None:  # one round trip for both: is any user due, and the best level
            some_user, top = entry if entry is not None else conn.execute(self._user_and_top, {"now": now}).one()
            users = self._due_users(conn, now) if some_user is not None else []
            tops = {} if top is None else {None: top}
        else:
            users = self._due_users(conn, now, user_types)
        if users:
            picked = self._pick_fair(conn, n, now, users, user_types, types, tops)
        else:
            picked = self._pick_userless(conn, n, now, lock=True, types=types, tops=tops)
        if not picked:
            return [], [], False
        now = stamp()
        deliver, ended = self._screen(conn, picked, now)
        if admit is not None:
            deliver = admit(deliver)
        screened = len(deliver)
        deliver = policy.limited_first(deliver, behind=behind)
        if deliver:
            expires = now + alive_time
            ids = [r["id"] for r in deliver]
            ct = self.claim_table(conn)
            res = conn.execute(
                sa.update(ct)
                .where(ct.c.id.in_(ids), *task_where(ct, "claim", now=now))
                .ordered_values(  # run_at first: MySQL reads ``timeout`` as the SETs before left it
                    (ct.c.run_at, ct.c.timeout),  # the attempt's due time (its wait: started_at - run_at)
                    (ct.c.leased, 1),
                    (ct.c.lease_token, token),
                    (ct.c.timeout, expires),
                    (ct.c.attempts, ct.c.attempts + 1),
                    (ct.c.started_at, now),
                    (ct.c.owner, owner[:255]),
                    *self.db.dialect.claim_marks(ct),
                )
            )
            if res.rowcount != len(ids):  # not expected (the rows are locked): deliver only what is leased
                got = {i for (i,) in conn.execute(sa.select(t.c.id).where(t.c.id.in_(ids), t.c.lease_token == token))}
                deliver = [r for r in deliver if r["id"] in got]
            self.events.event_record(
                conn, claimed_events(deliver, now, owner[:255], self.events.recorded_claims(conn, deliver))
            )
            for r in deliver:
                r.update(
                    run_at=r["timeout"],
                    leased=1,
                    lease_token=token,
                    timeout=expires,
                    attempts=r["attempts"] + 1,
                    started_at=now,
                    owner=owner[:255],
                )
        return deliver, ended, len(deliver) < screened

    def _pick_userless(
        self, conn, n: int, now: float, lock: bool, types: list[str] | None = None, tops: dict | None = None
    ) -> list[dict]:
        """Up to ``n`` due userless rows by (priority desc, due time, id), one priority level
        at a time: a loose scan of the claim index.

        A single ``ORDER BY priority DESC, timeout, id`` leaves the planner two bad choices:
        walk the claim index past every row due later (SQLite does, and MariaDB may), or
        sort every due row (PostgreSQL does, on a backlog). Per level, the rows come from an
        exact index range (state, priority, due time) already in order, and the next level is
        one index probe, so a poll costs the same on a table holding a million finished and
        a hundred thousand future rows as on an empty one.

        With ``types``, the same walk per type on the type index (state, type, priority, due
        time, id): the types' next levels are one probe each, and a level's rows come from the
        exact range of each type that has due rows there, merged here by due time. Rows of
        other types are never read, however many are due before them (``typed_claims.py``)."""
        picked: list[dict] = []
        tops = self._tops(conn, types) if tops is None else dict(tops)  # types' best levels, if known
        while tops and len(picked) < n:
            level = max(tops.values(), key=rowcheck.sql_order)
            at = [k for k, p in tops.items() if p == level]
            due = self._with_due_at(conn, at, level, now)
            if due:
                picked += self._due_at(conn, level, due, now, n - len(picked), lock)
            for k in at:
                del tops[k]
            if len(picked) < n:  # the next level is read only when this one did not fill the batch
                tops.update(self._tops(conn, None if types is None else at, below=level))
        return picked

    def _due_at(self, conn, level: int, at: list, now: float, need: int, lock: bool) -> list[dict]:
        """Up to ``need`` due userless rows of priority ``level`` (of the types ``at``, unless
        ``at`` is ``[None]``: any type), by due time and id."""
        t = self.t

        def due(*cols):
            stmt = (
                sa.select(*cols)
                .where(self._live(t.c.priority == level, t.c.timeout <= now, t.c.resource.is_(None)))
                .order_by(t.c.timeout, t.c.id)
                .limit(need)
            )
            return self.db.dialect.lock_candidates(stmt) if lock else stmt

        if len(at) == 1:
            return [dict(r._mapping) for r in self._rows_of_types(conn, due(t), None if at == [None] else at)]
        # Several types: up to ``need`` rows of each, merged by due time. Their ids only (locked
        # as the rows would be), then the whole rows of the ``need`` first: the rest are not
        # decoded for nothing.
        firsts = sorted((r.timeout, r.id) for r in self._rows_of_types(conn, due(t.c.id, t.c.timeout), at))[:need]
        if not firsts:
            return []
        rows = {r.id: dict(r._mapping) for r in conn.execute(sa.select(t).where(t.c.id.in_([i for _, i in firsts])))}
        return [rows[i] for _, i in firsts if i in rows]

    def _due_users(self, conn, now, types: list[str] | None = None) -> list[str]:
        t = self.t
        stmt = (
            sa.select(t.c.resource)
            .where(self._live(t.c.resource.is_not(None), self.db.dialect.likely(t.c.timeout <= now)))
            .group_by(t.c.resource)
        )
        return list(dict.fromkeys(r[0] for r in self._rows_of_types(conn, stmt, types)))

    def _running_counts(self, conn, users: Iterable[str], now: float) -> dict[str, int]:
        t = self.t
        users = list(users)
        counts: dict[str, int] = {}
        for i in range(0, len(users), 500):
            stmt = (
                sa.select(t.c.resource, sa.func.count())
                .where(t.c.state == LIVE, t.c.leased == 1, t.c.resource.in_(users[i : i + 500]), lease_counted(t, now))
                .group_by(t.c.resource)
            )
            counts.update({r[0]: int(r[1]) for r in conn.execute(stmt)})
        return counts

    def _pick_fair(self, conn, n, now, users, user_types=None, types=None, tops=None) -> list[dict]:
        """PerfectQueue's fair share, per user heads instead of a table scan per poll.

        Order: priority, then weight ``max_running / (running + 1)``, then longest due, then
        submission order; a capped user holding ``max_running`` live leases gets nothing.
        With ``types``, only rows of those types are candidates (of ``user_types``: those with
        due rows of users); a user's running count still counts all its running tasks
        (``max_running`` caps the user, whatever the type)."""
        t = self.t
        rn = (
            sa.func.row_number()
            .over(partition_by=t.c.resource, order_by=(t.c.priority.desc(), t.c.timeout, t.c.id))
            .label("rn")
        )
        due = self.db.dialect.likely(t.c.timeout <= now)  # through the user index, not every due row
        heads = sa.select(t, rn).where(self._live(t.c.resource.is_not(None), due))

        def per_user(stmt):
            inner = stmt.subquery()
            return sa.select(inner).where(inner.c.rn <= n)

        candidates = [dict(r._mapping) for r in self._rows_of_types(conn, heads, user_types, wrap=per_user)]
        candidates += self._pick_userless(conn, n, now, lock=False, types=types, tops=tops)
        candidates, corrupt = self.split_corrupt(candidates)  # set aside by _screen, never weighed
        running = self._running_counts(conn, users, now)
        chosen = policy.choose_fair(candidates, running, n)
        if any(r["max_running"] is not None for r in chosen):
            # Capped claims hold the fair lock alone, and count again under it: two workers cannot
            # both take a user's last slot, nor one while another leases a task of that user.
            conn.execute(self.db.dialect.lock_rows(self._fair_lock))
            running = self._running_counts(conn, {r["resource"] for r in chosen if r["resource"]}, now)
            chosen = policy.choose_fair(chosen, running, n)
        elif any(r["resource"] is not None for r in chosen):
            # Uncapped claims of users share it: the tasks they lease count in a capped claim's count.
            conn.execute(self.db.dialect.share_rows(self._fair_lock))
        chosen += corrupt
        if not chosen:
            return []
        return self.without_mended(self._lock_chosen(conn, [r["id"] for r in chosen], now), corrupt)

    def _lock_chosen(self, conn, ids: list[int], now: float) -> list[dict]:
        """Lock the rows ``ids`` that are still due and in this view's scope (its queue), in that
        order, as they are now: read before the lock, another worker may have claimed, changed
        and given one back meanwhile, or an operator moved one to another queue."""
        t = self.t
        still_due = self.db.dialect.likely(self._live(t.c.timeout <= now))
        lock = self.db.dialect.lock_candidates(sa.select(t).where(t.c.id.in_(ids), still_due))
        locked = {r.id: dict(r._mapping) for r in conn.execute(lock)}
        return [locked[i] for i in ids if i in locked]
