"""Scenario 3 — graceful (USR1) and immediate (HUP) restarts under load.

One worker pool (a supervisor with ``processors`` children) drains ``tasks`` tasks that each
sleep a random time up to ``max_sleep``. Every ``every`` seconds a randomly chosen USR1 or HUP
is sent to the supervisor; before each signal the scenario waits until the previous restart
is complete (the old children are gone, ``processors`` new ones run), so it knows exactly which
children each signal hit.

What the signals promise (docs/worker.md) and how it is checked:

* USR1: children are replaced after their current task: no execution of a USR1'd child is
  left unfinished, and none of its leases is left to expire (it finishes or releases them);
* HUP: children are killed and replaced: a task whose handler was running runs again once its
  lease expires; the replacement gives back at once what its predecessor held unrun, and the
  successes it had not yet written (those tasks run again); a task runs again only as often as
  its leases were cut (a lease the watch saw left behind, or an execution by a HUP'd child that
  its row did not finish with);
* and, as always: every task finished with outcome success exactly once, nothing left running.

Time to recover: from a HUP until every task whose lease it cut was finished again.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from ..chaos import Kill, kill_recovery
from ..handlers import TASK_TYPE
from ..procs import alive, children, wait_for
from ..result import Result
from ..stage import Context, stage

NAME = "graceful_restart"
BACKENDS = ("mariadb", "postgres", "sqlite")


@dataclass(frozen=True)
class Params:
    tasks: int = 1500
    processors: int = 4
    max_sleep: float = 0.2
    every: tuple[float, float] = (1.0, 2.0)
    alive_time: float = 3.0
    timeout: float = 600.0


FULL = Params()
QUICK = Params(tasks=120, processors=2, max_sleep=0.1, every=(0.4, 0.8), alive_time=2.0, timeout=120.0)


def run(ctx: Context, p: Params = FULL) -> Result:
    result = Result(NAME, ctx.backend, tasks=p.tasks)
    rng = ctx.rng(NAME)
    started = time.monotonic()
    with stage(ctx, NAME) as st:
        keys = [f"t{i}" for i in range(p.tasks)]
        st.queue.submit_many(
            {"key": k, "type": TASK_TYPE, "data": {"sleep": round(rng.uniform(0, p.max_sleep), 3)}} for k in keys
        )
        pool = st.worker("pool", processors=p.processors, alive_time=p.alive_time)
        hit: dict[str, set[int]] = {"USR1": set(), "HUP": set()}  # children each kind of signal hit
        sent = {"USR1": 0, "HUP": 0}
        hups: list[Kill] = []
        deadline = time.monotonic() + p.timeout
        current = _steady(pool.pid, p.processors, set(), p)
        while st.finished() < p.tasks:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {p.timeout:.0f}s draining under restarts")
            time.sleep(rng.uniform(*p.every))
            sig = rng.choice([signal.SIGUSR1, signal.SIGHUP])
            hit[sig.name[3:]].update(current)
            sent[sig.name[3:]] += 1
            if sig == signal.SIGHUP:
                hups.append(Kill(time.time(), "HUP", tuple(current)))
            if sig == signal.SIGUSR1:
                st.fleet.graceful.update(current)
            pool.send(sig)
            current = _steady(pool.pid, p.processors, current, p)
        pool.stop()
        table = st.verify(result, keys, killed=hit["HUP"])
        result.recovered(kill_recovery(hups, st.watch, st.done_at(table)))
        for e in st.ledger().unfinished():
            if e.pid not in hit["HUP"]:
                result.fail(f"execution of {e.key} by pid {e.pid} never returned, and no HUP killed that pid")
        result.kills = len(hit["HUP"])  # children SIGKILLed by the supervisor on HUP
        result.restarts = sent["USR1"] + sent["HUP"]
        result.figures.update(usr1=sent["USR1"], hup=sent["HUP"], usr1_children=len(hit["USR1"]))
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _steady(supervisor: int, n: int, old: set[int], p: Params) -> set[int]:
    """Wait until every child in ``old`` is gone and ``n`` children run; return them."""

    def ready():
        if any(alive(pid) for pid in old):
            return None
        now = set(children(supervisor))
        return now if len(now) == n else None

    return wait_for(ready, 30 + p.max_sleep * 40, "the worker pool to complete its restart", 0.05)
