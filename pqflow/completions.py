"""What follows when steps end: the decision after a completion, for many runs at once.

A completion reads and writes only what it affects: the row of its map (a count of the items
still open), the rows of its successors (a count of their parents that ended), and its run row
(a count of the steps still open). Completions that a worker settles together — steps of many
runs, items of one map — are decided together: each phase reads the rows it needs across the
whole batch in one statement and writes them back in one statement per kind of change, so a
batch costs a few statements however many completions it holds.

Phases, each locking its rows in key order: maps (count items), successors (count parents;
submit, skip or wait; level by level while skips cascade), runs (count steps; end the run).
The run row is always locked last, so completions of one run never deadlock one another; they
serialise only where they meet (two parents of a join, two items of a map, one run row).

Each successor is decided by :func:`pqflow.decision.verdict` from the counts of its parents, the
rule :func:`pqflow.decision.decide` folds over a whole run for ``explain()``: one decision, which
tests/workflow_faults/test_completions_agree_with_decide.py checks against whole runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from queue_core.api.queue import Transaction
from queue_core.errors import ValidationError
from queue_core.rules.task_states import PENDING
from queue_core.rules.validate import encode_data

from . import decision
from .errors import FlowError, UnknownRunError
from .lifecycle import (
    DEFAULT_RETENTION,
    NO_RESULT,
    NOT_ENDED,
    Decision,
    Ended,
    RunRef,
    is_own_row,
    item_rows,
    load_ref,
    mapped_list,
)
from .rows import OUTCOME_OF, MapCount, NodeState, RunState, dumps, node_key

log = logging.getLogger("pqflow")
_STARTED = "a map was started by another decision meanwhile (its row changed since it was read)"


@dataclass
class _Writes:
    """The changes one phase makes, written with one statement per kind."""

    promote: list[tuple[int, str]] = field(default_factory=list)
    pending: list[tuple[int, str]] = field(default_factory=list)
    close: list[dict] = field(default_factory=list)
    items: list[dict] = field(default_factory=list)
    #: maps that start: (row id, bookkeeping as read, bookkeeping with the item count)
    starts: list[tuple[int, str, str]] = field(default_factory=list)

    def close_row(self, row: dict, outcome: str, node: NodeState, error: str | None = None) -> None:
        self.close.append({"id": row["id"], "outcome": outcome, "workflow": node.dump(), "error": error})

    def flush(self, tx: Transaction) -> None:
        if tx.store.run_start_maps(tx.conn, self.starts) != len(self.starts):
            raise FlowError(_STARTED)
        if self.items:
            tx.submit_rows(self.items)
        tx.store.run_promote(tx.conn, self.promote, tx.now)
        tx.store.run_set_workflow_many(tx.conn, self.pending)
        tx.store.run_close_many(tx.conn, self.close, tx.now)


def what_follows(tx: Transaction, run: RunRef, ended: list[Ended]) -> Decision:
    """Decide what follows rows of one run that ended (already written by the caller)."""
    return what_follows_many(tx, [(run, ended)])[run.run_id]


def what_follows_many(tx: Transaction, batch: Iterable[tuple[RunRef, list[Ended]]]) -> dict[str, Decision]:
    """Decide what follows rows of several runs that ended (already written by the caller)."""
    runs: dict[str, RunRef] = {}
    ended: dict[str, list[Ended]] = {}
    for run, events in batch:
        runs.setdefault(run.run_id, run)
        ended.setdefault(run.run_id, []).extend(events)
    runs = _with_cancel_flags(tx, runs)
    nodes = _close_maps(tx, runs, {r: [e for e in es if e.index is not None] for r, es in ended.items()})
    for r, es in ended.items():
        nodes.setdefault(r, []).extend(e for e in es if e.index is None)
    closed = {r: list(es) for r, es in nodes.items()}
    while any(nodes.values()):
        nodes = _advance(tx, runs, nodes)
        for r, es in nodes.items():
            closed[r].extend(es)
    ends = _count_runs(tx, runs, closed)
    return {r: Decision(closed.get(r, []), ends.get(r)) for r in runs}


def _with_cancel_flags(tx: Transaction, runs: dict[str, RunRef]) -> dict[str, RunRef]:
    """The runs as read before their steps ran, with their cancel flags as they are now: a run
    cancelled meanwhile submits nothing new."""
    rows = tx.store.run_read(tx.conn, list(runs))
    out = {}
    for run_id, run in runs.items():
        now = RunState.load(rows[run_id]["workflow"]) if run_id in rows else None
        cancel = now is not None and now.iid == run.iid and now.cancel
        out[run_id] = (
            run
            if cancel == run.state.cancel
            else dataclasses.replace(run, state=dataclasses.replace(run.state, cancel=cancel))
        )
    return out


# -- maps ------------------------------------------------------------------------------------
def _close_maps(tx: Transaction, runs: dict[str, RunRef], items: dict[str, list[Ended]]) -> dict[str, list[Ended]]:
    """Count ended items into their map rows; a map with no item open ends."""
    wanted: dict[str, tuple[RunRef, list[Ended]]] = {}
    for run_id, events in items.items():
        for e in events:
            wanted.setdefault(node_key(run_id, e.step), (runs[run_id], []))[1].append(e)
    out: dict[str, list[Ended]] = {}
    if not wanted:
        return out
    rows = tx.store.run_read(tx.conn, list(wanted), lock=True)
    writes = _Writes()
    for key in sorted(wanted):
        run, events = wanted[key]
        row = rows.get(key)
        node = _own(row, run)
        if row is None or node is None or node.map is None or row["state"] != PENDING:
            continue
        for e in events:
            if isinstance(e.index, int) and 0 <= e.index < node.map.n:  # not a row added by hand
                _count_item(node.map, e.status)
        out.setdefault(run.run_id, []).extend(_end_map_if_done(run, row, node, writes))
    writes.flush(tx)
    return out


def _count_item(count: MapCount, status: str) -> None:
    if status == "succeeded":
        count.ok += 1
    elif status == "failed":
        count.failed += 1
    else:
        count.cancelled += 1


def _end_map_if_done(run: RunRef, row: dict, node: NodeState, writes: _Writes) -> list[Ended]:
    assert node.map is not None
    if node.map.open > 0:
        writes.pending.append((row["id"], node.dump()))
        return []
    spec = run.dag["steps"][node.step]
    status = decision.map_status(
        node.map.failed, node.map.cancelled, allow_failed_items=bool(spec.get("allow_failed_items"))
    )
    error = None if status != "failed" else f"{node.map.failed} of {node.map.n} items failed"
    writes.close_row(row, OUTCOME_OF[status], node, error)
    return [Ended(node.step, status)]


def _own(row: dict | None, run: RunRef) -> NodeState | None:
    """The row's bookkeeping when the row is one of this run instance's own steps, maps or items
    (else None: a row of an earlier instance, or a copy under another key, decides nothing)."""
    if row is None:
        return None
    node = NodeState.load(row.get("workflow"))
    if node is None or node.iid != run.iid or not is_own_row(run, row["key"], node):
        return None
    return node


# -- successors ----------------------------------------------------------------------------------
def _advance(tx: Transaction, runs: dict[str, RunRef], ended: dict[str, list[Ended]]) -> dict[str, list[Ended]]:
    """Count ended steps into their successors; submit or skip those now decided."""
    wanted: dict[str, tuple[RunRef, str, list[Ended]]] = {}
    for run_id, events in ended.items():
        run = runs[run_id]
        for e in events:
            for child in run.children[e.step]:
                wanted.setdefault(node_key(run_id, child), (run, child, []))[2].append(e)
    out: dict[str, list[Ended]] = {r: [] for r in runs}
    if not wanted:
        return out
    rows = tx.store.run_read(tx.conn, list(wanted), lock=True)
    writes = _Writes()
    for key in sorted(wanted):
        run, child, parents = wanted[key]
        row = rows.get(key)
        node = _own(row, run)
        if row is None or node is None:
            continue  # a foreign row
        for e in parents:
            node.wait = _tally(node.wait, e.status)
        known = {e.step: e for e in ended[run.run_id]}
        out[run.run_id] += _decide_successor(tx, run, row, node, known, writes)
    writes.flush(tx)
    return out


def _decide_successor(
    tx: Transaction, run: RunRef, row: dict, node: NodeState, known: dict[str, Ended], writes: _Writes
) -> list[Ended]:
    verdict = _verdict(run, row, node)
    if verdict == decision.KEEP:  # decided once: a later parent is only counted (while still pending)
        writes.pending += [(row["id"], node.dump())] if row["state"] == PENDING else []
        return []
    if verdict == decision.SUBMIT and run.dag["steps"][node.step].get("map"):
        items, why = mapped_list(tx, run, run.dag["steps"][node.step]["map"], known)
        if why == NOT_ENDED:  # decided again when the step it maps over ends (it is a parent)
            writes.pending.append((row["id"], node.dump()))
            return []
        return start_map(tx, run, row, node, items, why, writes)
    if verdict == decision.SUBMIT:
        writes.promote.append((row["id"], node.dump()))
    elif verdict == decision.SKIP:
        writes.close_row(row, "skipped", node)
        return [Ended(node.step, "skipped")]
    else:
        writes.pending.append((row["id"], node.dump()))
    return []


def _tally(wait: list[int], status: str) -> list[int]:
    ok, failed, done = wait
    return [ok + (status == "succeeded"), failed + (status == "failed"), done + 1]


def _verdict(run: RunRef, row: dict, node: NodeState) -> str:
    spec = run.dag["steps"][node.step]
    return decision.verdict(
        spec["trigger"], len(spec["after"]), *node.wait, started=started(row, node), cancel=run.state.cancel
    )


def started(row: dict, node: NodeState) -> bool:
    """Whether a step's row was decided already: submitted (or ended), or a map whose items exist."""
    return row["state"] != PENDING or node.map is not None


