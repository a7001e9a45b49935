"""The claim (store layer): :class:`TaskClaim` leases due tasks, the store's ``task_claim``.

Where each part of it lives:

- ``tables.py``: what every claim of a store shares: its tables, the claim mark, the fair lock;
- ``queues.py``: the walk over the queues a worker serves (pauses, concurrency limits);
- ``rates.py``: a rate-limited queue's starts;
- ``view.py``: the claim in one queue: the priority walk, the fair share, the lease itself;
- ``types.py``: the reads of a claim limited to task types;
- ``screen.py``: the picked rows it ends instead of leasing (cancelled, out of attempts, corrupt).
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from .. import lost_claims
from ..schema import DEFAULT_QUEUE
from ..settles import Settled, TaskSettles
from .queues import QueueWalk
from .screen import ClaimScreen
from .tables import MARK_CHECK_INTERVAL, ClaimTables
from .view import ClaimRequest

__all__ = ["MARK_CHECK_INTERVAL", "ClaimScreen", "ClaimTables", "TaskClaim", "new_token"]

#: the rounds of a claim that ended only rows (given up, set aside) before it says more may be due
ROUNDS = 4


def new_token() -> int:
    return secrets.randbits(62) + 1


class TaskClaim:
    """The claims of :class:`ClaimTables` ``tables``; ``settles`` finishes the batch a claim
    settles first."""

    def __init__(self, tables: ClaimTables, settles: TaskSettles):
        self.tables, self.db, self.settles = tables, tables.db, settles
        self.walk = QueueWalk(tables)

    def task_claim(
        self,
        n: int,
        alive_time: float,
        now: float,
        owner: str,
        settle: Sequence[Settled] = (),
        lost: list[Settled] | None = None,
        also=None,
        types: Sequence[str] | None = None,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        notes: dict | None = None,
        clock: Callable[[], float] | None = None,
        start_within: float = 0.0,
        announce: Callable[[int], None] | None = None,
        owned_ended: Callable[[Any, list[dict]], None] | None = None,
    ) -> list[dict]:
        """Lease up to ``n`` due tasks; first, in the same transaction, finish ``settle``.

        ``now``: the time the claim judges which rows are due and which leases count. ``clock()``
        (default: ``now``): asked once the locks a queue's walk may wait for are held (on SQLite
        the write lock of ``BEGIN IMMEDIATE``, elsewhere a limited queue's settings row and the
        fair lock), for the time the claim writes: the lease's expiry and ``started_at``, the
        claim events, a rate limit's starts. A claim that waited for a lock never writes the time
        it read before the wait: a lease born expired would run twice at once. ``start_within``:
        the seconds within which the caller starts the handler of a rate-limited task (each such
        row's ``start_by``: its start is counted then; ``rates.py``).

        ``queues``: the queues to lease from, best first (a queue's tasks are taken before the
        next queue's; paused ones are passed over, limited ones give at most their free slots:
        ``queues.py``, which also fills ``notes``). ``types``: lease only rows of these task
        types (exact, validated strings); None: any. ``notes["ended_rows"]``: nothing leased
        after four rounds that only ended rows (given up, set aside): more may be due, claim again.

        Settling the previous batch together with the next claim makes a drain cost one
        transaction per batch instead of two per task, with the same fencing as ``finish``:
        a settled task whose lease was taken over is not finished, and its ``Settled`` entry
        is appended to ``lost``. ``also(conn)``: more writes of the settled batch, in the same
        transaction before the claim (deferred finishes of workflow steps).

        The lease token is drawn before the transaction: when it runs again after a transient
        error that may have hidden its COMMIT (a lost acknowledgement), the rows it already
        leased under that token are delivered instead of being left to expire unknown.
        ``announce(token)``: told each token before the transaction that leases under it (a worker
        child keeps it where its successor finds it, should it die before it records its batch).
        ``owned_ended(conn, rows)``: told, in the claim's transaction, the rows of workflow runs
        the claim ended instead of leasing (set aside, given up; each as it ended), so that their
        runs decide what follows in the same commit; what it raises is logged, and rolled back alone."""
        req = ClaimRequest(n, alive_time, now, owner, types, queues, clock or (lambda: now), start_within, notes)
        first = _FirstRound(list(settle), lost, also)
        for _ in range(ROUNDS):
            req.token = new_token()
            if announce is not None:
                announce(req.token)
            rows, ended = self.db.run(
                functools.partial(self._round, req=req, first=first, told=owned_ended), what="poll"
            )
            first = _FirstRound([], None, None)
            if rows or not ended:
                return rows
        if notes is not None:  # only ended rows, four times: more may be due behind them
            notes["ended_rows"] = True
        return []

    def _round(self, conn, req: ClaimRequest, first: _FirstRound, told):
        """One transaction of a claim: its rows, and the rows it ended instead (those of
        workflow runs ``told(conn, rows)``)."""
        self.tables.claim_table(conn)
        if first.settle:
            gone = self.settles.settle(conn, first.settle, req.now)
            if first.lost is not None:
                first.lost[:] = gone
        if first.also is not None:
            first.also(conn)
        if self.db.last_run_retried() and req.stamps:
            expiries = [at + req.alive_time for at in req.stamps]
            mine = lost_claims.renewed_under(
                self.tables.t, conn, req.token, expiries, req.stamp, req.alive_time, self.db.dialect.per_row
            )
            if mine:
                return self.walk.rates.with_start_by(conn, mine, req.start_within), []
        if not req.n:
            return [], []
        rows, ended = self.walk.claim(conn, req)
        self.tables.screen.tell_owners(conn, told, ended)
        return rows, ended


class _FirstRound:
    """What only a claim's first round does: settle the batch ``settle`` (the lost ones told in
    ``lost``) and write ``also(conn)``."""

    def __init__(self, settle: list[Settled], lost: list[Settled] | None, also):
        self.settle, self.lost, self.also = settle, lost, also
