"""The guarantees, checked from the database and the ledgers after a scenario.

Each function adds what it finds to a :class:`~reliability.result.Result`:

* :func:`tasks_succeeded_once`: every expected key is one row, finished with outcome
  ``success``, and went from live to finished exactly once (the audit trigger);
* :func:`nothing_left_running`: no row still holds a live lease;
* :func:`executions_explained`: every expected key ran at least once (its side effect is
  recorded) and ran again only as often as leases of that key were cut (plus planned retries);
* :func:`acked_present`: every acknowledged submission is a row;
* :func:`graceful_stops_kept_leases`: a gracefully stopped worker left no lease to expire.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping

import queue_core

from .ledger import Ledger
from .procs import local_pid
from .result import Result


def rows(q: queue_core.Queue) -> dict[str, queue_core.TaskMetadata]:
    return {m.key: m for m in q.list()}


def tasks_succeeded_once(
    result: Result, table: Mapping[str, queue_core.TaskMetadata], finishes: Counter, expected: Iterable[str]
) -> None:
    for key in expected:
        m = table.get(key)
        if m is None:
            result.loss(f"task {key} is not in the table")
        elif m.status != "finished" or m.outcome != "success":
            result.loss(f"task {key} is {m.status} with outcome {m.outcome} after {m.attempts} attempts ({m.error})")
        if finishes[key] > 1:
            result.duplicate(f"task {key} went from live to finished {finishes[key]} times")


def nothing_left_running(result: Result, table: Mapping[str, queue_core.TaskMetadata]) -> None:
    for m in table.values():
        if m.status == "running":
            result.fail(f"task {m.key} left running (owner {m.owner}, attempts {m.attempts})")


def cut_executions(
    watched: set[tuple[str, int]], ledger: Ledger, table: Mapping[str, queue_core.TaskMetadata], killed: Collection[int]
) -> Counter:
    """Cut leases per key: those the lease watch saw (``(key, pid)``), and each execution by a
    ``killed`` pid that is not the one its key's row finished with."""
    pairs = set(watched)
    for e in ledger.of("start"):
        m = table.get(e.key)
        if e.pid in killed and (m is None or local_pid(m.owner) != e.pid):
            pairs.add((e.key, e.pid))
    return Counter(key for key, _ in pairs)


def executions_explained(
    result: Result,
    ledger: Ledger,
    expected: Iterable[str],
    cut: Counter,
    planned: Mapping[str, int] | None = None,
    *,
    strict: bool = True,
) -> None:
    """``planned[key]``: executions the scenario itself causes beyond the first (handler failures).
    Not ``strict``: re-executions are only counted (leases may expire without a kill)."""
    planned = planned or {}
    executions = ledger.executions()
    reexecutions = 0
    for key in expected:
        n = executions[key]
        if n == 0:
            result.loss(f"task {key} has no recorded execution (finished without running?)")
            continue
        extra = n - 1 - planned.get(key, 0)
        reexecutions += max(0, extra)
        if strict and extra > cut[key]:
            result.duplicate(
                f"task {key} ran {n} times; {cut[key]} of its leases were cut (executions: {ledger.described(key)})"
            )
    result.figures["reexecutions"] = result.figures.get("reexecutions", 0) + reexecutions
    result.figures["leases_cut"] = result.figures.get("leases_cut", 0) + sum(cut.values())


def graceful_stops_kept_leases(result: Result, cut_by_pid: Mapping[int, list], graceful: Iterable[int]) -> None:
    """A process stopped gracefully (TERM, USR1) finishes its running task and releases the
    rest: none of its leases may be left to expire."""
    for pid in graceful:
        for c in cut_by_pid.get(pid, []):
            result.fail(f"pid {pid} was stopped gracefully but left its lease on task {c.key} to expire")


def acked_present(result: Result, table: Mapping[str, queue_core.TaskMetadata], acked: Iterable[str]) -> None:
    for key in acked:
        if key not in table:
            result.loss(f"acknowledged submission {key} is not in the table")


def recovery(outages: Iterable[tuple[float, float]], done_times: Iterable[float]) -> float | None:
    """Worst delay from the start of an outage ``(down, up)`` to the first completion after
    its end (work still committed by a dying server does not count as recovered)."""
    done = sorted(done_times)
    worst = None
    for down, up in outages:
        after = next((d for d in done if d > up), None)
        if after is not None:
            worst = max(worst or 0.0, after - down)
    return worst