def start_map(
    tx: Transaction, run: RunRef, row: dict, node: NodeState, items: list | None, why: str, writes: _Writes
) -> list[Ended]:
    """Submit one task per item of the list (or end the map at once: no list, an empty one, an
    item that cannot be a task's data, or item keys another row already holds)."""
    if items:
        rows = item_rows(run, node.step, run.dag["steps"][node.step], items)
        why = _unsubmittable(tx, run, rows)
        items = None if why else items
    if items is None:
        status = "skipped" if why.startswith("skipped") else "failed"
        writes.close_row(row, OUTCOME_OF[status], node, why)
        return [Ended(node.step, status)]
    node.map = MapCount(len(items))
    if not items:
        writes.close_row(row, "success", node)
        return [Ended(node.step, "succeeded", result=[])]
    writes.items += rows
    writes.starts.append((row["id"], row["workflow"], node.dump()))
    return []


def _unsubmittable(tx: Transaction, run: RunRef, rows: list[dict]) -> str:
    """Why these item rows cannot be inserted as they are ('' when they can). FlowError when
    they exist already as this map's items: it started, and is never started again."""
    limit = tx.queue.config["max_data_size"]
    for r in rows:
        try:
            encode_data(r["data"], limit)
        except ValidationError as exc:
            return f"item {r['key'].rsplit('#', 1)[1]} cannot be a task's data: {exc}"
    taken = tx.store.run_read(tx.conn, [r["key"] for r in rows])
    if any(_own(row, run) is not None for row in taken.values()):
        raise FlowError(_STARTED)
    if taken:
        return f"item keys are held by other rows: {', '.join(sorted(taken)[:3])}"
    return ""


