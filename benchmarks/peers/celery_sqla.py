"""Peer: Celery with kombu's SQLAlchemy transport on MariaDB, compared with pq on MariaDB.

Broker ``sqla+mysql+pymysql://`` on the test database; the transport's two tables are named
``bench_<pid>_kombu_queue`` / ``_message`` (transport options ``queue_tablename`` /
``message_tablename``), made once and emptied before each measurement (kombu creates its tables
once per process and engine, so tables dropped in between would be missing; and it names the
message table's foreign key ``FK_kombu_message_queue`` whatever the table, so a second pair of
tables cannot be made in the same database), dropped at the end. No result backend. Tasks
are sent first, then ``celery worker -c 2`` (prefork, 2 processes) runs them; everything else
is Celery's default (prefetch multiplier 4, early acks). kombu documents this transport as
experimental.
"""

from __future__ import annotations

import os

import sqlalchemy as sa

from ..procs import command
from ..tables import drop_tables, engine
from .base import Peer, drain
from .feel import feel_variants, measure_latency, timed_submits

WORKERS = 2


def tables_prefix() -> str:
    return f"bench_{os.getpid()}_kombu"


class CelerySqla(Peer):
    name = "celery"
    label = "Celery (SQLAlchemy transport)"
    db = "mariadb"
    modules = ("celery", "kombu")

    def settings(self, ctx) -> dict:
        return {
            "tasks": ctx.sizes.peer_tasks,
            "broker": "sqla+mysql+pymysql:// (kombu SQLAlchemy transport)",
            "workers": f"celery worker -c {WORKERS} (prefork)",
            "result backend": "none",
        }

    def skip_reason(self, ctx):
        if not ctx.extra.get("server_urls", {}).get("mariadb"):
            return "skipped: no MariaDB server"
        return super().skip_reason(ctx)

    def _empty(self, ctx) -> None:
        """Delete every message a former measurement left in the transport's table."""
        url, table = ctx.extra["server_urls"]["mariadb"], f"{tables_prefix()}_message"
        with engine(url).begin() as conn:
            if sa.inspect(conn).has_table(table):
                conn.execute(sa.text(f"DELETE FROM {table}"))

    latency_consumer = "celery worker -c 1 (prefork; the transport's 1 s polling interval)"

    def variants(self, sizes) -> list[Peer]:
        return feel_variants(self)

    def _fresh(self, ctx):
        """An app on the emptied transport tables: (app, broker URL, table prefix)."""
        from .celery_app import build

        broker = "sqla+" + ctx.extra["server_urls"]["mariadb"]
        self._empty(ctx)
        return build(broker, tables=tables_prefix()), broker, tables_prefix()

    @staticmethod
    def _worker(concurrency: int) -> list[str]:
        return [*command("celery", "celery"), "-A", "benchmarks.peers.celery_app", "worker", "-c", str(concurrency)]

    def submit_rate(self, ctx) -> float:
        app, _, _ = self._fresh(ctx)
        noop = app.tasks["noop"]
        try:
            with app.producer_or_acquire() as producer:
                return timed_submits(ctx.sizes.enqueue_tasks, lambda _i: noop.apply_async(producer=producer))
        finally:
            app.close()

    def latency(self, ctx) -> float:
        app, broker, prefix = self._fresh(ctx)
        record = app.tasks["record"]
        try:
            with app.producer_or_acquire() as producer:
                return measure_latency(
                    ctx,
                    "celery",
                    self._worker(1),
                    lambda created: record.apply_async((created,), producer=producer),
                    env={"BENCH_CELERY_BROKER": broker, "BENCH_CELERY_TABLES": prefix},
                )
        finally:
            app.close()

    def run(self, ctx) -> float:
        n = ctx.sizes.peer_tasks
        app, broker, prefix = self._fresh(ctx)
        noop = app.tasks["noop"]
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(producer=producer)
        app.close()
        seconds = drain(
            ctx,
            "celery-sqla",
            [self._worker(WORKERS)],
            n,
            env={"BENCH_CELERY_BROKER": broker, "BENCH_CELERY_TABLES": prefix},
        )
        return n / seconds

    def teardown(self, ctx) -> None:
        prefix = tables_prefix()
        drop_tables(ctx.extra["server_urls"]["mariadb"], [f"{prefix}_message", f"{prefix}_queue"])
