"""Running workflows on queue rows: the Decider, runs, and the transactions that keep them right.

Storage (only rows of the queue table):

* the **run row**: the queue task that started the run — key = run id, type = workflow name.
  Its data holds ``{"__pqflow__": {input, dag snapshot, status, cancel, ...}}``. While the run is
  unfinished it stays a live task, re-armed every ``sweep_interval`` as a safety-net sweep; it is
  finished when the run ends, with the workflow's retention.
* one **step row** per submitted step: key ``"<run id>#<step>"``, type ``"<workflow>.<step>"``,
  group = run id. Its data holds the step's result once it succeeded.

Every decision about a run (a step finished, failed for good, the run was cancelled or retried,
the sweep) happens in one transaction that first locks the run row. Decisions are therefore
serialised per run — two parents of a join finishing at the same moment are decided one after
the other, and the second sees the first — and the completion of a step and the submission of
its successors commit together, so a worker killed in between loses nothing. Step keys are
deterministic and inserted only if absent, so nothing is ever submitted twice.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field, replace
from typing import Any

import queue_core
from queue_core.app import Runner, UnknownTypeError
from queue_core.queue import Transaction

from . import logic
from .dag import Workflow, get_workflow
from .errors import FlowError, StepResultError, UnknownRunError, UnknownStepError, UnknownWorkflowError

log = logging.getLogger("pqflow")

MARK = "__pqflow__"
SEP = "#"
KEEP = 1e12  # retention of step rows while their run is unfinished (effectively never purged)
SWEEP_INTERVAL = 60.0
#: longest run id: step keys "<run id>#<step>" must fit the 255-character key limit (step names
#: have at most 64 characters)
MAX_RUN_ID = 255 - len(SEP) - 64
#: extra acquisitions a step gets when its worker dies (lease expiry) on top of its retries: a
#: crash must not use up the retry budget, but a step that kills every worker must end
CRASH_ALLOWANCE = 5


def step_key(run_id: str, step: str) -> str:
    return f"{run_id}{SEP}{step}"


def step_type(workflow: str, step: str) -> str:
    return f"{workflow}.{step}"


def _status_of(meta: queue_core.TaskMetadata) -> str:
    if meta.status != "finished":
        return meta.status  # waiting / running (a retrying step is waiting: nothing downstream moves)
    return {"success": "succeeded", "failure": "failed", "cancelled": "cancelled"}[meta.outcome or "failure"]


def _state(meta: queue_core.TaskMetadata | None) -> dict | None:
    if meta is None:
        return None
    st = meta.data.get(MARK)
    return st if isinstance(st, dict) and "dag" in st else None


# -- the view of a run ------------------------------------------------------------------
@dataclass(frozen=True)
class StepInfo:
    name: str
    status: str
    attempts: int = 0
    result: Any = None
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None


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

    def cancel(self, now: float | None = None) -> Run:
        return cancel_run(self.queue, self.run_id, now=now)

    def retry(self, now: float | None = None) -> Run:
        return retry_run(self.queue, self.run_id, now=now)

    def refresh(self) -> Run:
        return _load(self.queue, self.run_id)

    def why(self, step: str) -> str:
        if self.snapshot is None:
            return f"run {self.run_id!r} has not been picked up by a decider yet"
        try:
            return logic.explain(self.snapshot, self._submitted(), step, cancel_requested=self.cancel_requested)
        except ValueError as exc:
            raise UnknownStepError(str(exc)) from None

    def _submitted(self) -> dict[str, str]:
        return {n: s.status for n, s in self.steps.items() if s.status not in ("pending", "skipped")}

    @property
    def statuses(self) -> dict[str, str]:
        return {n: s.status for n, s in self.steps.items()}


def _open(url: str | None, table: str | None) -> queue_core.Queue:
    return queue_core.open(url, table or "pq_tasks")


def get_run(run_id: str, *, url: str | None = None, table: str | None = None,
            queue: queue_core.Queue | None = None) -> Run:
    """Read a run from the database alone."""
    return _load(queue or _open(url, table), run_id)


def _check_run_id(run_id: Any) -> str:
    from queue_core.queue import check_name

    return check_name(run_id, "run id")


def _load(q: queue_core.Queue, run_id: str) -> Run:
    _check_run_id(run_id)

    def read(tx: Transaction):
        run = tx.get(run_id)
        if run is None:
            raise UnknownRunError(f"run {run_id!r} not found")
        rows = [m for m in tx.group(run_id, with_data=True) if m.key.startswith(run_id + SEP)]
        return run, rows

    run, rows = q.transaction(read, what="read run")
    st = _state(run)
    if st is None:
        raw = run.data.get(MARK, {}) if isinstance(run.data.get(MARK), dict) else {}
        status = "cancelled" if run.outcome == "cancelled" else ("failed" if run.finished else "running")
        return Run(run_id, run.type, status, {}, input=raw.get("input", run.data), created_at=run.created_at,
                   queue=q)
    snap = st["dag"]
    by_step = {m.key[len(run_id) + 1:]: m for m in rows}
    submitted = {n: _status_of(m) for n, m in by_step.items() if n in snap["steps"]}
    decision = logic.decide(snap, submitted, cancel_requested=bool(st.get("cancel")))
    steps = {}
    for name in snap["order"]:
        m = by_step.get(name)
        if m is None:
            steps[name] = StepInfo(name, decision.statuses[name])
        else:
            res = (m.data.get(MARK) or {}).get("result")
            steps[name] = StepInfo(name, decision.statuses[name], m.attempts, res, m.error, m.started_at,
                                   m.finished_at)
    return Run(run_id, snap["workflow"], st.get("status", "running"), steps, input=st.get("input"),
               snapshot=snap, created_at=run.created_at, finished_at=st.get("finished_at"),
               cancel_requested=bool(st.get("cancel")), queue=q)


# -- starting ---------------------------------------------------------------------------
def start_run(workflow: Workflow, run_id: str, data: Any = None, *, url: str | None = None,
              table: str | None = None, now: float | None = None,
              queue: queue_core.Queue | None = None) -> Run:
    """Submit the run's task (key = run id, type = workflow name) with the DAG snapshot."""
    _check_run_id(run_id)
    if SEP in run_id:
        raise queue_core.ValidationError(f"run id must not contain {SEP!r}")
    if len(run_id) > MAX_RUN_ID:
        raise queue_core.ValidationError(f"run id is {len(run_id)} characters long; the limit is {MAX_RUN_ID} "
                                         "(step keys add '#<step>')")
    q = queue or _open(url, table)
    state = {"input": data, "dag": workflow.snapshot(), "status": "running", "cancel": False}
    q.submit(run_id, workflow.name, {MARK: state}, priority=workflow.priority, now=now)
    return Run(run_id, workflow.name, "running", {}, input=data, snapshot=state["dag"], queue=q)


