"""Scenario 9 — clock skew: workers and a submitter whose clocks are wrong.

Workers run with their wall clocks shifted by each of ``skews`` (libfaketime, see
:mod:`reliability.skew`), one more has its clock stepped back ``step`` seconds while it works
(as an NTP step would), and a submitter ``submitter_skew`` seconds fast adds "run now" tasks of a
higher priority while the queue drains. Every ``long_every``-th task outlives its lease
(``long_factor`` × ``alive_time``): only heartbeats keep it. Nothing is killed.

Checked: every task finished with outcome success exactly once, and ran once — a re-execution
means a live lease was taken, and with no kill nothing explains it; every "run now" task started
within ``due_within`` s of its submission by the server's clock (a fast submitter's tasks used to
wait until its clock's "now" came). SQLite is one host with one clock: not run there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import skew
from ..handlers import TASK_TYPE
from ..procs import stop_all, wait_for
from ..result import Result
from ..stage import Context, stage

NAME = "clock_skew"
BACKENDS = ("mariadb", "postgres")


@dataclass(frozen=True)
class Params:
    tasks: int = 3000
    skews: tuple[float, ...] = (-600.0, -30.0, 0.0, 30.0, 600.0)
    step: float = -600.0
    submitter_skew: float = 600.0
    submitted: int = 300
    alive_time: float = 3.0
    long_every: int = 20
    long_factor: float = 2.0
    task_sleep: float = 0.005
    due_within: float = 15.0
    timeout: float = 900.0


FULL = Params()
QUICK = Params(tasks=150, skews=(-600.0, 0.0, 600.0), submitted=40, alive_time=2.0, long_every=15, timeout=240.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend, tasks=p.tasks + p.submitted)
    started = time.monotonic()
    if not skew.available():
        result.fail(f"libfaketime is not installed ({skew.LIBFAKETIME}): apt-get install faketime")
        return result
    with stage(ctx, NAME) as st:
        keys = _submit(st, p)
        workers = [st.worker(f"worker{s:+.0f}", alive_time=p.alive_time, env=skew.shifted(s)) for s in p.skews]
        offset = st.workdir / "step-offset"
        workers.append(st.worker("stepped", alive_time=p.alive_time, env=skew.stepping(offset)))
        fast = st.submitter(
            "fast-submitter",
            env=skew.shifted(p.submitter_skew),
            threads=1,
            prefix="now",
            count=p.submitted,
            priorities=[5],
            data={"sleep": p.task_sleep},
            interval=0.02,
        )
        wait_for(lambda: st.finished() >= p.tasks // 4, p.timeout, "a quarter of the tasks")
        offset.write_text(f"{p.step:+.0f}")  # the stepped worker's clock jumps while it holds leases
        wait_for(lambda: not fast.running(), p.timeout, "the fast submitter")
        submitted = [e.key for e in st.acks().of("ack")]
        wait_for(lambda: st.finished() >= p.tasks + len(submitted), p.timeout, "every task")
        stop_all(workers)
        table = st.verify(result, keys + submitted)
        _check_due(result, table, submitted, p)
        result.figures.update(skews=list(p.skews), step=p.step, submitted=len(submitted))
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _submit(st, p: Params) -> list[str]:
    keys = [f"t{i}" for i in range(p.tasks)]
    long = p.long_factor * p.alive_time
    st.queue.submit_many(
        {"key": k, "type": TASK_TYPE, "data": {"sleep": long if i % p.long_every == 0 else p.task_sleep}}
        for i, k in enumerate(keys)
    )
    return keys


def _check_due(result: Result, table, submitted: list[str], p: Params) -> None:
    waits = [
        table[k].started_at - table[k].created_at for k in submitted if k in table and table[k].started_at is not None
    ]
    late = [w for w in waits if w > p.due_within]
    for w in late[:3]:
        result.fail(f"a 'run now' task of the fast submitter waited {w:.1f} s to start")
    if len(waits) != len(submitted):
        result.loss(f"{len(submitted) - len(waits)} 'run now' tasks have no start time")
    result.figures["run_now_max_wait_s"] = round(max(waits, default=0.0), 2)
