"""Scenario 5 — scheduler storm.

``schedules`` minutely schedules and ``schedulers`` scheduler processes on an injected clock:
each process loops ``tick(now=<simulated time>)``, reading the simulated time from a file the
scenario writes. For each of ``minutes`` simulated minutes the scenario advances the clock by
60 s, SIGKILLs one scheduler a random moment later (usually in the middle of its tick
transaction: ticks lock ``tick_batch`` schedules per transaction, so the processes share each
minute's work), starts a replacement, and waits until that minute's occurrences are all in the
queue. Nothing sleeps for simulated time: a minute takes as long as the ticks take.

Checked at the end: the queue holds exactly one task per (schedule, occurrence) — the key
``<schedule>.<epoch>`` for every schedule and every simulated minute, and nothing else — and
every schedule's ``next_time`` is the minute after the last one.
Time to recover: the slowest simulated minute, from the clock advance to its last occurrence.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass

import perfectsched

from ..procs import wait_for
from ..result import Result
from ..stage import Context, Stage, stage

NAME = "scheduler_storm"
BACKENDS = ("mariadb", "postgres", "sqlite")
T0 = 1_800_000_000 - 1_800_000_000 % 60  # a simulated minute boundary


@dataclass(frozen=True)
class Params:
    schedulers: int = 5
    schedules: int = 1000
    minutes: int = 10
    tick_batch: int = 50
    kill_within: float = 0.3
    minute_timeout: float = 120.0


FULL = Params()
QUICK = Params(schedulers=3, schedules=100, minutes=4, tick_batch=10, kill_within=0.1, minute_timeout=60.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend, tasks=p.schedules * p.minutes)
    rng = ctx.rng(NAME)
    started = time.monotonic()
    with stage(ctx, NAME, schedules=True, watch=False) as st:
        sched = perfectsched.open(ctx.url, st.tables.schedules, st.table)
        for i in range(p.schedules):
            sched.add(f"s{i}", "rel_task", cron="* * * * *", now=T0 + 1)
        clock = st.workdir / "clock"
        _set_clock(clock, T0 + 1)
        ticker = _ticker(st, sched, clock, p.tick_batch)
        procs = [ticker(i) for i in range(p.schedulers)]
        minute_s, mid_minute = [], 0

        def submitted() -> int:
            return st.queue.stats()["total"]

        for m in range(1, p.minutes + 1):
            advanced = time.monotonic()
            _set_clock(clock, T0 + 60 * m)
            wait_for(lambda m=m: submitted() > p.schedules * (m - 1), p.minute_timeout, f"minute {m} to start", 0.02)
            time.sleep(rng.uniform(0, p.kill_within))
            victim = rng.randrange(len(procs))
            procs[victim].kill()
            mid_minute += submitted() < p.schedules * m
            procs[victim] = ticker(victim)
            wait_for(
                lambda m=m: submitted() >= p.schedules * m,
                p.minute_timeout,
                f"simulated minute {m} to be submitted",
                0.05,
            )
            minute_s.append(round(time.monotonic() - advanced, 2))
        for proc in procs:
            proc.kill()
        _check(result, st, sched, p)
        sched.close()
        result.kills = result.restarts = p.minutes
        result.recovered(max(minute_s))
        result.figures.update(minute_s=minute_s, killed_mid_minute=mid_minute)
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _set_clock(path, t: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(repr(float(t)))
    os.replace(tmp, path)


def _ticker(st: Stage, sched: perfectsched.Scheduler, clock, tick_batch: int):
    def start(i: int):
        return st.fleet.agent(
            "simtick",
            {
                "url": st.url,
                "schedule_table": sched.table,
                "queue_table": st.table,
                "clock_file": str(clock),
                "interval": 0.1,
                "tick_batch": tick_batch,
            },
            name=f"scheduler{i}",
        )

    return start


def _check(result: Result, st: Stage, sched: perfectsched.Scheduler, p: Params) -> None:
    expected = {f"s{i}.{T0 + 60 * m}" for i in range(p.schedules) for m in range(1, p.minutes + 1)}
    got = Counter(m.key for m in st.queue.list())
    for key in sorted(expected - set(got)):
        result.loss(f"occurrence {key} has no task")
    for key in sorted(set(got) - expected):
        result.duplicate(f"task {key} is not an occurrence of the simulated minutes")
    for key, n in got.items():
        if n > 1:
            result.duplicate(f"occurrence {key} has {n} tasks")
    for m in sched.list():
        if m.next_time != T0 + 60 * (p.minutes + 1):
            result.loss(f"schedule {m.key} stands at {m.next_time}, not after the last simulated minute")
