"""Scenario 4: submit-to-start latency with a worker already idle.

One ``perfectqueue run benchmarks.handlers:record`` (1 process, the default) runs
continuously. After a warm-up task has run and the worker has been idle for 1.5 poll
intervals, ``latency_tasks`` tasks are submitted at a steady ``latency_rate`` per second. The
handler appends ``key created_at started_at`` to a file; latency = started_at - created_at
(the task's own submission time). Measured at the default poll interval (1.0 s) and at 0.1 s.
"""

from __future__ import annotations

import time

from queue_core.config import DEFAULTS

from ..procs import pq_worker, wait_until
from ..stats import percentile
from .base import Context, Sample, Scenario

DEFAULT_POLL = DEFAULTS["poll_interval"][0]


def read_records(path) -> list[tuple[str, float, float]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], float(parts[1]), float(parts[2])))
    return out


def steady(n: int, rate: float, submit) -> float:
    """Call ``submit(i)`` n times on a fixed timetable of ``rate`` per second; the achieved rate."""
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        submit(i)
    return n / max(1e-9, time.perf_counter() - t0)


class Latency(Scenario):
    name = "latency"
    title = "4. Submit-to-start latency, worker idle, steady submissions"

    def run(self, ctx: Context, out: Sample) -> None:
        for interval in ctx.sizes.latency_intervals:
            self.measure(ctx, out, interval)

    def measure(self, ctx: Context, out: Sample, interval: float) -> None:
        s = ctx.sizes
        url, table = ctx.url("latency"), ctx.table("latency")
        record = ctx.file(f"latency-{ctx.run}-{interval:g}.txt")
        record.unlink(missing_ok=True)
        tag = f"{interval:g}s"
        with ctx.queue("latency", table) as q:
            proc = pq_worker(
                "benchmarks.handlers:record",
                url=url,
                table=table,
                poll_interval=None if interval == DEFAULT_POLL else interval,
                env={"PQ_BENCH_RECORD": str(record)},
                log=ctx.file(f"latency-{tag}.log"),
            )
            try:
                q.submit("warm-up", "record")
                wait_until(lambda: read_records(record), s.timeout, "the warm-up task", [proc])
                time.sleep(1.5 * interval)
                ctx.log(f"latency: {s.latency_tasks} tasks at {s.latency_rate:g}/s, poll interval {tag}")
                achieved = steady(s.latency_tasks, s.latency_rate, lambda i: q.submit(f"l{i}", "record"))
                wait_until(
                    lambda: len(read_records(record)) >= s.latency_tasks + 1, s.timeout, "the latency tasks", [proc]
                )
            finally:
                proc.stop()
        rows = [r for r in read_records(record) if r[0] != "warm-up"]
        lat = [(started - created) * 1000 for _, created, started in rows]
        label = f"poll interval {tag}" + (" (default)" if interval == DEFAULT_POLL else "")
        for p in (50, 95, 99):
            out.metric("latency", f"p{p}_{tag}", percentile(lat, p), f"p{p}, {label}", "ms")
        out.check("latency", f"duplicates_{tag}", len(rows) - len({r[0] for r in rows}))
        out.detail("latency", f"submit_rate_{tag}", round(achieved, 1))
