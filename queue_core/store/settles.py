"""Settling a batch of held tasks as finished (store layer): one UPDATE per lease token, fenced by
it, and the ``finished`` events of the rows it wrote. A part of
:class:`~queue_core.store.tasks.SqlStore` (its ``settles``); a worker settles each batch in the
transaction of its next claim.

The events are read back from the rows as the UPDATE left them (``record_ids``: one INSERT ...
SELECT), except where the claims mark their rows (MySQL/MariaDB, whose insert of selected rows
reads them into the client first: ``Dialect.claim_mark_usable``). There a success of a task untracked
when claimed is written from what its holder keeps of the claim (:class:`HeldAttempt`) when its
row is still as the claim left it: the UPDATE is also fenced by the claim mark, which the server
changes on any change of the row since (a move, a track, an attempt given back, a heartbeat, a
hand edit). A row changed since, a lease lost, or a batch whose UPDATE fell short, goes the
read-back way. (Fencing by every column an event reads instead cost MariaDB what the read
saved.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..rules.task_states import FINISHED
from .database import Database
from .events import COLUMNS, TaskEvents, finished_events
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

    @classmethod
    def of(cls, row: dict) -> HeldAttempt | None:
        """The attempt a claim's ``row`` (as the claim left it) holds; None when tracked then."""
        if row["tracked"] or row["started_at"] is None or row["owner"] is None:
            return None
        claimed = (row["attempts"], row["owner"], row["started_at"], row["run_at"])
        return cls(row["key"], row["queue"], row["type"], *claimed)


@dataclass(frozen=True)
class Settled:
    """A held task whose outcome is decided and waits to be written with the next batch
    (``held``: its attempt as claimed, when it was untracked then; else None)."""

    id: int
    token: int
    purge_at: float
    outcome: str = "success"
    held: HeldAttempt | None = None


@dataclass
class _SortedOut:
    """The rows of a settled group read after its finish: finished under its token by this
    transaction (``ours``) or before it (``earlier``), still held under it (``live``), or no
    longer under it (``lost``)."""

    ours: list[Settled]
    earlier: list[Settled]
    live: list[Settled]
    lost: list[Settled]


class TaskSettles:
    """Finishes of batches of held tasks of the task table ``t``, with their events (``events``);
    ``purge_time`` gives a finished row its purge time, ``marked_claims()`` the table with its
    claim mark when the store's claims mark their rows (the store's)."""

    def __init__(
        self,
        db: Database,
        t: sa.Table,
        events: TaskEvents,
        purge_time: Callable[..., Any],
        marked_claims: Callable[[], sa.Table | None],
    ):
        self.db, self.t, self.events, self.purge_time, self.marked_claims = db, t, events, purge_time, marked_claims

    def task_settle(self, settled: Sequence[Settled], now: float, also=None) -> list[Settled]:
        """Finish a batch of held tasks in one transaction; returns those whose lease was lost.
        ``also(conn)``: more writes of the batch in the same transaction."""

        def work(conn):
            gone = self.settle(conn, settled, now) if settled else []
            if also is not None:
                also(conn)
            return gone

        return self.db.run(work, what="finish") if settled or also is not None else []

    def settle(self, conn, settled: Sequence[Settled], now: float) -> list[Settled]:
        """Finish ``settled`` in the caller's transaction; those whose lease was lost."""
        by_batch: dict[tuple, dict[int, Settled]] = {}
        for s in settled:  # each lease once: an entry listed twice is settled once
            by_batch.setdefault((s.token, s.outcome, s.purge_at), {}).setdefault(s.id, s)
        marked = self.marked_claims()
        gone: list[Settled] = []
        for entries in by_batch.values():
            group = list(entries.values())
            held = [s for s in group if marked is not None and s.held is not None and s.outcome == "success"]
            if marked is not None and held:
                gone += self._settle_held(conn, marked, held, now)
            if len(held) < len(group):
                taken = {s.id for s in held}
                gone += self._settle_group(conn, [s for s in group if s.id not in taken], now)
        return gone

    def _finish(self, conn, group: Sequence[Settled], now: float, table: sa.Table | None = None) -> int:
        """Finish the rows of ``group`` (one token, outcome and retention) still held under its
        token (``table``: the marked table, its rows also as claimed); how many."""
        t, first = table if table is not None else self.t, group[0]
        done = dict(state=FINISHED, leased=0, outcome=first.outcome, finished_at=now)
        held = task_where(t, "finish", token=first.token)
        fence = self.db.dialect.as_claimed(table) if table is not None else []
        update = sa.update(t).where(t.c.id.in_([s.id for s in group]), *self.db.dialect.per_row([*held, *fence]))
        return conn.execute(update.values(**done, timeout=self.purge_time(first.purge_at, table))).rowcount

    def _settle_group(self, conn, group: Sequence[Settled], now: float) -> list[Settled]:
        written = self._finish(conn, group, now)
        if written == len(group):
            self.events.record_ids(conn, "finished", [s.id for s in group], now, outcome=group[0].outcome)
            return []
        return self._settled_short(conn, written, group, now)

    def _settle_held(self, conn, marked: sa.Table, group: Sequence[Settled], now: float) -> list[Settled]:
        """Settle successes of tasks untracked when claimed: those whose rows are still as claimed
        get their events from ``held``; the rest go the read-back way."""
        written = self._finish(conn, group, now, marked)
        if written == len(group):
            self._record_held(conn, group, now)
            return []
        if not written:  # changed since, lost, or finished by an earlier run of this transaction
            return self._settle_group(conn, group, now)
        # Some written: no earlier run of this transaction committed (it would have finished
        # every row still held), so the rows finished under the token now are this statement's.
        rows = self._sort_out(conn, group, now)
        self._record_held(conn, rows.ours, now)
        return rows.lost + (self._settle_group(conn, rows.live, now) if rows.live else [])

    def _record_held(self, conn, group: Sequence[Settled], now: float) -> None:
        events = finished_events([(s.id, s.held) for s in group], now, group[0].outcome) if group else []
        if events:
            self.db.dialect.insert_rows(conn, self.events.events_t, COLUMNS, events)

    def _sort_out(self, conn, group: Sequence[Settled], now: float) -> _SortedOut:
        """The rows of ``group`` (one token) as they are now (read after its finish)."""
        t = self.t
        cols = (t.c.id, t.c.state, t.c.lease_token, t.c.finished_at)
        found = {r.id: r for r in conn.execute(sa.select(*cols).where(t.c.id.in_([s.id for s in group])))}
        out = _SortedOut([], [], [], [])
        for s in group:
            r = found.get(s.id)
            if r is None or r.lease_token != s.token:
                out.lost.append(s)
            elif r.state != FINISHED:
                out.live.append(s)
            else:  # finished at another time: by its holder alone before (a copy of a task listed again)
                (out.ours if r.finished_at == now else out.earlier).append(s)
        return out

    def _settled_short(self, conn, written: int, group: Sequence[Settled], now: float) -> list[Settled]:
        """Of a settled ``group`` (one token) whose finish wrote ``written`` of its rows, those whose
        lease was lost. The others are finished under the token: by this statement, or, when it
        wrote none, by an earlier run of this transaction that committed them and their events,
        or by their holder before (their events written then)."""
        rows = self._sort_out(conn, group, now)
        if written:
            self.events.record_ids(conn, "finished", sorted(s.id for s in rows.ours), now, outcome=group[0].outcome)
        return rows.lost + rows.live
