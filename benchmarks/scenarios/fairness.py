"""Scenario 6: fairness under load.

Three users with ``max_running`` 1, 2 and 4 queue ``fair_tasks`` tasks each; the handler
sleeps ``fair_sleep``. ``fair_workers`` worker commands with ``fair_processors`` processes
each (8 slots for 7 capped ones, so every user could hold its cap) serve them. A sampler
reads ``q.list(status="running")`` every 50 ms while every user still has waiting tasks, for
at most ``fair_window`` seconds, from the first sample when every worker process has all its
children forked and a task is running (so start-up is not counted).

Reported per user: its share of the running tasks (ideal: cap / sum of caps — 1/7, 2/7, 4/7)
and its slot use (mean running / cap, ideal 100 %); checked: no sample ever shows a user
above its cap.
"""

from __future__ import annotations

import time
from collections import Counter

from ..procs import BenchError, descendants, pq_worker
from .base import Context, Sample, Scenario, fill

SAMPLE_EVERY = 0.05


class Fairness(Scenario):
    name = "fairness"
    title = "6. Fairness under load"

    def run(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("fairness"), ctx.table("fairness")
        users = {f"cap{cap}": cap for cap in s.fair_caps}
        with ctx.queue("fairness", table) as q:
            for user, cap in users.items():
                fill(q, s.fair_tasks, "nap", prefix=f"{user}-", user=user, max_running=cap)
            procs = [
                pq_worker(
                    "benchmarks.handlers:nap",
                    url=url,
                    table=table,
                    processors=s.fair_processors,
                    env={"PQ_BENCH_NAP": str(s.fair_sleep)},
                    log=ctx.file(f"fairness-{i}.log"),
                )
                for i in range(s.fair_workers)
            ]
            try:

                def warm() -> bool:
                    return all(len(descendants(p.pid)) >= s.fair_processors for p in procs)

                samples = self.sample(q, users, warm, s.fair_window, s.timeout)
            finally:
                for p in procs:
                    p.stop()
        if not samples:
            raise BenchError("no running task was ever sampled")
        mean = {u: sum(r[u] for _, r in samples) / len(samples) for u in users}
        total = sum(mean.values()) or 1.0
        for user, cap in users.items():
            out.metric(
                "fairness",
                f"{user}_share",
                100 * mean[user] / total,
                f"max_running={cap}: share of running tasks (ideal {100 * cap / sum(users.values()):.0f} %)",
                "%",
                zero_ok=True,
            )
            out.metric(
                "fairness",
                f"{user}_slot_use",
                100 * mean[user] / cap,
                f"max_running={cap}: mean running / cap",
                "%",
                zero_ok=True,
            )
            out.check("fairness", f"{user}_over_cap", sum(1 for _, r in samples if r[user] > cap))
        out.detail("fairness", "window_s", round(samples[-1][0], 2))
        out.detail("fairness", "samples", len(samples))
        out.detail("fairness", "series", self.series(samples, list(users)))

    @staticmethod
    def sample(q, users: dict, warm, window: float, timeout: float) -> list[tuple[float, Counter]]:
        """(seconds since the window began, running tasks per user) until a user has no
        waiting task left or ``window`` has passed. The window begins at the first sample
        with a running task once ``warm()`` holds."""
        samples: list[tuple[float, Counter]] = []
        began = time.monotonic()
        first = None
        while True:
            now = time.monotonic()
            running = Counter(m.user for m in q.list(status="running"))
            if first is None and running and warm():
                first = now
            if first is not None:
                samples.append((now - first, running))
                backlog = all(next(q.list(status="waiting", user=u, limit=1), None) for u in users)
                if not backlog or now - first >= window:
                    return samples
            elif now - began > timeout:
                raise BenchError("no task started within the timeout")
            time.sleep(max(0.0, SAMPLE_EVERY - (time.monotonic() - now)))

    @staticmethod
    def series(samples, users: list[str], buckets: int = 20) -> list[list[float]]:
        """Mean running tasks per user in ``buckets`` equal time slices: [t, u1, u2, ...]."""
        end = samples[-1][0] or 1.0
        out = []
        for b in range(buckets):
            lo, hi = end * b / buckets, end * (b + 1) / buckets
            part = [r for t, r in samples if lo <= t < hi or (b == buckets - 1 and t == end)]
            if part:
                out.append([round(hi, 2), *(round(sum(r[u] for r in part) / len(part), 2) for u in users)])
        return out
