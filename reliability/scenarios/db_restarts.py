"""Scenario 2 — database restarts.

On a private server (see :mod:`reliability.dbserver`): ``tasks`` tasks, ``runs`` workflow runs
and ``schedules`` minutely schedules are served by ``workers`` workers (which are also the
deciders) and one real ``perfectsched run`` loop. The server is SIGKILLed, kept down for
``downtime`` seconds and restarted twice during the drain, and once during a burst of
``submit`` calls from ``submitters`` threads (each writes a key to its ledger only after
``submit`` returned, and tries a failed key again until it is known to be in the table).
After the restarts ``runs`` more runs start and a schedule whose occurrences are already due
is added: nobody restarted the workers or the scheduler, so they prove they reconnected.

Checked at the end: every acknowledged submission is a row; every task, step and run row
finished with outcome success exactly once (audit trigger); every run succeeded; every
schedule has exactly one task per minute between its start and where it stands now.
Re-executions are counted, not failed: a lease may expire while the server is down.
Time to recover: from a kill until the first task finished (in the burst: the first submission
acknowledged) after the server was back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import perfectsched

from .. import checks
from ..chaos import WorkerPool
from ..handlers import TASK_TYPE
from ..procs import Proc, wait_for
from ..result import Result
from ..stage import Context, Stage, stage
from .common import add_minutely, node_keys, runs_succeeded, start_runs, step_keys

NAME = "db_restarts"
BACKENDS = ("mariadb", "postgres")


@dataclass(frozen=True)
class Params:
    tasks: int = 3000
    workers: int = 3
    runs: int = 10
    schedules: int = 5
    submitters: int = 4
    burst_acks: int = 400
    downtime: float = 5.0
    alive_time: float = 5.0
    task_sleep: float = 0.01
    timeout: float = 600.0


FULL = Params()
QUICK = Params(
    tasks=300, workers=2, runs=3, schedules=2, submitters=2, burst_acks=60, downtime=0.5, alive_time=3.0, timeout=180.0
)


def run(ctx: Context, p: Params = FULL) -> Result:
    if ctx.servers is None:
        raise ValueError("db_restarts needs private servers it may kill (Context.servers)")
    result = Result(NAME, ctx.backend)
    started = time.monotonic()
    with stage(ctx, NAME, schedules=True) as st:
        sched = perfectsched.open(ctx.url, st.tables.schedules, st.table)
        keys = [f"t{i}" for i in range(p.tasks)]
        st.queue.submit_many({"key": k, "type": TASK_TYPE, "data": {"sleep": p.task_sleep}} for k in keys)
        first = {f"m{i}": add_minutely(sched, f"m{i}", time.time()) for i in range(p.schedules)}
        run_ids = start_runs(st, "before", p.runs)
        pool = WorkerPool(lambda i: st.worker(f"worker{i}", alive_time=p.alive_time), p.workers)
        scheduler = st.scheduler(poll_interval=0.2)
        outages = []
        for fraction in (1 / 3, 2 / 3):
            wait_for(
                lambda fraction=fraction: st.finished() >= fraction * p.tasks, p.timeout, f"{fraction:.0%} of the drain"
            )
            outages.append(_outage(ctx, p))
        burst_acked, burst_outage = _burst(ctx, st, p)
        run_ids += start_runs(st, "after", p.runs)
        first["late"] = add_minutely(sched, "late", time.time() - 150)
        occurrences = _occurrences_submitted(sched, scheduler, first, p.timeout)
        executed = [*keys, *burst_acked, *occurrences, *step_keys(run_ids)]
        expected = [*executed, *run_ids, *node_keys(run_ids)]
        wait_for(lambda: st.finished() >= len(expected), p.timeout, "every task, step and run to finish", 0.2)
        pool.stop()
        sched.close()
        table = st.verify(result, expected, executed=executed, strict=False)
        checks.acked_present(result, table, burst_acked)
        runs_succeeded(result, st, run_ids)
        _check_occurrences(result, table, first, occurrences)
        result.tasks = len(expected)
        result.kills = result.restarts = len(outages) + 1
        done = [m.finished_at for m in table.values() if m.finished_at]
        result.recovered(checks.recovery(outages, done))
        acks = [e.time for e in st.acks().of("ack")]
        result.recovered(checks.recovery([burst_outage], acks))
        result.figures.update(
            downtime_s=[round(up - t, 2) for t, up in [*outages, burst_outage]],
            burst_acked=len(burst_acked),
            submit_errors=dict(st.acks().errors()),
            worker_errors=st.log_lines("poll failed", "could not settle", "finish failed"),
        )
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _outage(ctx: Context, p: Params) -> tuple[float, float]:
    """Kill the server, keep it down ``downtime`` s, restart it: (kill time, back-up time)."""
    killed = ctx.servers.kill(ctx.backend)
    time.sleep(max(0.0, killed + p.downtime - time.time()))
    return killed, ctx.servers.restart(ctx.backend)


def _burst(ctx: Context, st: Stage, p: Params) -> tuple[list[str], tuple[float, float]]:
    """Submitters run; the server dies after ``burst_acks`` acknowledgements and they go on
    until as many more were acknowledged. Returns the acknowledged keys and the outage."""
    submitter = st.submitter(prefix="b", threads=p.submitters, retry=True, data={"sleep": p.task_sleep})

    def acked() -> int:
        return len(st.acks().acked())

    wait_for(lambda: acked() >= p.burst_acks, p.timeout, "the first acknowledgements of the burst", 0.1)
    outage = _outage(ctx, p)
    wait_for(lambda: acked() >= 2 * p.burst_acks, p.timeout, "acknowledgements after the restart", 0.1)
    st.stop_submitters([submitter])
    return sorted(st.acks().acked()), outage


def _occurrences_submitted(
    sched: perfectsched.Scheduler, scheduler: Proc, first: dict[str, int], timeout: float
) -> list[str]:
    """Wait until the scheduler process has submitted every due occurrence, stop it, and
    return the task keys of the occurrences it submitted: one per minute from each schedule's
    first occurrence up to its ``next_time`` (submission and advance commit together)."""

    def caught_up():
        now = time.time()
        return all(m.next_time > now - 1 for m in sched.list())

    wait_for(caught_up, timeout, "the scheduler to submit every due occurrence", 0.2)
    scheduler.stop()
    return [f"{m.key}.{t}" for m in sched.list() for t in range(first[m.key], m.next_time, 60)]


def _check_occurrences(result: Result, table: dict, first: dict[str, int], occurrences: list[str]) -> None:
    """No task for an occurrence that should not exist (the missing ones are losses already)."""
    expected = set(occurrences)
    for key in table:
        sched_key = key.rsplit(".", 1)[0]
        if sched_key in first and key not in expected:
            result.duplicate(f"occurrence task {key} of schedule {sched_key} was not expected")
    if not any(k.startswith("late.") for k in occurrences):
        result.loss("the schedule added after the restarts has no due occurrence")
