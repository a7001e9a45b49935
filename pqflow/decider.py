"""The Decider: the handler that serves workflow runs, their steps and their map items.

A worker serving a :class:`Decider` leases three kinds of rows: a run row submitted as a plain
task (``perfectqueue submit RUN etl DATA``), which it takes up as a run; a step row; a map item
row. For a step or item it reads the run and the step's inputs in one read, runs the function,
then writes the outcome and decides what follows in one transaction (:mod:`pqflow.completions`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from typing import Any

import queue_core
from queue_core.api.app import Runner, UnknownTypeError
from queue_core.api.deferred import Deferred
from queue_core.api.queue import Transaction
from queue_core.rules import policy
from queue_core.rules.tracebacks import traceback_text
from queue_core.rules.validate import _error_text, decode_data

from . import lifecycle
from .completions import Completion, ended_by_claim, finish_many, finish_step
from .dag import Workflow, get_workflow, registered_workflows
from .errors import FlowError, StepResultError, UnknownWorkflowError
from .lifecycle import Decision, RunRef
from .rows import NodeState, node_key, step_type

log = logging.getLogger("pqflow")

#: what a step reads before it runs: its run (None: gone, or another instance of it), its inputs,
#: the failed items of upstream maps and the run's input data
StepRead = tuple[RunRef | None, dict, dict, Any]


class StepContext:
    """What a step function gets as its first argument."""

    def __init__(
        self,
        task,
        run_id: str,
        workflow: str,
        step: str,
        data: Any,
        results: dict,
        *,
        index: int | None = None,
        item: Any = None,
        failed_items: dict | None = None,
    ):
        self._task = task
        self.run_id, self.workflow, self.step = run_id, workflow, step
        self.attempt: int = task.attempts
        self.data = data
        self.results = results
        #: a map item's position and value (None outside maps)
        self.index, self.item = index, item
        #: for each upstream map step: the indexes of its items that did not succeed
        self.failed_items: dict[str, list[int]] = failed_items or {}
        self.cancelled = False

    def heartbeat(self) -> None:
        """Extend the step's lease; raises queue_core.CancelRequestedError once the run is cancelled."""
        try:
            self._task.heartbeat()
        except queue_core.CancelRequestedError:
            self.cancelled = True
            raise

    def __repr__(self) -> str:
        item = f" item={self.index}" if self.index is not None else ""
        return f"<StepContext run={self.run_id!r} step={self.step!r}{item} attempt={self.attempt}>"


