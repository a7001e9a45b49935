"""What every peer shares: availability checks and the "queue, start workers, wait" drain.

A peer's task bodies call :func:`benchmarks.peers.done.mark`, which appends one byte to the
file named by ``BENCH_DONE_FILE``; the harness counts bytes. A peer's figure is therefore
"from the start of its worker processes to its last task's end" (the file's mtime), like
pq's, which also includes start-up (pq's also includes its exit).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time

from ..procs import BenchError, Proc, child_env, wait_until
from ..scenarios.base import Context
from . import done


class Peer:
    """A queue pq is compared with. One instance per invocation; ``run`` once per run."""

    #: --peers name
    name = ""
    #: e.g. "huey (SqliteHuey)"
    label = ""
    #: the database whose pq figures it is compared with; None: a reference for every database
    db: str | None = None
    #: the pq section it is compared with: "drain" (2 processes) or "workflow"
    section = "drain"
    #: importable modules it needs (else: skipped)
    modules: tuple[str, ...] = ()
    needs_redis = False
    #: the metric ``run`` returns
    metric = "tasks_per_s"
    unit = "tasks/s"
    #: the pq figure it is compared with (a metric of ``section``), as the ratios name it, and
    #: what of pq's it is compared with, as the peers' table says it
    pq_metric = "p2_per_s"
    pq_label = "pq drain (2 processes)"
    versus = "drain, 2 processes"

    def variants(self, sizes) -> list[Peer]:
        """The peers this one stands for with ``sizes`` (one per width, say); itself by default."""
        return [self]

    def settings(self, ctx: Context) -> dict:
        """What the results should say about how it ran (defaults changed, counts)."""
        return {}

    def missing_modules(self) -> str | None:
        missing = [m for m in self.modules if importlib.util.find_spec(m) is None]
        if missing:
            return f"skipped: {', '.join(missing)} not installed (pip install -e '.[bench]')"
        return None

    def skip_reason(self, ctx: Context) -> str | None:
        """Why it cannot run here (``skipped: ...``), or None."""
        missing = self.missing_modules()
        if missing:
            return missing
        if self.needs_redis and not ctx.extra.get("redis_url"):
            return f"skipped: no Redis ({ctx.extra.get('redis_error') or 'not started'})"
        return None

    def setup(self, ctx: Context) -> None:
        """Preparation shared by the runs."""

    def run(self, ctx: Context) -> float:
        """One measurement, in ``unit``."""
        raise NotImplementedError

    def teardown(self, ctx: Context) -> None:
        """Undo ``setup``."""


def drain(
    ctx: Context,
    name: str,
    argvs: list[list[str]],
    total: int,
    *,
    env: dict | None = None,
    stop_signal: int = signal.SIGTERM,
) -> float:
    """Start the worker commands ``argvs`` and wait until ``total`` task bodies have run; stop
    the workers. Returns seconds from their start to the last task's end."""
    marks = ctx.file(f"{name}.done")
    marks.unlink(missing_ok=True)
    env = child_env(**{done.ENV: str(marks)}, **(env or {}))
    started = time.time()
    procs = [Proc(a, env=env, log=ctx.file(f"{name}-{i}.log")) for i, a in enumerate(argvs)]
    try:
        wait_until(lambda: done.count(marks) >= total, ctx.sizes.timeout, f"{total} {name} tasks", procs, interval=0.05)
        return os.stat(marks).st_mtime - started
    finally:
        for p in procs:
            p.stop(stop_signal, grace=10)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise BenchError(message)
