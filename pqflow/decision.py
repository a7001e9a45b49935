"""The pure decision function of pqflow: what to submit next, what can never run.

No database and no clock: :func:`decide` maps a run's stored snapshot (see
:meth:`pqflow.dag.Workflow.snapshot`) plus the statuses of the steps that have a queue
row to the full state of the run. :func:`explain` answers "why is this step not
running?" in one line.

Step statuses: ``pending`` (not submitted: parents not done yet, or ready to be
submitted now), ``waiting``, ``running``, ``succeeded``, ``failed``, ``skipped`` (its
trigger can never hold, or the run was cancelled before it was submitted),
``cancelled``. Run statuses: ``running``, ``succeeded``, ``failed``, ``cancelled``.

Snapshots are treated as immutable: their precomputed form is cached by identity.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ACTIVE",
    "KEEP",
    "RUN_STATUSES",
    "STEP_STATUSES",
    "SUBMITTED_STATUSES",
    "TERMINAL",
    "Evaluation",
    "Waiting",
    "decide",
    "explain",
    "map_status",
    "run_status",
    "verdict",
    "waiting_for",
    "unserved",
]

TERMINAL = frozenset({"succeeded", "failed", "skipped", "cancelled"})
ACTIVE = frozenset({"waiting", "running"})
#: Statuses a step with a queue row may have (``skipped`` is accepted too, as given).
SUBMITTED_STATUSES = ACTIVE | TERMINAL
STEP_STATUSES = ("pending", "waiting", "running", "succeeded", "failed", "skipped", "cancelled")
RUN_STATUSES = ("running", "succeeded", "failed", "cancelled")

SUBMIT, SKIP, WAIT = "submit", "skip", "wait"
#: the verdict on a step that started already (submitted, or a map whose items exist): it stays
#: as it is; a parent ending after its start is only counted
KEEP = "keep"
_SUBMIT, _SKIP, _WAIT = SUBMIT, SKIP, WAIT


@dataclass(frozen=True)
class Evaluation:
    """A run evaluated from its steps' statuses (:func:`decide`). ``submit`` is in the snapshot's topological order."""

    submit: tuple[str, ...]
    skipped: frozenset[str]
    statuses: dict[str, str]
    run_status: str


@dataclass(frozen=True)
class _Compiled:
    order: tuple[str, ...]
    parents: dict[str, tuple[str, ...]]
    triggers: dict[str, str]


_cache: dict[int, tuple[dict[str, Any], _Compiled]] = {}
_CACHE_SIZE = 128


def _compile(snapshot: dict[str, Any]) -> _Compiled:
    hit = _cache.get(id(snapshot))
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    if snapshot.get("format") != 1:
        raise ValueError(f"unsupported workflow snapshot format {snapshot.get('format')!r}")
    steps: dict[str, dict[str, Any]] = snapshot["steps"]
    compiled = _Compiled(
        order=tuple(snapshot["order"]),
        parents={name: tuple(spec["after"]) for name, spec in steps.items()},
        triggers={name: spec["trigger"] for name, spec in steps.items()},
    )
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[id(snapshot)] = (snapshot, compiled)  # holding the snapshot keeps its id unique
    return compiled


def _evaluate(trigger: str, parent_statuses: list[str], *, started: bool, cancel: bool) -> str:
    """The verdict on a step from its parents' statuses."""
    succeeded = parent_statuses.count("succeeded")
    failed = parent_statuses.count("failed")
    done = sum(1 for s in parent_statuses if s in TERMINAL)
    return verdict(trigger, len(parent_statuses), succeeded, failed, done, started=started, cancel=cancel)


def verdict(
    trigger: str, n: int, succeeded: int, failed: int, done: int, *, started: bool, cancel: bool = False
) -> str:
    """submit / skip / wait / keep for a step with ``n`` parents of which ``done`` ended,
    ``succeeded`` and ``failed`` of those with that outcome (the others skipped or cancelled).

    A step is decided once: one that ``started`` (submitted, or a map whose items exist) is kept
    whatever its parents do later, a cancelled run's or not (``keep``). Else a cancelled run
    submits nothing new (``skip``), a step without parents is submitted, and the one rule of
    triggers holds: a step is decided from these counts alone, so a completion needs only the
    counts of its successors, never the rest of the run."""
    if started:
        return KEEP
    if cancel:
        return _SKIP
    if n == 0:
        return _SUBMIT
    return _trigger_holds(trigger, n, succeeded, failed, done)


