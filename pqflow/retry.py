"""Retrying a failed or cancelled run: re-run what did not succeed, keep every result that did.

An operator action, so it may read every step row of the run (not every item: only the items of
maps that did not succeed). Steps that succeeded keep their rows and results; every other step
is reopened as pending with its parents counted afresh, then decided as a completion would be:
submitted, skipped, or left pending. A map that failed re-runs only its failed and cancelled
items.
"""

from __future__ import annotations

from queue_core.api.queue import Transaction
from queue_core.rules.task_states import FINISHED, PENDING

from . import decision
from .completions import _own, _Writes, start_map, what_follows
from .errors import FlowError, UnknownRunError
from .lifecycle import NOT_ENDED, Ended, RunRef, mapped_list, run_ref
from .rows import MapCount, NodeState, node_key

RETRYABLE = ("failed", "cancelled")


def reopen_run(tx: Transaction, run_id: str) -> None:
    row = tx.store.run_read(tx.conn, [run_id], lock=True).get(run_id)
    run = run_ref(tx, run_id, row) if row else None
    if row is None or run is None:
        raise UnknownRunError(
            f"run {run_id!r} not found"
            if row is None
            else f"run {run_id!r} ended before a decider picked it up; start a new run"
        )
    state = run.state
    if state.status not in RETRYABLE:
        raise FlowError(f"run {run_id!r} is {state.status}; only failed or cancelled runs can be retried")
    open_rows = tx.store.run_open_rows(tx.conn, run.groups(), limit=None)  # copies of rows may come first
    still_open = [r["key"] for r in open_rows if _own(r, run) is not None]
    if still_open:  # an end written while rows ran (a run that ended so before this was fixed)
        raise FlowError(f"run {run_id!r} has rows still open ({', '.join(still_open)}); retry it once they end")
    nodes = tx.store.run_read(tx.conn, [node_key(run_id, s) for s in state.dag["steps"]], lock=True)
    kept = {s for s in state.dag["steps"] if _succeeded(nodes.get(node_key(run_id, s)))}
    redo = [s for s in state.dag["order"] if s not in kept]
    state.status, state.cancel, state.finished_at = "running", False, None
    state.open, state.succeeded, state.failed, state.cancelled = len(redo), len(kept), 0, 0
    run.state = state
    tx.store.run_reopen(tx.conn, row["id"], state.dump(), tx.now)
    tx.store.run_group_keep(tx.conn, run.groups())  # running again: nothing of it is purged
    ended = []
    for step in redo:
        ended += _redo(tx, run, step, nodes[node_key(run_id, step)], kept)
    what_follows(tx, run, ended)


def _succeeded(row: dict | None) -> bool:
    return row is not None and row["state"] == FINISHED and row["outcome"] == "success"


def _redo(tx: Transaction, run: RunRef, step: str, row: dict, kept: set[str]) -> list[Ended]:
    """Reopen one step that did not succeed; submit it if its parents allow."""
    spec = run.dag["steps"][step]
    old = NodeState.load(row.get("workflow"))
    node = NodeState(run.run_id, run.iid, step, map=old.map if old else None)
    node.wait = [sum(p in kept for p in spec["after"]), 0, sum(p in kept for p in spec["after"])]
    if row["state"] != PENDING:
        tx.store.run_reopen_steps(tx.conn, [row["id"]], tx.now, pending=True)
    # reopened: decided afresh (started=False), as a completion would decide it
    verdict = decision.verdict(spec["trigger"], len(spec["after"]), *node.wait, started=False)
    if verdict == decision.SKIP:
        tx.store.run_close(tx.conn, row["id"], "skipped", tx.now, workflow=node.dump())
        return [Ended(step, "skipped")]
    if verdict == decision.WAIT:
        if spec.get("map") and node.map is not None:  # its list may change: its old items go
            tx.store.run_group_clear(tx.conn, node_key(run.run_id, step))
        node.map = None
        tx.store.run_set_workflow(tx.conn, row["id"], node.dump())
        return []
    if not spec.get("map"):
        tx.store.run_promote(tx.conn, [(row["id"], node.dump())], tx.now)
        return []
    if node.map is not None and node.map.n:
        return _redo_items(tx, run, row, node)
    items, why = mapped_list(tx, run, spec["map"], {})
    if why == NOT_ENDED:  # the step it maps over runs again: decided when it ends (a parent)
        node.map = None
        tx.store.run_set_workflow(tx.conn, row["id"], node.dump())
        return []
    writes = _Writes()
    ended = start_map(tx, run, row, node, items, why, writes)
    writes.flush(tx)
    return ended


def _item_of(row: dict, run: RunRef, node: NodeState) -> bool:
    """Whether ``row`` of the map's group is one of its items (not a copy made by hand)."""
    item = _own(row, run)
    return item is not None and item.index is not None and node.map is not None and 0 <= item.index < node.map.n


def _redo_items(tx: Transaction, run: RunRef, row: dict, node: NodeState) -> list[Ended]:
    """Reopen the items of a map that did not succeed; keep the others' results."""
    assert node.map is not None
    items = tx.store.run_group_read(tx.conn, node_key(run.run_id, node.step))
    again = [r for r in items if r["state"] == FINISHED and r["outcome"] != "success" and _item_of(r, run, node)]
    tx.store.run_reopen_steps(tx.conn, [r["id"] for r in again], tx.now)
    fresh = []
    for r in again:
        item = NodeState.load(r.get("workflow"))
        if item is not None:
            item.failures = 0
            fresh.append((r["id"], item.dump()))
    tx.store.run_set_workflow_many(tx.conn, fresh, state=0)
    node.map = MapCount(node.map.n, ok=node.map.n - len(again))
    writes = _Writes(starts=[(row["id"], row["workflow"], node.dump())])
    writes.flush(tx)
    return []
