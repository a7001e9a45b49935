"""The queue API: Queue (tasks in :mod:`queue_core.api.task`, transactions in :mod:`queue_core.api.transaction`).

This layer validates arguments, resolves ``now`` from the clock, encodes data as JSON and
turns store rows into objects. It never builds SQL (that is ``queue_core.store``).
"""

from __future__ import annotations

import functools
import os
import random
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .. import config as config_mod
from ..clock import Clock, ServerClock, SystemClock, resolve_now
from ..errors import (
    ConfigError,
    CorruptRowError,
    IdempotentAlreadyExistsError,
    ValidationError,
)
from ..rules import policy
from ..rules.task_states import STATUSES
from ..rules.validate import (  # noqa: F401 - re-exported: callers import them from here
    MAX_DATA_DEPTH,
    MAX_DURATION,
    MAX_ERROR_BYTES,
    _error_text,
    _shown,
    check_duration,
    check_int,
    check_name,
    check_queue,
    check_served_queues,
    check_tag,
    check_tags,
    check_time,
    check_types,
    decode_data,
    encode_data,
)
from ..store.protocol import DEFAULT_QUEUE, Database, NewTask, Settled, open_store, rowcheck
from . import deferred as deferred_mod
from . import tracing
from .queue_browse import QueueBrowse
from .queue_bulk import QueueBulk
from .queue_controls import QueueControls, QueueInfo  # noqa: F401 - QueueInfo: part of this module's API
from .queue_insight import QueueInsight
from .queue_stats import QueueStatistics
from .task import OUTCOMES, AcquiredTask, Task, TaskMetadata, metadata_from_row, row_status
from .transaction import Transaction, _DeferredBatch

__all__ = [
    "OUTCOMES",
    "STATUSES",
    "AcquiredTask",
    "Queue",
    "Task",
    "TaskMetadata",
    "Transaction",
    "open",
    "metadata_from_row",
    "row_status",
]

T = TypeVar("T")