# -- decisions (always inside a transaction that locked the run row first) --------------------
def _evaluate(tx: Transaction, run_id: str, st: dict,
              group: list[queue_core.TaskMetadata] | None = None) -> logic.Decision:
    """Submit whatever became ready; finish the run when every step is terminal.

    ``group``: the run's rows as this transaction already read them (else they are read).
    """
    snap = st["dag"]
    rows = [m for m in (tx.group(run_id) if group is None else group) if m.key.startswith(run_id + SEP)]
    submitted = {m.key[len(run_id) + 1:]: _status_of(m) for m in rows}
    submitted = {k: v for k, v in submitted.items() if k in snap["steps"]}
    decision = logic.decide(snap, submitted, cancel_requested=bool(st.get("cancel")))
    items = []
    for name in decision.submit:
        spec = snap["steps"][name]
        items.append({"key": step_key(run_id, name), "type": step_type(snap["workflow"], name),
                      "data": {MARK: {"run": run_id, "workflow": snap["workflow"], "step": name}},
                      "group": run_id, "priority": snap.get("priority", 0),
                      "max_attempts": int(spec["retries"]) + 1 + CRASH_ALLOWANCE})
    if items:
        tx.submit_many(items)
    if decision.run_status != "running":
        _complete(tx, run_id, st, decision.run_status)
    return decision


def _complete(tx: Transaction, run_id: str, st: dict, status: str) -> None:
    st.update(status=status, finished_at=tx.now)
    tx.update_data(run_id, {MARK: st})
    outcome = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled"}[status]
    retention = float(st["dag"].get("retention", 7 * 86400))
    tx.finish_key(run_id, outcome, retention_time=retention)
    tx.keep_group(run_id, retention)
    tx.on_commit(lambda: log.info("run finished run=%s workflow=%s status=%s", run_id, st["dag"]["workflow"], status))


def _lock_state(tx: Transaction, run_id: str) -> tuple[queue_core.TaskMetadata, dict]:
    run = tx.lock(run_id)
    if run is None:
        raise UnknownRunError(f"run {run_id!r} not found")
    st = _state(run)
    if st is None:
        raise UnknownRunError(f"run {run_id!r} has not been started by a decider yet")
    return run, st


