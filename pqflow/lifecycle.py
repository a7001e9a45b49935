"""A run's life outside its completions, each step in the caller's transaction: start, adoption
of a submitted row, the rows of its steps and map items, the inputs a step reads, a step's retry
and a cancel request. What follows a completion is :mod:`pqflow.completions`; the pure rules
(which trigger holds, how a map and a run end) are :mod:`pqflow.decision`. Every write is a named
transition of the Store interface (``run_*``, ``queue_core/store/protocol.py``), fenced by the
state it expects.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from dataclasses import dataclass, field
from typing import Any, cast

from queue_core import Queue
from queue_core.api.queue import Transaction, check_name
from queue_core.errors import IdempotentAlreadyExistsError, ValidationError
from queue_core.rules.task_states import FINISHED, PENDING
from queue_core.store.protocol import DEFAULT_QUEUE

from .errors import FlowError, InvalidRunIdError, UnknownRunError
from .rows import (
    MAX_MAP_ITEMS,
    MAX_RUN_ID,
    RUNS_GROUP,
    NodeState,
    RunState,
    digest,
    dumps,
    item_key,
    node_key,
    step_type,
)

NO_RESULT: Any = object()
#: why a map has no list yet: the step it maps over has not ended (its trigger fired early)
NOT_ENDED = "not ended"
DEFAULT_RETENTION = 7 * 86400.0


@dataclass(frozen=True)
class Ended:
    """A step, map or item of a run that ended in this transaction."""

    step: str
    status: str  # succeeded / failed / cancelled / skipped
    index: int | None = None  # a map item
    result: Any = NO_RESULT


@dataclass
class RunRef:
    """What a decision needs to know of its run: id, instance, snapshot (read once)."""

    run_id: str
    row_id: int
    state: RunState
    children: dict[str, list[str]] = field(default_factory=dict)

    @property
    def dag(self) -> dict:
        return self.state.dag

    @property
    def iid(self) -> int:
        return self.state.iid

    def groups(self) -> list[str]:
        """The groups holding this run's rows: its steps, and each map's items."""
        maps = [name for name, spec in self.dag["steps"].items() if spec.get("map")]
        return [self.run_id, *(node_key(self.run_id, m) for m in maps)]


#: DAG snapshots by digest, with each step's children: a snapshot never changes and runs of one
#: workflow version share it, so a process reads and parses it once, not once per step
_DAGS: dict[str, tuple[dict, dict[str, list[str]]]] = {}
_DAGS_KEPT = 256


def _dag(tx: Transaction, run_id: str, dag_id: str, row: dict) -> tuple[dict, dict[str, list[str]]]:
    hit = _DAGS.get(dag_id) if dag_id else None
    if hit is not None:
        return hit
    text = row.get("definition")
    if text is None:
        text = (tx.store.run_read(tx.conn, [run_id], definition=True).get(run_id) or {}).get("definition")
    dag, children = _parse_dag(run_id, text)
    if len(_DAGS) >= _DAGS_KEPT:
        _DAGS.pop(next(iter(_DAGS)))
    # text is the definition column's str here: _parse_dag raised FlowError for a missing one
    _DAGS[digest(cast(str, text))] = (dag, children)  # under what it is, never under what a row claims
    return dag, children


def _parse_dag(run_id: str, text: Any) -> tuple[dict, dict[str, list[str]]]:
    """A stored DAG snapshot and each step's children; FlowError when it is not one."""
    try:
        dag = json.loads(text)
        steps, order = dag["steps"], dag["order"]
        children: dict[str, list[str]] = {name: [] for name in steps}
        for name in order:
            for parent in steps[name]["after"]:
                children[parent].append(name)
        if sorted(order) != sorted(steps) or not isinstance(dag["workflow"], str):
            raise ValueError("steps and order differ")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise FlowError(f"run {run_id!r} has a malformed DAG snapshot ({type(exc).__name__}: {exc})") from None
    return dag, children


def run_ref(tx: Transaction, run_id: str, row: dict) -> RunRef | None:
    """The run of a run row as read (None for a row no decider has taken up)."""
    state = RunState.load(row.get("workflow"))
    if state is None:
        return None
    state.dag, children = _dag(tx, run_id, state.dag_id, row)
    return RunRef(run_id, row["id"], state, children)


def is_own_row(run: RunRef, key: str, node: NodeState) -> bool:
    """Whether the row ``key`` with the bookkeeping ``node`` is one of ``run``'s own steps or map
    items: its key is the one its bookkeeping names and its step is one of the run's (a copy of a
    row under another key, or of another workflow's, is not: it decides nothing)."""
    return key == node.own_key() and node.step in run.dag["steps"]


def load_ref(tx: Transaction, run_id: str, *, lock: bool = False) -> RunRef:
    row = tx.store.run_read(tx.conn, [run_id], lock=lock).get(run_id)
    if row is None:
        raise UnknownRunError(f"run {run_id!r} not found")
    ref = run_ref(tx, run_id, row)
    if ref is None:
        raise UnknownRunError(f"run {run_id!r} has not been picked up by a decider yet")
    return ref


