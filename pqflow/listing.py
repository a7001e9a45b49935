"""Runs a page at a time, newest first, by workflow and status: what a dashboard lists. Bounded
however many runs the table holds: keyset pages of the run rows (the runs group's index walked by
id, and the live rows no decider has taken up yet), no OFFSET and no count.

:func:`pqflow.list_runs` reads every run, oldest first (the CLI's ``pqflow runs``); this reads
``limit`` of them, older than a cursor."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import queue_core
from queue_core.errors import ValidationError
from queue_core.rules.validate import check_int, check_name

from . import decision
from .rows import RUNS_GROUP, SEP, RunState
from .runs import run_status

#: what a run's status can be
RUN_STATUSES = ("running", "succeeded", "failed", "cancelled")
#: pages of run rows read at most to fill one page of a status filter (the rest: on the next)
MAX_BATCHES = 10
MAX_LIMIT = 500


@dataclass(frozen=True)
class RunSummary:
    """A run as a list shows it: ``steps_*`` are None for a run no decider has picked up."""

    id: int
    run_id: str
    workflow: str
    status: str
    created_at: float
    finished_at: float | None
    steps_total: int | None = None
    steps_succeeded: int | None = None
    steps_failed: int | None = None
    #: the queue of its row
    queue: str = "default"
    #: a running run no decider has taken up: "no live worker serves workflow X", or None
    unserved: str | None = None


@dataclass(frozen=True)
class RunsPage:
    runs: tuple[RunSummary, ...]
    #: what ``runs_page(cursor=...)`` takes for the next (older) page; None: this is the last
    next_cursor: int | None


def summary(row: dict) -> RunSummary:
    """A run row (as ``Transaction.store.run_read`` returns it) as a :class:`RunSummary`."""
    state = RunState.load(row.get("workflow"))
    finished = state.finished_at if state is not None else row.get("finished_at")
    summary = RunSummary(row["id"], row["key"], row["type"], run_status(row), row["created_at"], finished)
    if state is None:
        return dataclasses.replace(summary, queue=row["queue"])
    return dataclasses.replace(
        summary, steps_total=state.total, steps_succeeded=state.succeeded, steps_failed=state.failed
    )


def runs_page(
    q: queue_core.Queue,
    *,
    workflow: str | None = None,
    status: str | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> RunsPage:
    """Runs newest first, of ``workflow`` (else of every workflow recorded in the table) and in
    ``status`` (one of :data:`RUN_STATUSES`), older than ``cursor``. A status filter reads at
    most :data:`MAX_BATCHES` pages of runs for one page (fewer runs then, and a cursor)."""
    _check(workflow, status, cursor, limit)
    names = [workflow] if workflow else q.transaction(lambda tx: tx.store.run_names_registered(tx.conn, "workflow"))
    found: list[RunSummary] = []
    for _ in range(MAX_BATCHES):
        batch, cursor = _newest(q, names, cursor, limit - len(found))
        found += [r for r in batch if status is None or r.status == status]
        if len(found) >= limit or cursor is None:
            break
    return RunsPage(tuple(_with_unserved(q, found)), cursor)


def _with_unserved(q: queue_core.Queue, runs: list[RunSummary]) -> list[RunSummary]:
    """``runs``, those no decider has taken up yet with what they wait for (one read of the
    live workers, only when there is such a run)."""
    if not any(_unpicked(r) for r in runs):
        return runs
    workers = q.workers()
    return [
        dataclasses.replace(r, unserved=decision.unserved(r.workflow, r.queue, workers, what="workflow"))
        if _unpicked(r)
        else r
        for r in runs
    ]


def _unpicked(run: RunSummary) -> bool:
    return run.steps_total is None and run.status == "running"


def _check(workflow: str | None, status: str | None, cursor: int | None, limit: int) -> None:
    check_name(workflow, "workflow", optional=True)
    if status is not None and status not in RUN_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
    if cursor is not None:
        check_int(cursor, "cursor", minimum=0)
    if not 1 <= check_int(limit, "limit") <= MAX_LIMIT:
        raise ValidationError(f"limit must be between 1 and {MAX_LIMIT}")


def _newest(
    q: queue_core.Queue, names: Sequence[str], cursor: int | None, limit: int
) -> tuple[list[RunSummary], int | None]:
    """The newest ``limit`` runs of ``names`` older than ``cursor``, and the cursor after them."""
    if not names:
        return [], None
    rows = q.transaction(
        lambda tx: tx.store.run_newest(tx.conn, RUNS_GROUP, names, cursor, limit + 1, SEP), what="list runs"
    )
    taken = rows[:limit]
    return [summary(r) for r in taken], (taken[-1]["id"] if len(rows) > limit else None)
