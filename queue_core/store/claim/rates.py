"""A claim from a rate-limited queue (store layer): at most ``rate_limit`` starts in any
``rate_window`` seconds, for the whole queue or per user or type (``rate_key``).

Each start is a row of ``<table>_starts`` (queue, rate key, start time, task), written by the
claim that leased the task, in its transaction, at the latest time its handler starts (its
``start_by``); a claim counts the starts in the window under the queue's settings row lock, so
two claims cannot both take its last start.
"""

from __future__ import annotations

import sqlalchemy as sa

from ...rules import policy
from ..queues import RateLimit, settings_in
from .tables import ClaimTables
from .view import ClaimView

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


class RateLimits:
    """The rate limits of the claims of :class:`ClaimTables` ``tables``."""

    def __init__(self, tables: ClaimTables):
        self.tables, self.t, self.st = tables, tables.t, tables.starts_t

    def with_start_by(self, conn, rows: list[dict], within: float) -> list[dict]:
        """``rows`` (leased by an earlier run of this claim), those of rate-limited queues with the
        ``start_by`` their claim counted their start at."""
        tables = self.tables
        settings = settings_in(conn, tables.db, tables.queues_t, sorted({r["queue"] for r in rows}))
        for r in rows:
            if (s := settings.get(r["queue"])) is not None and (rate := s.rate) is not None:
                r["start_by"] = policy.start_by(r["started_at"], within, rate.window)
        return rows

    def room(self, conn, view: ClaimView, rate: RateLimit, room: int, now: float):
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

    def note_wait(self, conn, rate: RateLimit, now: float, notes: dict) -> None:
        """Note in ``notes["rate_wait"]`` when the queue's window next lets a start through: its
        oldest start in the window leaves it then (the earliest of all its keys' oldest)."""
        st = self.st
        oldest = conn.execute(
            sa.select(sa.func.min(st.c.started_at)).where(st.c.queue == rate.queue, st.c.started_at > now - rate.window)
        ).scalar()
        if oldest is not None:
            wait = max(0.0, oldest + rate.window - now)
            notes["rate_wait"] = min(wait, notes.get("rate_wait", wait))

    def _starts_in(self, conn, rate: RateLimit, now: float) -> dict[str, int]:
        """The starts of the queue counted in its window ending at ``now``, per rate key. Every
        start after ``now - window`` counts, also one stamped later than ``now`` (by a claim whose
        clock read later and committed first): any window then holds at most ``rate_limit``."""
        st = self.st
        stmt = (
            sa.select(st.c.rate_key, sa.func.count())
            .where(st.c.queue == rate.queue, st.c.started_at > now - rate.window)
            .group_by(st.c.rate_key)
        )
        return {key: int(n) for key, n in conn.execute(stmt)}

    def record_starts(self, conn, rate: RateLimit, rows: list[dict], now: float, within: float = 0.0) -> None:
        """Record the starts of ``rows`` in the rate-limited queue at the latest time their
        handlers start (``start_by``, set on each row: ``within`` seconds after their lease's
        ``started_at``, the time the claim wrote, read after its lock waits), and forget those no window
        can count any more: older than the window and :data:`CLOCK_MARGIN` (the clocks of two
        claimers may read apart: SQLite's are the hosts'), by a claim that started something."""
        st = self.st
        key_of = _rate_key_of(rate.key)
        if not rows:
            return
        for r in rows:
            r["start_by"] = policy.start_by(r["started_at"], within, rate.window)
        conn.execute(  # a start already recorded (the same task at the same instant) counts once
            self.tables.db.dialect.insert_if_absent(st, ("queue", "rate_key", "started_at", "task_id")),
            [
                {"queue": rate.queue, "rate_key": key_of(r), "started_at": r["start_by"], "task_id": r["id"]}
                for r in rows
            ],
        )
        forget = now - rate.window - max(rate.window, CLOCK_MARGIN)
        conn.execute(sa.delete(st).where(st.c.queue == rate.queue, st.c.started_at <= forget))
