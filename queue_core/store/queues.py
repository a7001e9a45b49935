"""Named queues (store layer), mixed into :class:`~queue_core.store.tasks.SqlStore`: the walk of a
claim over the queues a worker serves, and the settings operators give a queue (pause, limits).

Every task row names its queue (column ``queue``); a claim reads one queue at a time, each an
exact range of the indexes that lead with ``(state, queue)``. The settings live in
``<table>_queues``, a row per queue an operator paused or limited; a queue without a row runs,
unlimited. A claim reads the settings of the queues it serves in its own transaction, so a pause
or a limit holds from the next claim of every worker on every host.

A queue's concurrency limit is the ``max_running`` rule of users applied to a queue
(:func:`queue_core.rules.policy.free_slots`): its live leases counted under a lock, so that two claims
cannot both take its last slot. The lock is the queue's settings row, taken by the claims that
serve a limited queue (in name order, before any other lock of the claim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..rules import policy
from ..rules.task_states import FINISHED, LIVE, PENDING
from .database import Database
from .transitions import lease_counted, lease_held


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


#: the statuses :meth:`NamedQueues.queue_counts` counts
QUEUE_STATUSES = ("waiting", "running", "pending", "finished")


#: how far apart the clocks of two claimers may read before the starts one of them still counts
#: could be forgotten by the other (seconds)
CLOCK_MARGIN = 300.0


def _rate_key_of(rate_key: str | None):
    """The function giving a row's rate key: its user ('' without one), its type, or '' (the
    whole queue)."""
    if rate_key == "user":
        return lambda row: row["resource"] or ""
    if rate_key == "type":
        return lambda row: row["type"]
    return lambda row: ""


class NamedQueues:
    """Needs ``t`` (the task table), ``queues_t`` (the settings table) and ``db``."""

    # what the store this is mixed into provides (declared only: no class attribute is made)
    t: sa.Table
    queues_t: sa.Table
    db: Database

    # -- the claim's walk ----------------------------------------------------------------
    def _claim_queues(
        self,
        conn,
        n: int,
        now: float,
        queues: Sequence[str],
        claim_one,
        notes: dict | None = None,
        start_within: float = 0.0,
    ) -> tuple[list[dict], list[dict]]:
        """Up to ``n`` rows from ``queues`` in that order, and the rows the claim ended instead, each queue's through
        ``claim_one(view, room, behind, admit, entry)`` (``behind``: rows of earlier queues are in
        the batch; ``admit``: the rows a rate limit per key lets start, or None; ``entry``: what
        the walk reads first, read already, or None); paused queues are passed over, a limited
        one gives at most its free slots and the starts its rate allows, a rate-limited one only
        the first task of the batch (:func:`policy.rate_limited_room`). Serving several queues,
        one statement first reads every queue's entry (:meth:`_entries`): those with nothing due
        are not walked, and the others' walks skip their first read, so a claim costs as many
        round trips as one serving a single queue.
        ``notes["rate_wait"]``: when nothing was leased and a rate held due tasks back, the
        seconds until its window lets one start (the worker sleeps that long, not a whole poll).
        ``start_within``: the seconds within which the caller starts a rate-limited task's handler
        (its row's ``start_by``, when its start is counted: :func:`policy.start_by`)."""
        settings = self.settings_in(conn, queues, lock=True)
        running = [q for q in queues if not (q in settings and settings[q].paused)]
        entries = self._entries(conn, running, now) if len(running) > 1 else None
        delivered: list[dict] = []
        consumed: list[dict] = []
        for name in running:
            entry = None if entries is None else entries.get(name)
            if entries is not None and entry is None:
                continue  # nothing due there
            s = settings.get(name)
            rate = s.rate if s is not None else None
            want = n - len(delivered)
            if rate is not None and (want := policy.rate_limited_room(want, len(delivered))) == 0:
                continue  # behind other tasks of the batch: not leased by this claim
            room = self._room(conn, s, want, now)
            plain = view = self.in_queue(name)  # type: ignore[attr-defined]
            admit = None
            if room > 0 and rate is not None:
                view, admit, room = self._rate_room(conn, view, rate, room, now)
            if room <= 0:
                if rate is not None and notes is not None:
                    self._note_rate_wait(conn, rate, now, notes)
                continue
            rows, ended, cut = claim_one(view, room, bool(delivered), admit, entry if view is plain else None)
            if rate is not None:
                self._record_starts(conn, rate, rows, now, start_within)
                if not rows and notes is not None:
                    self._note_rate_wait(conn, rate, now, notes)
            delivered += rows
            consumed += ended
            if cut or len(delivered) >= n:
                break
        return delivered, consumed

    # -- rate limits ---------------------------------------------------------------------
    def with_start_by(self, conn, rows: list[dict], within: float) -> list[dict]:
        """``rows`` (leased by an earlier run of this claim), those of rate-limited queues with the
        ``start_by`` their claim counted their start at."""
        settings = self.settings_in(conn, sorted({r["queue"] for r in rows}))
        for r in rows:
            if (s := settings.get(r["queue"])) is not None and (rate := s.rate) is not None:
                r["start_by"] = policy.start_by(r["started_at"], within, rate.window)
        return rows

    def _rate_room(self, conn, view, rate: RateLimit, room: int, now: float):
        """The view, admission and room (at most ``room``) of a claim from a rate-limited queue:
        for the whole queue, its room if the window has a start left; per key, the keys with none
        left are not read at all and the others' rows are admitted up to what each has left."""
        used = self._starts_in(conn, rate, now)
        if rate.key is None:  # every start of the queue counts (also those made under a rate per key)
            return view, None, min(room, policy.free_slots(rate.limit, sum(used.values())))
        left = {key: policy.free_slots(rate.limit, n) for key, n in used.items()}
        spent = sorted(key for key, n in left.items() if n == 0)
        if spent:
            view = view.narrowed(self._not_keyed(rate.key, spent))
        key_of = _rate_key_of(rate.key)

        def admit(rows: list[dict]) -> list[dict]:
            budget = dict(left)
            out = []
            for r in rows:
                key = key_of(r)
                if budget.setdefault(key, rate.limit) > 0:
                    budget[key] -= 1
                    out.append(r)
            return out

        return view, admit, room

    def _not_keyed(self, rate_key: str, spent: list[str]):
        """Rows whose rate key is none of ``spent`` (a user's rate key: '' for rows without one)."""
        t = self.t
        if rate_key == "type":
            return t.c.type.not_in(spent)
        users = [u for u in spent if u != ""]
        others = t.c.resource.not_in(users) if users else sa.true()
        return sa.and_(t.c.resource.is_not(None), others) if "" in spent else sa.or_(t.c.resource.is_(None), others)

    def _note_rate_wait(self, conn, rate: RateLimit, now: float, notes: dict) -> None:
        """Note in ``notes["rate_wait"]`` when the queue's window next lets a start through: its
        oldest start in the window leaves it then (the earliest of all its keys' oldest)."""
        st = self.starts_t  # type: ignore[attr-defined]
        oldest = conn.execute(
            sa.select(sa.func.min(st.c.started_at)).where(st.c.queue == rate.queue, st.c.started_at > now - rate.window)
        ).scalar()
        if oldest is not None:
            wait = max(0.0, oldest + rate.window - now)
            notes["rate_wait"] = min(wait, notes.get("rate_wait", wait))

    def _starts_in(self, conn, rate: RateLimit, now: float) -> dict[str, int]:
        """The starts of queue ``s`` counted in its window ending at ``now``, per rate key. Every
        start after ``now - window`` counts, also one stamped later than ``now`` (by a claim whose
        clock read later and committed first): any window then holds at most ``rate_limit``."""
        st = self.starts_t  # type: ignore[attr-defined]
        stmt = (
            sa.select(st.c.rate_key, sa.func.count())
            .where(st.c.queue == rate.queue, st.c.started_at > now - rate.window)
            .group_by(st.c.rate_key)
        )
        return {key: int(n) for key, n in conn.execute(stmt)}

    def _record_starts(self, conn, rate: RateLimit, rows: list[dict], now: float, within: float = 0.0) -> None:
        """Record the starts of ``rows`` in rate-limited queue ``s`` at the latest time their
        handlers start (``start_by``, set on each row: ``within`` seconds after their lease's
        ``started_at``, the time the claim wrote, read after its lock waits), and forget those no window
        can count any more: older than the window and :data:`CLOCK_MARGIN` (the clocks of two
        claimers may read apart: SQLite's are the hosts'), by a claim that started something."""
        st = self.starts_t  # type: ignore[attr-defined]
        key_of = _rate_key_of(rate.key)
        if not rows:
            return
        for r in rows:
            r["start_by"] = policy.start_by(r["started_at"], within, rate.window)
        conn.execute(  # a start already recorded (the same task at the same instant) counts once
            self.db.dialect.insert_if_absent(st, ("queue", "rate_key", "started_at", "task_id")),
            [
                {"queue": rate.queue, "rate_key": key_of(r), "started_at": r["start_by"], "task_id": r["id"]}
                for r in rows
            ],
        )
        forget = now - rate.window - max(rate.window, CLOCK_MARGIN)
        conn.execute(sa.delete(st).where(st.c.queue == rate.queue, st.c.started_at <= forget))

    def _entries(self, conn, names: Sequence[str], now: float) -> dict[str, tuple]:
        """The entry of each of ``names`` that has due rows: what a walk of it reads first (a
        due user, the best level of its live rows: ``SqlStore._user_and_top``), read with the
        earliest due time of its rows without a user, 30 queues per statement (index probes)."""
        found: dict[str, tuple] = {}
        for i in range(0, len(names), 30):
            for row in conn.execute(self._entry_probe(tuple(names[i : i + 30])), {"now": now}):
                for j in range(0, len(row), 4):  # one queue per row, or all of them in one
                    q, some_user, top, userless_due = row[j : j + 4]
                    if some_user is not None or (userless_due is not None and userless_due <= now):
                        found[q] = (some_user, top)
        return found

    def _entry_probe(self, chunk: tuple[str, ...]):
        """The statement of :meth:`_entries`: a row (name, due user, best level, earliest due time
        without a user) per queue of ``chunk``, by index probes. The earliest due time of rows
        without a user is read in the order of the user index (state, queue, resource, timeout),
        its first entry: asked for "any due row" instead, PostgreSQL and MariaDB scan the table
        or the purge index for one (they expect every row to be due) and cross other queues' rows.

        Where the dialect says so (``correlated_probes``), the probes are subqueries correlated to
        a list of the names, so that the database plans three probes whatever the number of
        queues (PostgreSQL planned 60 over 20 queues for 2.2 ms at every poll of a large table);
        MariaDB reads such a subquery's rows by a scan, so there each queue gets probes of its own."""
        cache = self.__dict__.setdefault("_entry_probes", {})
        stmt = cache.get(chunk)
        if stmt is None:
            if len(cache) >= 64:
                cache.clear()
            build = self._correlated_probe if self.db.dialect.correlated_probes else self._probes_per_queue
            stmt = cache[chunk] = build(chunk)
        return stmt

    def _earliest_userless(self, queue):
        t = self.t
        return (
            sa.select(t.c.timeout)
            .where(t.c.state == LIVE, t.c.queue == queue, t.c.resource.is_(None))
            .order_by(*self.db.dialect.index_order([t.c.state, t.c.queue, t.c.resource], [t.c.timeout]))
            .limit(1)
            .scalar_subquery()
        )

    def _correlated_probe(self, chunk: tuple[str, ...]):
        t = self.t
        served = sa.union_all(*(sa.select(sa.literal(q, t.c.queue.type).label("name")) for q in chunk))
        name = served.subquery("served").c.name
        view = self._view(t.c.queue == name)  # type: ignore[attr-defined]
        return sa.select(name, *view.entry_columns(), self._earliest_userless(name))

    def _probes_per_queue(self, chunk: tuple[str, ...]):
        cols = []
        for q in chunk:
            view = self.in_queue(q)  # type: ignore[attr-defined]
            cols += [sa.literal(q, self.t.c.queue.type), *view.entry_columns(), self._earliest_userless(q)]
        return sa.select(*cols)

    def _room(self, conn, settings: QueueSettings | None, want: int, now: float) -> int:
        """How many tasks the claim may take from a queue: ``want``, none while it is paused, at
        most its free slots under a concurrency limit."""
        if settings is None:
            return want
        if settings.paused:
            return 0
        if settings.concurrency is not None:
            want = min(want, policy.free_slots(settings.concurrency, self.running_in(conn, settings.name, now)))
        return want

    def running_in(self, conn, name: str, now: float) -> int:
        """The leases held in queue ``name`` that count towards its limit (an exact range of
        the running index)."""
        t = self.t
        stmt = sa.select(sa.func.count()).where(
            t.c.state == LIVE, t.c.leased == 1, t.c.queue == name, lease_counted(t, now)
        )
        return int(conn.execute(stmt).scalar() or 0)

    # -- settings ------------------------------------------------------------------------
    def settings_in(self, conn, names: Sequence[str], lock: bool = False) -> dict[str, QueueSettings]:
        """The settings rows of ``names`` (absent: defaults); with ``lock``, the rows of the
        limited ones are locked, in name order, until the transaction ends."""
        q = self.queues_t
        rows = {r.name: _settings(r) for r in conn.execute(sa.select(q).where(q.c.name.in_(list(names))))}
        limited = sorted(name for name, s in rows.items() if s.limited)
        if lock and limited:
            stmt = sa.select(q).where(q.c.name.in_(limited)).order_by(q.c.name)
            rows.update({r.name: _settings(r) for r in conn.execute(self.db.dialect.lock_rows(stmt))})
        return rows

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
        for (queue, _type), c in self.stats_live_counts(now).items():  # type: ignore[attr-defined]
            per = out.setdefault(queue, {**dict.fromkeys(QUEUE_STATUSES, 0), "finished": None, "oldest_due": None})
            per["waiting"] += c["waiting"] + c["scheduled"]
            per["running"] += c["running"]
            per["pending"] += c["pending"]
            if c["oldest_due"] is not None:
                per["oldest_due"] = min(c["oldest_due"], per["oldest_due"] or c["oldest_due"])
        return out
