"""Settling a batch of held tasks as finished (store layer): one UPDATE per lease token, fenced by
it, and the ``finished`` events of the rows it wrote, read back from the rows as the UPDATE left
them (``record_ids``). A mixin of :class:`~queue_core.store.tasks.TaskStore`; a worker settles
each batch in the transaction of its next claim.

(Writing the events of tasks untracked when claimed from what their holder keeps of the claim,
without reading the rows back, was tried on MySQL in session 17: fenced by every column the
event reads — an attempt given back by an earlier holder, a move once the lease expired, a hand
edit — its UPDATE cost what the read saved.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..row_states import FINISHED
from .database import Database
from .transitions import task_where


@dataclass(frozen=True)
class Settled:
    """A held task whose outcome is decided and waits to be written with the next batch."""

    id: int
    token: int
    purge_at: float
    outcome: str = "success"


class TaskSettles:
    """Needs ``t`` (the task table), ``db``, ``purge_time`` and ``record_ids``."""

    # what the store this is mixed into provides (declared only: no class attribute is made)
    t: sa.Table
    db: Database
    purge_time: Callable[[float], Any]
    record_ids: Callable[..., None]  # TaskEvents

    def settle(self, settled: Sequence[Settled], now: float, also=None) -> list[Settled]:
        """Finish a batch of held tasks in one transaction; returns those whose lease was lost.
        ``also(conn)``: more writes of the batch in the same transaction."""

        def work(conn):
            gone = self._settle(conn, settled, now) if settled else []
            if also is not None:
                also(conn)
            return gone

        return self.db.run(work, what="finish") if settled or also is not None else []

    def _settle(self, conn, settled: Sequence[Settled], now: float) -> list[Settled]:
        by_batch: dict[tuple, dict[int, Settled]] = {}
        for s in settled:  # each lease once: an entry listed twice is settled once
            by_batch.setdefault((s.token, s.outcome, s.purge_at), {}).setdefault(s.id, s)
        gone: list[Settled] = []
        for entries in by_batch.values():
            gone += self._settle_group(conn, list(entries.values()), now)
        return gone

    def _finish(self, conn, group: Sequence[Settled], now: float) -> int:
        """Finish the rows of ``group`` (one token, outcome and retention) still held under its
        token; how many."""
        t, first = self.t, group[0]
        done = dict(state=FINISHED, leased=0, outcome=first.outcome, finished_at=now)
        held = task_where(t, "finish", token=first.token)
        update = sa.update(t).where(t.c.id.in_([s.id for s in group]), *held)
        return conn.execute(update.values(**done, timeout=self.purge_time(first.purge_at))).rowcount

    def _settle_group(self, conn, group: Sequence[Settled], now: float) -> list[Settled]:
        written = self._finish(conn, group, now)
        if written == len(group):
            self.record_ids(conn, "finished", [s.id for s in group], now, outcome=group[0].outcome)
            return []
        return self._settled_short(conn, written, group, now)

    def _states(self, conn, group: Sequence[Settled]) -> dict[int, tuple]:
        t = self.t
        rows = conn.execute(sa.select(t.c.id, t.c.state, t.c.lease_token).where(t.c.id.in_([s.id for s in group])))
        return {r.id: (r.state, r.lease_token) for r in rows}

    def _settled_short(self, conn, written: int, group: Sequence[Settled], now: float) -> list[Settled]:
        """Of a settled ``group`` (one token) whose finish wrote ``written`` of its rows, those whose
        lease was lost (the others are finished under the token: by this statement, or, when it
        wrote none, by an earlier run of this transaction that committed them and their events)."""
        states = self._states(conn, group)
        ours = sorted(s.id for s in group if states.get(s.id) == (FINISHED, s.token))
        if written:
            self.record_ids(conn, "finished", ours, now, outcome=group[0].outcome)
        return [s for s in group if s.id not in ours]
