"""The schedule collection: add/modify/delete/list, lease-style poll, and the built-in tick.

``tick`` submits each due occurrence as a queue task keyed ``"<schedule key>.<scheduled time>"``
and advances the schedule in the same transaction, so a crash between the two can neither
lose nor double an occurrence, and any number of schedulers can tick at once. A due schedule
that cannot be computed (:mod:`perfectsched.rows`) is set aside in that transaction, logged once
after it committed, and fires again once an operator modifies or resumes it.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import queue_core
from queue_core.api.queue import (
    Transaction,
    check_duration,
    check_name,
    check_queue,
    check_time,
    decode_data,
    encode_data,
)
from queue_core.rules import policy
from queue_core.store.protocol import NewSchedule, open_schedule_store

from . import cron as cronlib
from . import rows as rows_mod
from .errors import (
    ConfigError,
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentNotFoundError,
    NotFoundError,
    PreemptedError,
    ValidationError,
)

log = logging.getLogger("perfectsched.scheduler")

#: perfectsched's own config keys (on top of queue_core's)
EXTRA_KEYS: dict[str, tuple] = {
    "schedule_table": ("pq_schedules", "str", "schedule table name"),
    "timezone": ("UTC", "str", "default timezone of new schedules"),
    "catchup_grace": (60.0, "float0", "catchup=skip still submits an occurrence at most this late (s)"),
    "tick_batch": (200, "int+", "schedules locked per tick transaction"),
}

MAX_DELAY = rows_mod.MAX_DELAY


@dataclass(frozen=True)
class ScheduleMetadata:
    key: str
    type: str
    cron: str
    delay: int
    timezone: str
    data: dict
    next_time: int
    next_run_time: float
    catchup: str
    dst: str
    timeout: float = 0.0
    #: the queue its occurrences' tasks are submitted to, and the tags they carry
    queue_name: str = "default"
    tags: tuple[str, ...] = ()
    leased: bool = False
    #: ``active``, or ``set_aside``: it cannot be computed and never fires until modified or resumed
    status: str = "active"
    #: why it was set aside (None while active)
    error: str | None = None
    #: why it cannot be computed as stored, column first (``column cron: invalid cron ...``): a
    #: value perfectsched never writes (a row edited by hand), a timezone this host lacks. None
    #: when it can. An active schedule with a problem is set aside when it is due.
    problem: str | None = None

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _num(x: float) -> float | int:
    try:
        return int(x) if float(x).is_integer() else x
    except (TypeError, ValueError):  # a column edited by hand: shown as it is
        return x


def _shown_data(text: str) -> dict:
    """The data as stored; text that is not JSON (a row edited by hand) as ``{"value": text}``."""
    try:
        return decode_data(text)
    except (ValueError, RecursionError):
        return {"value": text}


def _shown_tags(text: str | None) -> tuple[str, ...]:
    """The tags as stored; text that is not a list of text (a row edited by hand) as it is."""
    try:
        tags = [] if text is None else json.loads(text)
    except (ValueError, RecursionError):
        return (str(text),)
    return tuple(str(t) for t in tags) if isinstance(tags, list) else (str(text),)


def _meta(row: Mapping, problem: str | None) -> ScheduleMetadata:
    return ScheduleMetadata(
        key=row["key"],
        type=row["type"],
        cron=row["cron"],
        delay=row["delay"],
        timezone=row["timezone"],
        data=_shown_data(row["data"]),
        next_time=row["next_time"],
        next_run_time=_num(row["next_run_time"]),
        catchup=row["catchup"],
        dst=row["dst"],
        timeout=_num(row["timeout"]),
        leased=bool(row["leased"]),
        status="active" if row["error"] is None else "set_aside",
        error=row["error"],
        problem=problem,
        queue_name=row["queue"],
        tags=_shown_tags(row.get("tags")),
    )


class Schedule:
    """A reference to one schedule by key."""

    def __init__(self, sched: Scheduler, key: str):
        self.scheduler, self.key = sched, key

    def __repr__(self) -> str:
        return f"<Schedule {self.key!r}>"

    def exists(self) -> bool:
        return self.scheduler.store.schedule_get(self.key) is not None

    def metadata(self, *, check: bool = True) -> ScheduleMetadata:
        """The schedule as stored, with the ``problem`` that keeps it from being computed, if any.
        With ``check``, an active schedule whose row holds a value perfectsched never writes (edited
        by hand) raises CorruptRowError naming the table, the key and the column rather than being
        returned as if it could run; a set-aside one is returned (its ``error`` says why). Without,
        it is returned as stored, as :meth:`Scheduler.list` returns it."""
        sched = self.scheduler
        row = sched.store.schedule_get(self.key)
        if row is None:
            raise NotFoundError(f"schedule {self.key!r} not found")
        if check and row["error"] is None:
            sched.store.schedule_check(row)
        return sched.describe(row)

    def delete(self) -> None:
        def work(conn):
            if not self.scheduler.store.schedule_delete(conn, self.key):
                raise IdempotentNotFoundError(f"schedule {self.key!r} not found")

        self.scheduler.run_once(work, what="delete schedule")

    def resume(self, now: float | None = None) -> bool:
        """Bring back a set-aside schedule as it is, from the occurrence it stopped at (its catch-up
        policy decides about the ones missed since). Returns False for an active schedule (nothing
        to do); raises a ValidationError saying why when it still cannot be computed, every column
        checked as the scheduler checks it (nothing written: it stays set aside, never cleared only
        to be set aside again)."""
        sched = self.scheduler
        now = sched.now(now)

        def work(conn):
            row = sched.store.schedule_lock(conn, self.key)
            if row is None:
                raise IdempotentNotFoundError(f"schedule {self.key!r} not found")
            if row["error"] is None:
                return False
            sched.check(row)
            return sched.store.schedule_resume(conn, self.key, row["next_time"], now)

        return sched.run_once(work, what="resume schedule", now=now)


class ScheduledTask:
    """One occurrence of a schedule, leased by this process (``poll``)."""

    def __init__(self, sched: Scheduler, row: Mapping, token: int):
        self.scheduler = sched
        self.queue = sched.queue
        self._token = token
        self.key: str = row["key"]
        self.type: str = row["type"]
        self.data: dict = decode_data(row["data"])
        self.cron: str = row["cron"]
        self.delay: int = row["delay"]
        self.timezone: str = row["timezone"]
        self.dst: str = row["dst"]
        self.scheduled_time: int = int(row["next_time"])
        self.attempts = 1
        self.done = False
        self.cancel_requested = False

    def __repr__(self) -> str:
        return f"<ScheduledTask {self.key!r} scheduled_time={self.scheduled_time}>"

    def _held(self, what: str, write) -> None:
        """Run ``write(conn, store)``, a holder's transition; when it did not apply, raise why —
        unless an earlier run of this transaction applied it (its acknowledgement was lost)."""
        store = self.scheduler.store

        def work(conn):
            if write(conn, store):
                return
            row = store.schedule_get(self.key, conn)
            if not (row is not None and self.scheduler.db.last_run_retried() and self._settled_by_me(row)):
                self._refused(what, row)

        self.scheduler.db.run(work, what=what)

    def _settled_by_me(self, row: Mapping) -> bool:
        """Whether this holder finished, retried or released ``row``: only those transitions drop
        the lease and keep its token (a lease, advance, reschedule or set-aside changes the token)."""
        return row["lease_token"] == self._token and not row["leased"] and row["error"] is None

    def _refused(self, what: str, row: Mapping | None) -> NoReturn:
        if row is None:
            raise PreemptedError(f"{what}: schedule {self.key!r} was deleted")
        if row["error"] is not None:
            raise PreemptedError(f"{what}: schedule {self.key!r} was set aside: {row['error']}")
        if int(row["next_time"]) != self.scheduled_time and row["lease_token"] == self._token:
            raise IdempotentAlreadyFinishedError(f"{what}: occurrence {self.scheduled_time} already finished")
        if row["lease_token"] == self._token and row["leased"]:
            raise PreemptedError(f"{what}: the lease on schedule {self.key!r} expired (held past alive_time)")
        if row["lease_token"] == self._token:
            raise PreemptedError(f"{what}: occurrence {self.scheduled_time} was already retried or released")
        raise PreemptedError(f"{what}: the lease on schedule {self.key!r} was taken over")

    def heartbeat(self, alive_time: float | None = None, now: float | None = None) -> None:
        alive = self.scheduler.queue._alive(alive_time)

        def extend(conn, store) -> bool:
            at = self.scheduler.now(now)  # in each run: a retried one judges the lease at its own time
            return store.schedule_heartbeat(conn, self.key, self._token, at + alive, at)

        self._held("heartbeat", extend)

    def finish(self, now: float | None = None) -> None:
        """Advance to the occurrence after the scheduled one (not after now)."""
        spec = {"cron": self.cron, "timezone": self.timezone, "dst": self.dst}
        nxt = cronlib.next_time(spec["cron"], self.scheduled_time, spec["timezone"], spec["dst"])
        now = self.scheduler.now(now)
        self._held("finish", lambda c, st: st.schedule_finish(c, self.key, self._token, nxt, nxt + self.delay, now))
        self.done = True

    def retry(self, retry_wait: float | None = None, now: float | None = None, error: Any = None) -> None:
        now = self.scheduler.now(now)
        given = None if retry_wait is None else check_duration(retry_wait, "retry_wait")
        wait = policy.requested_wait(given, self.scheduler.queue.config["retry_wait"])
        self._held("retry", lambda c, st: st.schedule_retry(c, self.key, self._token, now + wait))
        self.done = True

    def release(self, now: float | None = None) -> None:
        now = self.scheduler.now(now)
        self._held("release", lambda c, st: st.schedule_release(c, self.key, self._token, now))
        self.done = True

    def retry_or_fail(self, error: Any = None, now: float | None = None) -> str:
        """After a handler error: retried after ``retry_wait``, the same every time (an occurrence
        has no attempt limit: the schedule goes on); returns ``"retry"``. A permanent error
        (:func:`queue_core.rules.policy.is_permanent`: the occurrence can never succeed) is not retried:
        the occurrence is skipped, the schedule advanced to its next one; returns ``"skip"``."""
        if policy.is_permanent(error):
            self.finish(now=now)
            return "skip"
        queue = self.scheduler.queue
        self.retry(policy.backoff(policy.Backoff.fixed(queue.config["retry_wait"]), self.attempts, queue.rng), now=now)
        return "retry"


class Scheduler:
    """Schedules stored in ``table`` submitting into the queue table ``queue_table``."""

    def __init__(
        self,
        url: str | None = None,
        table: str = "pq_schedules",
        queue_table: str = "pq_tasks",
        timezone: str = "UTC",
        *,
        clock=None,
        **config: Any,
    ):
        own = {k: config.pop(k) for k in list(config) if k in EXTRA_KEYS}
        self.options = {k: v[0] for k, v in EXTRA_KEYS.items()} | own
        try:
            self.queue = queue_core.open(url, queue_table, clock=clock, **config)
        except queue_core.ConfigError as exc:
            raise ConfigError(str(exc)) from None
        self.timezone = cronlib.validate_timezone(timezone).key
        self.db = self.queue.db
        self.store = open_schedule_store(self.db, table)
        self.table = table

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.queue.close()

    def now(self, now: float | None = None) -> float:
        return self.queue.now(now)

    def run_once(self, work, *, what: str, now: float | None = None):
        """Run the operator's change ``work(conn)`` with a receipt in the queue's table: after a
        COMMIT whose outcome was unknown, one that committed is not run again (an add would
        find its own schedule and report it taken, a delete find it gone)."""
        return self.db.run(work, what=what, receipt=self.queue.store.receipts.at(self.now(now)))

    def init(self, force: bool = False) -> None:
        """Create the schedule table and the queue table (idempotent)."""
        self.queue.init(force=False)
        self.store.tables_init(force=force)

    # -- add / modify ---------------------------------------------------------------------
    def check(self, row: Mapping) -> None:
        """Raise a ValidationError saying why the stored ``row`` cannot be computed (nothing when
        it can): the rules of :mod:`perfectsched.rows`, those ``add`` applies to its arguments."""
        try:
            rows_mod.check(row, self.queue.config["max_data_size"])
        except rows_mod.CANNOT_COMPUTE as exc:
            if isinstance(exc, queue_core.ValidationError):
                raise
            raise ValidationError(f"schedule {row['key']!r} cannot be computed: {rows_mod.reason(exc)}") from None

    def add(
        self,
        key: str,
        type: str,
        *,
        cron: str,
        data: Mapping | None = None,
        delay: int = 0,
        timezone: str | None = None,
        next_time: float | None = None,
        next_run_time: float | None = None,
        catchup: str = "all",
        dst: str = "vixie",
        now: float | None = None,
        queue: str = "default",
        tags: Iterable[str] = (),
    ) -> Schedule:
        """Add a schedule submitting a ``type`` task to ``queue`` (carrying ``tags``) at each
        occurrence of ``cron`` (five fields, or an interval ``@every:15m+5m``)."""
        now = self.now(now)
        rows_mod.check_key(key)
        check_name(type, "schedule type")
        check_queue(queue)
        cron, tz, delay, catchup, dst = rows_mod.check_spec(cron, timezone or self.timezone, delay, catchup, dst)
        start = now if next_time is None else check_time(next_time, "next_time")
        nt = cronlib.cron_time(cron, start, tz, dst)
        nrt = nt + delay if next_run_time is None else check_time(next_run_time, "next_run_time")
        new = NewSchedule(
            key=key,
            type=type,
            cron=cron,
            delay=delay,
            timezone=tz,
            next_time=nt,
            data=encode_data(data, self.queue.config["max_data_size"]),
            next_run_time=nrt,
            catchup=catchup,
            dst=dst,
            queue=queue,
            tags=rows_mod.tags_text(tags),
        )
        if not self.run_once(lambda c: self.store.schedule_add(c, new, now), what="add schedule", now=now):
            raise IdempotentAlreadyExistsError(f"schedule {key!r} already exists")
        return Schedule(self, key)

    def modify(
        self,
        key: str,
        *,
        cron: str | None = None,
        type: str | None = None,
        data: Mapping | None = None,
        delay: int | None = None,
        timezone: str | None = None,
        catchup: str | None = None,
        dst: str | None = None,
        now: float | None = None,
        queue: str | None = None,
        tags: Iterable[str] | None = None,
    ) -> ScheduleMetadata:
        """Change a schedule; a new cron, timezone, delay or dst policy recomputes next_time from
        now, and so does any change of a set-aside schedule (which brings it back). A change that
        leaves the schedule unable to fire is refused (ValidationError) and writes nothing."""
        now = self.now(now)
        check_name(key, "schedule key")
        if type is not None:
            check_name(type, "schedule type")
        if queue is not None:
            check_queue(queue)
        data_text = None if data is None else encode_data(data, self.queue.config["max_data_size"])
        spec = {"cron": cron, "timezone": timezone, "delay": delay, "catchup": catchup, "dst": dst}
        tags_text = None if tags is None else rows_mod.tags_text(tags) or "[]"
        other = {"type": type, "data": data_text, "queue": queue, "tags": tags_text}

        def work(conn):
            row = self.store.schedule_lock(conn, key)
            if row is None:
                raise IdempotentNotFoundError(f"schedule {key!r} not found")
            self._change(conn, row, spec, other, now)
            written = self.store.schedule_get(key, conn)  # the row is locked: the change applied
            if written is None:
                raise IdempotentNotFoundError(f"schedule {key!r} not found")
            self.check(written)  # raises: the transaction rolls back
            return _meta(written, None)

        return self.db.run(work, what="modify schedule")

    def _change(self, conn, row: Mapping, spec: dict, other: dict, now: float) -> None:
        """``configure`` the locked ``row``, or ``reschedule`` it from now (new times, or a row set
        aside or that cannot be computed as stored: its lease and time columns written anew)."""
        merged = [row[k] if v is None else v for k, v in spec.items()]
        c, tz, d, cu, ds = rows_mod.check_spec(*merged)
        same = (c, tz, d, ds) == (row["cron"], row["timezone"], row["delay"], row["dst"])
        if same and row["error"] is None and self.problem(row) is None:
            self.store.schedule_configure(conn, row["key"], now, catchup=cu, **other)
            return
        nt = cronlib.cron_time(c, now, tz, ds)
        self.store.schedule_reschedule(
            conn, row["key"], now, cron=c, timezone=tz, delay=d, dst=ds, catchup=cu, next_time=nt, **other
        )

    # -- reads ----------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Schedule:
        check_name(key, "schedule key")
        return Schedule(self, key)

    def list(self) -> Iterator[ScheduleMetadata]:
        """Every schedule as stored, next due first: one that cannot be computed too, with its
        ``problem`` (a row edited by hand never hides the others, nor makes the list fail)."""
        return iter([self.describe(r) for r in self.store.schedule_list()])

    def problem(self, row: Mapping) -> str | None:
        """Why the stored ``row`` cannot be computed (:func:`perfectsched.rows.problem`); None when it can."""
        return rows_mod.problem(row, self.queue.config["max_data_size"])

    def describe(self, row: Mapping) -> ScheduleMetadata:
        """The stored ``row`` as a :class:`ScheduleMetadata`, with its problem."""
        return _meta(row, self.problem(row))

    # -- what a due schedule does ---------------------------------------------------------------
    @property
    def _plan_options(self) -> dict:
        return {"grace": self.options["catchup_grace"], "max_data_size": self.queue.config["max_data_size"]}

    def _set_aside(self, conn, plans: builtins.list[rows_mod.SetAside], now: float) -> builtins.list[rows_mod.SetAside]:
        """Set aside the due schedules that cannot be computed; returns those it applied to."""
        reasons = [dataclasses.replace(p, reason=f"{p.reason} (set aside by {self.queue.owner})") for p in plans]
        return [p for p in reasons if self.store.schedule_set_aside(conn, p.key, p.expected, p.reason, now)]

    @staticmethod
    def _log_set_aside(done: builtins.list[rows_mod.SetAside]) -> None:
        """Once per schedule, after the transaction that set it aside committed."""
        for p in done:
            log.error(
                "set aside schedule=%s: it cannot be computed and fires again once it is modified or resumed: %s",
                p.key,
                p.reason,
            )

    # -- poll (custom handlers) ---------------------------------------------------------------
    def poll(self, *, alive_time: float | None = None, now: float | None = None) -> ScheduledTask | None:
        """Lease one due occurrence (after applying the schedule's catch-up policy); a due
        schedule that cannot be computed is set aside on the way."""
        now = self.now(now)
        alive = self.queue._alive(alive_time)
        # Drawn before the transaction: when it runs again after a transient error that may have
        # hidden its COMMIT (a lost acknowledgement), the occurrence it already leased under this
        # token is delivered instead of being left to expire unknown (and fire a lease late).
        token = self.store.schedule_token()

        def work(conn):
            aside: list[rows_mod.SetAside] = []
            if self.db.last_run_retried() and (mine := self.store.schedule_leased_under(conn, token, now + alive)):
                return ScheduledTask(self, mine, token), aside
            for _ in range(50):
                rows = self.store.schedule_due(conn, now, 1)
                if not rows:
                    break
                plan = rows_mod.poll_plan(rows[0], now, **self._plan_options)
                task = self._poll_one(conn, plan, now, alive, aside, token)
                if task is not None:
                    return task, aside
            return None, aside

        task, aside = self.db.run(work, what="poll schedules")
        self._log_set_aside(aside)
        return task

    def _poll_one(self, conn, plan, now: float, alive: float, aside: builtins.list, token: int) -> ScheduledTask | None:
        if isinstance(plan, rows_mod.SetAside):
            aside += self._set_aside(conn, [plan], now)
            return None
        if isinstance(plan, rows_mod.Fire):  # missed ones skipped: advance, look at the next schedule
            self.store.schedule_advance_many(conn, [plan.advance], now)
            return None
        row = plan.row
        if not self.store.schedule_lease(conn, row["key"], row["next_time"], plan.occurrence, now, now + alive, token):
            return None
        return ScheduledTask(self, {**row, "next_time": plan.occurrence}, token)

    # -- tick (the built-in submitter) -------------------------------------------------------
    def tick(self, *, now: float | None = None) -> int:
        """Submit every due occurrence into the queue; returns how many tasks were submitted. A
        due schedule that cannot be computed is set aside (and logged once); the others fire."""
        now = self.now(now)
        total = 0
        for _ in range(10_000):
            done, submitted, aside = self.queue.transaction(lambda tx: self._tick_batch(tx, now), now=now, what="tick")
            total += submitted
            self._log_set_aside(aside)
            if done == 0:  # every due schedule advanced past now (or is held by another scheduler)
                break
        return total

    def _tick_batch(self, tx: Transaction, now: float) -> tuple[int, int, builtins.list[rows_mod.SetAside]]:
        rows = self.store.schedule_due(tx.conn, now, self.options["tick_batch"])
        plans = [rows_mod.tick_plan(r, now, new_task=tx.new_task, **self._plan_options) for r in rows]
        fire = [p for p in plans if isinstance(p, rows_mod.Fire)]
        aside = self._set_aside(tx.conn, [p for p in plans if isinstance(p, rows_mod.SetAside)], now)
        # The whole batch in a few statements: one insert of every occurrence's task, one
        # batched compare-and-set advance of every schedule, committed together.
        tasks = [t for p in fire for t in p.tasks]
        submitted = tx.insert(tasks) if tasks else 0
        self.store.schedule_advance_many(tx.conn, [p.advance for p in fire], now)
        return len(rows), submitted, aside

    def check_tables(self) -> None:
        """SchemaError when the schedule table was never created, or was made by an older release
        that ``init`` has not upgraded yet."""
        self.store.tables_require_current()

    def check_writable(self) -> None:
        """AccessDeniedError when this account or database refuses writes to the schedule table (a
        read-only replica, transaction or file; no UPDATE grant: every tick updates it). Writes
        nothing. The queue table is left to the submissions: a scheduler only inserts there."""
        self.store.tables_check_writable()

    def next_due(self) -> float | None:
        """When the next schedule becomes due (None without schedules)."""
        return self.store.schedule_next_due_time()

    def next_occurrence(self) -> tuple[str, float, int, str] | None:
        """The schedule due first: (key, due time, scheduled time, timezone); None without any."""
        return self.store.schedule_next_due()


def open(
    url: str | None = None,
    table: str = "pq_schedules",
    queue_table: str = "pq_tasks",
    timezone: str = "UTC",
    *,
    clock=None,
    **config: Any,
) -> Scheduler:
    return Scheduler(url, table, queue_table, timezone, clock=clock, **config)