def cancel_run(q: queue_core.Queue, run_id: str, *, now: float | None = None) -> Run:
    """Submit nothing new, cancel waiting steps, tell running ones; the run ends cancelled."""
    _check_run_id(run_id)

    def work(tx: Transaction):
        run = tx.lock(run_id)
        if run is None:
            raise UnknownRunError(f"run {run_id!r} not found")
        st = _state(run)
        if st is None:  # no decider has taken it up yet: the run ends before any step
            if not run.finished:
                tx.cancel(run_id)
            return
        if st.get("status") != "running":
            return
        st["cancel"] = True
        tx.update_data(run_id, {MARK: st})
        for m in tx.group(run_id):
            if m.key.startswith(run_id + SEP) and m.status != "finished":
                tx.cancel(m.key)
        _evaluate(tx, run_id, st)

    q.transaction(work, now=now, what="cancel run")
    return _load(q, run_id)


def retry_run(q: queue_core.Queue, run_id: str, *, now: float | None = None,
              sweep_interval: float = SWEEP_INTERVAL) -> Run:
    """Re-run the failed, skipped and cancelled steps of a failed or cancelled run."""
    _check_run_id(run_id)

    def work(tx: Transaction):
        run, st = _lock_state(tx, run_id)
        if st.get("status") not in ("failed", "cancelled"):
            raise FlowError(f"run {run_id!r} is {st.get('status')}; only failed or cancelled runs can be retried")
        st.update(status="running", cancel=False, finished_at=None)
        for m in tx.group(run_id):
            if m.key.startswith(run_id + SEP) and m.finished and m.outcome in ("failure", "cancelled"):
                tx.reopen(m.key)
        tx.keep_group(run_id, None)
        tx.reopen(run_id, run_at=tx.now + sweep_interval, data={MARK: st})
        _evaluate(tx, run_id, st)

    q.transaction(work, now=now, what="retry run")
    return _load(q, run_id)


# -- the decider -----------------------------------------------------------------------------
class StepContext:
    """What a step function gets as its first argument."""

    def __init__(self, task, run_id: str, workflow: str, step: str, data: Any, results: dict):
        self._task = task
        self.run_id, self.workflow, self.step = run_id, workflow, step
        self.attempt: int = task.attempts
        self.data = data
        self.results = results
        self.cancelled = False

    def heartbeat(self) -> None:
        """Extend the step's lease; raises queue_core.CancelRequestedError once the run is cancelled."""
        try:
            self._task.heartbeat()
        except queue_core.CancelRequestedError:
            self.cancelled = True
            raise

    def __repr__(self) -> str:
        return f"<StepContext run={self.run_id!r} step={self.step!r} attempt={self.attempt}>"


