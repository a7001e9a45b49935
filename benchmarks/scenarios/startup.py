"""Scenario 12: worker start-up, what a deploy or an autoscaler feels: from launching
``perfectqueue run benchmarks.handlers:record --processors 2`` (the defaults otherwise) to the
start of the first task, which was queued before; ``startup_launches`` launches per run, their
median. The packages are byte-compiled first, as ``pip install`` does (this machine's
``PYTHONDONTWRITEBYTECODE`` would otherwise compile pq's sources at every start).
"""

from __future__ import annotations

import compileall
import statistics
import time

from ..procs import ROOT, pq_worker, wait_until
from .base import Context, Sample, Scenario
from .latency import read_records


class Startup(Scenario):
    name = "startup"
    title = "12. Worker start-up: perfectqueue run (2 processes) to its first task"

    def setup(self, ctx: Context) -> None:
        for package in ("queue_core", "perfectsched", "pqflow", "benchmarks"):
            compileall.compile_dir(str(ROOT / package), quiet=1)

    def run(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("startup"), ctx.table("startup")
        firsts = []
        with ctx.queue("startup", table) as q:
            for i in range(s.startup_launches):
                record = ctx.file(f"startup-{ctx.run}-{i}.txt")
                record.unlink(missing_ok=True)
                q.submit(f"first-{ctx.run}-{i}", "record")
                launched = time.time()
                proc = pq_worker(
                    "benchmarks.handlers:record",
                    url=url,
                    table=table,
                    processors=2,
                    env={"PQ_BENCH_RECORD": str(record)},
                    log=ctx.file("startup.log"),
                )
                try:
                    wait_until(lambda rec=record: read_records(rec), s.timeout, "the first task", [proc])
                finally:
                    proc.stop()
                firsts.append(read_records(record)[0][2] - launched)
        out.metric(
            "startup",
            "first_task_s",
            statistics.median(firsts),
            f"launch to first task start, 2 processes (median of {s.startup_launches})",
            "s",
        )
        out.detail("startup", "launches_s", [round(x, 3) for x in firsts])
