"""Handlers used by the worker tests (loaded by path from real worker processes).

Each run appends "<key> <pid>" to the file named by the task's data["log"], so tests can
count executions from the outside.
"""

from __future__ import annotations

import os
import re
import time

import queue_core


def _record(task, what="run", key=None):
    path = task.data.get("log")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{key or task.key} {os.getpid()} {what}\n")
            fh.flush()


class Handler(queue_core.Application):
    def perform(self):
        _record(self.task)
        sleep = self.task.data.get("sleep", 0)
        if sleep:
            time.sleep(sleep)
        if self.task.data.get("fail"):
            raise RuntimeError("asked to fail")
        _record(self.task, "done")


class Killable(queue_core.Runner):
    def run(self):
        _record(self.task)
        deadline = time.time() + self.task.data.get("sleep", 30)
        while time.time() < deadline and self.killed is None:
            time.sleep(0.05)
        _record(self.task, "killed" if self.killed is not None else "done")


def plain(task):
    _record(task)


def concurrent(task):
    """Counts the handlers running at once across processes in the file data["counter"] ("now
    most"), under an exclusive lock; records the run; sleeps data["sleep"]."""
    _record(task)
    _count(task.data["counter"], +1)
    try:
        time.sleep(task.data.get("sleep", 0.1))
    finally:
        _count(task.data["counter"], -1)
        _record(task, "done")


def _count(path, step):
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        now, most = (int(x) for x in (fh.read().split() or ["0", "0"]))
        now += step
        fh.seek(0)
        fh.truncate()
        fh.write(f"{now} {max(most, now)}")


def traced(task):
    """Records the trace id current while it runs (OpenTelemetry's API: the submitter's trace)."""
    from opentelemetry import trace

    _record(task, f"trace={trace.get_current_span().get_span_context().trace_id:032x}")


class Worker(queue_core.Dispatch):
    routes = [
        ("handler", Handler),
        (re.compile(r"^kill"), Killable),
        ("plain", plain),
        ("concurrent", concurrent),
        ("traced", traced),
    ]


class Invoices(queue_core.Dispatch):
    """Serves type ``invoice`` only (its one route is an exact string)."""

    routes = [("invoice", plain)]


def occurrence(task):
    """A ``perfectsched run`` handler: records "<schedule key>.<scheduled time>" (data: log, sleep)."""
    key = f"{task.key}.{task.scheduled_time}"
    _record(task, key=key)
    time.sleep(task.data.get("sleep", 0))
    _record(task, "done", key=key)


def stamped(task):
    """Appends "<key> <time.time()>" to data["starts"] as its handler starts; sleeps data["sleep"]."""
    with open(task.data["starts"], "a") as fh:
        fh.write(f"{task.key} {time.time():.6f}\n")
    time.sleep(task.data.get("sleep", 0))
