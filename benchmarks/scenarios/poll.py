"""Scenario 5: the cost of one ``q.poll()`` on a big table against an empty one.

Two tables: *empty* and *loaded* with ``poll_finished`` finished rows and ``poll_future``
rows due in the future (copies of rows pq itself wrote, bulk-inserted, then ANALYZEd), both
loaded once per invocation. Each run adds ``poll_count`` due tasks to each table and times,
one by one (median):

* a **claiming poll** — ``q.poll()`` that returns one of those due tasks;
* an **empty poll** — ``q.poll()`` once none is due, returning None (what an idle worker does).

The ratio loaded / empty is taken within the run.
"""

from __future__ import annotations

import statistics
import time

import queue_core

from ..procs import BenchError
from ..stats import timed_calls
from ..tables import analyze, clone, read_row, tasks_table
from .base import Context, Sample, Scenario

FAR = 30 * 86400.0


class PollCost(Scenario):
    name = "poll"
    title = "5. Poll cost at scale"

    def setup(self, ctx: Context) -> None:
        s = ctx.sizes
        self.tables = {"empty": ctx.table("poll_empty"), "loaded": ctx.table("poll_loaded")}
        ctx.queue("poll", self.tables["empty"]).close()
        url, name = ctx.url("poll"), self.tables["loaded"]
        with ctx.queue("poll", name) as q:
            now = time.time()
            q.submit("template-finished", "noop")
            q.poll().finish(retention_time=FAR)
            q.submit("template-future", "noop", run_at=now + FAR)
        t = tasks_table(name)
        ctx.log(f"poll: loading {s.poll_finished} finished + {s.poll_future} future rows")
        done = read_row(url, t, "template-finished")
        clone(url, t, done, s.poll_finished, lambda i: {"key": f"f{i}", "timeout": done["timeout"] + i / 1000})
        future = read_row(url, t, "template-future")
        clone(url, t, future, s.poll_future,
              lambda i: {"key": f"u{i}", "run_at": future["run_at"] + i, "timeout": future["timeout"] + i})
        analyze(url, name)

    def run(self, ctx: Context, out: Sample) -> None:
        n = ctx.sizes.poll_count
        medians = {}
        for kind, table in self.tables.items():
            with queue_core.open(ctx.url("poll"), table) as q:
                q.poll(alive_time=FAR)  # warm-up: connect
                q.submit_many({"key": f"d{ctx.run}-{i}", "type": "noop"} for i in range(n))

                def claim() -> None:
                    if q.poll(alive_time=FAR) is None:
                        raise BenchError(f"poll on {kind} table returned None while tasks were due")

                def idle() -> None:
                    if q.poll(alive_time=FAR) is not None:
                        raise BenchError(f"poll on {kind} table returned a task while none was due")

                medians["claim", kind] = statistics.median(timed_calls(claim, n)) * 1000
                medians["none", kind] = statistics.median(timed_calls(idle, n)) * 1000
        for what, label in (("claim", "claiming poll (returns a task)"), ("none", "empty poll (returns None)")):
            out.metric("poll", f"{what}_empty_ms", medians[what, "empty"], f"{label}, empty table", "ms")
            out.metric("poll", f"{what}_loaded_ms", medians[what, "loaded"], f"{label}, loaded table", "ms")
            out.metric("poll", f"{what}_ratio", medians[what, "loaded"] / medians[what, "empty"],
                       f"{label}: loaded / empty", "x")
