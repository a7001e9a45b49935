"""What the claim does with the due rows it picked, before it leases them (store layer): one
:class:`ClaimScreen` per store, shared by the claim's views.

A row that must not run again ends here (:func:`queue_core.rules.policy.on_claim`: a cancel requested,
its attempts used up; transition ``give_up``), and so does a row holding a value pq never writes
(:mod:`.rowcheck`; transition ``set_aside``): finished as failure with the reason as its error,
logged once, so that it neither breaks the claim nor blocks the rows behind it. The fair share
never weighs such a row (its numbers may be anything): it is kept apart (:func:`split_corrupt`)
and screened after the locking statement read it again, like a row that was sound when read and
edited before it was locked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from ...rules import policy
from ...rules.task_states import FINISHED
from .. import rowcheck
from ..database import isolated
from ..events import TaskEvents
from ..transitions import TASK_EVENTS, task_where

log = logging.getLogger("queue_core.store")


class ClaimScreen:
    """The screen of the claims of the task table ``t`` (named ``name``): ``purge_time`` gives a
    row it ends its purge time, ``events`` records what it ends."""

    def __init__(self, t: sa.Table, name: str, purge_time: Callable[[float], sa.Case], events: TaskEvents):
        self.t, self.name, self.purge_time, self.events = t, name, purge_time, events
        #: how long a row the claim ends is kept (the queue sets its config's retention_time and
        #: failure_retention)
        self.retention_time = 300.0
        self.failure_retention: float | None = None

    def screen(self, conn, picked: list[dict], now: float) -> tuple[list[dict], list[dict]]:
        """The rows of ``picked`` to lease, and those the claim ended instead (as they ended:
        ``outcome`` and ``error`` set)."""
        deliver, ended = [], []
        for r in picked:
            found = rowcheck.problem(r, rowcheck.TASK_COLUMNS)
            if found is not None:
                if self._set_aside(conn, r, found, now):
                    ended.append(r)
                continue
            verdict = policy.on_claim(
                attempts=r["attempts"],
                max_attempts=r["max_attempts"],
                cancel_requested=bool(r["cancel_requested"]),
                owned=r["workflow"] is not None,
            )
            if verdict is policy.OnClaim.DELIVER:
                deliver.append(r)
                continue
            events = self.events.ended_events(conn, [r], now)  # its last attempt's, when its lease expired
            if verdict is policy.OnClaim.CANCEL:
                done = self._finish_row(conn, r, "give_up", "cancelled", r["error"], now, events)
            else:
                error = policy.give_up_error(r["error"], r["attempts"])
                done = self._finish_row(conn, r, "give_up", "failure", error, now, events)
            if done:
                ended.append(r)
        return deliver, ended

    def _set_aside(self, conn, row: dict, found: tuple[str, str], now: float) -> bool:
        """Finish the due ``row`` holding a value pq never writes (``found``) as failure, the
        reason as its error; logged once (a finished row is never claimed again). Whether it did."""
        error = str(rowcheck.corrupt("task", self.name, row["key"], found))
        if not self._finish_row(conn, row, "set_aside", "failure", "set aside by the claim: " + error, now):
            return False
        log.error("claim set aside: %s", error)
        return True

    def _finish_row(
        self, conn, row: dict, transition: str, outcome: str, error: str | None, now: float, ended: Sequence[dict] = ()
    ) -> bool:
        """End the due ``row`` at claim (``transition``), after the events ``ended`` (of the
        attempt its expired lease ended); whether it did (then ``row`` says how it ended)."""
        t = self.t
        id_ = row["id"]
        done = conn.execute(
            sa.update(t)
            .where(t.c.id == id_, *task_where(t, transition, now=now))
            .values(
                state=FINISHED,
                leased=0,
                outcome=outcome,
                error=error,
                finished_at=now,
                timeout=self.purge_time(now + policy.retention(outcome, self.retention_time, self.failure_retention)),
                lease_token=None,
            )
        )
        if done.rowcount != 1:
            return False
        row.update(state=FINISHED, leased=0, outcome=outcome, error=error, finished_at=now, lease_token=None)
        self.events.event_record(conn, ended)
        self.events.record_ids(conn, TASK_EVENTS[transition], [id_], now)
        return True

    def tell_owners(self, conn, owned_ended: Callable[[Any, list[dict]], None] | None, ended: list[dict]) -> None:
        """``owned_ended(conn, rows)`` with the rows of workflow runs among ``ended`` (the rows the
        claim ended), in a savepoint: their runs decide what follows in the claim's commit. What
        it raises is logged and rolled back alone (the rows stay ended; their runs are not told)."""
        rows = [r for r in ended if r["workflow"] is not None]
        if not rows or owned_ended is None:
            return
        error = isolated(conn, lambda: owned_ended(conn, rows))
        if error is not None:
            keys = ", ".join(repr(r["key"]) for r in rows[:5])
            log.error("the runs of rows the claim ended (%s) could not decide what follows: %s", keys, error)


def split_corrupt(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """``rows`` holding only values pq writes, and the others (for :meth:`ClaimScreen.screen`)."""
    bad = [r for r in rows if rowcheck.problem(r, rowcheck.TASK_COLUMNS) is not None]
    return [r for r in rows if not any(r is b for b in bad)], bad


def without_mended(locked: list[dict], corrupt: list[dict]) -> list[dict]:
    """``locked`` less the rows read corrupt that were mended before the lock: the fair share
    did not weigh them (the next claim does); a row still corrupt stays, to be set aside."""
    read_corrupt = {r["id"] for r in corrupt}
    return [r for r in locked if r["id"] not in read_corrupt or rowcheck.problem(r, rowcheck.TASK_COLUMNS) is not None]
