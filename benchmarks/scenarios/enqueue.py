"""Scenario 2: enqueue — ``q.submit`` one task at a time, then ``q.submit_many`` in batches,
from one process into an empty table."""

from __future__ import annotations

from ..stats import Stopwatch
from ..tables import task_counts
from .base import Context, Sample, Scenario


class Enqueue(Scenario):
    name = "enqueue"
    title = "2. Enqueue from one process"

    def run(self, ctx: Context, out: Sample) -> None:
        n, batch = ctx.sizes.enqueue_tasks, ctx.sizes.enqueue_batch
        table = ctx.table("enqueue")
        with ctx.queue("enqueue", table) as q:
            with Stopwatch() as one:
                for i in range(n):
                    q.submit(f"one-{i}", "noop", {"i": i})
            with Stopwatch() as many:
                for start in range(0, n, batch):
                    q.submit_many(
                        {"key": f"many-{i}", "type": "noop", "data": {"i": i}}
                        for i in range(start, min(n, start + batch))
                    )
        counts = task_counts(ctx.url("enqueue"), table)
        out.metric("enqueue", "submit_per_s", n / one.seconds, "submit, one by one", "tasks/s")
        out.metric("enqueue", "submit_many_per_s", n / many.seconds, f"submit_many, batches of {batch}", "tasks/s")
        out.check("enqueue", "missing", 2 * n - counts["total"])