# -- starting ------------------------------------------------------------------------------
def new_state(snapshot: dict) -> tuple[RunState, str]:
    """A new run's state, and its snapshot as the JSON text of its ``definition``."""
    n, text = len(snapshot["steps"]), dumps(snapshot)
    return RunState(iid=secrets.randbits(62) + 1, dag=snapshot, dag_id=digest(text), total=n, open=n), text


def start(q: Queue, snapshot: dict, run_id: str, data: Any, *, now: float | None = None) -> RunState:
    """Insert the run row (data = the run's input) and the rows of all its steps, in one commit."""
    state, text = new_state(snapshot)

    def work(tx: Transaction) -> None:
        row = {
            "key": run_id,
            "type": snapshot["workflow"],
            "data": data,
            "group": RUNS_GROUP,
            "priority": snapshot.get("priority", 0),
            "queue": snapshot.get("queue", DEFAULT_QUEUE),
            "tags": snapshot.get("tags", ()),
            "max_attempts": None,
            "pending": True,
            "workflow": state.dump(),
            "definition": text,
        }
        if tx.submit_rows([row]) != 1:
            if tx.retried and _is_instance(tx, run_id, state.iid):
                return  # an earlier attempt committed; only its acknowledgement was lost
            raise IdempotentAlreadyExistsError(f"task {run_id!r} already exists")
        register(tx, snapshot["workflow"])
        create_rows(tx, run_id, state)

    q.transaction(work, now=now, what="start run")
    return state


def register(tx: Transaction, workflow: str) -> None:
    """Record a workflow's name in the table (`pqflow runs` lists its plain-task runs), once per
    process and table."""
    seen = tx.store.run_names_registered_here
    if ("workflow", workflow) in seen:
        return
    tx.store.run_name_register(tx.conn, "workflow", workflow)
    tx.on_commit(lambda: seen.add(("workflow", workflow)))


def _is_instance(tx: Transaction, run_id: str, iid: int) -> bool:
    row = tx.store.run_read(tx.conn, [run_id]).get(run_id)
    state = RunState.load(row["workflow"]) if row else None
    return state is not None and state.iid == iid


def adopt(tx: Transaction, task: Any, snapshot: dict) -> RunState:
    """A run row submitted as a plain task, held by this decider, becomes a run."""
    check_run_id(task.key)
    state, text = new_state(snapshot)
    if not tx.store.run_adopt(tx.conn, task.row_id, task.lease_token, state.dump(), text, RUNS_GROUP, tx.now):
        row = tx.store.run_read(tx.conn, [task.key]).get(task.key)
        if tx.retried and row and row["state"] == PENDING and row["lease_token"] == task.lease_token:
            return RunState.load(row["workflow"]) or state  # an earlier attempt committed: ours already
        raise FlowError(f"run {task.key!r} was taken over while being started")
    register(tx, snapshot["workflow"])
    create_rows(tx, task.key, state)
    return state


def create_rows(tx: Transaction, run_id: str, state: RunState) -> None:
    """A run starts with an empty group: rows an earlier run of this id left are deleted first."""
    dag = state.dag
    for group in RunRef(run_id, 0, state).groups():
        tx.store.run_group_clear(tx.conn, group)
    _check_free(tx, run_id, [node_key(run_id, name) for name in dag["order"]])
    rows = []
    for name in dag["order"]:
        spec = dag["steps"][name]
        node = NodeState(run_id, state.iid, name)
        rows.append(
            {
                "key": node_key(run_id, name),
                "type": step_type(dag["workflow"], name),
                "data": {},
                "group": run_id,
                "priority": dag.get("priority", 0),
                "queue": step_queue(dag, spec),
                "tags": spec.get("tags", ()),
                "max_attempts": None,
                "pending": bool(spec["after"]),
                "workflow": node.dump(),
            }
        )
    tx.submit_rows(rows)


# -- completion ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """What a completion decided: the steps (and maps) that ended, and the run's end if it came."""

    ended: list[Ended]
    run_status: str | None


def step_queue(dag: dict, spec: dict) -> str:
    """The queue of a step's tasks (its own, else its workflow's; runs started before named
    queues: the default queue)."""
    return spec.get("queue", dag.get("queue", DEFAULT_QUEUE))


def item_rows(run: RunRef, step: str, spec: dict, items: list) -> list[dict]:
    """The rows of a map's items: keys from run id, step and index, so none is submitted twice."""
    cap = spec.get("max_parallel")
    owner = node_key(run.run_id, step)
    rows = []
    for i, value in enumerate(items):
        state = NodeState(run.run_id, run.iid, step, index=i)
        rows.append(
            {
                "key": item_key(run.run_id, step, i),
                "type": step_type(run.dag["workflow"], step),
                "data": {"item": value},
                "group": owner,
                "priority": run.dag.get("priority", 0),
                "queue": step_queue(run.dag, spec),
                "tags": spec.get("tags", ()),
                "max_attempts": None,
                "workflow": state.dump(),
                **({"user": owner, "max_running": cap} if cap else {}),
            }
        )
    return rows


