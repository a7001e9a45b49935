"""Peers: Celery canvas on Redis, compared with pq's workflows (scenarios 8 and 10).

Redis is broker and result backend (a chord needs a result backend; Redis's is the one with an
atomic fan-in counter). The canvases are sent first (from a child process), then ``celery
worker -c 2`` (prefork) runs them; Celery's defaults otherwise. The figure runs from the
worker's start to the last task's end.

- :class:`CeleryChord`: scenario 8's shape, ``chain(step.si(), chord([step.si()] * 8,
  step.si()))`` — 10 no-op tasks — ``chord_runs`` times; steps/s.
- :class:`CeleryChordMap`: scenario 10's, ``chord([step.si()] * W, step.si())`` (what
  ``group(...) | step.si()`` becomes) — W items and a join — as many times as pq's map runs of
  width W (``map_items // W``); items/s. One peer per width of ``map_widths``.
"""

from __future__ import annotations

import os
import signal
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
    pq_metric = "steps_per_s"
    pq_label = "pq workflow steps/s"
    versus = "workflow (1 → 8 → 1)"
    #: the canvas sent (see :func:`send`), its width, and how many of its tasks the figure counts
    shape, width, counted = "dag", FAN_OUT, STEPS

    def settings(self, ctx) -> dict:
        return {
            "runs": self.runs(ctx),
            "shape": f"chain(step, chord([step] x {FAN_OUT}, step))",
            "broker/backend": "redis:// (same redis-server)",
            "workers": f"celery worker -c {WORKERS} (prefork)",
        }

    def runs(self, ctx) -> int:
        return ctx.sizes.chord_runs

    def tasks(self) -> int:
        """Tasks of one canvas."""
        return STEPS

    def run(self, ctx) -> float:
        from redis import Redis

        runs = self.runs(ctx)
        url = ctx.extra["redis_url"] + "/3"
        Redis.from_url(url).flushdb()
        # Sent from a child: a sender subscribes to its results, and this process has no use for them.
        sent = subprocess.run(
            [sys.executable, "-m", "benchmarks.peers.celery_chord", url, self.shape, str(runs), str(self.width)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=ctx.sizes.timeout,
        )
        if sent.returncode != 0:
            raise BenchError(f"sending the chords failed: {sent.stderr.strip().splitlines()[-1:]}")
        argv = [*command("celery", "celery"), "-A", "benchmarks.peers.celery_app", "worker", "-c", str(WORKERS)]
        # Stopped by SIGQUIT (cold shutdown) once measured: nothing is left to run, and a warm one takes seconds.
        seconds = drain(
            ctx,
            f"celery-{self.name}",
            [argv],
            runs * self.tasks(),
            stop_signal=signal.SIGQUIT,
            env={"BENCH_CELERY_BROKER": url, "BENCH_CELERY_BACKEND": url},
        )
        return runs * self.counted / seconds


class CeleryChordMap(CeleryChord):
    """One width W of scenario 10: ``chord([step] x W, step)``; :meth:`variants` gives one per width."""

    name = "chordmap"
    section = "maps"
    metric = "items_per_s"
    unit = "items/s"
    shape = "map"

    def __init__(self, width: int = 0):
        self.width = self.counted = width
        self.name = f"chordmap-{width}"
        self.label = f"Celery chord of {width:,} items on Redis"
        self.pq_metric = f"w{width}_items_per_s"
        self.pq_label = f"pq map of {width:,} items, items/s"
        self.versus = f"map of {width:,} items + join"

    def variants(self, sizes) -> list[Peer]:
        return [CeleryChordMap(w) for w in sizes.map_widths]

    def settings(self, ctx) -> dict:
        return {**super().settings(ctx), "shape": f"chord([step] x {self.width:,}, step)"}

    def runs(self, ctx) -> int:
        return ctx.sizes.map_runs(self.width)

    def tasks(self) -> int:
        return self.width + 1


def send(url: str, shape: str, runs: int, width: int) -> None:
    """Send ``runs`` canvases of ``shape`` ("dag" or "map") and ``width`` (run in a child process)."""
    from celery import chain, chord

    from .celery_app import build

    app = build(url, url)
    step = app.tasks["step"]
    for _ in range(runs):
        fan = chord([step.si() for _ in range(width)], step.si())
        (chain(step.si(), fan) if shape == "dag" else fan).apply_async()
    sys.stdout.flush()
    os._exit(0)  # skip the result handles' teardown (it would talk to Redis while exiting)


if __name__ == "__main__":
    send(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