@functools.lru_cache(maxsize=1024)
def _takes_item(fn) -> bool:
    try:
        return "item" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Decider(Runner):
    """Serves workflow runs and their steps. Subclass it and list ``workflows``.

    Hooks (called after the deciding transaction committed; ``self.queue`` submits anything):
    ``on_step_finished(run_id, step, status)``, ``on_step_failed(run_id, step, error)`` and
    ``on_run_finished(run_id, status)``.
    """

    workflows: list[Workflow] = []
    max_result_size: int | None = None  # default: the queue's max_data_size
    #: successes are written by the worker with its next batch, together (False: one commit each)
    batch_completions: bool = True

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        names: dict[str, Workflow] = {}
        for wf in cls.workflows:
            if not isinstance(wf, Workflow):
                raise FlowError(f"{cls.__name__}.workflows must hold pqflow.Workflow objects, not {wf!r}")
            if wf.name in names and names[wf.name] is not wf:
                raise FlowError(f"{cls.__name__}.workflows has two workflows named {wf.name!r}")
            wf.validate()
            names[wf.name] = wf
        cls._by_name = names

    _by_name: dict[str, Workflow] = {}

    @classmethod
    def served_types(cls) -> frozenset[str]:
        """What its workers lease: each workflow's name (runs) and ``"<workflow>.<step>"`` of each
        step; every registered workflow's when ``workflows`` is empty."""
        flows = cls.workflows or list(registered_workflows().values())
        return frozenset(t for wf in flows for t in (wf.name, *(step_type(wf.name, s) for s in wf.steps)))

    def __init__(self, task):
        super().__init__(task)
        self.ctx: StepContext | None = None

    # hooks
    def on_step_finished(self, run_id: str, step: str, status: str) -> None:
        pass

    def on_step_failed(self, run_id: str, step: str, error: str | None) -> None:
        pass

    def on_run_finished(self, run_id: str, status: str) -> None:
        pass

    def workflow(self, name: str) -> Workflow:
        wf = self._by_name.get(name)
        if wf is None:
            try:
                wf = get_workflow(name)
            except UnknownWorkflowError:
                raise UnknownTypeError(f"no workflow named {name!r} in {type(self).__name__}") from None
        return wf

    def kill(self, reason: BaseException) -> None:
        super().kill(reason)
        if self.ctx is not None:
            self.ctx.cancelled = True

    def run(self) -> None:
        node = NodeState.load(self.task.workflow)
        if node is None:
            self._take_up()
        else:
            self._run_step(node)

    # a run row submitted as a plain task
    def _take_up(self) -> None:
        t = self.task
        try:
            wf = self.workflow(t.type)
        except UnknownTypeError:
            raise FlowError(
                f"task {t.key!r} of type {t.type!r} is neither a run of a workflow of "
                f"{type(self).__name__} nor one of its steps"
            ) from None
        self.queue.transaction(lambda tx: lifecycle.adopt(tx, t, wf.snapshot()), what="start run")
        t.done = True  # the row is now its run's pending row
        log.info("run started run=%s workflow=%s", t.key, wf.name)

    # a step or a map item
    def _run_step(self, node: NodeState) -> None:
        t = self.task
        run, inputs, failed_items, data = self._read(node)
        if run is None or not lifecycle.is_own_row(run, t.key, node):
            return self._drop_foreign(node)
        spec = run.dag["steps"].get(node.step)
        fn = self._function(run.dag["workflow"], node.step)
        refusal = self._refusal(run, node, spec, fn)
        if refusal is not None:
            return self._end(run, node, *refusal)
        item = t.data.get("item") if node.index is not None else None
        self.ctx = StepContext(
            t,
            run.run_id,
            run.dag["workflow"],
            node.step,
            data,
            inputs,
            index=node.index,
            item=item,
            failed_items=failed_items,
        )
        kwargs = {p: inputs.get(p) for p in spec.get("inputs", [])}
        if node.index is not None and _takes_item(fn):
            kwargs["item"] = item
        try:
            result = fn(self.ctx, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a step's error is its outcome
            return self._failed(run, node, spec, exc)
        if policy.ends_cancelled(self.ctx.cancelled or t.cancel_requested):
            return self._end(run, node, "cancelled")
        try:
            result = self._stored(result)
        except StepResultError as exc:
            return self._end(run, node, "failed", error=str(exc))
        return self._end(run, node, "succeeded", result=result)

    def _refusal(self, run: RunRef, node: NodeState, spec: dict | None, fn) -> tuple | None:
        """Why the step must end without running its function (None: run it)."""
        t = self.task
        if policy.ends_cancelled(run.state.cancel or t.cancel_requested):  # before it ran: the run's or its own
            return ("cancelled",)
        if spec is None:
            return ("failed", f"step {node.step!r} is not in the run's DAG snapshot")
        if fn is None:
            return (
                "failed",
                f"step {node.step!r} of workflow {run.dag['workflow']!r} no longer exists in the worker's code",
            )
        crashed = policy.crash_refusal(t.attempts, node.failures)
        return None if crashed is None else ("failed", crashed)

    def _function(self, workflow: str, step: str):
        try:
            return self.workflow(workflow).steps[step].fn
        except (UnknownTypeError, KeyError):
            return None

    def _read(self, node: NodeState) -> StepRead:
        """The run and the step's inputs (parents' results): read with the worker's batch by
        :meth:`prefetch`, else in one read transaction of its own."""
        if self.task.prefetched is not None:
            return self.task.prefetched
        return self.queue.transaction(lambda tx: _read_all(tx, [(self.task, node)])[0], what="read run", write=False)

    @classmethod
    def prefetch(cls, queue: queue_core.Queue, tasks: list) -> None:
        """Read what a batch of steps needs (their runs, their parents' results) in one read."""
        steps = [(t, n) for t in tasks if (n := NodeState.load(t.workflow)) is not None]
        if not steps:
            return
        found = queue.transaction(lambda tx: _read_all(tx, steps), what="read runs", write=False)
        for (t, _), read in zip(steps, found, strict=True):
            t.prefetched = read

    @classmethod
    def ended_by_claim(cls, tx: queue_core.Transaction, rows: list[dict]) -> None:
        """Steps a claim ended instead of leasing (a row set aside, out of attempts): their runs
        decide what follows in the claim's commit, as if the steps had failed."""
        ended_by_claim(tx, rows)

    def _failed(self, run: RunRef, node: NodeState, spec: dict, exc: Exception) -> None:
        t = self.task
        if policy.ends_cancelled((self.ctx is not None and self.ctx.cancelled) or t.cancel_requested):
            return self._end(run, node, "cancelled")
        verdict = policy.step_after_error(
            node.failures + 1, int(spec["retries"]), policy.Backoff(float(spec["retry_wait"])), self.queue.rng, exc
        )
        error, trace = _error_text(exc), traceback_text(exc)
        if isinstance(verdict, policy.Retry):
            self.queue.transaction(
                lambda tx: lifecycle.retry_step(tx, t, node, tx.now + verdict.wait, error, trace), what="retry step"
            )
            t.done = True
            return self._log_error(logging.WARNING, "step retry", run, node, trace or error)
        self._log_error(logging.ERROR, "step failed", run, node, trace or error)
        return self._end(run, node, "failed", error=error, traceback=trace)

    def _log_error(self, level: int, what: str, run: RunRef, node: NodeState, text: str) -> None:
        """The error of an attempt of a step, once, with its traceback (capped)."""
        item, attempt = _item(node), self.task.attempts
        log.log(level, "%s run=%s step=%s%s attempt=%d: %s", what, run.run_id, node.step, item, attempt, text)

    def _end(
        self,
        run: RunRef,
        node: NodeState,
        status: str,
        error: str | None = None,
        result: Any = None,
        traceback: str | None = None,
    ) -> None:
        t = self.task
        done = Completion(t, run, node, status, result, error, traceback=traceback)
        if status == "succeeded" and self.batch_completions:
            # written by the worker with its next batch (one commit for many completions)
            t.deferred = Deferred(_write_completions, done, lambda: self._after(done))
            return
        done.decision = self.queue.transaction(lambda tx: finish_step(tx, done), what="finish step")
        t.done = True
        self._after(done)

    def _after(self, done: Completion) -> None:
        """Log and hooks: the step that ran (a map: when its last item ended), then the run's end."""
        run_id, node, decision = done.run.run_id, done.node, done.decision
        log.info("step %s run=%s step=%s%s", done.status, run_id, node.step, _item(node))
        if node.index is None:
            self._hook(self.on_step_finished, run_id, node.step, done.status)
            if done.status == "failed":
                self._hook(self.on_step_failed, run_id, node.step, done.error)
        else:
            for e in decision.ended if decision else ():
                if e.step == node.step:
                    self._hook(self.on_step_finished, run_id, e.step, e.status)
        if decision is not None and decision.run_status is not None:
            log.info("run finished run=%s status=%s", run_id, decision.run_status)
            self._hook(self.on_run_finished, run_id, decision.run_status)

    def _drop_foreign(self, node: NodeState) -> None:
        """A row that is not a step of a current run (left by an earlier run with the same id, of
        a run that is gone, or written by hand): ended alone, without touching any run."""
        t = self.task
        err = f"not a step of a current run of {node.run!r}: not run"
        keep = self.queue.config["retention_time"]  # not part of any run: the queue's own retention
        self.queue.transaction(
            lambda tx: tx.store.run_finish_held(
                tx.conn, t.row_id, t.lease_token, "cancelled", tx.now, error=err, result=None, purge_at=tx.now + keep
            ),
            what="finish step",
        )
        t.done = True
        log.warning("step dropped task=%s: %s", t.key, err)

    def _stored(self, result: Any) -> Any:
        """The result as it is stored and read back (JSON: tuples become lists, keys strings);
        StepResultError when it cannot be stored."""
        limit = self.max_result_size or self.queue.config["max_data_size"]
        try:
            text = json.dumps(result, allow_nan=False)
            size = len(text.encode("utf-8"))
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
            raise StepResultError(f"step result is not JSON-serialisable: {exc}") from None
        if size > limit:
            raise StepResultError(f"step result is {len(text)} bytes as JSON; the limit is {limit}")
        return json.loads(text)

    def _hook(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a hook must not undo a committed decision
            log.exception("decider hook %s raised", fn.__name__)


def _write_completions(tx: Transaction, tasks: list) -> list:
    """The worker's batch writer of step completions: all of them, decided together."""
    done = [t.deferred.payload for t in tasks]
    decisions, lost = finish_many(tx, done)
    seen: set[str] = set()
    for c in done:  # the run's end is reported once, with the first completion of the run
        d = decisions.get(c.run.run_id)
        c.decision = d if c.run.run_id not in seen else Decision(d.ended, None) if d else None
        seen.add(c.run.run_id)
    lost_ids = {c.task.row_id for c in lost}
    return [t for t in tasks if t.row_id in lost_ids]


def _read_all(tx: Transaction, steps: list[tuple[Any, NodeState]]) -> list[StepRead]:
    """For each (task, node): its run, its inputs, the failed items of upstream maps, the run's
    input data; (None, {}, {}, None) when its run is gone or is another instance."""
    rows = tx.store.run_read(tx.conn, sorted({n.run for _, n in steps}), data=True)
    refs = {r: lifecycle.run_ref(tx, r, row) for r, row in rows.items()}
    keys = sorted(
        {
            node_key(n.run, p)
            for _, n in steps
            if (run := refs.get(n.run)) is not None and run.iid == n.iid
            for p in _parents(run, n.step)
            if not run.dag["steps"][p].get("map")
        }
    )
    parents = tx.store.run_read(tx.conn, keys, result=True) if keys else {}
    out: list[StepRead] = []
    for _, n in steps:
        run = refs.get(n.run)
        if run is None or run.iid != n.iid:
            out.append((None, {}, {}, None))
            continue
        inputs, failed = _inputs(tx, run, _parents(run, n.step), parents)
        out.append((run, inputs, failed, decode_data(rows[n.run]["data"])))
    return out


def _parents(run: RunRef, step: str) -> list[str]:
    """The steps whose results a step receives (parameters and ctx.results); not the list a
    map step maps over (each item has its own element)."""
    spec = run.dag["steps"].get(step) or {}
    names = dict.fromkeys([*spec.get("inputs", []), *spec.get("after", [])])
    return [p for p in names if p != spec.get("map")]


def _inputs(tx: Transaction, run: RunRef, names: list[str], rows: dict) -> tuple[dict, dict]:
    """The results of the named upstream steps, and the failed items of upstream maps."""
    inputs, failed = {}, {}
    for n in names:
        row = rows.get(node_key(run.run_id, n), {})
        inputs[n], bad = lifecycle.results_of(tx, run, n, row)
        if bad:
            failed[n] = bad
    return inputs, failed


def _item(node: NodeState) -> str:
    return f" item={node.index}" if node.index is not None else ""
