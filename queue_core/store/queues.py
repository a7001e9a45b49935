"""Named queues (store layer): the settings operators give a queue (pause, limits) and the
counts of its rows, the part :class:`QueueRows` of :class:`~queue_core.store.tasks.SqlStore`.

Every task row names its queue (column ``queue``). The settings live in ``<table>_queues``, a
row per queue an operator paused or limited; a queue without a row runs, unlimited. The claim
(``claim/queues.py``) reads them in its own transaction, by :func:`settings_in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..rules.task_states import FINISHED, LIVE, PENDING
from .database import Database
from .transitions import lease_held


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` starts of queue ``queue`` in any ``window`` seconds, per value of ``key``
    (``user``, ``type``) or for the whole queue (None)."""

    queue: str
    limit: int
    window: float
    key: str | None


@dataclass(frozen=True)
class QueueSettings:
    """What an operator set for a queue (a queue without a settings row: the defaults)."""

    name: str
    paused: bool = False
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_window: float | None = None
    rate_key: str | None = None
    updated_at: float | None = None

    @property
    def rate(self) -> RateLimit | None:
        """Its rate limit, if it has one."""
        if self.rate_limit is None or self.rate_window is None:
            return None
        return RateLimit(self.name, self.rate_limit, self.rate_window, self.rate_key)

    @property
    def limited(self) -> bool:
        """Whether a claim must count under the queue's lock before it leases."""
        return self.concurrency is not None or self.rate_limit is not None


def _settings(row: Any) -> QueueSettings:
    return QueueSettings(
        name=row.name,
        paused=bool(row.paused),
        concurrency=row.concurrency,
        rate_limit=row.rate_limit,
        rate_window=row.rate_window,
        rate_key=row.rate_key,
        updated_at=row.updated_at,
    )


#: the statuses :meth:`QueueRows.queue_counts` counts
QUEUE_STATUSES = ("waiting", "running", "pending", "finished")


def settings_in(conn, db: Database, q: sa.Table, names: Sequence[str], lock: bool = False) -> dict[str, QueueSettings]:
    """The settings rows (of the settings table ``q``) of ``names`` (absent: defaults); with
    ``lock``, the rows of the limited ones are locked, in name order, until the transaction ends."""
    rows = {r.name: _settings(r) for r in conn.execute(sa.select(q).where(q.c.name.in_(list(names))))}
    limited = sorted(name for name, s in rows.items() if s.limited)
    if lock and limited:
        stmt = sa.select(q).where(q.c.name.in_(limited)).order_by(q.c.name)
        rows.update({r.name: _settings(r) for r in conn.execute(db.dialect.lock_rows(stmt))})
    return rows


class QueueRows:
    """The queues of the task table ``t``: their settings (``queues_t``) and counts
    (``live_counts(now)``: the statistics' counts of live rows per queue and type)."""

    def __init__(self, db: Database, t: sa.Table, queues_t: sa.Table, live_counts):
        self.db, self.t, self.queues_t, self.live_counts = db, t, queues_t, live_counts

    def queue_settings_all(self) -> dict[str, QueueSettings]:
        q = self.queues_t
        return self.db.run(
            lambda c: {r.name: _settings(r) for r in c.execute(sa.select(q))}, write=False, what="queue settings"
        )

    def queue_set_paused(self, name: str, paused: bool, now: float) -> QueueSettings:
        """Pause queue ``name`` (no claim leases its tasks) or resume it; returns its settings."""
        return self._write_settings(name, now, {"paused": 1 if paused else 0}, f"pause queue {name}")

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
        limits = {
            "concurrency": concurrency,
            "rate_limit": rate_limit,
            "rate_window": rate_window,
            "rate_key": rate_key,
        }
        return self._write_settings(name, now, limits, f"limit queue {name}")

    def _write_settings(self, name: str, now: float, values: dict[str, Any], what: str) -> QueueSettings:
        """Write ``values`` to the settings row of queue ``name``, made first if it has none."""
        q = self.queues_t

        def work(conn):
            found = conn.execute(self.db.dialect.lock_rows(sa.select(q.c.name).where(q.c.name == name))).first()
            if found is None:
                conn.execute(self.db.dialect.insert_if_absent(q, "name").values(name=name, updated_at=now))
            conn.execute(sa.update(q).where(q.c.name == name).values(updated_at=now, **values))
            return _settings(conn.execute(sa.select(q).where(q.c.name == name)).one())

        return self.db.run(work, what=what)

    def queue_known(self, name: str) -> bool:
        """Whether queue ``name`` has settings or tasks (any state)."""
        t, q = self.t, self.queues_t

        def read(conn):
            if conn.execute(sa.select(q.c.name).where(q.c.name == name)).first() is not None:
                return True
            # through the claim index per state: no scan of other queues' rows
            return any(
                conn.execute(sa.select(t.c.id).where(t.c.state == state, t.c.queue == name).limit(1)).first()
                for state in (LIVE, FINISHED, PENDING)
            )

        return self.db.run(read, write=False, what="look up queue")

    def queue_counts(self, now: float) -> dict[str, dict[str, float]]:
        """Per queue that has rows: its rows by status (``waiting``, ``running``, ``pending``,
        ``finished``) and ``oldest_due``, the earliest due time of its waiting rows that are due
        (None: none is). One read of the whole table: an operator's question, not a claim's."""
        t = self.t
        held = lease_held(t, now)
        status = sa.case(
            (t.c.state == FINISHED, "finished"),
            (t.c.state == PENDING, "pending"),
            (sa.and_(t.c.state == LIVE, held), "running"),
            (t.c.state == LIVE, "waiting"),
            else_="corrupt state",
        ).label("status")
        due = sa.case((sa.and_(t.c.state == LIVE, sa.not_(held), t.c.timeout <= now), t.c.timeout), else_=None)
        stmt = sa.select(t.c.queue, status, sa.func.count(), sa.func.min(due)).group_by(t.c.queue, status)

        def read(conn):
            out: dict[str, dict[str, Any]] = {}
            for queue, st, count, oldest in conn.execute(stmt):
                per = out.setdefault(queue, {**dict.fromkeys(QUEUE_STATUSES, 0), "oldest_due": None})
                per[st] = per.get(st, 0) + int(count)
                if oldest is not None:
                    per["oldest_due"] = oldest if per["oldest_due"] is None else min(per["oldest_due"], oldest)
            return out

        return self.db.run(read, write=False, what="queue counts")

    def queue_live_counts(self, now: float) -> dict[str, dict[str, Any]]:
        """:meth:`queue_counts` without the finished rows (``finished`` None: not counted), read
        through the indexes only (``stats_live_counts``): it costs the same on a table of a million
        finished rows as on an empty one, for a page that asks every few seconds."""
        out: dict[str, dict[str, Any]] = {}
        for (queue, _type), c in self.live_counts(now).items():
            per = out.setdefault(queue, {**dict.fromkeys(QUEUE_STATUSES, 0), "finished": None, "oldest_due": None})
            per["waiting"] += c["waiting"] + c["scheduled"]
            per["running"] += c["running"]
            per["pending"] += c["pending"]
            if c["oldest_due"] is not None:
                per["oldest_due"] = min(c["oldest_due"], per["oldest_due"] or c["oldest_due"])
        return out
