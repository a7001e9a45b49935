"""Scenario 1 — worker crashes.

``tasks`` tasks are drained by ``workers`` worker processes while a random worker (its
supervisor and its child, the whole process session) is SIGKILLed every ``kill_every`` seconds
and started again. Checked at the end: every task finished with outcome success exactly once
(one row, one live-to-finished transition), each execution is in the ledger, a task ran again
only as often as one of its leases was cut by a kill, nothing is left running.
Time to recover: from a kill until every task whose lease it cut was finished again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..chaos import WorkerPool, kill_recovery, rampage
from ..handlers import TASK_TYPE
from ..result import Result
from ..stage import Context, stage

NAME = "worker_crashes"
BACKENDS = ("mariadb", "postgres", "sqlite")


@dataclass(frozen=True)
class Params:
    tasks: int = 5000
    workers: int = 4
    kill_every: tuple[float, float] = (1.0, 3.0)
    alive_time: float = 5.0
    task_sleep: float = 0.01
    timeout: float = 900.0


FULL = Params()
QUICK = Params(tasks=300, workers=3, kill_every=(0.4, 1.2), alive_time=2.0, timeout=150.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend, tasks=p.tasks)
    started = time.monotonic()
    with stage(ctx, NAME) as st:
        keys = [f"t{i}" for i in range(p.tasks)]
        st.queue.submit_many({"key": k, "type": TASK_TYPE, "data": {"sleep": p.task_sleep}} for k in keys)
        pool = WorkerPool(lambda i: st.worker(f"worker{i}", alive_time=p.alive_time), p.workers)
        rampage(
            pool,
            ctx.rng(NAME),
            p.kill_every,
            until=lambda: st.finished() >= p.tasks,
            timeout=p.timeout,
            what=f"{p.tasks} tasks to finish",
        )
        pool.stop()
        table = st.verify(result, keys)
        result.kills = result.restarts = len(pool.kills)
        result.recovered(kill_recovery(pool.kills, st.watch, st.done_at(table)))
    result.duration_s = round(time.monotonic() - started, 1)
    return result
