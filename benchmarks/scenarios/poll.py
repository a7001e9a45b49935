"""Scenario 5: the cost of one ``q.poll()`` on a big table against an empty one.

Two tables: *empty* and *loaded* with ``poll_finished`` finished rows and ``poll_future``
rows due in the future (copies of rows pq itself wrote, bulk-inserted, then ANALYZEd), both
loaded once per invocation. Each run adds ``poll_count`` due tasks to each table and times,
one by one (median):

* a **claiming poll** — ``q.poll()`` that returns one of those due tasks;
* an **empty poll** — ``q.poll()`` once none is due, returning None (what an idle worker does).

The ratio loaded / empty is taken within the run. Section ``insight`` (issue 15) times, on the
same two tables, a scrape of the Prometheus metrics (``queue_core.ops.metrics.exposition``: what
``perfectqueue metrics`` serves) and a read of the last hour's statistics (median of
``poll_count // 10``), after a roll-up.
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


def load(ctx: Context, db: str, name: str, queues: int = 1) -> None:
    """Make table ``name`` with ``poll_finished`` finished and ``poll_future`` future rows
    (copies of rows pq wrote), spread over ``queues`` queues (``q0``, ``q1``, ...; one: the
    default queue), and refresh its planner statistics."""
    s = ctx.sizes
    url = ctx.url(db)
    where = {} if queues == 1 else {"queue": "q0"}
    with ctx.queue(db, name) as q:
        now = time.time()
        q.submit("template-finished", "noop", **where)
        q.poll(queues=where.get("queue")).finish(retention_time=FAR)
        q.submit("template-future", "noop", run_at=now + FAR, **where)
    t = tasks_table(name)
    ctx.log(f"{db}: loading {s.poll_finished} finished + {s.poll_future} future rows over {queues} queue(s)")

    def spread(i: int) -> dict:
        return {} if queues == 1 else {"queue": f"q{i % queues}"}

    done = read_row(url, t, "template-finished")
    clone(url, t, done, s.poll_finished, lambda i: {"key": f"f{i}", "timeout": done["timeout"] + i / 1000, **spread(i)})
    future = read_row(url, t, "template-future")
    clone(
        url,
        t,
        future,
        s.poll_future,
        lambda i: {"key": f"u{i}", "run_at": future["run_at"] + i, "timeout": future["timeout"] + i, **spread(i)},
    )
    analyze(url, name)


def timed_polls(q, n: int, kind: str, **poll) -> tuple[float, float]:
    """Median ms of a claiming poll and of an empty poll, ``n`` each, after ``n`` due tasks were
    queued (``poll``: the options of every poll, e.g. its queues; ``queue`` of the due tasks)."""
    target = poll.pop("target", None)
    q.poll(alive_time=FAR, **poll)  # warm-up: connect
    q.submit_many(
        {"key": f"d{time.time()}-{i}", "type": "noop", **({"queue": target} if target else {})} for i in range(n)
    )

    def claim() -> None:
        if q.poll(alive_time=FAR, **poll) is None:
            raise BenchError(f"poll on {kind} table returned None while tasks were due")

    def idle() -> None:
        if q.poll(alive_time=FAR, **poll) is not None:
            raise BenchError(f"poll on {kind} table returned a task while none was due")

    return statistics.median(timed_calls(claim, n)) * 1000, statistics.median(timed_calls(idle, n)) * 1000


def timed_insight(q, n: int) -> tuple[float, float]:
    """Median ms of a metrics scrape and of a read of the last hour's statistics (``n`` each)."""
    from queue_core.ops import metrics

    q.roll_up_stats()
    scrape = statistics.median(timed_calls(lambda: metrics.exposition(q), n)) * 1000
    read = statistics.median(timed_calls(lambda: q.statistics(roll_up=False), n)) * 1000
    return scrape, read


class PollCost(Scenario):
    name = "poll"
    title = "5. Poll cost at scale"
    also = {"insight": "14. Metrics scrape and statistics read at scale"}

    def setup(self, ctx: Context) -> None:
        self.tables = {"empty": ctx.table("poll_empty"), "loaded": ctx.table("poll_loaded")}
        ctx.queue("poll", self.tables["empty"]).close()
        load(ctx, "poll", self.tables["loaded"])

    def run(self, ctx: Context, out: Sample) -> None:
        medians = {}
        for kind, table in self.tables.items():
            with queue_core.open(ctx.url("poll"), table) as q:
                medians["claim", kind], medians["none", kind] = timed_polls(q, ctx.sizes.poll_count, kind)
        for what, label in (("claim", "claiming poll (returns a task)"), ("none", "empty poll (returns None)")):
            out.metric("poll", f"{what}_empty_ms", medians[what, "empty"], f"{label}, empty table", "ms")
            out.metric("poll", f"{what}_loaded_ms", medians[what, "loaded"], f"{label}, loaded table", "ms")
            out.metric(
                "poll",
                f"{what}_ratio",
                medians[what, "loaded"] / medians[what, "empty"],
                f"{label}: loaded / empty",
                "x",
            )
        for kind, table in self.tables.items():
            with queue_core.open(ctx.url("poll"), table) as q:
                scrape, stats = timed_insight(q, max(5, ctx.sizes.poll_count // 10))
            out.metric("insight", f"scrape_{kind}_ms", scrape, f"metrics scrape, {kind} table", "ms")
            out.metric("insight", f"stats_{kind}_ms", stats, f"statistics of the last hour, {kind} table", "ms")
