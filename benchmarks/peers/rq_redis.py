"""Peer: RQ on Redis, the reference line (the de-facto default a Python user would pick).

Debian's ``redis-server`` on loopback without persistence. Jobs are enqueued first, then 2
``rq worker --burst`` processes run them with RQ's default worker class (it forks a work
horse per job; RQ's non-forking ``SimpleWorker`` is several times faster but not the default).
Compared with pq's 2-process drain on every database.
"""

from __future__ import annotations

from ..procs import command
from .base import Peer, drain

WORKERS = 2
QUEUE = "bench"


class RQ(Peer):
    name = "rq"
    label = "RQ on Redis (reference)"
    db = None
    modules = ("rq", "redis")
    needs_redis = True

    def settings(self, ctx) -> dict:
        return {
            "tasks": ctx.sizes.rq_tasks,
            "workers": f"{WORKERS} x rq worker --burst (default forking Worker)",
            "redis": "redis-server --save '' --appendonly no, 127.0.0.1",
        }

    def run(self, ctx) -> float:
        from redis import Redis
        from rq import Queue

        from .rq_jobs import noop

        n = ctx.sizes.rq_tasks
        url = ctx.extra["redis_url"] + "/2"
        conn = Redis.from_url(url)
        conn.flushdb()
        q = Queue(QUEUE, connection=conn)
        for start in range(0, n, 500):
            q.enqueue_many([Queue.prepare_data(noop) for _ in range(start, min(n, start + 500))])
        conn.close()
        argv = [*command("rq", "rq.cli"), "worker", "--burst", "--url", url, QUEUE]
        return n / drain(ctx, "rq", [argv] * WORKERS, n)
