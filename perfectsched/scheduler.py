"""The schedule collection: add/modify/delete/list, lease-style poll, and the built-in tick.

``tick`` submits each due occurrence as a queue task keyed ``"<schedule key>.<scheduled time>"``
and advances the schedule in the same transaction, so a crash between the two can neither
lose nor double an occurrence, and any number of schedulers can tick at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import queue_core
from queue_core import policy
from queue_core.queue import Transaction, check_duration, check_name, check_time, decode_data, encode_data
from queue_core.store.schedules import NewSchedule, ScheduleStore

from . import catchup as catchup_mod
from . import cron as cronlib
from .errors import (
    ConfigError,
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentNotFoundError,
    NotFoundError,
    PreemptedError,
    ValidationError,
)

#: perfectsched's own config keys (on top of queue_core's)
EXTRA_KEYS: dict[str, tuple] = {
    "schedule_table": ("pq_schedules", "str", "schedule table name"),
    "timezone": ("UTC", "str", "default timezone of new schedules"),
    "catchup_grace": (60.0, "float0", "catchup=skip still submits an occurrence at most this late (s)"),
    "tick_batch": (200, "int+", "schedules locked per tick transaction"),
}

MAX_DELAY = 366 * 86400


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
    leased: bool = False

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _meta(row: Mapping) -> ScheduleMetadata:
    return ScheduleMetadata(
        key=row["key"],
        type=row["type"],
        cron=row["cron"],
        delay=row["delay"],
        timezone=row["timezone"],
        data=decode_data(row["data"]),
        next_time=int(row["next_time"]),
        next_run_time=_num(row["next_run_time"]),
        catchup=row["catchup"],
        dst=row["dst"],
        timeout=_num(row["timeout"]),
        leased=bool(row["leased"]),
    )


def _spec(row: Mapping) -> dict:
    return {
        "cron": row["cron"],
        "timezone": row["timezone"],
        "dst": row["dst"],
        "delay": row["delay"],
        "catchup": row["catchup"],
    }


class Schedule:
    """A reference to one schedule by key."""

    def __init__(self, sched: Scheduler, key: str):
        self.scheduler, self.key = sched, key

    def __repr__(self) -> str:
        return f"<Schedule {self.key!r}>"

    def exists(self) -> bool:
        return self.scheduler.store.get(self.key) is not None

    def metadata(self) -> ScheduleMetadata:
        row = self.scheduler.store.get(self.key)
        if row is None:
            raise NotFoundError(f"schedule {self.key!r} not found")
        return _meta(row)

    def delete(self) -> None:
        def work(conn):
            if not self.scheduler.store.delete(conn, self.key):
                raise IdempotentNotFoundError(f"schedule {self.key!r} not found")

        self.scheduler.db.run(work, what="delete schedule")


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
        """Run ``write(conn, store)``, a holder's transition; when it did not apply, raise why."""
        store = self.scheduler.store

        def work(conn):
            if write(conn, store):
                return
            row = store.get(self.key, conn)
            if row is None:
                raise PreemptedError(f"{what}: schedule {self.key!r} was deleted")
            if int(row["next_time"]) != self.scheduled_time and row["lease_token"] == self._token:
                raise IdempotentAlreadyFinishedError(f"{what}: occurrence {self.scheduled_time} already finished")
            if row["lease_token"] == self._token and row["leased"]:
                raise PreemptedError(f"{what}: the lease on schedule {self.key!r} expired (held past alive_time)")
            raise PreemptedError(f"{what}: the lease on schedule {self.key!r} was taken over")

        self.scheduler.db.run(work, what=what)

    def heartbeat(self, alive_time: float | None = None, now: float | None = None) -> None:
        now = self.scheduler.now(now)
        alive = self.scheduler.queue._alive(alive_time)
        self._held("heartbeat", lambda c, st: st.heartbeat(c, self.key, self._token, now + alive, now))

    def finish(self, now: float | None = None) -> None:
        """Advance to the occurrence after the scheduled one (not after now)."""
        spec = {"cron": self.cron, "timezone": self.timezone, "dst": self.dst}
        nxt = cronlib.next_time(spec["cron"], self.scheduled_time, spec["timezone"], spec["dst"])
        now = self.scheduler.now(now)
        self._held("finish", lambda c, st: st.finish(c, self.key, self._token, nxt, nxt + self.delay, now))
        self.done = True

    def retry(self, retry_wait: float | None = None, now: float | None = None, error: Any = None) -> None:
        now = self.scheduler.now(now)
        wait = (
            self.scheduler.queue.config["retry_wait"]
            if retry_wait is None
            else check_duration(retry_wait, "retry_wait")
        )
        self._held("retry", lambda c, st: st.retry(c, self.key, self._token, now + wait))
        self.done = True

    def release(self, now: float | None = None) -> None:
        now = self.scheduler.now(now)
        self._held("release", lambda c, st: st.release(c, self.key, self._token, now))
        self.done = True

    def retry_or_fail(self, error: Any = None, now: float | None = None) -> str:
        """After a handler error: retried after ``retry_wait``, the same every time (an occurrence
        has no attempt limit: the schedule goes on)."""
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
        self.store = ScheduleStore(self.db, table)
        self.table = table

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.queue.close()

    def now(self, now: float | None = None) -> float:
        return self.queue.now(now)

    def init(self, force: bool = False) -> None:
        """Create the schedule table and the queue table (idempotent)."""
        self.queue.init(force=False)
        self.store.init(force=force)

    # -- add / modify ---------------------------------------------------------------------
    def _validate(self, cron, timezone, delay, catchup, dst) -> tuple[str, str, int, str, str]:
        cron = cronlib.validate_cron(cron)
        tz = cronlib.validate_timezone(timezone).key
        if isinstance(delay, bool) or not isinstance(delay, int) or not (0 <= delay <= MAX_DELAY):
            raise ValidationError(f"delay must be whole seconds between 0 and {MAX_DELAY}, not {delay!r}")
        if catchup not in catchup_mod.POLICIES:
            raise ValidationError(f"catchup must be one of {', '.join(catchup_mod.POLICIES)}, not {catchup!r}")
        dst = cronlib.validate_dst(dst)
        return cron, tz, delay, catchup, dst

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
    ) -> Schedule:
        now = self.now(now)
        self._check_key(key)
        check_name(type, "schedule type")
        cron, tz, delay, catchup, dst = self._validate(cron, timezone or self.timezone, delay, catchup, dst)
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
        )
        if not self.db.run(lambda c: self.store.add(c, new, now), what="add schedule"):
            raise IdempotentAlreadyExistsError(f"schedule {key!r} already exists")
        return Schedule(self, key)

    @staticmethod
    def _check_key(key) -> None:
        check_name(key, "schedule key")
        if len(key) > 240:
            raise ValidationError("schedule key is longer than 240 characters (task keys add '.<time>')")

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
    ) -> ScheduleMetadata:
        """Change a schedule; a new cron, timezone, delay or dst policy recomputes next_time from now."""
        now = self.now(now)
        check_name(key, "schedule key")
        if type is not None:
            check_name(type, "schedule type")
        data_text = None if data is None else encode_data(data, self.queue.config["max_data_size"])

        def work(conn):
            row = self.store.lock(conn, key)
            if row is None:
                raise IdempotentNotFoundError(f"schedule {key!r} not found")
            c, tz, d, cu, ds = self._validate(
                row["cron"] if cron is None else cron,
                row["timezone"] if timezone is None else timezone,
                row["delay"] if delay is None else delay,
                row["catchup"] if catchup is None else catchup,
                row["dst"] if dst is None else dst,
            )
            if (c, tz, d, ds) == (row["cron"], row["timezone"], row["delay"], row["dst"]):
                self.store.configure(conn, key, now, type=type, data=data_text, catchup=cu)
            else:
                self.store.reschedule(
                    conn,
                    key,
                    now,
                    cron=c,
                    timezone=tz,
                    delay=d,
                    dst=ds,
                    type=type,
                    data=data_text,
                    catchup=cu,
                    next_time=cronlib.cron_time(c, now, tz, ds),
                )
            changed = self.store.get(key, conn)  # the row is locked: both apply
            if changed is None:
                raise IdempotentNotFoundError(f"schedule {key!r} not found")
            return _meta(changed)

        return self.db.run(work, what="modify schedule")

    # -- reads ----------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Schedule:
        check_name(key, "schedule key")
        return Schedule(self, key)

    def list(self) -> Iterator[ScheduleMetadata]:
        return iter([_meta(r) for r in self.store.list()])

    # -- poll (custom handlers) ---------------------------------------------------------------
    def poll(self, *, alive_time: float | None = None, now: float | None = None) -> ScheduledTask | None:
        """Lease one due occurrence (after applying the schedule's catch-up policy)."""
        now = self.now(now)
        alive = self.queue._alive(alive_time)

        def work(conn):
            for _ in range(50):
                rows = self.store.due(conn, now, 1)
                if not rows:
                    return None
                row = rows[0]
                todo, after = catchup_mod.plan(
                    _spec(row), int(row["next_time"]), now, grace=self.options["catchup_grace"], limit=1
                )
                if not todo:  # set aside: advance without delivering, look at the next schedule
                    skip = (row["key"], int(row["next_time"]), after, after + row["delay"])
                    self.store.advance_many(conn, [skip], now)
                    continue
                token = self.store.lease(conn, row["key"], int(row["next_time"]), todo[0], now, now + alive)
                if token is not None:  # the row is locked: it applies
                    return ScheduledTask(self, {**row, "next_time": todo[0]}, token)
            return None

        return self.db.run(work, what="poll schedules")

    # -- tick (the built-in submitter) -------------------------------------------------------
    def tick(self, *, now: float | None = None) -> int:
        """Submit every due occurrence into the queue; returns how many tasks were submitted."""
        now = self.now(now)
        total = 0
        for _ in range(10_000):
            done, submitted = self.queue.transaction(lambda tx: self._tick_batch(tx, now), now=now, what="tick")
            total += submitted
            if done == 0:  # every due schedule advanced past now (or is held by another scheduler)
                break
        return total

    def _tick_batch(self, tx: Transaction, now: float) -> tuple[int, int]:
        rows = self.store.due(tx.conn, now, self.options["tick_batch"])
        tasks: list[dict] = []
        advances: list[tuple[str, int, int, float]] = []
        for row in rows:
            todo, after = catchup_mod.plan(_spec(row), int(row["next_time"]), now, grace=self.options["catchup_grace"])
            if todo:
                data = json.loads(row["data"]) if row["data"] else {}
                tasks += (
                    {
                        "key": f"{row['key']}.{o}",
                        "type": row["type"],
                        "data": data,
                        "run_at": row["next_run_time"] if o == int(row["next_time"]) else o + row["delay"],
                    }
                    for o in todo
                )
            advances.append((row["key"], int(row["next_time"]), after, after + row["delay"]))
        # The whole batch in a few statements: one insert of every occurrence's task, one
        # batched compare-and-set advance of every schedule, committed together.
        submitted = tx.submit_many(tasks) if tasks else 0
        self.store.advance_many(tx.conn, advances, now)
        return len(rows), submitted

    def next_due(self) -> float | None:
        """When the next schedule becomes due (None without schedules)."""
        return self.store.next_timeout()


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
