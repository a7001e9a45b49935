"""Peer: Celery with kombu's SQLAlchemy transport on MariaDB, compared with pq on MariaDB.

Broker ``sqla+mysql+pymysql://`` on the test database; the transport's two tables are named
``bench_<pid>_kombu<run>_queue`` / ``_message`` (transport options ``queue_tablename`` /
``message_tablename``), new ones each run (kombu creates its tables once per process and
engine, so a table dropped and re-used in the next run would be missing), all dropped at the
end. No result backend. Tasks
are sent first, then ``celery worker -c 2`` (prefork, 2 processes) runs them; everything else
is Celery's default (prefetch multiplier 4, early acks). kombu documents this transport as
experimental.
"""

from __future__ import annotations

import os

from ..procs import command
from ..tables import drop_tables
from .base import Peer, drain

WORKERS = 2


def tables_prefix(run: int) -> str:
    return f"bench_{os.getpid()}_kombu{run}"


class CelerySqla(Peer):
    name = "celery"
    label = "Celery (SQLAlchemy transport)"
    db = "mariadb"
    modules = ("celery", "kombu")

    def settings(self, ctx) -> dict:
        return {"tasks": ctx.sizes.peer_tasks, "broker": "sqla+mysql+pymysql:// (kombu SQLAlchemy transport)",
                "workers": f"celery worker -c {WORKERS} (prefork)", "result backend": "none"}

    def skip_reason(self, ctx):
        if not ctx.extra.get("server_urls", {}).get("mariadb"):
            return "skipped: no MariaDB server"
        return super().skip_reason(ctx)

    runs = 0

    def _clean(self, ctx, run: int) -> None:
        prefix = tables_prefix(run)
        drop_tables(ctx.extra["server_urls"]["mariadb"], [f"{prefix}_message", f"{prefix}_queue"])

    def run(self, ctx) -> float:
        from .celery_app import build

        n = ctx.sizes.peer_tasks
        broker = "sqla+" + ctx.extra["server_urls"]["mariadb"]
        self.runs += 1
        prefix = tables_prefix(self.runs)
        self._clean(ctx, self.runs)
        app = build(broker, tables=prefix)
        noop = app.tasks["noop"]
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(producer=producer)
        app.close()
        argv = [*command("celery", "celery"), "-A", "benchmarks.peers.celery_app", "worker", "-c", str(WORKERS)]
        seconds = drain(ctx, "celery-sqla", [argv], n,
                        env={"BENCH_CELERY_BROKER": broker, "BENCH_CELERY_TABLES": prefix})
        return n / seconds

    def teardown(self, ctx) -> None:
        for run in range(1, self.runs + 1):
            self._clean(ctx, run)
