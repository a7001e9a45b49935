"""Scenario 7: the scheduler (perfectsched).

*Due at once*: ``sched_due`` schedules (``* * * * *``) whose occurrence one hour ago is due;
1 and 3 scheduler processes, released together, each call ``sched.tick(now=...)`` (which
ticks until nothing is due for it). Measured: seconds from the release to the last process
done. Checked: one task per schedule — none missing, none doubled (tasks per occurrence > 1),
no schedule left due.

*Idle tick*: one ``sched.tick()`` over ``sched_idle`` schedules of which none is due (median).

Schedules are copies of one that ``sched.add`` wrote, bulk-inserted with new keys.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import perfectsched

from ..procs import BenchError, barrier, barrier_child, child_env
from ..stats import timed_calls
from ..tables import analyze, clone, count_where, read_row, schedules_table, task_counts
from .base import Context, Sample, Scenario

DAY = 86400


def load(ctx: Context, table: str, queue_table: str, count: int, start: float) -> None:
    """A fresh schedule table holding ``count`` schedules whose next occurrence is the first
    minute at or after ``start``."""
    url = ctx.url("sched")
    ctx.queue("sched", queue_table).close()
    with perfectsched.open(url, table, queue_table) as sched:
        sched.init(force=True)
        sched.add("s0", "noop", cron="* * * * *", next_time=start)
    t = schedules_table(table)
    row = read_row(url, t, "s0")
    clone(url, t, row, count - 1, lambda i: {"key": f"s{i + 1}"})
    analyze(url, table)


class Scheduler(Scenario):
    name = "scheduler"
    title = "7. Scheduler (perfectsched tick)"

    def setup(self, ctx: Context) -> None:
        self.idle, self.idle_q = ctx.table("sched_idle"), ctx.table("sched_idle_q")
        ctx.log(f"scheduler: loading {ctx.sizes.sched_idle} idle schedules")
        load(ctx, self.idle, self.idle_q, ctx.sizes.sched_idle, time.time() + DAY)

    def run(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url = ctx.url("sched")
        for procs in s.sched_processes:
            table, queue_table = ctx.table("sched_due"), ctx.table("sched_due_q")
            due_at = (int(time.time()) // 60 - 60) * 60
            load(ctx, table, queue_table, s.sched_due, due_at)
            now = due_at + 30
            ctx.log(f"scheduler: {s.sched_due} due schedules, {procs} process(es)")
            argv = [sys.executable, "-m", "benchmarks.scenarios.scheduler", url, table, queue_table, str(now)]
            seconds, results = barrier([argv] * procs, env=child_env(), logdir=ctx.workdir, timeout=s.timeout)
            counts = task_counts(url, queue_table)
            t = schedules_table(table)
            out.metric(
                "scheduler",
                f"due_p{procs}_s",
                seconds,
                f"{s.sched_due:,} due schedules submitted, {procs} scheduler process{'es' * (procs > 1)}",
                "s",
            )
            out.check("scheduler", f"p{procs}_missing", s.sched_due - counts["distinct_keys"])
            out.check("scheduler", f"p{procs}_duplicates", counts["total"] - counts["distinct_keys"])
            out.check("scheduler", f"p{procs}_miscounted", sum(r["submitted"] for r in results) - counts["total"])
            out.check("scheduler", f"p{procs}_still_due", count_where(url, t, t.c.timeout <= now))
        with perfectsched.open(url, self.idle, self.idle_q) as sched:
            sched.tick()  # warm-up: connect

            def tick() -> None:
                if sched.tick() != 0:
                    raise BenchError("an idle tick submitted tasks")

            idle_ms = statistics.median(timed_calls(tick, s.sched_idle_ticks)) * 1000
        out.metric("scheduler", "idle_tick_ms", idle_ms, f"one tick, {s.sched_idle:,} schedules, none due", "ms")


def main(url: str, table: str, queue_table: str, now: str) -> None:
    """A scheduler process of the due-at-once measurement (see :func:`benchmarks.procs.barrier`)."""
    with perfectsched.open(url, table, queue_table) as sched:
        sched.next_due()  # connect before the release
        barrier_child()
        submitted = sched.tick(now=float(now))
        print(json.dumps({"submitted": submitted, "end": time.time()}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
