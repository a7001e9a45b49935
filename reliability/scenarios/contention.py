"""Scenario 4 — contention.

``submit_procs`` × ``threads`` concurrent submitters and ``pools`` × ``processors`` worker
processes run for ``duration`` seconds on one table. Submissions mix fair-scheduling users
(some capped with ``max_running``, some not, some tasks without a user) and priorities. Then
the submitters and workers are stopped gracefully and the table is checked:

* no error reached a user: no ``submit`` raised, no worker logged a failed poll or finish
  (deadlocks and lock-wait timeouts must be absorbed by the store's retries);
* no acknowledged submission is missing;
* every task a handler ran finished with outcome success, exactly once, and ran once;
* no user ever held more live leases than its ``max_running`` (sampled while running);
* the claim rate (tasks finished per ``window`` s) does not collapse while the table grows:
  the last window keeps at least ``min_rate_ratio`` of the median window (the first window,
  while the workers start, left out).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from .. import checks
from ..procs import stop_all
from ..result import Result
from ..stage import Context, Stage, stage

NAME = "contention"
BACKENDS = ("mariadb", "postgres")
USERS = ["u0", "u1", "u2", "u3", None]
CAPS = {"u0": 2, "u1": 3}
PRIORITIES = [0, 0, 1, 5]
#: worker log lines that mean a database error got past the store's retries
ERROR_LINES = ("poll failed", "could not settle", "finish failed", "heartbeat failed", "crashed", "Traceback")


@dataclass(frozen=True)
class Params:
    submit_procs: int = 4
    threads: int = 8
    pools: int = 2
    processors: int = 4
    duration: float = 60.0
    window: float = 5.0
    min_rate_ratio: float | None = 0.5
    alive_time: float = 10.0


FULL = Params()
QUICK = Params(submit_procs=2, threads=4, pools=1, processors=2, duration=6.0, window=2.0, min_rate_ratio=None)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend)
    started = time.monotonic()
    with stage(ctx, NAME) as st:
        workers = [st.worker(f"pool{i}", processors=p.processors, alive_time=p.alive_time) for i in range(p.pools)]
        submitters = [
            st.submitter(
                f"submitter{i}", prefix=f"s{i}", threads=p.threads, users=USERS, caps=CAPS, priorities=PRIORITIES
            )
            for i in range(p.submit_procs)
        ]
        rates = _sample_rates(st, p)
        st.stop_submitters(submitters)
        stop_all(workers)
        acks = st.acks()
        ran = set(st.ledger().executions())
        table = st.verify(result, ran)
        checks.acked_present(result, table, acks.acked())
        for kind, n in acks.errors().items():
            result.fail(f"{n} submit calls raised {kind}")
        errors = st.log_lines(*ERROR_LINES)
        if errors:
            result.fail(f"{errors} worker log lines report a failed database operation")
        _check_rate(result, rates, p)
        result.tasks = len(acks.acked())
        result.figures.update(
            submitted=len(acks.acked()),
            claimed=len(ran),
            claims_per_s=rates,
            retries_absorbed=st.log_lines("transient database error"),
            max_running_seen=dict(st.watch.max_per_user),
        )
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _sample_rates(st: Stage, p: Params) -> list[float]:
    """Tasks finished per second in each ``window`` of the run."""
    rates = []
    last, t_last = max(0, st.finished()), time.monotonic()
    end = t_last + p.duration
    while time.monotonic() < end:
        time.sleep(max(0.0, min(p.window, end - time.monotonic())))
        n, now = st.finished(), time.monotonic()
        rates.append(round((n - last) / (now - t_last), 1))
        last, t_last = n, now
    return rates


def _check_rate(result: Result, rates: list[float], p: Params) -> None:
    """The last window against the median of the others (the first one, while the workers
    start, left out)."""
    if p.min_rate_ratio is None or len(rates) < 4:
        return
    median = statistics.median(rates[1:-1])
    if rates[-1] < p.min_rate_ratio * median:
        result.fail(f"claim rate fell to {rates[-1]}/s in the last window (median {median}/s)")
