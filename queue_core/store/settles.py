"""Settling a batch of held tasks as finished (store layer): one UPDATE per lease token, fenced by
it, and the ``finished`` events of the rows it wrote. A mixin of
:class:`~queue_core.store.tasks.TaskStore`; a worker settles each batch in the transaction of
its next claim.

The events are read back from the rows the UPDATE left (``record_ids``: one INSERT ... SELECT),
except where the database's insert of selected rows reads them into the client first (MySQL,
``Dialect.inserts_read_back``). There a task untracked when claimed carries what its claim
wrote (:class:`HeldAttempt`), and its event is written from that: the UPDATE is also fenced by
``tracked = 0``, the one column of the event that may change while the task is held (a move is
refused while it runs; key, type, attempt, owner, start and due time are the claim's). A task
tracked since, or a batch whose UPDATE fell short, goes the way of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..row_states import FINISHED
from .database import Database
from .events import COLUMNS, finished_events
from .transitions import task_where


class HeldAttempt(NamedTuple):
    """What the claim of a task untracked when claimed wrote on its row (and its holder keeps);
    a tuple: one is made for every task a worker claims."""

    key: str
    queue: str
    type: str
    attempt: int
    owner: str
    started_at: float
    due_at: float  # the attempt's due time: the row's ``run_at`` as the claim set it


@dataclass(frozen=True)
class Settled:
    """A held task whose outcome is decided and waits to be written with the next batch
    (``held``: its attempt as claimed, when it was untracked then; else None)."""

    id: int
    token: int
    purge_at: float
    outcome: str = "success"
    held: HeldAttempt | None = None


class TaskSettles:
    """Needs ``t`` (the task table), ``events_t``, ``db``, ``purge_time`` and ``record_ids``."""

    # what the store this is mixed into provides (declared only: no class attribute is made)
    t: sa.Table
    events_t: sa.Table
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
        by_batch: dict[tuple, list[Settled]] = {}
        for s in settled:
            by_batch.setdefault((s.token, s.outcome, s.purge_at), []).append(s)
        gone: list[Settled] = []
        for group in by_batch.values():
            held = [s for s in group if self._from_held(s)]
            by_claim: dict[tuple, list[Settled]] = {}
            for s in held:
                by_claim.setdefault((s.held.started_at, s.held.owner), []).append(s)  # type: ignore[union-attr]
            for claim in by_claim.values():
                gone += self._settle_held(conn, claim, now)
            if len(held) < len(group):
                gone += self._settle_read_back(conn, [s for s in group if not self._from_held(s)], now)
        return gone

    def _from_held(self, s: Settled) -> bool:
        return s.held is not None and s.outcome == "success" and self.db.dialect.inserts_read_back

    def _finish(self, conn, group: Sequence[Settled], now: float, *fence) -> int:
        """Finish the rows of ``group`` (one token, outcome and retention) still held under its
        token (and matching ``fence``); how many."""
        t, first = self.t, group[0]
        done = dict(state=FINISHED, leased=0, outcome=first.outcome, finished_at=now)
        held = task_where(t, "finish", token=first.token)
        update = sa.update(t).where(t.c.id.in_([s.id for s in group]), *held, *fence)
        return conn.execute(update.values(**done, timeout=self.purge_time(first.purge_at))).rowcount

    def _settle_read_back(self, conn, group: Sequence[Settled], now: float) -> list[Settled]:
        written = self._finish(conn, group, now)
        if written == len(group):
            self.record_ids(conn, "finished", [s.id for s in group], now, outcome=group[0].outcome)
            return []
        return self._settled_short(conn, written, group, now)

    def _settle_held(self, conn, group: Sequence[Settled], now: float) -> list[Settled]:
        """Settle a group of tasks untracked when claimed, their events written from ``held``."""
        written = self._finish(conn, group, now, *self._as_held(group))
        if written == len(group):
            self._record_held(conn, group, now)
            return []
        if not written:  # tracked since, lost, or finished by an earlier run of this transaction
            return self._settle_read_back(conn, group, now)
        states = self._states(conn, group)
        ours = [s for s in group if states.get(s.id) == (FINISHED, s.token)]
        self._record_held(conn, ours, now)  # written just now: an earlier run would have ended them all
        rest = [s for s in group if states.get(s.id, (None, None))[1] == s.token and states[s.id][0] != FINISHED]
        lost = [s for s in group if states.get(s.id, (None, None))[1] != s.token]
        return lost + (self._settle_read_back(conn, rest, now) if rest else [])

    def _as_held(self, group: Sequence[Settled]) -> list:
        """The rows of ``group`` (one claim's: one start, one owner) only as their holder claimed
        them: untracked, their start and owner as the claim wrote them."""
        t, held = self.t, group[0].held
        assert held is not None
        return [t.c.tracked == 0, t.c.started_at == held.started_at, t.c.owner == held.owner]

    def _states(self, conn, group: Sequence[Settled]) -> dict[int, tuple]:
        t = self.t
        rows = conn.execute(sa.select(t.c.id, t.c.state, t.c.lease_token).where(t.c.id.in_([s.id for s in group])))
        return {r.id: (r.state, r.lease_token) for r in rows}

    def _record_held(self, conn, group: Sequence[Settled], now: float) -> None:
        events = finished_events([(s.id, s.held) for s in group], now, group[0].outcome) if group else []
        self.db.dialect.insert_rows(conn, self.events_t, COLUMNS, events)

    def _settled_short(self, conn, written: int, group: Sequence[Settled], now: float) -> list[Settled]:
        """Of a settled ``group`` (one token) whose finish wrote ``written`` of its rows, those whose
        lease was lost (the others are finished under the token: by this statement, or, when it
        wrote none, by an earlier run of this transaction that committed them and their events)."""
        states = self._states(conn, group)
        ours = sorted(s.id for s in group if states.get(s.id) == (FINISHED, s.token))
        if written:
            self.record_ids(conn, "finished", ours, now, outcome=group[0].outcome)
        return [s for s in group if s.id not in ours]
