"""The claim in one scope (store layer): :class:`ClaimView` picks due rows of one queue (less
the keys a rate limit spent), screens them and leases them.

Its walk reads one priority level at a time, each level an exact index range in order: the
cost of a poll does not grow with the finished rows or the future rows of the table. Due rows
of users are weighed by the fair share (:func:`queue_core.rules.policy.choose_fair`); the
others are taken by (priority desc, due time, id). Rows are picked as due at the claim's
``now``; what the claim writes of them is at ``stamp()``, read once they are locked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ...rules import policy
from ...rules.task_states import LIVE
from .. import rowcheck
from ..events import claimed_events
from ..transitions import lease_counted, task_where
from .screen import split_corrupt, without_mended
from .tables import ClaimTables
from .types import TypeProbes


@dataclass
class ClaimRequest:
    """What one claim asks for: up to ``n`` rows leased for ``alive_time`` seconds by ``owner``
    under ``token``, due at ``now``, of ``types`` (None: any), from ``queues`` best first;
    ``clock()`` reads the time it writes (:meth:`stamp`); ``start_within``: the seconds within
    which the caller starts a rate-limited row's handler; ``notes``: what it tells the caller."""

    n: int
    alive_time: float
    now: float
    owner: str
    types: Sequence[str] | None
    queues: Sequence[str]
    clock: Callable[[], float]
    start_within: float = 0.0
    notes: dict | None = None
    token: int = 0
    #: the times its transactions leased at: one run again (its COMMIT's acknowledgement lost)
    #: finds the rows it leased
    stamps: list[float] = field(default_factory=list)

    def stamp(self) -> float:
        """The time the claim writes, read once its locks are held (never before ``now``)."""
        at = max(self.now, self.clock())
        self.stamps.append(at)
        return at


