"""Scenario 13: named queues (issue 14).

* **Poll over 20 queues**: scenario 5's tables, their rows spread over ``queue_count`` queues; a
  worker serving all of them (strict order) polls for due tasks that sit in the last one.
  Claiming and empty poll, loaded / empty.
* **Drain, 3 queues**: ``drain_tasks`` no-op tasks drained by ``perfectqueue run --burst
  --processors 2``, once in one queue, once spread over three queues the worker serves
  (``--queues q0,q1,q2``), alternately in the same run: tasks/s and the ratio.
* **Concurrency limit**: ``limit_tasks`` tasks of ``fair_sleep`` seconds in a queue limited to
  ``limit_concurrency``, served by ``limit_workers`` workers of ``fair_processors`` processes (more
  slots than the limit). A sampler counts the queue's running tasks every 50 ms: utilisation =
  mean running / limit; a sample above the limit is a failed check.
* **Rate limit**: ``rate_per_s`` starts per second (``--rate N/1s``) served by ``rate_workers``
  worker processes for ``rate_seconds``: the starts the claims stamped in the measured window
  (after the first second), per second of the window, / the rate; a window of one second holding
  more starts than the rate is a failed check.
"""

from __future__ import annotations

import time

import queue_core

from ..procs import BenchError, descendants, pq_worker
from ..tables import task_counts
from .base import Context, Sample, Scenario, fill
from .poll import load, timed_polls

SAMPLE_EVERY = 0.05