class Decider(Runner):
    """Serves workflow runs and their steps. Subclass it and list ``workflows``.

    Hooks (called after the deciding transaction committed; ``self.queue`` submits anything):
    ``on_step_finished(run_id, step, status)``, ``on_step_failed(run_id, step, error)`` and
    ``on_run_finished(run_id, status)``.
    """

    workflows: list[Workflow] = []
    sweep_interval: float = SWEEP_INTERVAL
    max_result_size: int | None = None  # default: the queue's max_data_size

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
        from .dag import registered_workflows

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
        t = self.task
        if "." in t.type and t.type.split(".", 1)[0] in self._known_names():
            self._run_step()
        else:
            self._run_decision()

    def _known_names(self) -> set[str]:
        from .dag import registered_workflows

        return set(self._by_name) | set(registered_workflows())

    # the run row: initialise, sweep
    def _run_decision(self) -> None:
        t = self.task
        wf = self.workflow(t.type)
        finished: list[str] = []

        def work(tx: Transaction):
            run = tx.lock(t.key)
            st = _state(run)
            if st is None:
                raw = run.data.get(MARK, {}).get("input", run.data) if isinstance(run.data.get(MARK), dict) \
                    else run.data
                st = {"input": raw, "dag": wf.snapshot(), "status": "running", "cancel": False}
                tx.update_data(t.key, {MARK: st})
                log.info("run started run=%s workflow=%s", t.key, wf.name)
            if st.get("status") != "running":
                return  # already decided (a finished run row is never claimed; defensive)
            decision = _evaluate(tx, t.key, st)
            if decision.run_status == "running":
                tx.keep_group(t.key, None)
                tx.retry(t, self.sweep_interval)
            else:
                finished.append(decision.run_status)

        self.queue.transaction(work, what="decide run")
        t.done = True  # re-armed as the sweep, or finished with the run
        for status in finished:
            self._hook(self.on_run_finished, t.key, status)

    # a step: run the function, then decide
    def _run_step(self) -> None:
        t = self.task
        info = t.data.get(MARK)
        info = info if isinstance(info, dict) else {}
        run_id, wf_name, name = info.get("run"), info.get("workflow"), info.get("step")
        if not (run_id and wf_name and name):
            raise FlowError(f"task {t.key!r} of type {t.type!r} is not a pqflow step")
        run, parent_rows = self._read(run_id, name)
        st = _state(run) or {}
        snap = st.get("dag") or {}
        spec = snap.get("steps", {}).get(name)
        if st.get("cancel"):
            return self._settle(run_id, name, "cancelled", None, None)
        fn = None
        try:
            fn = self.workflow(wf_name).steps[name].fn
        except (UnknownTypeError, KeyError):
            pass
        if spec is None or fn is None:
            err = (f"step {name!r} of workflow {wf_name!r} no longer exists in the worker's code"
                   if fn is None else f"step {name!r} is not in the run's DAG snapshot")
            return self._settle(run_id, name, "failure", err, None)
        results = {k[len(run_id) + 1:]: (m.data.get(MARK) or {}).get("result") for k, m in parent_rows.items()}
        self.ctx = StepContext(t, run_id, wf_name, name, st.get("input"), results)
        kwargs = {p: results.get(p) for p in spec.get("inputs", [])}
        try:
            result = fn(self.ctx, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a step's error is its outcome
            if self.ctx.cancelled or t.cancel_requested:
                return self._settle(run_id, name, "cancelled", None, None)
            failures = (t.data.get(MARK) or {}).get("failures", 0) + 1
            if failures <= int(spec["retries"]):
                wait = float(spec["retry_wait"]) * (2 ** (failures - 1)) * (0.8 + 0.4 * random.random())
                t.update_data({MARK: {**(t.data.get(MARK) or {}), "failures": failures}})
                t.retry(retry_wait=wait, error=exc)  # no decision: nothing downstream moves
                log.warning("step retry run=%s step=%s attempt=%d: %s", run_id, name, t.attempts, exc)
                return None
            return self._settle(run_id, name, "failure", f"{type(exc).__name__}: {exc}", None)
        if self.ctx.cancelled or t.cancel_requested:
            return self._settle(run_id, name, "cancelled", None, None)
        try:
            self._check_result(result)
        except StepResultError as exc:
            return self._settle(run_id, name, "failure", str(exc), None)
        return self._settle(run_id, name, "success", None, result)

    def _read(self, run_id: str, step: str) -> tuple[queue_core.TaskMetadata, dict]:
        """The run row and the rows of the step's parents (for their results), in one read."""
        def read(tx: Transaction):
            run = tx.get(run_id)
            if run is None:
                raise UnknownRunError(f"run {run_id!r} not found")
            spec = ((_state(run) or {}).get("dag") or {}).get("steps", {}).get(step) or {}
            parents = {step_key(run_id, p) for p in [*spec.get("inputs", []), *spec.get("after", [])]}
            return run, (tx.get_many(parents) if parents else {})

        return self.queue.transaction(read, what="read run")

    def _check_result(self, result: Any) -> None:
        limit = self.max_result_size or self.queue.config["max_data_size"]
        try:
            text = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise StepResultError(f"step result is not JSON-serialisable: {exc}") from None
        if len(text.encode("utf-8")) > limit - 512:
            raise StepResultError(f"step result is {len(text)} bytes as JSON; the limit is {limit - 512}")

    def _settle(self, run_id: str, step: str, outcome: str, error: str | None, result: Any) -> None:
        t = self.task
        finished: list[str] = []

        def work(tx: Transaction):
            run, st = _lock_state(tx, run_id)  # the run lock serialises every decision of this run
            rows = {m.key: m for m in tx.group(run_id)}
            mine = rows.get(t.key)
            final = outcome
            if outcome == "success" and mine is not None and mine.cancel_requested:
                final = "cancelled"
            data = {MARK: {**(t.data.get(MARK) or {}), "result": result if final == "success" else None}}
            tx.finish(t, final, error=error, data=data, retention_time=KEEP)
            if st.get("status") != "running":
                return
            if mine is not None:
                rows[t.key] = replace(mine, status="finished", outcome=final)
            decision = _evaluate(tx, run_id, st, list(rows.values()))
            if decision.run_status != "running":
                finished.append(decision.run_status)

        self.queue.transaction(work, what="finish step")
        log.info("step %s run=%s step=%s", {"success": "succeeded", "failure": "failed"}.get(outcome, outcome),
                 run_id, step)
        self._hook(self.on_step_finished, run_id, step,
                   {"success": "succeeded", "failure": "failed"}.get(outcome, outcome))
        if outcome == "failure":
            self._hook(self.on_step_failed, run_id, step, error)
        for status in finished:
            self._hook(self.on_run_finished, run_id, status)

    def _hook(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a hook must not undo a committed decision
            log.exception("decider hook %s raised", fn.__name__)
