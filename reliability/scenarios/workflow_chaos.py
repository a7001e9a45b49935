"""Scenario 6 — workflow chaos.

``runs`` runs of :data:`reliability.handlers.dag` (a diamond ``a -> (b, c) -> d``, then a
fan-out ``d -> f0..f5 -> join``, then a map of 5 items and its join; each step sleeps
``step_sleep`` s) are served by ``workers`` worker processes, the deciders,
while a random worker is SIGKILLed every ``kill_every`` seconds and started again — in the
middle of step functions, of deciding transactions, of claims.

Checked at the end: every run ``succeeded``; every step of every run is one row, finished with
outcome success exactly once (audit trigger), recorded at least once, and ran again only as
often as its leases were cut; every run row finished once; nothing is left running.
Time to recover: from a kill until every step whose lease it cut was finished again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..chaos import WorkerPool, kill_recovery, rampage
from ..handlers import DAG_STEPS, MAP_ITEMS
from ..result import Result
from ..stage import Context, stage
from .common import node_keys, runs_succeeded, start_runs, step_keys

NAME = "workflow_chaos"
BACKENDS = ("mariadb", "postgres", "sqlite")


@dataclass(frozen=True)
class Params:
    runs: int = 100
    workers: int = 3
    step_sleep: float = 0.02
    kill_every: tuple[float, float] = (1.0, 3.0)
    alive_time: float = 3.0
    timeout: float = 900.0


FULL = Params()
QUICK = Params(runs=10, workers=2, step_sleep=0.05, kill_every=(0.5, 1.2), alive_time=2.0, timeout=150.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend)
    started = time.monotonic()
    with stage(ctx, NAME) as st:
        run_ids = start_runs(st, "r", p.runs, p.step_sleep)
        steps = step_keys(run_ids)
        rows = p.runs * (1 + len(DAG_STEPS) + MAP_ITEMS)
        pool = WorkerPool(lambda i: st.worker(f"worker{i}", alive_time=p.alive_time), p.workers)
        rampage(
            pool,
            ctx.rng(NAME),
            p.kill_every,
            until=lambda: st.finished() >= rows,
            timeout=p.timeout,
            what=f"{p.runs} runs to finish",
        )
        pool.stop()
        table = st.verify(result, [*run_ids, *steps, *node_keys(run_ids)], executed=steps)
        runs_succeeded(result, st, run_ids)
        result.tasks = len(steps)
        result.kills = result.restarts = len(pool.kills)
        result.recovered(kill_recovery(pool.kills, st.watch, st.done_at(table)))
        result.figures["runs"] = p.runs
    result.duration_s = round(time.monotonic() - started, 1)
    return result