def _trigger_holds(trigger: str, n: int, succeeded: int, failed: int, done: int) -> str:
    if trigger == "all_success":
        return _SUBMIT if succeeded == n else _SKIP if done > succeeded else _WAIT
    if trigger == "all_done":
        return _SUBMIT if done == n else _WAIT
    if trigger == "all_failed":
        return _SUBMIT if failed == n else _SKIP if done > failed else _WAIT
    if trigger == "one_failed":
        return _SUBMIT if failed else _SKIP if done == n else _WAIT
    if trigger == "one_success":
        return _SUBMIT if succeeded else _SKIP if done == n else _WAIT
    if trigger == "none_failed":
        return _SKIP if failed else _SUBMIT if done == n else _WAIT
    raise ValueError(f"unknown trigger {trigger!r} in snapshot")


def map_status(n_failed: int, n_cancelled: int, *, allow_failed_items: bool) -> str:
    """How a map ends once none of its items is open."""
    if n_cancelled:
        return "cancelled"
    if n_failed and not allow_failed_items:
        return "failed"
    return "succeeded"


def run_status(*, cancel: bool, failed: int, cancelled: int) -> str:
    """How a run ends once none of its steps is open."""
    if cancel:
        return "cancelled"
    if failed:
        return "failed"
    return "cancelled" if cancelled else "succeeded"


def decide(snapshot: dict[str, Any], submitted: Mapping[str, str], *, cancel_requested: bool = False) -> Evaluation:
    """What to submit now, what is skipped, every step's status and the run's status.

    ``submitted`` maps each step that has a queue row to its status (waiting, running,
    succeeded, failed, cancelled; skipped is kept as given).
    """
    c = _compile(snapshot)
    for name, given in submitted.items():
        if name not in c.parents:
            raise ValueError(f"unknown step {name!r} (steps: {', '.join(c.order)})")
        if given not in SUBMITTED_STATUSES:
            raise ValueError(
                f"step {name!r} has status {given!r}; expected one of {', '.join(sorted(SUBMITTED_STATUSES))}"
            )
    statuses: dict[str, str] = {}
    submit: list[str] = []
    skipped: set[str] = set()
    in_progress = False
    any_failed = any_cancelled = False
    for name in c.order:
        status = submitted.get(name)
        parents = [statuses[p] for p in c.parents[name]]
        verdict = _evaluate(c.triggers[name], parents, started=status is not None, cancel=cancel_requested)
        if verdict == _SKIP:
            status = "skipped"
            skipped.add(name)
        elif verdict != KEEP:  # submit or wait: not submitted yet
            status = "pending"
            submit += [name] if verdict == _SUBMIT else []
        assert status is not None
        in_progress = in_progress or status in ACTIVE or status == "pending"
        any_failed = any_failed or status == "failed"
        any_cancelled = any_cancelled or status == "cancelled"
        statuses[name] = status
    if in_progress:
        status = "running"
    else:
        status = run_status(cancel=cancel_requested, failed=int(any_failed), cancelled=int(any_cancelled))
    return Evaluation(tuple(submit), frozenset(skipped), statuses, status)


_NEEDS = {
    "all_success": "needs every parent to succeed",
    "all_done": "needs every parent to finish",
    "all_failed": "needs every parent to fail",
    "one_failed": "needs at least one parent to fail",
    "one_success": "needs at least one parent to succeed",
    "none_failed": "needs every parent to finish with none failed",
}


