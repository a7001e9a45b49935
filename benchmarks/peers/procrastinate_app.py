"""procrastinate's application for the benchmarks:
``procrastinate --app=benchmarks.peers.procrastinate_app.app worker``.

Workers build it from ``BENCH_PROCRASTINATE_DSN``; the harness calls :func:`build` itself.
"""

from __future__ import annotations

import os

from .done import mark, record


def build(dsn: str):
    """A procrastinate App (psycopg 3 connector, defaults) and its no-op task."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    def noop():
        mark()

    @app.task(name="record")
    def record_task(created):
        record(created)

    app.bench_record = record_task  # the latency figure's task (benchmarks/peers/feel.py)
    return app, noop


if os.environ.get("BENCH_PROCRASTINATE_DSN"):
    app, noop = build(os.environ["BENCH_PROCRASTINATE_DSN"])