# -- runs ---------------------------------------------------------------------------------------
def _count_runs(tx: Transaction, runs: dict[str, RunRef], closed: dict[str, list[Ended]]) -> dict[str, str]:
    """Count steps that ended into their run rows; the last one of a run ends it."""
    changed = [r for r, es in closed.items() if es]
    if not changed:
        return {}
    rows = tx.store.run_read(tx.conn, changed, lock=True)
    pending: list[tuple[int, RunState, RunRef]] = []
    done: list[tuple[int, RunState, RunRef]] = []
    ends, writes, ended = {}, _Writes(), []
    for run_id in sorted(changed):
        run, row = runs[run_id], rows.get(run_id)
        state = RunState.load(row.get("workflow"), run.dag) if row else None
        if not row or state is None or state.iid != run.iid or row["state"] != PENDING:
            raise FlowError(f"run {run_id!r} changed under a decision (row replaced or ended)")
        _count_steps(state, closed[run_id])
        (pending if state.open > 0 else done).append((row["id"], state, run))
    still_open = _open_runs(tx, [run for _, _, run in done])
    for row_id, state, run in done:
        if run.run_id in still_open:
            pending.append((row_id, state, run))  # its last open row's end ends it
        else:
            ends[run.run_id], purge_at = _end_run(tx, row_id, state, writes)
            ended.append((run, purge_at))
    tx.store.run_set_workflow_many(tx.conn, [(row_id, state.dump()) for row_id, state, _ in pending])
    writes.flush(tx)
    _keep_groups(tx, ended)
    return ends


