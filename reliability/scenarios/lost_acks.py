"""Scenario 11 — lost acknowledgements: COMMITs the server applied, answered by a dropped connection.

``workers`` worker processes drain ``tasks`` tasks (every ``limited_every``-th with
``max_attempts = 1``) while a submitter process's ``threads`` threads add ``submitted`` "run
now" tasks (a higher priority), and two ``perfectsched run`` loops fire minutely schedules the
scenario adds in ``waves``, each ``missed`` minutes behind: one the built-in submitter (tick:
each occurrence's task and the schedule's advance in one transaction), one with a handler
(:func:`reliability.handlers.fire`: a lease per occurrence, the handler submits the
occurrence's task, the loop finishes the lease). In all these processes the first COMMIT of
each kind of store transaction that changed rows, and ``fault_rate`` of the others, is carried
out by the server and then answered by a dropped connection (:mod:`reliability.lost_ack`): the store runs the
whole transaction again, and that run must recognise what the first one did.

Checked: every acknowledged submission is one row and no ``submit`` raised; every task finished
with outcome success exactly once, ran once, on its first attempt (a claim whose acknowledgement
was lost delivers what it leased: no attempt is spent, no lease is left to expire, a task with
one attempt does not fail) and — the "run now" tasks — started within half a lease
(``alive_time``) of its submission; every occurrence of every schedule has exactly one task,
and each handled occurrence was fired once, and no schedule lease was held half a lease or more
(the handler takes milliseconds: such a lease was left to expire);
no process logged a warning or an error beyond the injected faults; and faults hit claims,
submissions, ticks and schedule leases.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import perfectsched

from .. import checks, lost_ack
from ..handlers import TASK_TYPE
from ..leases import ScheduleLeaseWatch
from ..procs import Proc, stop_all, wait_for
from ..result import Result
from ..stage import Context, Stage, stage
from .common import add_minutely

NAME = "lost_acks"
BACKENDS = ("mariadb", "postgres", "sqlite")
FIRE = "reliability.handlers:fire"
#: kinds of transaction (``Database.run``'s ``what``) each role must have lost an acknowledgement of
REQUIRED = {"workers": "poll", "submitter": "submit", "ticker": "tick", "handler": "poll schedules"}
#: seconds the processes may take to start
STARTUP = 60.0
#: what the store logs when it runs a transaction again after a transient error
RETRIED = "transient database error (attempt"


@dataclass(frozen=True)
class Params:
    tasks: int = 2000
    limited_every: int = 4
    workers: int = 3
    processors: int = 2
    threads: int = 2
    submitted: int = 400
    submit_interval: float = 0.05
    waves: int = 8
    wave_every: float = 1.5
    schedules: int = 5
    handled: int = 2
    missed: int = 10
    tick_batch: int = 1
    fault_rate: float = 0.05
    alive_time: float = 20.0
    task_sleep: float = 0.002
    timeout: float = 600.0


FULL = Params()
QUICK = Params(
    tasks=120,
    workers=2,
    submitted=24,
    submit_interval=0.02,
    waves=2,
    wave_every=0.5,
    schedules=3,
    missed=4,
    fault_rate=0.1,
    alive_time=10.0,
    timeout=60.0,
)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend)
    started = time.monotonic()
    with stage(ctx, NAME, schedules=True) as st:
        keys = _submit(st, p)
        ticked = perfectsched.open(ctx.url, st.tables.schedules, st.table)
        handled = perfectsched.open(ctx.url, st.table + "_h", st.table)
        handled.init()
        procs = _start(st, p, handled.table)
        watch = ScheduleLeaseWatch(perfectsched.open(ctx.url, handled.table, st.table))
        watch.start()
        added = _add_waves(ticked, handled, p)
        wait_for(lambda: not procs["submitter"].running(), p.timeout, "the submitter")
        occurrences = _caught_up([ticked, handled], [procs["ticker"], procs["handler"]], added, p.timeout)
        watch.stop()
        submitted = sorted(st.acks().acked())
        expected = [*keys, *submitted, *occurrences]
        wait_for(lambda: st.finished() >= len(expected), p.timeout, "every task to finish", 0.2)
        stop_all(procs["workers"])
        table = st.verify(result, expected)
        _check(result, st, table, p, submitted, occurrences, added)
        _leases_held(result, watch, p.alive_time / 2)
        for sched in (ticked, handled, watch.sched):
            sched.close()
        result.tasks = len(expected)
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _submit(st: Stage, p: Params) -> list[str]:
    keys = [f"t{i}" for i in range(p.tasks)]
    st.queue.submit_many(
        {
            "key": k,
            "type": TASK_TYPE,
            "data": {"sleep": p.task_sleep},
            "max_attempts": 1 if i % p.limited_every == 0 else None,
        }
        for i, k in enumerate(keys)
    )
    return keys


def _faulty(st: Stage, p: Params, role: str) -> dict:
    return lost_ack.env(p.fault_rate, st.workdir / f"faults-{role}.txt", seed=st.ctx.seed)


def _start(st: Stage, p: Params, handled_table: str) -> dict:
    """Start the processes; let the submitter submit once the workers and the two schedulers run
    their loops (tasks finish, the schedulers logged their start): a process starting up is not
    to be taken for a wait."""
    lease = {
        "alive_time": p.alive_time,
        "task_heartbeat_interval": p.alive_time / 5,
        "poll_interval": 0.2,
        "log_level": "INFO",
    }
    go = st.workdir / "start-submitting"
    procs = {
        "workers": [
            st.worker(f"worker{i}", alive_time=p.alive_time, processors=p.processors, env=_faulty(st, p, "workers"))
            for i in range(p.workers)
        ],
        "ticker": st.scheduler("ticker", env=_faulty(st, p, "ticker"), tick_batch=p.tick_batch, **lease),
        "handler": st.scheduler(
            "handler", env=_faulty(st, p, "handler"), schedule_table=handled_table, target=FIRE, **lease
        ),
        "submitter": st.submitter(
            env=_faulty(st, p, "submitter"),
            threads=p.threads,
            prefix="now",
            count=p.submitted // p.threads,
            priorities=[5],
            data={"sleep": p.task_sleep},
            interval=p.submit_interval,
            start_file=str(go),
        ),
    }
    wait_for(
        lambda: st.finished() > 0 and all("schedule_table=" in procs[s].output() for s in ("ticker", "handler")),
        STARTUP,
        "the workers and schedulers to start",
    )
    go.touch()
    return procs


def _add_waves(ticked: perfectsched.Scheduler, handled: perfectsched.Scheduler, p: Params) -> dict[str, tuple]:
    """Add the schedules, a wave every ``wave_every`` s; returns ``key -> (first occurrence,
    when it was added)`` (handled schedules' keys start with ``h``)."""
    added: dict[str, tuple] = {}
    for w in range(p.waves):
        time.sleep(p.wave_every if w else 0.0)
        for sched, prefix, n in ((ticked, "c", p.schedules), (handled, "h", p.handled)):
            for i in range(n):
                key = f"{prefix}{w}-{i}"
                first = add_minutely(sched, key, time.time() - 60 * p.missed, {"sleep": p.task_sleep})
                added[key] = (first, time.time())
    return added


def _caught_up(scheds: list[perfectsched.Scheduler], procs: list[Proc], added: dict, timeout: float) -> list[str]:
    """Wait until the schedulers have fired every due occurrence, stop them, and return the task
    keys of the occurrences they fired: every minute from a schedule's first occurrence up to
    where it stands."""

    def done() -> bool:
        now = time.time()
        return all(m.next_time > now - 1 for s in scheds for m in s.list())

    wait_for(done, timeout, "the schedulers to fire every due occurrence", 0.2)
    stop_all(procs)
    return [f"{m.key}.{t}" for s in scheds for m in s.list() for t in range(added[m.key][0], m.next_time, 60)]


def _check(
    result: Result, st: Stage, table, p: Params, submitted: list[str], occurrences: list[str], added: dict
) -> None:
    checks.acked_present(result, table, submitted)
    for kind, n in st.acks().errors().items():
        result.fail(f"{n} submit calls raised {kind}")
    _first_attempts(result, table)
    _run_now(result, table, submitted, p.alive_time / 2)
    _occurrence_tasks(result, table, occurrences, added)
    _fired_once(result, st, occurrences)
    _complaints(result, st)
    _faults(result, st)


def _first_attempts(result: Result, table) -> None:
    """Nothing was killed and no handler failed: a second attempt means a lease was left to expire."""
    spent = [m for m in table.values() if m.attempts != 1]
    for m in spent[:5]:
        result.fail(f"task {m.key} finished on attempt {m.attempts}: a lease was left to expire")
    result.figures["attempts_spent"] = sum(max(0, m.attempts - 1) for m in spent)


def _run_now(result: Result, table, submitted: list[str], within: float) -> None:
    waits = [
        table[k].started_at - table[k].created_at for k in submitted if k in table and table[k].started_at is not None
    ]
    for w in [w for w in waits if w > within][:3]:
        result.fail(f"a 'run now' task waited {w:.1f} s to start (a lease left to expire?)")
    result.figures["run_now_max_wait_s"] = round(max(waits, default=0.0), 2)


def _occurrence_tasks(result: Result, table, occurrences: list[str], added: dict) -> None:
    """No task for an occurrence that should not exist (the missing ones are losses already)."""
    expected = set(occurrences)
    for key in table:
        if key.rsplit(".", 1)[0] in added and key not in expected:
            result.duplicate(f"occurrence task {key} was not expected")
    result.figures["occurrences"] = len(occurrences)


def _fired_once(result: Result, st: Stage, occurrences: list[str]) -> None:
    """Each handled occurrence fired once (the handler records each firing in the ledger)."""
    fires = Counter(e.key for e in st.ledger().of("fire"))
    for key in (k for k in occurrences if k.startswith("h")):
        if fires[key] != 1:
            (result.duplicate if fires[key] else result.loss)(f"occurrence {key} fired {fires[key]} times")


def _leases_held(result: Result, watch: ScheduleLeaseWatch, within: float) -> None:
    """A schedule lease held longer than ``within`` s: nobody ran its occurrence (the handler takes
    milliseconds), it waited for the lease to expire."""
    held, lease = watch.longest()
    if held > within:
        result.fail(
            f"the lease of schedule {lease[0]} on occurrence {lease[1]} was held {held:.1f} s: "
            "its occurrence waited for it to expire"
        )
    result.figures["schedule_lease_max_s"] = round(held, 2)


def _complaints(result: Result, st: Stage) -> None:
    """Warnings and errors the processes logged, other than the store's retries of transient
    errors (those of the injected faults, and others: a deadlock, say, counted in ``retries``)."""
    lines = [
        line
        for proc in st.fleet.procs
        for line in proc.output(tail=None).splitlines()
        if any(w in line for w in ("WARNING", "ERROR", "Traceback"))
    ]
    retries = [line for line in lines if RETRIED in line]
    for line in [line for line in lines if RETRIED not in line][:5]:
        result.fail(f"logged: {line[-300:]}")
    result.figures["complaints"] = len(lines) - len(retries)
    result.figures["retries"] = sum(1 for line in retries if lost_ack.MESSAGE not in line)


def _faults(result: Result, st: Stage) -> None:
    per_role = {role: lost_ack.faults(st.workdir / f"faults-{role}.txt") for role in REQUIRED}
    for role, what in REQUIRED.items():
        if not per_role[role][what]:
            result.fail(f"no '{what}' transaction of the {role} lost its acknowledgement: nothing was tested")
    result.kills = sum(sum(c.values()) for c in per_role.values())
    result.figures["faults"] = dict(sum(per_role.values(), Counter()).most_common())