class NamedQueues(Scenario):
    name = "queues"
    title = "13. Named queues: poll over 20 queues, drain over 3, concurrency and rate limits"

    def setup(self, ctx: Context) -> None:
        self.tables = {"empty": ctx.table("q20_empty"), "loaded": ctx.table("q20_loaded")}
        ctx.queue("queues", self.tables["empty"]).close()
        load(ctx, "queues", self.tables["loaded"], queues=ctx.sizes.queue_count)

    def run(self, ctx: Context, out: Sample) -> None:
        self.poll(ctx, out)
        self.drain(ctx, out)
        self.concurrency(ctx, out)
        self.rate(ctx, out)

    def poll(self, ctx: Context, out: Sample) -> None:
        served = ",".join(f"q{i}" for i in range(ctx.sizes.queue_count))
        last = f"q{ctx.sizes.queue_count - 1}"
        medians = {}
        for kind, table in self.tables.items():
            with queue_core.open(ctx.url("queues"), table) as q:
                medians["claim", kind], medians["none", kind] = timed_polls(
                    q, ctx.sizes.poll_count, kind, queues=served, target=last
                )
        n = ctx.sizes.queue_count
        for what, label in (("claim", "claiming poll"), ("none", "empty poll")):
            for kind in ("empty", "loaded"):
                out.metric(
                    "queues", f"poll_{what}_{kind}_ms", medians[what, kind], f"{label} over {n} queues, {kind}", "ms"
                )
            out.metric(
                "queues",
                f"poll_{what}_ratio",
                medians[what, "loaded"] / medians[what, "empty"],
                f"{label} over {n} queues: loaded / empty",
                "x",
            )

    def drain(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("queues"), ctx.table("q_drain")
        rates = {}
        for served in ("default", "q0,q1,q2"):
            names = served.split(",")
            with ctx.queue("queues", table) as q:
                for name in names:
                    fill(q, s.drain_tasks // len(names), prefix=f"{name}-", queue=name)
            proc = pq_worker(
                "benchmarks.handlers:noop",
                url=url,
                table=table,
                burst=True,
                processors=2,
                queues=served,
                log=ctx.file(f"queues-drain-{len(names)}.log"),
            )
            elapsed = proc.wait(s.timeout)
            done = task_counts(url, table)
            expected = (s.drain_tasks // len(names)) * len(names)
            out.check("queues", f"drain{len(names)}_not_finished", expected - done["success"])
            rates[len(names)] = expected / elapsed
            out.metric(
                "queues",
                f"drain{len(names)}_per_s",
                rates[len(names)],
                f"drain, 2 processes, {len(names)} queue{'s' if len(names) > 1 else ''}",
                "tasks/s",
            )
        out.metric("queues", "drain_ratio", rates[3] / rates[1], "drain over 3 queues / over 1", "x")

    def concurrency(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("queues"), ctx.table("q_limit")
        with ctx.queue("queues", table) as q:
            q.limit("api", concurrency=s.limit_concurrency)
            q.pause("api")  # until every worker has its processes: a loaded machine starts them slowly
            fill(q, s.limit_tasks, "nap", prefix="api-", queue="api")
            procs = [
                pq_worker(
                    "benchmarks.handlers:nap",
                    url=url,
                    table=table,
                    processors=s.fair_processors,
                    queues="api",
                    env={"PQ_BENCH_NAP": str(s.fair_sleep)},
                    log=ctx.file(f"queues-limit-{i}.log"),
                )
                for i in range(s.limit_workers)
            ]
            try:
                wait_warm(procs, s.fair_processors, s.timeout)
                q.resume("api")
                samples = sample_running(q, procs, s.fair_processors, s.fair_window, s.timeout)
            finally:
                for p in procs:
                    p.stop()
        if not samples:
            raise BenchError("no running task was ever sampled")
        mean = sum(samples) / len(samples)
        out.metric(
            "queues",
            "limit_utilisation_pct",
            100 * mean / s.limit_concurrency,
            f"concurrency limit {s.limit_concurrency}: mean running / limit",
            "%",
        )
        out.check("queues", "limit_over_cap", sum(1 for n in samples if n > s.limit_concurrency))
        out.detail("queues", "limit_samples", len(samples))

    def rate(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("queues"), ctx.table("q_rate")
        total = int(s.rate_per_s * (s.rate_seconds + 2) * 1.2)
        with ctx.queue("queues", table) as q:
            q.limit("api", rate=f"{s.rate_per_s}/1s")
            fill(q, total, prefix="api-", queue="api")
            procs = [
                pq_worker(
                    "benchmarks.handlers:noop", url=url, table=table, queues="api", log=ctx.file(f"queues-rate-{i}.log")
                )
                for i in range(s.rate_workers)
            ]
            try:
                time.sleep(s.rate_seconds + 1.5)
            finally:
                for p in procs:
                    p.stop()
            # the rows that ran: a waiting row keeps the started_at of a claim given back unrun
            # (a late start, a stopping worker's release), a start the limit no longer counts
            starts = sorted(m.started_at for m in q.list(queue="api", status="finished"))
        if len(starts) < 2:
            raise BenchError("the rate-limited queue started fewer than 2 tasks")
        begin = starts[0] + 1.0  # after the first second: workers all started
        window = [t for t in starts if begin <= t < begin + s.rate_seconds]
        achieved = len(window) / s.rate_seconds
        out.metric(
            "queues",
            "rate_ratio",
            achieved / s.rate_per_s,
            f"rate limit {s.rate_per_s}/s, {s.rate_workers} worker processes, {s.rate_seconds:g} s: achieved / limit",
            "x",
        )
        over = sum(1 for i, t in enumerate(starts) if sum(1 for u in starts[i:] if u < t + 1.0) > s.rate_per_s)
        out.check("queues", "rate_over_limit", over)


def wait_warm(procs, processors: int, timeout: float) -> None:
    """Wait until every worker of ``procs`` has its ``processors`` processes."""
    began = time.monotonic()
    while not all(len(descendants(p.pid)) >= processors for p in procs):
        if time.monotonic() - began >= timeout:
            raise BenchError(f"the workers did not start their {processors} processes in {timeout:g} s")
        time.sleep(SAMPLE_EVERY)


def sample_running(q, procs, processors: int, window: float, timeout: float) -> list[int]:
    """The running tasks of queue ``api`` every 50 ms, from the first sample with a running task
    once every worker has its processes, for ``window`` seconds or until none waits."""
    samples: list[int] = []
    began, first = time.monotonic(), None
    while time.monotonic() - began < timeout:
        running = sum(1 for _ in q.list(status="running", queue="api"))
        warm = all(len(descendants(p.pid)) >= processors for p in procs)
        if first is None and running and warm:
            first = time.monotonic()
        if first is not None:
            samples.append(running)
            waiting = next(q.list(status="waiting", queue="api", limit=1), None)
            if waiting is None or time.monotonic() - first >= window:
                return samples
        time.sleep(SAMPLE_EVERY)
    raise BenchError("the limited queue never ran a task")