def _open_runs(tx: Transaction, runs: list[RunRef]) -> set[str]:
    """The ids of ``runs`` (each counted done) with a step or item row still open: a run ends only
    when none is (a count that says otherwise was edited by hand, or is wrong; the run stays open
    and ends with its last row, and the other runs decided with it are not held back)."""
    groups = {g: run for run in runs for g in run.groups()}
    if not groups:
        return set()
    found = tx.store.run_open_rows(tx.conn, list(groups))
    if len(found) >= 20:  # the first rows by key may all be rows that are not the runs' own
        found = tx.store.run_open_rows(tx.conn, list(groups), limit=None)
    open_ = [r for r in found if _own(r, groups[r["grp"]]) is not None]
    for r in open_:
        log.error(
            "run %r counted done while its row %s is open: it ends with its last row", groups[r["grp"]].run_id, r["key"]
        )
    return {groups[r["grp"]].run_id for r in open_}


def _count_steps(state: RunState, closed: list[Ended]) -> None:
    state.open -= len(closed)
    state.succeeded += sum(e.status == "succeeded" for e in closed)
    state.failed += sum(e.status == "failed" for e in closed)
    state.cancelled += sum(e.status == "cancelled" for e in closed)


def _end_run(tx: Transaction, row_id: int, state: RunState, writes: _Writes) -> tuple[str, float]:
    status = decision.run_status(cancel=state.cancel, failed=state.failed, cancelled=state.cancelled)
    state.status, state.finished_at = status, tx.now
    purge_at = tx.now + float(state.dag.get("retention", DEFAULT_RETENTION))
    writes.close.append(
        {"id": row_id, "outcome": OUTCOME_OF[status], "workflow": state.dump(), "error": None, "purge_at": purge_at}
    )
    return status, purge_at


def _keep_groups(tx: Transaction, ended: list[tuple[RunRef, float]]) -> None:
    """The rows of runs that ended are purged with them, after their workflow's retention."""
    by_time: dict[float, list[str]] = {}
    for run, purge_at in ended:
        by_time.setdefault(purge_at, []).extend(run.groups())
    for purge_at, groups in by_time.items():
        tx.store.run_group_keep(tx.conn, groups, purge_at)


# -- steps that ended -----------------------------------------------------------------------------
@dataclass
class Completion:
    """A step (or item) its holder ran to an end, waiting to be written with its decision."""

    task: Any  # the AcquiredTask
    run: RunRef
    node: NodeState
    status: str
    result: Any = None
    error: str | None = None
    decision: Decision | None = None  # what its writing decided (after commit)
    traceback: str | None = None  # of the error it failed with (kept with the attempt)

    def ended(self) -> Ended:
        ok = self.status == "succeeded"
        return Ended(self.node.step, self.status, self.node.index, self.result if ok else NO_RESULT)

    def entry(self) -> dict:
        ok = self.status == "succeeded"
        return {
            "id": self.task.row_id,
            "token": self.task.lease_token,
            "outcome": OUTCOME_OF[self.status],
            "error": self.error,
            "result": dumps(self.result) if ok else None,
        }


