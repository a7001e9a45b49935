"""Celery's application for the benchmarks: ``celery -A benchmarks.peers.celery_app worker``.

Workers build it from ``BENCH_CELERY_BROKER`` (+ ``BENCH_CELERY_BACKEND``,
``BENCH_CELERY_TABLES``); the harness calls :func:`build` itself.
"""

from __future__ import annotations

import os

from .done import mark, record


def build(broker: str, backend: str | None = None, tables: str | None = None):
    """A Celery app with its documented defaults on ``broker`` (and result ``backend``).

    ``tables``: a prefix for the kombu SQLAlchemy transport's two tables.
    """
    from celery import Celery

    app = Celery("bench", broker=broker, backend=backend or None)
    if tables:
        app.conf.broker_transport_options = {
            "queue_tablename": f"{tables}_queue",
            "message_tablename": f"{tables}_message",
        }

    @app.task(name="noop")
    def noop():
        mark()

    @app.task(name="step")
    def step(*_args):
        mark()

    @app.task(name="record")
    def record_task(created):
        record(created)  # the latency figure (benchmarks/peers/feel.py)

    return app


if os.environ.get("BENCH_CELERY_BROKER"):
    app = build(
        os.environ["BENCH_CELERY_BROKER"], os.environ.get("BENCH_CELERY_BACKEND"), os.environ.get("BENCH_CELERY_TABLES")
    )