def _check_free(tx: Transaction, run_id: str, keys: list[str]) -> None:
    """A run's step keys are its own: another row holding one stops the start (nothing written)."""
    taken = tx.store.run_read(tx.conn, keys)
    if taken:
        raise FlowError(
            f"run {run_id!r} cannot start: {', '.join(sorted(taken)[:3])} held by other tasks "
            "(keys '<run id>#...' are its steps')"
        )


def mapped_list(tx: Transaction, run: RunRef, step: str, known: dict[str, Ended]) -> tuple[list | None, str]:
    """The list a map step maps over: ``step``'s result, or (None, why) when there is none."""
    e = known.get(step)
    if e is not None and e.status == "succeeded" and e.result is not NO_RESULT:
        value = e.result
    else:
        row = tx.store.run_read(tx.conn, [node_key(run.run_id, step)], result=True).get(node_key(run.run_id, step))
        if row is not None and row["state"] != FINISHED and _own_row(row, run):
            return None, NOT_ENDED  # a trigger fired on another parent (one_success...): wait for the list
        if row is None or row["state"] != FINISHED or row["outcome"] != "success":
            return None, f"skipped: step {step!r} it maps over did not succeed"
        value = results_of(tx, run, step, row)[0]
    if not isinstance(value, list):
        return None, f"step {step!r} returned {type(value).__name__}, not a list to map over"
    if len(value) > MAX_MAP_ITEMS:
        return None, f"step {step!r} returned {len(value)} items; a map takes at most {MAX_MAP_ITEMS}"
    return value, ""


def _own_row(row: dict, run: RunRef) -> bool:
    node = NodeState.load(row.get("workflow"))
    return node is not None and node.iid == run.iid


def results_of(tx: Transaction, run: RunRef, step: str, row: dict) -> tuple[Any, list[int]]:
    """A finished step's result: its own, or for a map the list of its items' results in item
    order (None for an item that did not succeed) and the indexes of those."""
    if not run.dag["steps"][step].get("map"):
        return (json.loads(row["result"]) if row.get("result") else None), []
    if not row.get("workflow"):
        row = tx.store.run_read(tx.conn, [node_key(run.run_id, step)]).get(node_key(run.run_id, step)) or {}
    own = NodeState.load(row.get("workflow"))
    n = own.map.n if own is not None and own.map is not None else 0
    values: dict[int, Any] = {}
    failed = []
    for key, state, outcome, workflow, result in tx.store.run_group_results(tx.conn, node_key(run.run_id, step)):
        node = NodeState.load(workflow, cached=False)
        if (
            node is None
            or node.iid != run.iid
            or node.index is None
            or not 0 <= node.index < n
            or key != item_key(run.run_id, step, node.index)
        ):
            continue  # not an item of this run (a row added by hand)
        ok = state == FINISHED and outcome == "success"
        values[node.index] = json.loads(result) if ok and result else None
        if not ok:
            failed.append(node.index)
    return [values[i] for i in sorted(values)], sorted(failed)


def retry_step(
    tx: Transaction, task: Any, node: NodeState, run_at: float, error: str, traceback: str | None = None
) -> None:
    """Give a failed step back for another try (its failures counted in the row, not in ``node``:
    the transaction may run twice); ``traceback``: its error's, kept with the attempt."""
    again = dataclasses.replace(node, failures=node.failures + 1)
    held = (task.row_id, task.lease_token, run_at, tx.now)
    tx.store.run_retry_held(tx.conn, *held, error=error, workflow=again.dump(), traceback=traceback)


def request_cancel(tx: Transaction, run_id: str) -> str:
    """Set the run's cancel flag (first transaction of a cancel). Returns the run's status."""
    row = tx.store.run_read(tx.conn, [run_id], lock=True).get(run_id)
    if row is None:
        raise UnknownRunError(f"run {run_id!r} not found")
    state = RunState.load(row.get("workflow"))
    if state is None:
        raise UnknownRunError(f"run {run_id!r} has not been picked up by a decider yet")
    if state.status == "running" and not state.cancel:
        state.cancel = True
        tx.store.run_set_workflow(tx.conn, row["id"], state.dump())
    return state.status


def check_run_id(run_id: Any) -> str:
    """``run_id`` if it can name a run; else InvalidRunIdError (a ValidationError that is
    permanent: a run task submitted under it fails at once, ``policy.is_permanent``)."""
    try:
        check_name(run_id, "run id")
    except ValidationError as exc:
        raise InvalidRunIdError(str(exc)) from None
    if "#" in run_id:
        raise InvalidRunIdError("run id must not contain '#'")
    if len(run_id) > MAX_RUN_ID:
        raise InvalidRunIdError(
            f"run id is {len(run_id)} characters long; the limit is {MAX_RUN_ID} (step keys add '#<step>#<item>')"
        )
    return run_id
