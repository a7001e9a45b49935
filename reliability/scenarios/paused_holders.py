"""Scenario 10 — paused holders: a worker stopped past its lease must not get it back.

``workers`` worker processes drain tasks of ``users`` users, each capped at ``max_running = 1``,
while, ``pauses`` times, a worker child that holds a lease is frozen (SIGSTOP) every
``pause_every`` seconds for ``pause_factor`` x ``alive_time`` — a stopped VM, a swapped-out
process, a debugger — and then thawed (SIGCONT). Its leases expire meanwhile and other workers
take its tasks over. Once thawed, its heartbeats must be refused (an expired lease is never
revived), its late finishes too, and at no sample may a user hold more live leases than its cap.

Checked: every task finished with outcome success exactly once (one finish transition), nothing
left running, no user ever over its cap (the lease sampler), each re-execution is a task whose
holder was frozen (at most one per pause), and thawed holders were told they lost their leases.
Time to recover: from a freeze until every task it held was finished by another worker.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

import queue_core

from ..handlers import TASK_TYPE
from ..procs import children, local_pid, signal_pids, stop_all, wait_for
from ..result import Result
from ..stage import Context, stage

NAME = "paused_holders"
BACKENDS = ("mariadb", "postgres", "sqlite")


@dataclass(frozen=True)
class Params:
    tasks: int = 150
    users: int = 6
    workers: int = 3
    alive_time: float = 3.0
    pause_every: float = 4.0
    pauses: int = 12
    pause_factor: float = 1.4
    task_sleep: float = 6.0
    timeout: float = 600.0


FULL = Params()
QUICK = Params(tasks=12, users=4, alive_time=1.5, pause_every=1.0, pauses=4, task_sleep=3.0, timeout=120.0)


def _tasks(p: Params) -> list[dict]:
    return [
        {
            "key": f"p{i}",
            "type": TASK_TYPE,
            "data": {"sleep": p.task_sleep},
            "user": f"u{i % p.users}",
            "max_running": 1,
        }
        for i in range(p.tasks)
    ]


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend, tasks=p.tasks)
    started = time.monotonic()
    rng = ctx.rng(NAME)
    with stage(ctx, NAME) as st:
        st.queue.submit_many(_tasks(p))
        pool = [st.worker(f"worker{i}", alive_time=p.alive_time, processors=2) for i in range(p.workers)]
        pauses = 0
        deadline = time.monotonic() + p.timeout
        while pauses < p.pauses and st.finished() < p.tasks and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.5, 1.5) * p.pause_every)
            holders = _holders(st, {c for w in pool for c in children(w.popen.pid)})
            if holders:
                _freeze(rng.choice(holders), p.pause_factor * p.alive_time)
                pauses += 1
        wait_for(lambda: st.finished() >= p.tasks, max(1.0, deadline - time.monotonic()), f"{p.tasks} tasks")
        stop_all(pool)
        table = st.verify(result, [t["key"] for t in _tasks(p)], strict=False)
        _check(result, st, table, pauses)
    result.kills = pauses
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _holders(st, pids: set[int]) -> list[int]:
    """The worker children among ``pids`` that hold a live lease now (its owner is ``host:pid``)."""
    try:
        owners = {m.owner for m in st.queue.list(status="running")}
    except queue_core.DatabaseError:
        return []
    return sorted({local_pid(o) for o in owners} & pids)


def _freeze(pid: int, seconds: float) -> None:
    signal_pids([pid], signal.SIGSTOP)
    time.sleep(seconds)
    signal_pids([pid], signal.SIGCONT)


def _check(result: Result, st, table, pauses: int) -> None:
    reruns = sum(n - 1 for n in st.ledger().executions().values() if n > 1)
    if pauses == 0:
        result.fail("no worker was frozen: the scenario injected nothing")
    if reruns > 2 * pauses:  # a frozen child holds at most its running task and one prefetched
        result.duplicate(f"{reruns} re-executions for {pauses} freezes")
    told = st.log_lines("expired (held past alive_time)", "was taken over")
    result.figures.update(
        pauses=pauses, reruns=reruns, told_lost=told, max_per_user=max(st.watch.max_per_user.values(), default=0)
    )
