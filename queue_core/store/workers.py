"""The registry of workers (store layer): a row of ``<table>_workers`` per claiming process,
keyed by the owner it writes on the rows it leases (host:pid). A part of
:class:`~queue_core.store.tasks.SqlStore` (its ``worker_*`` operations).

A worker writes its row when it starts, renews ``last_seen`` while it runs (a renewal that
finds no row, swept while the worker was cut off, writes it again), and deletes it when it
stops. A row silent past the limit is not listed, and deleted by the next sweep (cleanup).
The registry is not a lease: nothing is fenced by it, and a row left behind only misleads a
reader until the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ..rules.task_states import LIVE
from .database import Database


@dataclass(frozen=True)
class WorkerIdentity:
    """What a worker's registry row says of it besides its times."""

    #: the owner it writes on the rows it leases (host:pid)
    owner: str
    host: str
    pid: int
    #: the queues it serves, best first, and the task types (None: any), as JSON lists
    queues: str
    types: str | None
    version: str


def _columns(worker: WorkerIdentity, started_at: float, last_seen: float) -> dict:
    return {
        "owner": worker.owner,
        "host": worker.host,
        "pid": worker.pid,
        "queues": worker.queues,
        "types": worker.types,
        "version": worker.version,
        "started_at": started_at,
        "last_seen": last_seen,
    }


class WorkerRows:
    """The registry part of a store: ``workers_t`` beside the task table ``t``."""

    def __init__(self, db: Database, t: sa.Table, workers_t: sa.Table):
        self.db, self.t, self.workers_t = db, t, workers_t

    def worker_register(self, worker: WorkerIdentity, now: float) -> None:
        """Write the row of a worker that starts at ``now`` (or starts again: its old row replaced)."""
        self._write_worker_row(worker, now, now)

    def worker_renew(self, worker: WorkerIdentity, started_at: float, now: float) -> None:
        """Renew ``last_seen`` of a running worker; write its row again when it is gone (swept
        while the worker was cut off from the database)."""
        w = self.workers_t
        renew = sa.update(w).where(w.c.owner == worker.owner).values(last_seen=now)
        if self.db.run(lambda c: c.execute(renew).rowcount, what="renew worker", autocommit=True) == 0:
            self._write_worker_row(worker, started_at, now)  # (MySQL: also 0 when unchanged)

    def _write_worker_row(self, worker: WorkerIdentity, started_at: float, last_seen: float) -> None:
        """Replace the row of ``worker``: two statements, each in autocommit. The registry is
        written by a thread of a worker whose handler may hold the GIL in a C call for minutes:
        on SQLite a transaction of several statements would hold the database's write lock until
        its COMMIT got the GIL back, stalling every worker's claims and lease heartbeats. Between
        the two statements the worker is briefly unlisted, which its next renewal repairs."""
        w = self.workers_t
        row = _columns(worker, started_at, last_seen)
        self.db.run(
            lambda c: c.execute(sa.delete(w).where(w.c.owner == worker.owner)), what="register worker", autocommit=True
        )
        # insert if absent: an insert run again after a lost acknowledgement, or a renewal racing
        # this one, finds the row there, and then the row is brought up to date instead
        insert = self.db.dialect.insert_if_absent(w, "owner")
        put = self.db.run(
            lambda c: self.db.dialect.execute_insert(c, insert, [row], w.c.owner),
            what="register worker",
            autocommit=True,
        )
        if put == 0:
            update = sa.update(w).where(w.c.owner == worker.owner).values(**row)
            self.db.run(lambda c: c.execute(update), what="register worker", autocommit=True)

    def worker_remove(self, owner: str) -> None:
        w = self.workers_t
        self.db.run(lambda c: c.execute(sa.delete(w).where(w.c.owner == owner)), what="unregister worker")

    def worker_sweep(self, silent_since: float) -> int:
        """Delete the rows of workers not seen since ``silent_since``; how many."""
        w = self.workers_t
        return self.db.run(
            lambda c: c.execute(sa.delete(w).where(w.c.last_seen < silent_since)).rowcount, what="sweep workers"
        )

    def worker_rows(self, seen_since: float, now: float) -> list[dict]:
        """The workers seen since ``seen_since``, oldest first, each with ``held``: how many tasks
        it holds a lease on at ``now``, and ``held_keys``: their keys (at most
        :data:`MAX_HELD_KEYS`, in key order). Read here, from the rows leased: a worker writes
        nothing more per task for it."""
        w, t = self.workers_t, self.t
        held = (
            sa.select(t.c.owner, t.c.key)
            .where(t.c.state == LIVE, t.c.leased == 1, t.c.timeout > now)
            .order_by(t.c.owner, t.c.key)
        )

        def read(conn) -> list[dict]:
            rows = conn.execute(sa.select(w).where(w.c.last_seen >= seen_since).order_by(w.c.started_at, w.c.owner))
            found = [dict(r._mapping) for r in rows]
            keys: dict[str, list[str]] = {}
            for owner, key in conn.execute(held).all() if found else ():
                keys.setdefault(owner, []).append(key)
            return [_with_held(r, keys.get(r["owner"], [])) for r in found]

        return self.db.run(read, write=False, what="list workers")


#: the most keys of held tasks listed per worker (its count is always whole)
MAX_HELD_KEYS = 100


def _with_held(row: dict, keys: list[str]) -> dict:
    return row | {"held": len(keys), "held_keys": keys[:MAX_HELD_KEYS]}
