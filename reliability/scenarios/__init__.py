"""The fault and load scenarios, one module each, all with ``NAME``, ``FULL``, ``QUICK``,
``BACKENDS`` and ``run(ctx, params) -> Result``."""

from __future__ import annotations

from . import (
    clock_skew,
    contention,
    db_restarts,
    graceful_restart,
    long_tasks,
    lost_acks,
    paused_holders,
    scheduler_storm,
    soak,
    worker_crashes,
    workflow_chaos,
)

#: in the order of the issues (scenarios 1-8 of issue 6, 9-11 of issue 12)
ALL = [
    worker_crashes,
    db_restarts,
    graceful_restart,
    contention,
    scheduler_storm,
    workflow_chaos,
    long_tasks,
    soak,
    clock_skew,
    paused_holders,
    lost_acks,
]
BY_NAME = {m.NAME: m for m in ALL}