def finish_many(tx: Transaction, done: list[Completion]) -> tuple[dict[str, Decision], list[Completion]]:
    """Write how steps ended (fenced: a step whose lease was lost is left alone) and decide what
    follows, for all of them together. Returns the decisions by run and the completions lost."""
    # one end per row: a task listed twice is one completion, written and counted once
    firsts: dict[int, Completion] = {}
    for c in done:
        firsts.setdefault(c.task.row_id, c)
    once = list(firsts.values())
    lost, already = tx.store.run_finish_held_many(tx.conn, [c.entry() for c in once], tx.now, retried=tx.retried)
    skip = set(lost) | set(already)  # already: written and decided by an earlier, committed attempt
    decisions = what_follows_many(tx, [(c.run, [c.ended()]) for c in once if c.task.row_id not in skip])
    return decisions, [c for c in done if c.task.row_id in set(lost)]


def finish_step(tx: Transaction, done: Completion) -> Decision:
    """The holder of one step writes how it ended and decides what follows (PreemptedError when
    its lease was lost)."""
    c = done
    if not tx.store.run_finish_held(
        tx.conn,
        c.task.row_id,
        c.task.lease_token,
        OUTCOME_OF[c.status],
        tx.now,
        error=c.error,
        result=c.entry()["result"],
        traceback=c.traceback,
    ):
        return Decision([], None)  # an earlier, committed attempt of this transaction wrote and decided it
    return what_follows(tx, c.run, [c.ended()])


def ended_by_claim(tx: Transaction, rows: list[dict]) -> dict[str, Decision]:
    """Decide what follows the rows of steps and map items that a claim ended instead of leasing
    them (set aside for a value pq never writes, out of attempts; each as it ended): failed (or
    cancelled), as if the step had ended so, in the claim's transaction. A run's own row (its end
    is the run's) is left; so is, logged, a row whose bookkeeping cannot be read, one of a run
    that cannot be read and one that is not its run's own step (a copy under another key). Each
    run decides in a savepoint of its own: what one raises leaves the others decided."""
    refs: dict[str, RunRef | None] = {}
    by_run: dict[str, tuple[RunRef, list[Ended]]] = {}
    for row in rows:
        node = NodeState.load(row.get("workflow"), cached=False)
        if node is None:
            if RunState.load(row.get("workflow")) is None:
                log.error("the claim ended row %r, whose step bookkeeping cannot be read: no run is told", row["key"])
            continue
        if node.run not in refs:
            refs[node.run] = _known_ref(tx, node.run)
        run = refs[node.run]
        if run is None or _own(row, run) is None:
            log.error("the claim ended row %r, not a step of a readable run: run %r is not told", row["key"], node.run)
            continue
        status = "cancelled" if row.get("outcome") == "cancelled" else "failed"
        by_run.setdefault(run.run_id, (run, []))[1].append(Ended(node.step, status, node.index))
    decided = {run_id: _decide_alone(tx, run, events) for run_id, (run, events) in by_run.items()}
    return {run_id: d for run_id, d in decided.items() if d is not None}


def _decide_alone(tx: Transaction, run: RunRef, ended: list[Ended]) -> Decision | None:
    """What follows ``ended`` (rows the claim ended) in ``run``, in a savepoint; None, logged,
    when it raised (a database error propagates: the claim is retried whole)."""
    decided: list[Decision] = []
    error = tx.isolated(lambda: decided.append(what_follows(tx, run, ended)))
    if error is not None:
        log.error("run %r could not decide what follows the rows the claim ended: %s", run.run_id, error)
        return None
    return decided[0]


def _known_ref(tx: Transaction, run_id: str) -> RunRef | None:
    """The run, or None when it cannot be read (gone, not taken up, a snapshot edited by hand)."""
    try:
        return load_ref(tx, run_id)
    except (UnknownRunError, FlowError):
        return None


def cancel_open_rows(tx: Transaction, run_id: str) -> Decision:
    """Second transaction of a cancel: cancel waiting rows, flag running ones, decide."""
    run = load_ref(tx, run_id)
    ended = []
    for group in run.groups():
        for row in tx.store.run_cancel_waiting(tx.conn, group, tx.now):
            node = _own(row, run)
            if node is not None:
                ended.append(Ended(node.step, "cancelled", node.index))
    return what_follows(tx, run, ended)


__all__ = [
    "Completion",
    "cancel_open_rows",
    "ended_by_claim",
    "finish_many",
    "finish_step",
    "what_follows",
    "what_follows_many",
    "start_map",
]
