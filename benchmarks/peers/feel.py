"""What an application feels of a peer (issue 13): its one-by-one submit rate (scenario 2) and its
submit-to-start latency with a consumer already idle (scenario 4), measured as pq's are.

A peer that can be measured so implements ``submit_rate(ctx)`` (tasks/s, ``enqueue_tasks``
submitted one at a time from one process into an empty queue) and ``latency(ctx)`` (the p95 in
ms of ``latency_tasks`` tasks submitted at a steady ``latency_rate`` per second to one consumer
process left idle first, everything else the peer's defaults); ``variants`` then adds one
:class:`Feel` per figure, compared with pq's figure of the same scenario.
"""

from __future__ import annotations

import signal
import time

from ..procs import BenchError, Proc, child_env, wait_until
from ..scenarios.latency import DEFAULT_POLL, read_records, steady
from ..stats import percentile
from .base import Peer
from .done import RECORD_ENV

#: kind -> (section, metric, unit, pq metric, pq label, what is compared)
KINDS = {
    "submit": (
        "enqueue",
        "submit_per_s",
        "tasks/s",
        "submit_per_s",
        "pq submit one by one",
        "submit one by one, one process",
    ),
    "latency": (
        "latency",
        "p95_ms",
        "ms",
        f"p95_{DEFAULT_POLL:g}s",
        "pq latency p95 (default poll interval)",
        "submit-to-start p95, idle consumer, steady submissions",
    ),
}


class Feel(Peer):
    """One figure of ``base`` (``kind``: "submit" or "latency")."""

    def __init__(self, base: Peer, kind: str):
        self.base, self.kind = base, kind
        self.name = f"{base.name}-{kind}"
        self.label, self.db, self.modules, self.needs_redis = base.label, base.db, base.modules, base.needs_redis
        self.section, self.metric, self.unit, self.pq_metric, self.pq_label, self.versus = KINDS[kind]

    def settings(self, ctx) -> dict:
        sizes = ctx.sizes
        if self.kind == "submit":
            return {"tasks": sizes.enqueue_tasks, "how": "one call per task, one process, empty queue"}
        return {
            "tasks": sizes.latency_tasks,
            "rate": f"{sizes.latency_rate:g}/s",
            "consumer": self.base.latency_consumer,
            "latency": "handler start - time.time() before submit",
        }

    def skip_reason(self, ctx):
        return self.base.skip_reason(ctx)

    def setup(self, ctx) -> None:
        self.base.setup(ctx)

    def teardown(self, ctx) -> None:
        self.base.teardown(ctx)  # idempotent: the base's own teardown may run as well

    def run(self, ctx) -> float:
        return self.base.submit_rate(ctx) if self.kind == "submit" else self.base.latency(ctx)


def feel_variants(base: Peer) -> list[Peer]:
    return [base, Feel(base, "submit"), Feel(base, "latency")]


def timed_submits(n: int, submit) -> float:
    """Call ``submit(i)`` for i in range(n); tasks per second."""
    t0 = time.perf_counter()
    for i in range(n):
        submit(i)
    return n / (time.perf_counter() - t0)


def measure_latency(
    ctx, name: str, argv: list[str], submit, *, env: dict | None = None, stop_signal: int = signal.SIGTERM
) -> float:
    """Start the consumer ``argv``; once a warm-up task ran and it idled 1.5 s, submit
    ``latency_tasks`` tasks at ``latency_rate``/s with ``submit(created)``; the p95 latency in ms."""
    s = ctx.sizes
    path = ctx.file(f"{name}-latency-{ctx.run}.txt")
    path.unlink(missing_ok=True)
    proc = Proc(argv, env=child_env(**{RECORD_ENV: str(path)}, **(env or {})), log=ctx.file(f"{name}-latency.log"))
    try:
        submit(time.time())
        wait_until(lambda: read_records(path), s.timeout, f"the {name} warm-up task", [proc])
        time.sleep(1.5)
        steady(s.latency_tasks, s.latency_rate, lambda _i: submit(time.time()))
        wait_until(
            lambda: len(read_records(path)) >= s.latency_tasks + 1, s.timeout, f"the {name} latency tasks", [proc]
        )
    finally:
        proc.stop(stop_signal, grace=10)
    rows = read_records(path)[1:]
    if len(rows) < s.latency_tasks:
        raise BenchError(f"{name}: {len(rows)} of {s.latency_tasks} latency tasks ran")
    return percentile([(started - created) * 1000 for _, created, started in rows], 95)
