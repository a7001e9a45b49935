"""Peer: Celery canvas on Redis, compared with pq's workflows (scenario 8).

The same shape as :mod:`benchmarks.flows` — ``chain(step.si(), chord([step.si()] * 8,
step.si()))``, 10 no-op tasks — on Redis as broker and result backend (a chord needs a result
backend; Redis's is the one with an atomic fan-in counter). Chains are sent first, then
``celery worker -c 2`` (prefork) runs them; Celery's defaults otherwise. Steps/s from the
worker's start to the last step's end.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..flows import FAN_OUT, STEPS
from ..procs import BenchError, child_env, command
from .base import Peer, drain

WORKERS = 2


class CeleryChord(Peer):
    name = "chord"
    label = "Celery chord on Redis"
    db = None
    section = "workflow"
    modules = ("celery", "redis")
    needs_redis = True
    metric = "steps_per_s"
    unit = "steps/s"

    def settings(self, ctx) -> dict:
        return {"runs": ctx.sizes.chord_runs, "shape": f"chain(step, chord([step] x {FAN_OUT}, step))",
                "broker/backend": "redis:// (same redis-server)", "workers": f"celery worker -c {WORKERS} (prefork)"}

    def run(self, ctx) -> float:
        from redis import Redis

        runs = ctx.sizes.chord_runs
        url = ctx.extra["redis_url"] + "/3"
        Redis.from_url(url).flushdb()
        # Sent from a child: a sender subscribes to its results, and this process has no use for them.
        sent = subprocess.run([sys.executable, "-m", "benchmarks.peers.celery_chord", url, str(runs)],
                              env=child_env(), capture_output=True, text=True, timeout=ctx.sizes.timeout)
        if sent.returncode != 0:
            raise BenchError(f"sending the chords failed: {sent.stderr.strip().splitlines()[-1:]}")
        argv = [*command("celery", "celery"), "-A", "benchmarks.peers.celery_app", "worker", "-c", str(WORKERS)]
        seconds = drain(ctx, "celery-chord", [argv], runs * STEPS,
                        env={"BENCH_CELERY_BROKER": url, "BENCH_CELERY_BACKEND": url})
        return runs * STEPS / seconds


def send(url: str, runs: int) -> None:
    """Send ``runs`` chains of the benchmark's shape (run in a child process)."""
    from celery import chain, chord

    from .celery_app import build

    app = build(url, url)
    step = app.tasks["step"]
    for _ in range(runs):
        chain(step.si(), chord([step.si() for _ in range(FAN_OUT)], step.si())).apply_async()
    sys.stdout.flush()
    os._exit(0)  # skip the result handles' teardown (it would talk to Redis while exiting)


if __name__ == "__main__":
    send(sys.argv[1], int(sys.argv[2]))
