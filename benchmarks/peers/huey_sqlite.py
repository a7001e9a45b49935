"""Peer: huey with its SQLite storage (``SqliteHuey``), compared with pq on SQLite.

Tasks are enqueued first, then ``huey_consumer -w 2 -k process`` (2 worker processes, as
pq's 2-process drain) runs them; everything else is huey's default (WAL journal, SQLite's
default synchronous=FULL as pq, polling delay 0.1 s with backoff). Note: huey deletes a task
when it dequeues it, so a crashed worker loses it.
"""

from __future__ import annotations

import signal

from ..procs import command
from .base import Peer, drain

WORKERS = 2


class HueySqlite(Peer):
    name = "huey"
    label = "huey (SqliteHuey)"
    db = "sqlite"
    modules = ("huey",)

    def settings(self, ctx) -> dict:
        return {"tasks": ctx.sizes.peer_tasks, "consumer": f"huey_consumer -w {WORKERS} -k process",
                "storage": "SqliteHuey defaults (WAL, synchronous=FULL)"}

    def run(self, ctx) -> float:
        from .huey_app import build

        n = ctx.sizes.peer_tasks
        path = ctx.file("huey.db")
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        app, noop = build(str(path))
        for _ in range(n):
            noop()
        app.storage.close()
        argv = [*command("huey_consumer", "huey.bin.huey_consumer"), "benchmarks.peers.huey_app.huey",
                "-w", str(WORKERS), "-k", "process"]
        seconds = drain(ctx, "huey", [argv], n, env={"BENCH_HUEY_DB": str(path)}, stop_signal=signal.SIGINT)
        return n / seconds
