"""The handlers pq workers run in the benchmarks: plain functions, the idiomatic TARGET.

``perfectqueue run benchmarks.handlers:noop`` — the worker finishes the task when the
function returns. This module imports nothing from pq, so a worker serving it is as small
as a worker can be (scenario 9 measures its memory).
"""

from __future__ import annotations

import os
import time


def noop(task):
    """Scenario 3 (drain): does nothing."""


def record(task):
    """Scenario 4 (latency): append ``key created_at started_at`` to the file named by
    ``PQ_BENCH_RECORD`` (one short O_APPEND write per task, atomic between processes)."""
    started = time.time()
    line = f"{task.key} {task.created_at!r} {started!r}\n".encode()
    fd = os.open(os.environ["PQ_BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def nap(task):
    """Scenario 6 (fairness): hold the slot for ``PQ_BENCH_NAP`` seconds."""
    time.sleep(float(os.environ.get("PQ_BENCH_NAP", "0.02")))
