"""How much work each scenario does: a full run (the figures of issue 5), ``--quick`` and ``--smoke``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    runs: int
    raw_seconds: float  # 1: duration of each raw-limit measurement
    enqueue_tasks: int  # 2: tasks submitted one by one, and with submit_many
    enqueue_batch: int  #    submit_many batch size
    drain_tasks: int  # 3: queued no-op tasks
    drain_processes: tuple[int, ...]  #    worker processes (--processors)
    latency_tasks: int  # 4: tasks submitted at latency_rate per second
    latency_rate: float
    latency_intervals: tuple[float, ...]
    poll_finished: int  # 5: finished rows and future rows of the loaded table
    poll_future: int
    poll_count: int  #    polls timed per kind
    dash_count: int  # 15: requests timed per dashboard page (on the poll table's sizes)
    fair_tasks: int  # 6: tasks per user
    fair_caps: tuple[int, ...]  #    max_running of the users
    fair_workers: int  #    worker processes (supervisors) ...
    fair_processors: int  #    ... with this many processors each
    fair_sleep: float  #    handler duration (s)
    fair_window: float  #    longest sampling window (s)
    sched_due: int  # 7: schedules due at once
    sched_processes: tuple[int, ...]  #    scheduler processes
    sched_idle: int  #    schedules of the idle tick (none due)
    sched_idle_ticks: int  #    idle ticks timed
    flow_runs: int  # 8: workflow runs (10 steps each)
    map_widths: tuple[int, ...]  # 10: items of one map run
    map_items: int  #     items per width: map_items // width runs at once
    idle_workers: int  # 11: idle worker processes ...
    idle_seconds: float  #     measured for this long ...
    idle_warmup: float  #     after this long
    startup_launches: int  # 12: worker launches per run
    queue_count: int  # 13: queues the poll tables' rows are spread over
    limit_concurrency: int  #     the concurrency limit ...
    limit_tasks: int  #     ... over this many tasks (fair_sleep s each) ...
    limit_workers: int  #     ... served by workers of fair_processors processes
    rate_per_s: int  #     the rate limit (starts per second) ...
    rate_seconds: float  #     ... measured this long ...
    rate_workers: int  #     ... with this many worker processes
    peer_tasks: int  # peers: no-op tasks (drain comparison)
    rq_tasks: int  #        RQ forks per job: fewer tasks
    chord_runs: int  #        Celery chords (workflow comparison)
    timeout: float  # longest wait for any one worker run (s)

    def map_runs(self, width: int) -> int:
        """Runs of a ``width``-item map started together, so every width does the same work."""
        return max(1, self.map_items // width)


FULL = Sizes(
    runs=3,
    raw_seconds=3.0,
    enqueue_tasks=20_000,
    enqueue_batch=1000,
    drain_tasks=20_000,
    drain_processes=(1, 2, 4),
    latency_tasks=500,
    latency_rate=50.0,
    latency_intervals=(1.0, 0.1),
    poll_finished=1_000_000,
    poll_future=100_000,
    poll_count=200,
    dash_count=20,
    fair_tasks=5000,
    fair_caps=(1, 2, 4),
    fair_workers=2,
    fair_processors=4,
    fair_sleep=0.02,
    fair_window=20.0,
    sched_due=10_000,
    sched_processes=(1, 3),
    sched_idle=100_000,
    sched_idle_ticks=50,
    flow_runs=2000,
    map_widths=(100, 1000, 10_000),
    map_items=10_000,
    idle_workers=4,
    idle_seconds=10.0,
    idle_warmup=2.0,
    startup_launches=5,
    queue_count=20,
    limit_concurrency=10,
    limit_tasks=5000,
    limit_workers=3,
    rate_per_s=50,
    rate_seconds=60.0,
    rate_workers=4,
    peer_tasks=5000,
    rq_tasks=2000,
    chord_runs=2000,
    timeout=600.0,
)

QUICK = Sizes(
    runs=1,
    raw_seconds=0.5,
    enqueue_tasks=300,
    enqueue_batch=100,
    drain_tasks=300,
    drain_processes=(2,),
    latency_tasks=30,
    latency_rate=50.0,
    latency_intervals=(1.0,),
    poll_finished=20_000,
    poll_future=2000,
    poll_count=30,
    dash_count=3,
    fair_tasks=60,
    fair_caps=(1, 2, 4),
    fair_workers=2,
    fair_processors=4,
    fair_sleep=0.02,
    fair_window=1.5,
    sched_due=300,
    sched_processes=(3,),
    sched_idle=2000,
    sched_idle_ticks=10,
    flow_runs=5,
    map_widths=(5, 50),
    map_items=50,
    idle_workers=2,
    idle_seconds=1.0,
    idle_warmup=0.5,
    startup_launches=2,
    queue_count=20,
    limit_concurrency=10,
    limit_tasks=120,
    limit_workers=3,
    rate_per_s=20,
    rate_seconds=2.0,
    rate_workers=4,
    peer_tasks=200,
    rq_tasks=100,
    chord_runs=5,
    timeout=60.0,
)

#: ``--smoke``: the smallest counts and windows at which every scenario still runs and checks its
#: results (tests/test_benchmarks_quick.py): no figure of it means anything
SMOKE = dataclasses.replace(
    QUICK,
    raw_seconds=0.2,
    enqueue_tasks=100,
    enqueue_batch=50,
    drain_tasks=100,
    latency_tasks=10,
    latency_intervals=(0.5,),
    poll_finished=4000,
    poll_future=400,
    poll_count=10,
    dash_count=2,
    fair_tasks=30,
    fair_window=0.5,
    sched_due=60,
    sched_idle=400,
    sched_idle_ticks=3,
    flow_runs=3,
    map_widths=(5, 20),
    map_items=20,
    startup_launches=1,
    limit_tasks=40,
    rate_seconds=1.0,
    peer_tasks=50,
    rq_tasks=30,
    chord_runs=3,
)
