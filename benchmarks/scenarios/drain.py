"""Scenario 3 (drain) and scenario 9 (memory).

Drain: ``drain_tasks`` queued no-op tasks, processed by ``perfectqueue run
benchmarks.handlers:noop --burst --processors N``; tasks/s from the worker's process start
to its exit (start-up and shutdown included). Worker start-up is measured on its own as the
wall time of the same command on an empty queue (1 process).

Memory: peak RSS (VmHWM from /proc) of the supervisor and of each child process during each
drain, sampled every 50 ms. A pool's figure is supervisor + children; forked children share
pages with the supervisor (copy-on-write), so the sum over-counts what the pool really uses.
"""

from __future__ import annotations

from ..procs import PeakRSS, pq_worker
from ..tables import task_counts
from .base import Context, Sample, Scenario, fill

TARGET = "benchmarks.handlers:noop"


class Drain(Scenario):
    name = "drain"
    title = "3. Drain no-op tasks with perfectqueue run --burst"
    also = {"memory": "9. Memory: peak RSS of the worker processes (during scenario 3)"}

    def run(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("drain"), ctx.table("drain")
        ctx.queue("drain", table).close()
        startup = pq_worker(
            TARGET, url=url, table=table, burst=True, processors=1, log=ctx.file("drain-startup.log")
        ).wait(s.timeout)
        out.metric("drain", "startup_s", startup, "worker start-up: empty queue, --burst, start to exit", "s")
        worker_kb = 0
        for n in s.drain_processes:
            with ctx.queue("drain", table) as q:
                fill(q, s.drain_tasks)
            ctx.log(f"drain {s.drain_tasks} tasks, {n} process(es)")
            proc = pq_worker(TARGET, url=url, table=table, burst=True, processors=n, log=ctx.file(f"drain-p{n}.log"))
            rss = PeakRSS(proc.pid)
            rss.start()
            try:
                elapsed = proc.wait(s.timeout)
            finally:
                rss.stop()
            counts = task_counts(url, table)
            rate = s.drain_tasks / elapsed
            ctx.shared.setdefault("drain_rate", {})[n] = rate
            out.metric("drain", f"p{n}_per_s", rate, f"{n} worker process{'es' if n > 1 else ''}", "tasks/s")
            out.check("drain", f"p{n}_not_finished", s.drain_tasks - counts["success"])
            out.check("drain", f"p{n}_duplicates", counts["reexecuted"])
            worker_kb = max([worker_kb, *rss.children_kb.values()])
            pool_kb = rss.root_kb + sum(rss.children_kb.values())
            out.metric(
                "memory",
                f"p{n}_pool_mb",
                pool_kb / 1024,
                f"pool of {n}: supervisor + {len(rss.children_kb)} child process"
                f"{'es' if len(rss.children_kb) != 1 else ''}",
                "MB",
            )
            out.detail("memory", f"p{n}_supervisor_mb", round(rss.root_kb / 1024, 1))
        out.metric("memory", "worker_mb", worker_kb / 1024, "one worker (child) process, largest", "MB")
