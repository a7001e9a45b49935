"""Scenario 8 — soak (full runs only, not in CI).

For ``minutes`` minutes: a submitter sends ``rate`` tasks per second (short, slow, failing once
then succeeding, plain), a workflow run starts every ``run_every`` seconds, ``schedules``
minutely schedules are submitted by a real ``perfectsched run`` loop, and ``pools`` worker
pools of ``processors`` children serve it all. Every ``sample_every`` seconds the worker
processes' resident memory (``/proc/<pid>/status`` VmRSS) and open file descriptors
(``/proc/<pid>/fd``) and the database's sessions (``SHOW PROCESSLIST`` /
``pg_stat_activity``; run it on a private server so nobody else's sessions count) are sampled.

Checked: after a warm-up (the first ``warmup`` fraction of the samples: connection pools fill
up), the mean of the last third of the samples exceeds the first third by at most
``rss_slack_mb`` MB of memory, ``fd_slack`` descriptors and ``conn_slack`` sessions;
and, once the load stops and the queue drains, the usual guarantees (every acknowledged task
finished with outcome success once, failures retried as planned, every run succeeded).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import perfectsched

from .. import checks
from ..handlers import TASK_TYPE
from ..procs import Proc, stop_all, wait_for
from ..resources import connections, growth, open_fds, rss_kb
from ..result import Result
from ..stage import Context, Stage, stage
from .common import node_keys, runs_succeeded, start_runs, step_keys

NAME = "soak"
BACKENDS = ("mariadb", "postgres", "sqlite")
MIX = [{}, {"sleep": 0.01}, {"sleep": 0.2}, {"fail_attempts": 1}]


@dataclass(frozen=True)
class Params:
    minutes: float = 30.0
    pools: int = 2
    processors: int = 2
    rate: float = 20.0
    run_every: float = 10.0
    schedules: int = 5
    sample_every: float = 10.0
    warmup: float = 0.25
    rss_slack_mb: float = 10.0
    fd_slack: int = 8
    conn_slack: int = 4


FULL = Params()
QUICK = Params(minutes=1.0, rate=10.0, run_every=5.0, sample_every=3.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend)
    started = time.monotonic()
    with stage(ctx, NAME, schedules=True) as st:
        sched = perfectsched.open(ctx.url, st.tables.schedules, st.table)
        for i in range(p.schedules):
            sched.add(f"m{i}", TASK_TYPE, cron="* * * * *")
        workers = [st.worker(f"pool{i}", processors=p.processors, retry_wait=0.5) for i in range(p.pools)]
        scheduler = st.scheduler()
        submitter = st.submitter(prefix="s", threads=1, interval=1 / p.rate, mix=MIX)
        samples, run_ids = _load(st, workers, p)
        st.stop_submitters([submitter])
        scheduler.stop()
        acked = sorted(st.acks().acked())
        occurrences = [m.key for m in st.queue.list() if m.key.startswith("m")]
        expected = [*acked, *occurrences, *step_keys(run_ids)]
        nodes = [*run_ids, *node_keys(run_ids)]
        wait_for(lambda: st.finished() >= len(expected) + len(nodes), 300, "the queue to drain", 0.5)
        stop_all(workers)
        table = st.verify(
            result,
            [*expected, *nodes],
            executed=expected,
            planned={k: m.data.get("fail_attempts", 0) for k, m in checks.rows(st.queue).items()},
        )
        checks.acked_present(result, table, acked)
        runs_succeeded(result, st, run_ids)
        _check_flat(result, samples, p)
        sched.close()
        result.tasks = len(expected)
        result.figures.update(samples=samples, runs=len(run_ids), occurrences=len(occurrences))
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _load(st: Stage, workers: list[Proc], p: Params) -> tuple[list[dict], list[str]]:
    """Start workflow runs and sample resources until ``minutes`` have passed."""
    samples, run_ids = [], []
    t0 = time.monotonic()
    next_run = next_sample = t0
    while (now := time.monotonic()) < t0 + p.minutes * 60:
        if now >= next_run:
            run_ids += start_runs(st, f"r{len(run_ids)}-", 1)
            next_run = now + p.run_every
        if now >= next_sample:
            samples.append(_sample(st, workers, now - t0))
            next_sample = now + p.sample_every
        time.sleep(max(0.0, min(next_run, next_sample) - time.monotonic()))
    return samples, run_ids


def _sample(st: Stage, workers: list[Proc], elapsed: float) -> dict:
    pids = [pid for w in workers for pid in w.pids()]
    return {
        "t": round(elapsed, 1),
        "processes": len(pids),
        "rss_mb": round(sum(rss_kb(pid) for pid in pids) / 1024, 1),
        "fds": sum(open_fds(pid) for pid in pids),
        "db_sessions": connections(st.tables.engine),
    }


def _check_flat(result: Result, samples: list[dict], p: Params) -> None:
    for field, slack in (("rss_mb", p.rss_slack_mb), ("fds", p.fd_slack), ("db_sessions", p.conn_slack)):
        values = [s[field] for s in samples if s[field] is not None]
        g = growth(values, int(len(samples) * p.warmup))
        if g is None:
            continue
        first, last = g
        result.figures[f"{field}_first_last"] = [round(first, 1), round(last, 1)]
        if last - first > slack:
            result.fail(f"{field} grew from {first:.1f} to {last:.1f} (allowed: +{slack})")
