"""huey's application for the benchmarks: ``huey_consumer benchmarks.peers.huey_app.huey``.

The consumer builds it from ``BENCH_HUEY_DB``; the harness calls :func:`build` itself.
"""

from __future__ import annotations

import os

from .done import mark, record


def build(filename: str):
    """A SqliteHuey with its documented defaults on ``filename``, and its no-op task."""
    from huey import SqliteHuey

    app = SqliteHuey("bench", filename=filename)

    @app.task(name="noop")
    def noop():
        mark()

    @app.task(name="record")
    def record_task(created):
        record(created)

    app.bench_record = record_task  # the latency figure's task (benchmarks/peers/feel.py)
    return app, noop


if os.environ.get("BENCH_HUEY_DB"):
    huey, noop = build(os.environ["BENCH_HUEY_DB"])
