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
from .feel import feel_variants, measure_latency, timed_submits

WORKERS = 2


class HueySqlite(Peer):
    name = "huey"
    label = "huey (SqliteHuey)"
    db = "sqlite"
    modules = ("huey",)

    def settings(self, ctx) -> dict:
        return {
            "tasks": ctx.sizes.peer_tasks,
            "consumer": f"huey_consumer -w {WORKERS} -k process",
            "storage": "SqliteHuey defaults (WAL, synchronous=FULL)",
        }

    latency_consumer = "huey_consumer -w 1 -k process (defaults otherwise)"

    def variants(self, sizes) -> list[Peer]:
        return feel_variants(self)

    @staticmethod
    def _fresh(ctx, name: str):
        """A SqliteHuey on a new file ``name`` of the work directory: (app, noop, path)."""
        from .huey_app import build

        path = ctx.file(name)
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        return (*build(str(path)), path)

    def submit_rate(self, ctx) -> float:
        app, noop, _ = self._fresh(ctx, "huey-submit.db")
        try:
            return timed_submits(ctx.sizes.enqueue_tasks, lambda _i: noop())
        finally:
            app.storage.close()

    def latency(self, ctx) -> float:
        app, _, path = self._fresh(ctx, "huey-latency.db")
        argv = [
            *command("huey_consumer", "huey.bin.huey_consumer"),
            "benchmarks.peers.huey_app.huey",
            "-w",
            "1",
            "-k",
            "process",
        ]
        try:
            return measure_latency(
                ctx, "huey", argv, app.bench_record, env={"BENCH_HUEY_DB": str(path)}, stop_signal=signal.SIGINT
            )
        finally:
            app.storage.close()

    def run(self, ctx) -> float:
        n = ctx.sizes.peer_tasks
        app, noop, path = self._fresh(ctx, "huey.db")
        for _ in range(n):
            noop()
        app.storage.close()
        argv = [
            *command("huey_consumer", "huey.bin.huey_consumer"),
            "benchmarks.peers.huey_app.huey",
            "-w",
            str(WORKERS),
            "-k",
            "process",
        ]
        seconds = drain(ctx, "huey", [argv], n, env={"BENCH_HUEY_DB": str(path)}, stop_signal=signal.SIGINT)
        return n / seconds