# -- the queue --------------------------------------------------------------------------
class Queue(QueueControls, QueueInsight, QueueBulk, QueueStatistics, QueueBrowse):
    """A task queue stored in one table, its tasks in named queues. Thread-safe; open one per
    process after fork."""

    def __init__(
        self,
        url: str | None = None,
        table: str | None = None,
        *,
        clock: Clock | None = None,
        rng: policy.RandomSource | None = None,
        **config: Any,
    ):
        if table is not None:
            config["table"] = table
        if url is not None:
            config["url"] = url
        self.config = config_mod.build(config)
        #: retry jitter's random source: the ``random`` module (reseeded in a forked child), or an injected one
        self.rng: policy.RandomSource = rng or random
        self.db = Database(
            self.config["url"],
            max_retry_count=self.config["max_retry_count"],
            sqlite_synchronous=self.config["sqlite_synchronous"],
            pool_size=self.config["pool_size"],
            connect_timeout=self.config["connect_timeout"],
        )
        self.clock: Clock = clock or self.real_clock()
        self.table = self.config["table"]
        self.store = open_store(self.db, self.table)
        self.store.retention_time = self.config["retention_time"]
        self.store.failure_retention = self.config["failure_retention"]
        if not self.config["notify"]:
            self.store.channel = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        #: the queues a poll reads when it names none (config ``queues``), and their weights
        try:
            self.served_queues = check_served_queues(self.config["queues"], "config queues")
        except ValidationError as exc:
            raise ConfigError(str(exc)) from None

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
        self.store.tables_init(force=force)

    def check_writable(self) -> None:
        """Raise AccessDeniedError when this account or database refuses writes to the table (a
        read-only replica, transaction or file; a grant missing), ForeignTableError when the
        table is not a queue table. Writes nothing."""
        self.store.tables_check_writable()

    # -- submit ---------------------------------------------------------------------------
    def _new_task(
        self,
        key,
        type,
        data=None,
        *,
        user=None,
        max_running=None,
        run_at=None,
        priority=0,
        max_attempts=None,
        now,
        group=None,
        queue=DEFAULT_QUEUE,
        tags=(),
    ) -> NewTask:
        check_name(key, "task key")
        check_queue(queue)
        tags = check_tags(tags)
        check_name(type, "task type")
        check_name(user, "user", optional=True)
        check_name(group, "group", optional=True)
        max_running = check_int(max_running, "max_running", minimum=1, optional=True)
        priority = check_int(priority, "priority")
        if max_attempts is None:
            max_attempts = self.config["max_attempts"]
        max_attempts = check_int(max_attempts, "max_attempts", minimum=1, optional=True)
        run_at = now if run_at is None else check_time(run_at, "run_at")
        return NewTask(
            key=key,
            type=type,
            data=encode_data(data, self.config["max_data_size"]),
            resource=user,
            max_running=max_running,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            group=group,
            queue=queue,
            tags=tags,
            trace=tracing.context_text(),
        )

    def submit(
        self,
        key: str,
        type: str,
        data: Mapping | None = None,
        *,
        user: str | None = None,
        max_running: int | None = None,
        run_at: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        now: float | None = None,
        group: str | None = None,
        queue: str = DEFAULT_QUEUE,
        tags: Iterable[str] = (),
    ) -> Task:
        """Add a task to the named ``queue``, with ``tags`` (``["customer:acme", "invoice"]``). A
        key that exists (waiting, running, or finished within retention; in any queue) raises
        IdempotentAlreadyExistsError."""
        now = self.now(now)
        task = self._new_task(
            key,
            type,
            data,
            user=user,
            max_running=max_running,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            now=now,
            group=group,
            queue=queue,
            tags=tags,
        )
        if not self.store.task_submit_one(task, now):
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
        return self.store.task_submit(tasks, now)

    # -- poll -----------------------------------------------------------------------------
    def poll(
        self,
        *,
        alive_time: float | None = None,
        now: float | None = None,
        types: Iterable[str] | None = None,
        queues: Any = None,
    ) -> AcquiredTask | None:
        tasks = self.poll_multi(1, alive_time=alive_time, now=now, types=types, queues=queues)
        return tasks[0] if tasks else None

    def poll_multi(
        self,
        max_acquire: int,
        *,
        alive_time: float | None = None,
        now: float | None = None,
        finish: Sequence[AcquiredTask] = (),
        types: Iterable[str] | None = None,
        queues: Any = None,
        notes: dict | None = None,
        start_within: float = 0.0,
        announce: Callable[[int], None] | None = None,
        ended_by_claim: Callable[[Transaction, list[dict]], None] | None = None,
    ) -> list[AcquiredTask]:
        """Lease up to ``max_acquire`` tasks (with ``types``: only tasks of those types) from
        ``queues`` (default: the config's ``queues``): ``"critical,default"`` or a list of names
        takes a queue's tasks before the next queue's; ``"critical=5,default=1"`` or a mapping of
        names to weights reads them in a weighted random order (:func:`policy.queue_order`).
        ``notes``: a dict the claim fills: ``rate_wait``, the seconds until a rate limit that held
        due tasks back lets one start.

        ``start_within``: the seconds within which the caller starts the handler of a task of a
        rate-limited queue it leases (such a task comes only first in a batch; at most a twentieth
        of the limit's window: ``policy.start_by``); its start is counted at that deadline, the
        task's ``start_by``, and one not started by then must be
        given back unrun (the worker does): then no window of the limit's length holds more than
        its starts. 0: the lease is the start.

        ``finish``: held tasks to finish with outcome success in the same transaction, before
        the claim (a worker settles its last batch and leases the next one in one commit).
        Each is fenced as ``finish()`` is; one whose lease was lost is not finished and gets
        ``task.lost = True``.

        ``announce(token)``: told the lease token of the claim before it runs (a worker child keeps
        it for its successor: :meth:`release_leases` gives back what a claim leased under it).
        ``ended_by_claim(tx, rows)``: told, in the claim's transaction, the rows of workflow runs
        (their ``workflow`` set) that the claim ended instead of leasing (set aside for a value pq
        never writes, out of attempts), each as it ended: their engine decides what follows them
        in the same commit (a pqflow ``Decider``'s hook of that name).
        """
        n = check_int(max_acquire, "max_acquire", minimum=0 if finish else 1)
        types = None if types is None else check_types(types)
        served = self.served_queues if queues is None else check_served_queues(queues)
        given, now = now, self.now(now)
        alive = self._alive(alive_time)
        within = check_duration(start_within, "start_within")
        plain, deferred = self._split(finish)
        entries, more = self._settle_entries(plain, now), _DeferredBatch(self, deferred, now)
        lost: list[Settled] = []
        order = policy.queue_order(*served, self.rng)
        rows = self.store.task_claim(
            n,
            alive,
            now,
            self.owner,
            settle=entries,
            lost=lost,
            also=more.write,
            types=types,
            queues=order,
            notes=notes,
            clock=functools.partial(self.now, given),  # the time it writes: read after its lock waits
            start_within=within,
            announce=announce,
            owned_ended=None
            if ended_by_claim is None
            else lambda conn, rows: ended_by_claim(Transaction(self, conn, now), rows),
        )
        self._mark_settled(plain, lost, now)
        more.mark(now)
        return [AcquiredTask(self, r, r["started_at"]) for r in rows]

    def finish_many(self, tasks: Sequence[AcquiredTask], *, now: float | None = None) -> list[AcquiredTask]:
        """Finish several held tasks (outcome success, or their deferred finish) in one transaction.

        Returns the tasks that were not finished because their lease was lost (``task.lost``).
        """
        now = self.now(now)
        plain, deferred = self._split(tasks)
        more = _DeferredBatch(self, deferred, now)
        lost = self.store.task_settle(self._settle_entries(plain, now), now, also=more.write)
        return self._mark_settled(plain, lost, now) + more.mark(now)

    def release_many(self, tasks: Sequence[AcquiredTask], *, now: float | None = None) -> int:
        """Give back several held tasks unrun, due now, their attempts given back (as
        ``task.release()`` does), one transaction per claim. Returns how many were still held (those
        are marked released, ``done``): the others were taken over or finished meanwhile, and are
        left as they are."""
        now = self.now(now)
        by_token: dict[int, list[AcquiredTask]] = {}
        for t in self._split(tasks)[0]:
            by_token.setdefault(t._token, []).append(t)
        released: set[int] = set()
        for token, group in by_token.items():
            released.update(self.store.task_release_batch([t._id for t in group], token, now))
        for group in by_token.values():
            for t in group:
                if t._id in released:
                    t._mark_released(now)
        return len(released)

    def release_leases(
        self, leases: Sequence[tuple[int, int]], *, claims: Sequence[int] = (), now: float | None = None
    ) -> int:
        """Give back the leases ``(task id, lease token)`` that a process which died held without
        running their handlers (:class:`~queue_core.worker.lease_ledger.LeaseLedger`), and every lease of
        the ``claims`` (lease tokens) whose batch it never recorded: due now, their attempts given
        back, one transaction per claim; those finished or taken over meanwhile are left as they
        are. Returns how many were given back."""
        now = self.now(now)
        by_token: dict[int, list[int] | None] = {token: None for token in claims}
        for id_, token in leases:
            ids = by_token.setdefault(token, [])
            if ids is not None:
                ids.append(id_)
        return sum(len(self.store.task_release_batch(ids, token, now)) for token, ids in by_token.items())

    def _split(self, tasks: Sequence[AcquiredTask]) -> tuple[list[AcquiredTask], list[AcquiredTask]]:
        """The plain and the deferred finishes of ``tasks``, each lease once (listed twice, or two
        copies of one task: finished once) and none whose holder ended it already."""
        for t in tasks:
            if not isinstance(t, AcquiredTask) or t.queue is not self:
                raise ValidationError("finish takes tasks leased from this queue")
        once: dict[tuple, AcquiredTask] = {}
        for t in tasks:
            if not t.done:
                once.setdefault((t._id, t._token), t)
        return deferred_mod.split(list(once.values()))

    def _settle_entries(self, tasks: Sequence[AcquiredTask], now: float) -> list[Settled]:
        purge_at = now + self.config["retention_time"]
        return [Settled(t._id, t._token, purge_at, held=t.held_attempt) for t in tasks]

    @staticmethod
    def _mark_settled(tasks: Sequence[AcquiredTask], lost: Sequence[Settled], now: float) -> list[AcquiredTask]:
        lost_leases = {(s.id, s.token) for s in lost}  # a lease, not a task: one may hold an old and a new one
        out = []
        for t in tasks:
            if (t._id, t._token) in lost_leases:
                t.lost = True
                out.append(t)
            else:
                t._mark_finished("success", t.error, now)
        return out

    @property
    def notifies(self) -> bool:
        """Whether submissions wake listening workers at once (PostgreSQL, ``notify`` on)."""
        return self.store.channel is not None

    @property
    def wakes(self) -> bool:
        """Whether :meth:`listen` can wake a worker: by notification, or by the wake-up probe of
        the other databases (``wake_interval`` > 0)."""
        return self.notifies or self.config["wake_interval"] > 0

    def listen(self, on_notify: Callable[[], None], stop: threading.Event, *, timeout: float = 1.0) -> None:
        """Call ``on_notify()`` whenever tasks may have been submitted, until ``stop`` is set. Blocks;
        raises DatabaseError when the connection fails (listen again after a pause). PostgreSQL
        with ``notify`` on: by LISTEN/NOTIFY; elsewhere by reading the table's highest id every
        ``wake_interval`` seconds (see ``store/watch.py``). Only for queues where :attr:`wakes`."""
        if not self.wakes:
            raise ValidationError("this queue has no wake-ups (notify off on PostgreSQL, or wake_interval = 0)")
        self.store.wakeup_listen(on_notify, stop, timeout, probe_interval=self.config["wake_interval"])

    # -- reads ----------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Task:
        check_name(key, "task key")
        return Task(self, key)

    def list(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        user: str | None = None,
        limit: int | None = None,
        now: float | None = None,
        group: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        tracked: bool = False,
    ) -> Iterator[TaskMetadata]:
        """The tasks matching every filter given, in submission order: ``tag`` (read through the
        tag's index), ``tracked`` (only tracked tasks)."""
        now = self.now(now)
        if queue is not None:
            check_queue(queue)
        if tag is not None:
            check_tag(tag)
        if status is not None and status not in STATUSES:
            raise ValidationError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if limit is not None:
            check_int(limit, "limit", minimum=0)
        remaining = limit
        after = None
        while remaining is None or remaining > 0:
            page = 1000 if remaining is None else min(1000, remaining)
            rows = self.store.task_list(
                status=status,
                type=type,
                user=user,
                group=group,
                queue=queue,
                tag=tag,
                tracked=bool(tracked),
                limit=page,
                now=now,
                after_id=after,
            )
            for r in rows:
                yield metadata_from_row(r, now, table=self.table)
            if len(rows) < page:
                return
            after = rows[-1]["id"]
            if remaining is not None:
                remaining -= len(rows)

    def stats(self, *, now: float | None = None, queue: str | None = None) -> dict:
        """Tasks counted by status, outcome and type (of ``queue`` only, if given)."""
        now = self.now(now)
        if queue is not None:
            check_queue(queue)
        out: dict = {s: 0 for s in STATUSES}
        out["outcomes"] = {o: 0 for o in OUTCOMES}
        out["types"] = {}
        for type_, status, outcome, n in self.store.task_counts(now, queue):
            self._check_counted(type_, status, outcome, n)
            out[status] += n
            per = out["types"].setdefault(type_, {s: 0 for s in STATUSES})
            per[status] += n
            if outcome:
                out["outcomes"][outcome] = out["outcomes"].get(outcome, 0) + n
        out["total"] = sum(out[s] for s in STATUSES)
        return out

    def _check_counted(self, type_: Any, status: str, outcome: Any, n: int) -> None:
        """CorruptRowError for a group of ``stats`` that pq never writes (``list`` names its rows)."""
        found = (
            (status.split()[1], "a value out of range")
            if status.startswith("corrupt")
            else ("outcome", f"outcome {outcome!r}")
            if outcome is not None and outcome not in OUTCOMES
            else ("type", f"type {type_!r}")
            if rowcheck.name(type_)
            else None
        )
        if found:
            raise CorruptRowError(
                f"{n} {'row' if n == 1 else 'rows'} of table {self.table} {'holds' if n == 1 else 'hold'} {found[1]} "
                f"(column {found[0]}); "
                "pq never writes that (edited by hand?): 'list' names the first; correct or delete it"
            )

    def cleanup(self, *, now: float | None = None) -> int:
        """Purge the finished tasks whose retention ended (with their tags and history: events
        not counted yet are counted first), the registry rows of workers silent past
        ``registry_timeout``, the statistics past their retention and old receipts
        (``store/receipts.py``); how many tasks were purged."""
        now = self.now(now)
        purged = self.store.task_purge(now)
        self.store.worker_sweep(now - self.config["registry_timeout"])
        self.prune_stats(now=now)
        self.db.run(lambda conn: self.store.receipts.purge(conn, now), what="purge receipts")
        return purged

    # -- transactions ---------------------------------------------------------------------
    def transaction(
        self,
        fn: Callable[[Transaction], T],
        *,
        now: float | None = None,
        what: str = "transaction",
        write: bool = True,
        receipt: bool = False,
    ) -> T:
        """Run ``fn(tx)`` in one database transaction (retried as a whole on transient errors).
        ``write=False``: it only reads (on SQLite it then does not take the write lock).
        ``receipt``: a change that cannot tell from the rows whether an earlier run of it
        committed (an operator's): after a COMMIT whose outcome was unknown, it is not run again
        if it did, its first result returned (``store/receipts.py``)."""
        now = self.now(now)
        holder: dict = {}

        def work(conn):
            tx = Transaction(self, conn, now)
            holder["tx"] = tx
            return fn(tx)

        stamped = self.store.receipts.at(now) if receipt else None
        result = self.db.run(work, what=what, write=write, receipt=stamped)
        for cb in holder["tx"]._after_commit:
            cb()
        return result


def open(
    url: str | None = None,
    table: str = "pq_tasks",
    *,
    clock: Clock | None = None,
    rng: policy.RandomSource | None = None,
    **config: Any,
) -> Queue:
    """Open a queue. ``url`` is a SQLAlchemy URL; default: SQLite file ``pq.db`` here."""
    return Queue(url, table, clock=clock, rng=rng, **config)
