"""Pieces more than one scenario uses: workflow runs of :data:`reliability.handlers.dag`, minutely
schedules."""

from __future__ import annotations

from collections.abc import Iterable

import perfectsched
import pqflow
from perfectsched import cron as cronlib
from pqflow.rows import item_key, node_key

from ..handlers import DAG_STEPS, MAP_ITEMS, RUN_STEPS, TASK_TYPE, dag
from ..result import Result
from ..stage import Stage


def start_runs(st: Stage, prefix: str, n: int, step_sleep: float = 0.0) -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    for run_id in ids:
        dag.start(run_id, {"sleep": step_sleep}, queue=st.queue)
    return ids


def step_keys(run_ids: Iterable[str]) -> list[str]:
    """The queue keys of every step and map item of these runs that runs as a task."""
    return [
        k
        for r in run_ids
        for k in [*(node_key(r, s) for s in RUN_STEPS), *(item_key(r, "each", i) for i in range(MAP_ITEMS))]
    ]


def node_keys(run_ids: Iterable[str]) -> list[str]:
    """The rows of these runs that never run (a map step's own row): they finish once too."""
    return [node_key(r, "each") for r in run_ids]


def runs_succeeded(result: Result, st: Stage, run_ids: Iterable[str]) -> None:
    """Every run succeeded with every step succeeded (step rows once and finished once are
    checked with the tasks: their keys are in the expected set)."""
    for run_id in run_ids:
        run = pqflow.get_run(run_id, queue=st.queue)
        if run.status != "succeeded":
            result.loss(f"run {run_id} is {run.status}: {run.statuses}")
            continue
        bad = {n: s for n, s in run.statuses.items() if s != "succeeded"}
        if bad or set(run.statuses) != set(DAG_STEPS):
            result.loss(f"run {run_id} succeeded with steps {run.statuses}")


MINUTELY = "* * * * *"


def add_minutely(sched: perfectsched.Scheduler, key: str, start: float, data: dict | None = None) -> int:
    """Add a minutely schedule of :data:`TASK_TYPE` tasks starting at ``start`` and return its first
    occurrence, computed from the spec: read back, a scheduler running meanwhile may already have
    fired it and moved the row on."""
    sched.add(key, TASK_TYPE, cron=MINUTELY, data=data, next_time=start)
    return cronlib.cron_time(MINUTELY, start)
