"""The claim's walk over the queues a worker serves (store layer), best first.

Every task row names its queue (column ``queue``); a claim reads one queue at a time, each an
exact range of the indexes that lead with ``(state, queue)`` (a :class:`ClaimView` per queue,
kept: a worker serves the same queues at every poll). The claim reads the settings of the queues
it serves in its own transaction, so a pause or a limit holds from the next claim of every
worker on every host.

A queue's concurrency limit is the ``max_running`` rule of users applied to a queue
(:func:`queue_core.rules.policy.free_slots`): its live leases counted under a lock, so that two claims
cannot both take its last slot. The lock is the queue's settings row, taken by the claims that
serve a limited queue (in name order, before any other lock of the claim).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from ...rules import policy
from ...rules.task_states import LIVE
from ..queues import QueueSettings, settings_in
from ..transitions import lease_counted
from .rates import RateLimits
from .tables import ClaimTables
from .view import ClaimRequest, ClaimView

#: the queues whose entries one statement reads
ENTRIES_PER_STATEMENT = 30


class QueueWalk:
    """The walk of the claims of :class:`ClaimTables` ``tables`` over their queues."""

    def __init__(self, tables: ClaimTables):
        self.tables, self.t, self.db = tables, tables.t, tables.db
        self.rates = RateLimits(tables)
        self._views: dict[str, ClaimView] = {}
        self._entry_probes: dict[tuple[str, ...], sa.Select] = {}

    def view(self, name: str) -> ClaimView:
        """The claim in queue ``name`` (kept: a claim reads the same queues at every poll)."""
        view = self._views.get(name)
        if view is None:
            if len(self._views) >= 256:
                self._views.clear()
            view = self._views[name] = ClaimView(self.tables, self.t.c.queue == name)
        return view

    def claim(self, conn, req: ClaimRequest) -> tuple[list[dict], list[dict]]:
        """Up to ``req.n`` rows from ``req.queues`` in that order, and the rows the claim ended
        instead. Paused queues are passed over, a limited one gives at most its free slots and the
        starts its rate allows, a rate-limited one only the first task of the batch
        (:func:`policy.rate_limited_room`). Serving several queues, one statement first reads
        every queue's entry (:meth:`_entries`): those with nothing due are not walked, and the
        others' walks skip their first read, so a claim costs as many round trips as one serving
        a single queue. ``req.notes["rate_wait"]``: when nothing was leased and a rate held due
        tasks back, the seconds until its window lets one start (the worker sleeps that long,
        not a whole poll)."""
        settings = settings_in(conn, self.db, self.tables.queues_t, req.queues, lock=True)
        running = [q for q in req.queues if not (q in settings and settings[q].paused)]
        entries = self._entries(conn, running, req.now) if len(running) > 1 else None
        delivered: list[dict] = []
        ended: list[dict] = []
        for name in running:
            entry = None if entries is None else entries.get(name)
            if entries is not None and entry is None:
                continue  # nothing due there
            rows, gone, cut = self._claim_in(conn, req, settings.get(name), name, entry, behind=len(delivered))
            delivered += rows
            ended += gone
            if cut or len(delivered) >= req.n:
                break
        return delivered, ended

    def _claim_in(self, conn, req, settings: QueueSettings | None, name: str, entry, behind: int):
        """The rows leased from queue ``name`` (``behind`` rows of earlier queues in the batch),
        the rows the claim ended there instead, and whether the batch was cut there."""
        rate = settings.rate if settings is not None else None
        want = req.n - behind
        if rate is not None and (want := policy.rate_limited_room(want, behind)) == 0:
            return [], [], False  # behind other tasks of the batch: not leased by this claim
        room = self._room(conn, settings, want, req.now)
        plain = view = self.view(name)
        admit = None
        if room > 0 and rate is not None:
            view, admit, room = self.rates.room(conn, view, rate, room, req.now)
        if room <= 0:
            if rate is not None and req.notes is not None:
                self.rates.note_wait(conn, rate, req.now, req.notes)
            return [], [], False
        rows, ended, cut = view.claim(conn, req, room, bool(behind), admit, entry if view is plain else None)
        if rate is not None:
            self.rates.record_starts(conn, rate, rows, req.now, req.start_within)
            if not rows and req.notes is not None:
                self.rates.note_wait(conn, rate, req.now, req.notes)
        return rows, ended, cut

    def _room(self, conn, settings: QueueSettings | None, want: int, now: float) -> int:
        """How many tasks the claim may take from a queue: ``want``, none while it is paused, at
        most its free slots under a concurrency limit."""
        if settings is None:
            return want
        if settings.paused:
            return 0
        if settings.concurrency is not None:
            want = min(want, policy.free_slots(settings.concurrency, self._running_in(conn, settings.name, now)))
        return want

    def _running_in(self, conn, name: str, now: float) -> int:
        """The leases held in queue ``name`` that count towards its limit (an exact range of
        the running index)."""
        t = self.t
        stmt = sa.select(sa.func.count()).where(
            t.c.state == LIVE, t.c.leased == 1, t.c.queue == name, lease_counted(t, now)
        )
        return int(conn.execute(stmt).scalar() or 0)

    # -- the entries of several queues ---------------------------------------------------
    def _entries(self, conn, names: Sequence[str], now: float) -> dict[str, tuple]:
        """The entry of each of ``names`` that has due rows: what a walk of it reads first (a
        due user, the best level of its live rows: ``ClaimView.user_and_top``), read with the
        earliest due time of its rows without a user, 30 queues per statement (index probes)."""
        found: dict[str, tuple] = {}
        for i in range(0, len(names), ENTRIES_PER_STATEMENT):
            chunk = tuple(names[i : i + ENTRIES_PER_STATEMENT])
            for row in conn.execute(self._entry_probe(chunk), {"now": now}):
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
        cache = self._entry_probes
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
        view = ClaimView(self.tables, t.c.queue == name)
        return sa.select(name, *view.entry_columns(), self._earliest_userless(name))

    def _probes_per_queue(self, chunk: tuple[str, ...]):
        cols = []
        for q in chunk:
            cols += [sa.literal(q, self.t.c.queue.type), *self.view(q).entry_columns(), self._earliest_userless(q)]
        return sa.select(*cols)