def explain(
    snapshot: dict[str, Any],
    submitted: Mapping[str, str],
    step: str,
    *,
    cancel_requested: bool = False,
    waiting: str | None = None,
) -> str:
    """One line answering "why is this step (not) running?"; ValueError for an unknown step.
    ``waiting``: what the step waits for when it is waiting (:func:`waiting_for`)."""
    c = _compile(snapshot)
    if step not in c.parents:
        raise ValueError(f"unknown step {step!r} (steps: {', '.join(c.order)})")
    d = decide(snapshot, submitted, cancel_requested=cancel_requested)
    status = d.statuses[step]
    trigger = c.triggers[step]
    parents = c.parents[step]
    listing = ", ".join(f"{p} ({d.statuses[p]})" for p in parents)
    about = f"; trigger {trigger}; parents: {listing}" if parents else ""
    head = f"step {step!r}"
    if step in submitted:
        text = {
            "waiting": f"{head} is waiting: {waiting}" if waiting else f"{head} is waiting in the queue for a worker",
            "running": f"{head} is running",
            "succeeded": f"{head} succeeded",
            "failed": f"{head} failed",
            "cancelled": f"{head} was cancelled",
            "skipped": f"{head} was skipped",
        }[status]
        return text
    if cancel_requested:
        return f"{head} will not start: the run was cancelled"
    if step in d.submit:
        return f"{head} is ready to be submitted" + (about or ": it has no parents")
    if status == "pending":
        waiting_for = ", ".join(f"{p} ({d.statuses[p]})" for p in parents if d.statuses[p] not in TERMINAL)
        return f"{head} is pending: waiting for {waiting_for}{about}"
    # Skipped because the trigger can never hold.
    if trigger in ("one_failed", "one_success"):
        wanted = "failed" if trigger == "one_failed" else "succeeded"
        reason = f"no parent {wanted} and trigger {trigger} {_NEEDS[trigger]}"
    else:
        good = {"all_success": ("succeeded",), "all_failed": ("failed",)}.get(trigger)
        if good is None:  # none_failed
            culprits = [p for p in parents if d.statuses[p] == "failed"]
        else:
            culprits = [p for p in parents if d.statuses[p] in TERMINAL and d.statuses[p] not in good]
        noun = "parent" if len(culprits) == 1 else "parents"
        what = ", ".join(f"{p} {d.statuses[p]}" for p in culprits)
        reason = f"{noun} {what} and trigger {trigger} {_NEEDS[trigger]}"
    return f"{head} is skipped: {reason}; parents: {listing}"


class Serving(Protocol):
    """A live worker as the registry lists it (``queue_core.api.worker_registry.WorkerInfo``)."""

    @property
    def queues(self) -> tuple[str, ...]: ...
    @property
    def types(self) -> tuple[str, ...] | None: ...


@dataclass(frozen=True)
class Waiting:
    """What the row of a waiting step (or a run no decider took yet) says of its wait: its task
    type and queue, when it is due, how often its function raised, how many retries it has."""

    type: str
    queue: str
    due_at: float
    failures: int = 0
    retries: int = 0


def unserved(type_: str, queue: str, workers: Iterable[Serving], *, what: str = "type") -> str | None:
    """Why no live worker would lease a task of ``type_`` in ``queue``, or None when one would.
    ``what`` names the type (``workflow``: a run row's type is its workflow)."""
    workers = list(workers)
    if any(queue in w.queues and (w.types is None or type_ in w.types) for w in workers):
        return None
    if any(w.types is None or type_ in w.types for w in workers):
        return f"no live worker serves queue {queue} ({what} {type_} is served in other queues)"
    return f"no live worker serves {what} {type_}"


def waiting_for(wait: Waiting, workers: Iterable[Serving], now: float, *, paused: bool = False) -> str:
    """What a waiting row waits for, in one line: its backoff or due time, a paused queue, no
    live worker serving its type and queue; else a free worker."""
    reasons = []
    if wait.due_at > now:
        at = _clock_time(wait.due_at, now)
        if wait.failures:
            of = f"attempt {wait.failures + 1} of {wait.retries + 1}"
            reasons.append(f"retrying at {at} ({of}, backoff)")
        else:
            reasons.append(f"due at {at}")
    if paused:
        reasons.append(f"queue {wait.queue} is paused")
    nobody = unserved(wait.type, wait.queue, workers)
    if nobody is not None:
        reasons.append(nobody)
    return "; ".join(reasons) or "in the queue for a free worker (a live worker serves it)"


def _clock_time(at: float, now: float) -> str:
    """``at`` in UTC: the time of day, with the date when it is not today's."""
    day = dt.datetime.fromtimestamp(at, dt.UTC)
    same_day = day.date() == dt.datetime.fromtimestamp(now, dt.UTC).date()
    return day.strftime("%H:%M:%SZ" if same_day else "%Y-%m-%d %H:%M:%SZ")
