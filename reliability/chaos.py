"""Killing workers: a pool of worker processes, a random SIGKILL every few seconds, and how
long the work a kill interrupted took to be done again."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .leases import LeaseWatch
from .procs import Proc, stop_all


@dataclass(frozen=True)
class Kill:
    time: float
    name: str
    pids: tuple[int, ...]


class WorkerPool:
    """``n`` workers made by ``start(i)``; a killed worker is replaced by a new one in its slot."""

    def __init__(self, start: Callable[[int], Proc], n: int):
        self.start = start
        self.slots = [start(i) for i in range(n)]
        self.kills: list[Kill] = []

    def kill_random(self, rng: random.Random) -> Kill:
        i = rng.randrange(len(self.slots))
        proc = self.slots[i]
        t = time.time()
        kill = Kill(t, proc.name, tuple(proc.kill()))
        self.kills.append(kill)
        self.slots[i] = self.start(i)
        return kill

    def stop(self, timeout: float = 30.0) -> None:
        stop_all(self.slots, timeout)


def rampage(
    pool: WorkerPool,
    rng: random.Random,
    every: tuple[float, float],
    until: Callable[[], bool],
    timeout: float,
    what: str,
) -> None:
    """SIGKILL a random worker every ``uniform(*every)`` seconds until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    next_kill = time.monotonic() + rng.uniform(*every)
    while not until():
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        if now >= next_kill:
            pool.kill_random(rng)
            next_kill = now + rng.uniform(*every)
        time.sleep(0.1)


def kill_recovery(kills: list[Kill], watch: LeaseWatch, done_at: Mapping[str, float]) -> float | None:
    """Worst time from a kill until every task whose lease it cut was finished again."""
    by_pid = watch.cut_by_pid()
    worst = None
    for k in kills:
        hit = [c.key for pid in k.pids for c in by_pid.get(pid, [])]
        times = [done_at[key] for key in hit if key in done_at]
        if times:
            worst = max(worst or 0.0, max(times) - k.time)
    return worst
