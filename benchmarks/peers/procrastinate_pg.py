"""Peer: procrastinate on PostgreSQL, compared with pq on PostgreSQL.

procrastinate gets its own database (``bench_<pid>_procrastinate``, created by the qtest role,
re-created for each run, dropped at the end) with its schema applied. Jobs are deferred
first (``batch_defer``), then 2 ``procrastinate worker`` processes run them with the
documented defaults (concurrency 1, LISTEN/NOTIFY on, 5 s polling fallback).
"""

from __future__ import annotations

import os

import sqlalchemy as sa

from ..procs import command
from ..tables import engine
from .base import Peer, drain
from .feel import feel_variants, measure_latency, timed_submits

WORKERS = 2
DATABASE = f"bench_{os.getpid()}_procrastinate"


def _admin(ctx) -> sa.Engine:
    return engine(ctx.extra["server_urls"]["postgres"])


def _dsn(ctx) -> str:
    url = sa.engine.make_url(ctx.extra["server_urls"]["postgres"])
    return url.set(drivername="postgresql", database=DATABASE).render_as_string(hide_password=False)


def _drop(ctx) -> None:
    with _admin(ctx).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


class Procrastinate(Peer):
    name = "procrastinate"
    label = "procrastinate"
    db = "postgres"
    modules = ("procrastinate",)

    def settings(self, ctx) -> dict:
        return {
            "tasks": ctx.sizes.peer_tasks,
            "workers": f"{WORKERS} x procrastinate worker (defaults)",
            "database": f"{DATABASE} (own database, same server)",
        }

    def skip_reason(self, ctx):
        if not ctx.extra.get("server_urls", {}).get("postgres"):
            return "skipped: no PostgreSQL server"
        return super().skip_reason(ctx)

    latency_consumer = "procrastinate worker (defaults: concurrency 1, LISTEN/NOTIFY, 5 s polling fallback)"

    def variants(self, sizes) -> list[Peer]:
        return feel_variants(self)

    def _fresh(self, ctx):
        """procrastinate's database made anew with its schema; the app (not open) and its no-op task."""
        from .procrastinate_app import build

        _drop(ctx)
        with _admin(ctx).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {DATABASE}")
        app, noop = build(_dsn(ctx))
        with app.open():
            app.schema_manager.apply_schema()
        return app, noop

    def submit_rate(self, ctx) -> float:
        app, noop = self._fresh(ctx)
        with app.open():
            return timed_submits(ctx.sizes.enqueue_tasks, lambda _i: noop.defer())

    def latency(self, ctx) -> float:
        app, _ = self._fresh(ctx)
        argv = [*command("procrastinate", "procrastinate"), "--app=benchmarks.peers.procrastinate_app.app", "worker"]
        with app.open():
            return measure_latency(
                ctx,
                "procrastinate",
                argv,
                lambda created: app.bench_record.defer(created=created),
                env={"BENCH_PROCRASTINATE_DSN": _dsn(ctx)},
            )

    def run(self, ctx) -> float:
        n = ctx.sizes.peer_tasks
        app, noop = self._fresh(ctx)
        with app.open():
            for start in range(0, n, 1000):
                noop.batch_defer(*({} for _ in range(start, min(n, start + 1000))))
        argv = [*command("procrastinate", "procrastinate"), "--app=benchmarks.peers.procrastinate_app.app", "worker"]
        seconds = drain(ctx, "procrastinate", [argv] * WORKERS, n, env={"BENCH_PROCRASTINATE_DSN": _dsn(ctx)})
        return n / seconds

    def teardown(self, ctx) -> None:
        _drop(ctx)
