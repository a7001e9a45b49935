"""Runs as their users see them: start, read, list, cancel and retry (no user code needed).

Reading a run reads its run row and one row per step (a map counts its items with one grouped
count); the items of a map are listed only when asked for (:meth:`Run.items`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import queue_core
from queue_core.api.queue import Transaction
from queue_core.rules import policy
from queue_core.rules.task_states import FINISHED
from queue_core.rules.validate import check_name, decode_data

from . import decision, lifecycle
from .completions import cancel_open_rows
from .errors import FlowError, UnknownRunError, UnknownStepError
from .retry import reopen_run
from .rows import RUNS_GROUP, NodeState, RunState, dumps, item_index, node_key, status_of_row


@dataclass(frozen=True)
class MapInfo:
    """A map step's items by status."""

    total: int
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    running: int = 0
    waiting: int = 0

    def __str__(self) -> str:
        parts = [f"{self.succeeded:,}/{self.total:,} succeeded"]
        parts += [
            f"{n:,} {what}"
            for what, n in (
                ("failed", self.failed),
                ("cancelled", self.cancelled),
                ("running", self.running),
                ("waiting", self.waiting),
            )
            if n
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class StepInfo:
    name: str
    status: str
    attempts: int = 0
    result: Any = None
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    items: MapInfo | None = None  # a map step's counts, once its items exist
    #: what its row says of its wait (a waiting step): type, queue, due time, failures, retries
    wait: decision.Waiting | None = None
    #: a failed step's last traceback (capped as stored), and the attempt and worker it came from
    traceback: str | None = None
    traceback_from: str | None = None


@dataclass(frozen=True)
class ItemInfo:
    index: int
    status: str
    attempts: int
    item: Any
    result: Any
    error: str | None


@dataclass
class Run:
    """A workflow run read from the database (no user code needed)."""

    run_id: str
    workflow: str
    status: str
    steps: dict[str, StepInfo]
    input: Any = None
    snapshot: dict | None = None
    created_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    queue: queue_core.Queue | None = field(default=None, repr=False)
    #: a run no decider has taken up yet: its row's type (the workflow), queue and due time
    pickup: decision.Waiting | None = None

    def cancel(self, now: float | None = None) -> Run:
        return cancel_run(self._queue(), self.run_id, now=now)

    def retry(self, now: float | None = None) -> Run:
        return retry_run(self._queue(), self.run_id, now=now)

    def refresh(self) -> Run:
        return get_run(self.run_id, queue=self._queue())

    def items(self, step: str) -> list[ItemInfo]:
        """The items of map step ``step``, in item order."""
        if self.snapshot is None or not self.snapshot["steps"].get(step, {}).get("map"):
            raise UnknownStepError(f"{step!r} is not a map step of run {self.run_id!r}")
        q = self._queue()
        rows = q.transaction(
            lambda tx: tx.store.run_group_read(tx.conn, node_key(self.run_id, step), data=True, result=True),
            what="read items",
        )
        now = q.now()
        return sorted((_item_info(r, now) for r in rows), key=lambda i: i.index)

    def why(self, step: str) -> str:
        if self.snapshot is None:
            return self.not_picked_up()
        try:
            text = decision.explain(
                self.snapshot,
                self._submitted(),
                step,
                cancel_requested=self.cancel_requested,
                waiting=self._waiting(self.steps.get(step)),
            )
        except ValueError as exc:
            raise UnknownStepError(str(exc)) from None
        mapped = self.snapshot["steps"][step].get("map")
        if mapped and self.steps[step].items is not None:
            text += f"; map over {mapped}: {self.steps[step].items}"
        elif mapped:
            text += f"; map over {mapped} (one task per item of its result)"
        return text

    def not_picked_up(self) -> str:
        """Why no decider has taken this run up yet: no live worker serves its workflow, or one
        does and has not got to it."""
        head = f"run {self.run_id!r} has not been picked up by a decider yet"
        if self.pickup is None or self.status != "running":
            return head
        nobody = self.unserved()
        return f"{head}: {nobody}" if nobody else f"{head} (a live decider serves workflow {self.pickup.type})"

    def unserved(self) -> str | None:
        """For a run no decider has taken up yet, still open: "no live worker serves workflow
        X" when none of the live workers would lease its row; else None."""
        if self.pickup is None or self.status != "running":
            return None
        return decision.unserved(self.pickup.type, self.pickup.queue, self._queue().workers(), what="workflow")

    def _waiting(self, step: StepInfo | None) -> str | None:
        """What a waiting step waits for (``decision.waiting_for``), from its row and the live workers."""
        if step is None or step.status != "waiting" or step.wait is None:
            return None
        q = self._queue()
        now = q.now()
        paused = q.queue_settings(step.wait.queue).paused
        return decision.waiting_for(step.wait, q.workers(now=now), now, paused=paused)

    def _submitted(self) -> dict[str, str]:
        return {n: s.status for n, s in self.steps.items() if s.status not in ("pending", "skipped")}

    def _queue(self) -> queue_core.Queue:
        if self.queue is None:
            raise UnknownRunError(f"run {self.run_id!r} was not read from a queue")
        return self.queue

    @property
    def statuses(self) -> dict[str, str]:
        return {n: s.status for n, s in self.steps.items()}


def _item_info(row: dict, now: float) -> ItemInfo:
    data = decode_data(row.get("data"))
    result = json.loads(row["result"]) if row.get("result") else None
    return ItemInfo(
        item_index(row["key"]), status_of_row(row, now), row["attempts"], data.get("item"), result, row["error"]
    )


# -- reading -------------------------------------------------------------------------------------
def _open(url: str | None, table: str | None) -> queue_core.Queue:
    return queue_core.open(url, table or "pq_tasks")


def get_run(
    run_id: str, *, url: str | None = None, table: str | None = None, queue: queue_core.Queue | None = None
) -> Run:
    """Read a run from the database alone."""
    q = queue or _open(url, table)
    check_name(run_id, "run id")
    return q.transaction(lambda tx: read_run(tx, q, run_id), what="read run")


def read_run(tx: Transaction, q: queue_core.Queue, run_id: str) -> Run:
    row = tx.store.run_read(tx.conn, [run_id], data=True).get(run_id)
    if row is None or "#" in run_id:
        raise UnknownRunError(f"run {run_id!r} not found")
    data = decode_data(row["data"])
    ref = lifecycle.run_ref(tx, run_id, row)
    if ref is None:
        return _unpicked(row, data, q)
    state, dag = ref.state, ref.dag
    nodes = tx.store.run_read(tx.conn, [node_key(run_id, s) for s in dag["steps"]], result=True)
    steps = {
        name: _step_info(tx, run_id, name, nodes.get(node_key(run_id, name)), dag["steps"][name])
        for name in dag["order"]
    }
    _add_tracebacks(tx, steps, nodes, run_id)
    return Run(
        run_id,
        dag["workflow"],
        state.status,
        steps,
        input=data,
        snapshot=copy.deepcopy(dag),
        created_at=row["created_at"],
        finished_at=state.finished_at,
        cancel_requested=state.cancel,
        queue=q,
    )


def _add_tracebacks(tx: Transaction, steps: dict[str, StepInfo], nodes: dict, run_id: str) -> None:
    """The last traceback of each failed step that kept one (one read of their events)."""
    failed = {nodes[node_key(run_id, n)]["id"]: n for n, s in steps.items() if s.status == "failed" and s.items is None}
    for task_id, found in tx.store.event_last_tracebacks(tx.conn, list(failed)).items():
        shown = f"attempt {found['attempt']} on worker {found['owner'] or '-'}"
        steps[failed[task_id]] = dataclasses.replace(
            steps[failed[task_id]], traceback=found["traceback"], traceback_from=shown
        )


def _unpicked(row: dict, data: dict, q: queue_core.Queue) -> Run:
    status = (
        {"cancelled": "cancelled", "success": "succeeded"}.get(row["outcome"] or "", "failed")
        if row["state"] == FINISHED
        else "running"
    )
    return Run(
        row["key"],
        row["type"],
        status,
        {},
        input=data,
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        queue=q,
        pickup=decision.Waiting(row["type"], row["queue"], row["run_at"]),
    )


def _items_wait(tx: Transaction, group: str, row: dict, spec: dict) -> decision.Waiting:
    """What a map whose items all wait is waiting for: the wait of its item due first (a worker
    of their type, or that item's backoff)."""
    first = tx.store.run_next_waiting(tx.conn, group, tx.now)
    if first is None:
        return decision.Waiting(row["type"], row["queue"], 0.0)
    item = NodeState.load(first.get("workflow"))
    failures = item.failures if item is not None else 0
    return decision.Waiting(row["type"], row["queue"], first["run_at"], failures, int(spec.get("retries", 0)))


def _step_info(tx: Transaction, run_id: str, name: str, row: dict | None, spec: dict) -> StepInfo:
    if row is None:
        return StepInfo(name, "pending")
    now = tx.now
    status = status_of_row(row, now)
    node = NodeState.load(row.get("workflow"))
    items = None
    wait = None
    if status == "waiting":
        failures = node.failures if node is not None else 0
        wait = decision.Waiting(row["type"], row["queue"], row["run_at"], failures, int(spec.get("retries", 0)))
    if node is not None and node.map is not None:
        counts = tx.store.run_group_count(tx.conn, node_key(run_id, name), now)
        items = MapInfo(
            node.map.n,
            counts.get("success", 0),
            counts.get("failure", 0),
            counts.get("cancelled", 0),
            counts.get("running", 0),
            counts.get("waiting", 0),
        )
        if status == "pending" and node.map.open:
            status = "running" if items.running else "waiting"
            wait = _items_wait(tx, node_key(run_id, name), row, spec) if status == "waiting" else None
    result = None
    if status == "succeeded" and row.get("result"):
        result = json.loads(row["result"])
    times = (row["started_at"], row["finished_at"])
    return StepInfo(name, status, row["attempts"], result, row["error"], *times, items, wait)


def list_runs(q: queue_core.Queue, *, workflow: str | None = None) -> list[dict]:
    """Every run (oldest first), including runs not yet picked up by a decider: rows of the runs
    group, and rows of a workflow served or started here that no decider has taken yet."""

    def read(tx: Transaction) -> list[dict]:
        rows = {r["key"]: r for r in tx.store.run_group_read(tx.conn, RUNS_GROUP)}
        names = [workflow] if workflow else tx.store.run_names_registered(tx.conn, "workflow")
        for m in (m for name in names for m in q.list(type=name)):
            if "#" not in m.key and m.key not in rows and m.group is None:
                rows[m.key] = tx.store.run_read(tx.conn, [m.key]).get(m.key) or {}
        return [r for r in rows.values() if r and (workflow is None or r["type"] == workflow)]

    return sorted(q.transaction(read, what="list runs"), key=lambda r: r["id"])


def run_status(row: dict) -> str:
    """The status of a run from its row (as ``list_runs`` returns it): its state's, or for a run
    no decider picked up (yet, or ever: cancelled before), running until its row ended."""
    state = RunState.load(row.get("workflow"))
    if state is not None:
        return state.status
    if row["state"] != FINISHED:
        return "running"
    return {"cancelled": "cancelled", "success": "succeeded"}.get(row["outcome"] or "", "failed")


# -- operator actions ----------------------------------------------------------------------------
def cancel_run(q: queue_core.Queue, run_id: str, *, now: float | None = None) -> Run:
    """Submit nothing new, cancel waiting steps and items, tell running ones; the run ends
    cancelled once they return."""
    check_name(run_id, "run id")
    status = q.transaction(lambda tx: _cancel_flag(tx, run_id), now=now, what="cancel run")
    if status == "busy":
        raise FlowError(f"run {run_id!r} is being picked up by a decider right now; try again")
    if status == "running":
        q.transaction(lambda tx: cancel_open_rows(tx, run_id), now=now, what="cancel run")
    return get_run(run_id, queue=q)


def _cancel_flag(tx: Transaction, run_id: str) -> str:
    row = tx.store.run_read(tx.conn, [run_id], lock=True).get(run_id)
    if row is not None and RunState.load(row.get("workflow")) is None:
        return _cancel_unpicked(tx, row)
    return lifecycle.request_cancel(tx, run_id)


def _cancel_unpicked(tx: Transaction, row: dict) -> str:
    """A run no decider has taken up yet ends before any step; it stays listed as a run."""
    if row["state"] == FINISHED:
        return "finished"
    if policy.lease_held(row["leased"], row["timeout"], tx.now):
        return "busy"
    tx.cancel(row["key"])
    tx.store.run_mark(tx.conn, row["id"], RUNS_GROUP, dumps({"unpicked": True}))
    tx.store.run_name_register(tx.conn, "workflow", row["type"])
    return "cancelled"


def retry_run(q: queue_core.Queue, run_id: str, *, now: float | None = None) -> Run:
    """Re-run what did not succeed in a failed or cancelled run (a map: its failed items)."""
    check_name(run_id, "run id")
    # with a receipt: after a COMMIT whose outcome was unknown, a reopen that committed is not
    # done again (its steps may have failed again meanwhile; they would run twice)
    q.transaction(lambda tx: reopen_run(tx, run_id), now=now, what="retry run", receipt=True)
    return get_run(run_id, queue=q)


def start_run(
    workflow: Any,
    run_id: str,
    data: Any = None,
    *,
    url: str | None = None,
    table: str | None = None,
    now: float | None = None,
    queue: queue_core.Queue | None = None,
) -> Run:
    """Start a run of ``workflow`` (a pqflow.Workflow): its run row, whose data is ``data``,
    and its step rows, in one transaction. A duplicate run id raises IdempotentAlreadyExistsError."""
    lifecycle.check_run_id(run_id)
    q = queue or _open(url, table)
    snapshot = workflow.snapshot()
    state = lifecycle.start(q, snapshot, run_id, data, now=now)
    return Run(run_id, snapshot["workflow"], state.status, {}, input=data, snapshot=snapshot, queue=q)