class ClaimView:
    """The claim's reads and lease in ``scope`` (a clause over the task table: one queue)."""

    def __init__(self, tables: ClaimTables, scope: Any):
        self.tables, self.t, self.db, self.scope = tables, tables.t, tables.db, scope
        t = self.t
        # The highest priority of live rows: ORDER BY ... LIMIT 1 in index order (MariaDB
        # answers MAX() over a descending index column with a scan).
        self.top_level = sa.select(t.c.priority).where(self.live()).order_by(t.c.priority.desc()).limit(1)
        self.user_and_top = sa.select(*self.entry_columns())
        self.types = TypeProbes(tables, self.live, self.top_level)

    def narrowed(self, *clauses) -> ClaimView:
        """This view with its reads further limited by ``clauses`` (built for one claim)."""
        return ClaimView(self.tables, sa.and_(self.scope, *clauses))

    def live(self, *more):
        """Live rows of this view's scope (and ``more``): the claim reads nothing else."""
        return sa.and_(self.t.c.state == LIVE, self.scope, *more)

    def entry_columns(self) -> tuple:
        """What a claim's walk reads first: a due user (any), the best level of live rows. The
        due user in the order of the user index (state, queue, resource, timeout), its first
        entry: else SQLite walks every due row of the purge index looking for one with a user
        (``likely``), and PostgreSQL, before it has statistics, a type index's range."""
        t = self.t
        users_due = self.db.dialect.likely(t.c.timeout <= sa.bindparam("now"))
        order = self.db.dialect.index_order([t.c.state, t.c.queue], [t.c.resource, t.c.timeout])
        due_user = sa.select(t.c.resource).where(self.live(t.c.resource.is_not(None), users_due)).order_by(*order)
        return due_user.limit(1).scalar_subquery(), self.top_level.scalar_subquery()

    # -- the claim -----------------------------------------------------------------------
    def claim(self, conn, req: ClaimRequest, room: int, behind=False, admit=None, entry=None):
        """Lease up to ``room`` due rows of this scope; returns them, the picked rows the claim
        ended instead, and whether the batch was cut before a row with ``max_attempts``
        (``behind``: other rows come first in the batch). ``admit(rows)``: those of the rows a
        limit lets start (a rate limit per user or type). ``entry``: what :attr:`user_and_top`
        reads, read already in this transaction (several queues served)."""
        picked = self._pick(conn, req, room, entry)
        if not picked:
            return [], [], False
        now = req.stamp()
        deliver, ended = self.tables.screen.screen(conn, picked, now)
        if admit is not None:
            deliver = admit(deliver)
        screened = len(deliver)
        deliver = policy.limited_first(deliver, behind=behind)
        if deliver:
            deliver = self._lease(conn, req, deliver, now)
        return deliver, ended, len(deliver) < screened

    def _pick(self, conn, req: ClaimRequest, n: int, entry) -> list[dict]:
        """Up to ``n`` due rows, locked: by the fair share when users have due rows."""
        now, types = req.now, None
        tops: dict | None = None
        if req.types is not None:  # from here on, only the types that have live rows
            tops = self.types.live_tops(conn, req.types)
            types = sorted(tops)
            if not types:
                return []
        user_types = self.types.with_due_users(conn, types, now)
        if types is None:  # one round trip for both: is any user due, and the best level
            some_user, top = entry if entry is not None else conn.execute(self.user_and_top, {"now": now}).one()
            users = self._due_users(conn, now) if some_user is not None else []
            tops = {} if top is None else {None: top}
        else:
            users = self._due_users(conn, now, user_types)
        if users:
            return self._pick_fair(conn, n, now, users, user_types, types, tops)
        return self._pick_userless(conn, n, now, lock=True, types=types, tops=tops)

    def _lease(self, conn, req: ClaimRequest, rows: list[dict], now: float) -> list[dict]:
        """Lease the locked ``rows`` at ``now``; returns those it leased, as leased."""
        t, owner, expires = self.t, req.owner[:255], now + req.alive_time
        ids = [r["id"] for r in rows]
        ct = self.tables.claim_table(conn)
        res = conn.execute(
            sa.update(ct)
            .where(ct.c.id.in_(ids), *self.db.dialect.per_row(task_where(ct, "claim", now=now)))
            .ordered_values(  # run_at first: MySQL reads ``timeout`` as the SETs before left it
                (ct.c.run_at, ct.c.timeout),  # the attempt's due time (its wait: started_at - run_at)
                (ct.c.leased, 1),
                (ct.c.lease_token, req.token),
                (ct.c.timeout, expires),
                (ct.c.attempts, ct.c.attempts + 1),
                (ct.c.started_at, now),
                (ct.c.owner, owner),
                *self.db.dialect.claim_marks(ct),
            )
        )
        if res.rowcount != len(ids):  # not expected (the rows are locked): deliver only what is leased
            leased = sa.select(t.c.id).where(t.c.id.in_(ids), t.c.lease_token == req.token)
            got = {i for (i,) in conn.execute(leased)}
            rows = [r for r in rows if r["id"] in got]
        events = self.tables.events
        events.event_record(conn, claimed_events(rows, now, owner, events.recorded_claims(conn, rows)))
        for r in rows:
            r.update(
                run_at=r["timeout"],
                leased=1,
                lease_token=req.token,
                timeout=expires,
                attempts=r["attempts"] + 1,
                started_at=now,
                owner=owner,
            )
        return rows

    # -- rows without a user -------------------------------------------------------------
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
        other types are never read, however many are due before them (``types.py``)."""
        picked: list[dict] = []
        tops = self.types.tops(conn, types) if tops is None else dict(tops)  # types' best levels, if known
        while tops and len(picked) < n:
            level = max(tops.values(), key=rowcheck.sql_order)
            at = [k for k, p in tops.items() if p == level]
            due = self.types.with_due_at(conn, at, level, now)
            if due:
                picked += self._due_at(conn, level, due, now, n - len(picked), lock)
            for k in at:
                del tops[k]
            if len(picked) < n:  # the next level is read only when this one did not fill the batch
                tops.update(self.types.tops(conn, None if types is None else at, below=level))
        return picked

    def _due_at(self, conn, level: int, at: list, now: float, need: int, lock: bool) -> list[dict]:
        """Up to ``need`` due userless rows of priority ``level`` (of the types ``at``, unless
        ``at`` is ``[None]``: any type), by due time and id."""
        t = self.t

        def due(*cols):
            stmt = (
                sa.select(*cols)
                .where(self.live(t.c.priority == level, t.c.timeout <= now, t.c.resource.is_(None)))
                .order_by(t.c.timeout, t.c.id)
                .limit(need)
            )
            return self.db.dialect.lock_candidates(stmt) if lock else stmt

        rows_of = self.types.rows_of_types
        if len(at) == 1:
            return [dict(r._mapping) for r in rows_of(conn, due(t), None if at == [None] else at)]
        # Several types: up to ``need`` rows of each, merged by due time. Their ids only (locked
        # as the rows would be), then the whole rows of the ``need`` first: the rest are not
        # decoded for nothing.
        firsts = sorted((r.timeout, r.id) for r in rows_of(conn, due(t.c.id, t.c.timeout), at))[:need]
        if not firsts:
            return []
        rows = {r.id: dict(r._mapping) for r in conn.execute(sa.select(t).where(t.c.id.in_([i for _, i in firsts])))}
        return [rows[i] for _, i in firsts if i in rows]

    # -- the fair share ------------------------------------------------------------------
    def _due_users(self, conn, now, types: list[str] | None = None) -> list[str]:
        t = self.t
        stmt = (
            sa.select(t.c.resource)
            .where(self.live(t.c.resource.is_not(None), self.db.dialect.likely(t.c.timeout <= now)))
            .group_by(t.c.resource)
        )
        return list(dict.fromkeys(r[0] for r in self.types.rows_of_types(conn, stmt, types)))

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
        candidates = self._user_heads(conn, n, now, user_types)
        candidates += self._pick_userless(conn, n, now, lock=False, types=types, tops=tops)
        candidates, corrupt = split_corrupt(candidates)  # set aside by the screen, never weighed
        chosen = policy.choose_fair(candidates, self._running_counts(conn, users, now), n)
        fair_lock = self.tables.fair_lock
        if any(r["max_running"] is not None for r in chosen):
            # Capped claims hold the fair lock alone, and count again under it: two workers cannot
            # both take a user's last slot, nor one while another leases a task of that user.
            conn.execute(self.db.dialect.lock_rows(fair_lock))
            running = self._running_counts(conn, {r["resource"] for r in chosen if r["resource"]}, now)
            chosen = policy.choose_fair(chosen, running, n)
        elif any(r["resource"] is not None for r in chosen):
            # Uncapped claims of users share it: the tasks they lease count in a capped claim's count.
            conn.execute(self.db.dialect.share_rows(fair_lock))
        chosen += corrupt
        if not chosen:
            return []
        return without_mended(self._lock_chosen(conn, [r["id"] for r in chosen], now), corrupt)

    def _user_heads(self, conn, n: int, now: float, user_types) -> list[dict]:
        """The first ``n`` due rows of each user (of ``user_types``, if given), by the user index."""
        t = self.t
        rn = (
            sa.func.row_number()
            .over(partition_by=t.c.resource, order_by=(t.c.priority.desc(), t.c.timeout, t.c.id))
            .label("rn")
        )
        due = self.db.dialect.likely(t.c.timeout <= now)  # through the user index, not every due row
        heads = sa.select(t, rn).where(self.live(t.c.resource.is_not(None), due))

        def per_user(stmt):
            inner = stmt.subquery()
            return sa.select(inner).where(inner.c.rn <= n)

        return [dict(r._mapping) for r in self.types.rows_of_types(conn, heads, user_types, wrap=per_user)]

    def _lock_chosen(self, conn, ids: list[int], now: float) -> list[dict]:
        """Lock the rows ``ids`` that are still due and in this view's scope (its queue), in that
        order, as they are now: read before the lock, another worker may have claimed, changed
        and given one back meanwhile, or an operator moved one to another queue."""
        t = self.t
        still_due = self.db.dialect.likely(self.live(t.c.timeout <= now))
        lock = self.db.dialect.lock_candidates(sa.select(t).where(t.c.id.in_(ids), still_due))
        locked = {r.id: dict(r._mapping) for r in conn.execute(lock)}
        return [locked[i] for i in ids if i in locked]
