"""The worker target of every scenario: ``reliability.handlers:Worker``.

It serves two kinds of work (and :func:`fire` is a handler of schedule occurrences for
``perfectsched run``), both recording each execution in the ledger named by the
environment variable ``REL_LEDGER`` (see :mod:`reliability.ledger`):

* tasks of type ``rel_task`` (:class:`Task`), whose data says what the execution does: sleep,
  burn CPU, hold the GIL (which starves the heartbeat thread), fail its first attempts;
* the workflow ``rel_dag`` (:data:`dag`): a diamond ``a -> (b, c) -> d`` followed by a fan-out
  ``d -> f0..f5 -> join``, served by :class:`FlowDecider`; each step sleeps the run input's
  ``sleep`` seconds.
"""

from __future__ import annotations

import ctypes
import os
import re
import time

import pqflow
import queue_core

from . import ledger

LEDGER_ENV = "REL_LEDGER"
TASK_TYPE = "rel_task"
FANOUT = 6


def record(key: str, attempt: int, kind: str) -> None:
    path = os.environ.get(LEDGER_ENV)
    if path:
        ledger.append(path, key, attempt, kind)


def burn(seconds: float) -> None:
    """Busy-loop in Python (the GIL is handed over every few ms: heartbeats keep running)."""
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1


def hold_gil(seconds: float) -> None:
    """Block inside a C call that keeps the GIL: no other thread of the process runs meanwhile
    (a C extension that never releases the GIL does the same to the heartbeat thread)."""
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


def wait_for_record(key: str, prefix: str, timeout: float) -> None:
    """Wait until some execution of ``key`` logged a kind starting with ``prefix``."""
    deadline = time.monotonic() + timeout
    path = os.environ.get(LEDGER_ENV)
    while time.monotonic() < deadline and path:
        if any(e.key == key and e.kind.startswith(prefix) for e in ledger.read(path)):
            return
        time.sleep(0.05)


class Task(queue_core.Application):
    """data: ``sleep`` s, ``burn`` s (CPU), ``fail_attempts`` (attempts that raise), and for the
    fencing scenario ``block`` s (first attempt holds the GIL, then ``late`` = ``finish``: calls
    ``finish()`` itself, ``return``: lets the worker settle) and ``await_late`` (a re-run waits
    until the first attempt's late finish was tried, so that it happens while the re-run holds
    the lease)."""

    def perform(self) -> None:
        t, d = self.task, self.task.data
        record(t.key, t.attempts, "start")
        if d.get("block") and t.attempts == 1:
            self._block_then_finish_late(d)
            return
        if d.get("await_late") and t.attempts > 1:
            wait_for_record(t.key, "late:", d["await_late"])
        if d.get("sleep"):
            time.sleep(d["sleep"])
        if d.get("burn"):
            burn(d["burn"])
        if t.attempts <= d.get("fail_attempts", 0):
            raise RuntimeError(f"attempt {t.attempts} fails on purpose")
        record(t.key, t.attempts, "end")

    def _block_then_finish_late(self, d: dict) -> None:
        hold_gil(d["block"])
        if d.get("late") != "finish":
            record(self.task.key, self.task.attempts, "late:returned")
            return
        try:
            self.task.finish()
        except queue_core.PreemptedError:
            record(self.task.key, self.task.attempts, "late:refused")
        except queue_core.TaskError as exc:
            record(self.task.key, self.task.attempts, f"late:{type(exc).__name__}")
        else:
            record(self.task.key, self.task.attempts, "late:accepted")


def fire(task) -> None:
    """A ``perfectsched run`` handler (a target of leased occurrences): submits the occurrence's
    task under the built-in submitter's key ``<schedule>.<scheduled time>``, recording the firing
    as ``fire`` in the ledger (``fire:again`` when that task existed already)."""
    key = f"{task.key}.{task.scheduled_time}"
    record(key, task.attempts, "fire")
    try:
        task.queue.submit(key, TASK_TYPE, task.data)
    except queue_core.IdempotentAlreadyExistsError:
        record(key, task.attempts, "fire:again")


dag = pqflow.Workflow("rel_dag", retries=0, retry_wait=0)


def _step(name: str, after: list[str]):
    def fn(ctx, **_inputs):
        record(f"{ctx.run_id}#{ctx.step}", ctx.attempt, "start")
        time.sleep((ctx.data or {}).get("sleep", 0))
        return name

    fn.__name__ = name
    return dag.step(after=after, name=name)(fn)


_step("a", [])
_step("b", ["a"])
_step("c", ["a"])
_step("d", ["b", "c"])
for _i in range(FANOUT):
    _step(f"f{_i}", ["d"])
_step("join", [f"f{i}" for i in range(FANOUT)])
#: items of the map step "each": "items" returns them, "each" runs once per item, "total" joins
MAP_ITEMS = 5


@dag.step(after="join", name="items")
def _items(ctx, **_inputs):
    record(f"{ctx.run_id}#{ctx.step}", ctx.attempt, "start")
    return list(range(MAP_ITEMS))


@dag.step(map="items", name="each")
def _each(ctx, item):
    record(f"{ctx.run_id}#{ctx.step}#{ctx.index}", ctx.attempt, "start")
    time.sleep((ctx.data or {}).get("sleep", 0))
    return item


@dag.step(after="each", name="total")
def _total(ctx, each):
    record(f"{ctx.run_id}#{ctx.step}", ctx.attempt, "start")
    return sum(each)


#: step names of one run of :data:`dag`
DAG_STEPS = ["a", "b", "c", "d", *[f"f{i}" for i in range(FANOUT)], "join", "items", "each", "total"]
#: steps that run as tasks of their own (a map step's work is done by its items)
RUN_STEPS = [s for s in DAG_STEPS if s != "each"]


class FlowDecider(pqflow.Decider):
    workflows = [dag]


class Worker(queue_core.Dispatch):
    routes = [(TASK_TYPE, Task), (re.compile(r"^rel_dag(\.|$)"), FlowDecider)]
