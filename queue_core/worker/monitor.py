"""The task monitor: a thread that heartbeats every task its processor holds.

A CPU-bound handler cannot block it, so its task keeps its lease. It also writes waiting
finishes (:mod:`queue_core.worker.settler`) and tells a handler, through its ``kill(reason)``, when its
task was cancelled or its lease taken over; in process mode its :class:`LivenessBeat` beats the
supervisor's liveness pipe. :func:`run_handler` runs a handler under it (workers and
``perfectsched run``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ..api.app import make_runner
from ..errors import (
    AlreadyFinishedError,
    CancelRequestedError,
    IdempotentAlreadyFinishedError,
    PreemptedError,
    TaskError,
)
from .service import EXIT_IMMEDIATE, exit_now
from .settler import Settler

log = logging.getLogger("queue_core.worker")


def beats(busy_since: float | None, now: float, stuck_limit: float) -> bool:
    """Whether a child whose monitor has been busy in one turn since ``busy_since`` (None: idle)
    is alive to its supervisor: yes until that turn has lasted ``stuck_limit``."""
    return busy_since is None or now - busy_since < stuck_limit


def stuck_limit(settings: dict) -> float:
    """How long one turn of a monitor may last before its child beats no more: short enough that
    the supervisor's kill (``child_heartbeat_limit`` later) comes before the leases the monitor
    last renewed lapse, so no task runs here and elsewhere at once (review 22d: stopping at the
    lease let a task run twice for a minute). Zero when the lease is shorter than the kill takes:
    any wait of the monitor then stops the beats."""
    late = settings["child_heartbeat_limit"] + settings["task_heartbeat_interval"]
    return max(0.0, settings["alive_time"] - late - settings["child_heartbeat_interval"])


class LivenessBeat(threading.Thread):
    """Beats the supervisor's liveness pipe every ``child_heartbeat_interval``, from a thread of
    its own: a monitor waiting on the database (a lease heartbeat waiting for SQLite's write lock,
    which a frozen process holds) leaves its child alive, not silent; the supervisor killed such
    children with the frozen one. A frozen process or a handler holding the GIL beats no more;
    nor a child whose monitor died or has been stuck in one turn for :func:`stuck_limit`."""

    def __init__(self, beat_fd: int, settings: dict, monitor: TaskMonitor):
        super().__init__(name="pq-liveness", daemon=True)
        self.beat_fd, self.monitor = beat_fd, monitor
        self.interval, self.stuck_limit = settings["child_heartbeat_interval"], stuck_limit(settings)

    def run(self) -> None:
        while True:
            if self.monitor.is_alive() and beats(self.monitor.busy_since, time.monotonic(), self.stuck_limit):
                try:
                    os.write(self.beat_fd, b"\0")
                except OSError:  # the supervisor is gone: nobody will replace us, so stop hard
                    exit_now(EXIT_IMMEDIATE, f"processor pid={os.getpid()}: supervisor gone: exiting")
            if self.monitor.halted.wait(self.interval):
                return


class TaskMonitor(threading.Thread):
    """Heartbeats every task this processor holds, from a thread CPU-bound handlers can't block.

    Also tells a handler, through its ``kill(reason)``, when its task was cancelled or its lease
    taken over, and (process mode) starts the :class:`LivenessBeat` of its child.
    """

    def __init__(self, settings: dict, beat_fd: int | None = None, settler: Settler | None = None):
        super().__init__(name="pq-task-monitor", daemon=True)
        self.interval = settings["task_heartbeat_interval"]
        self.alive_time = settings["alive_time"]
        self.settler = settler
        self._held: dict[int, tuple[Any, Any]] = {}  # id(task) -> (task, runner)
        self._lock = threading.Lock()
        self.halted = threading.Event()
        #: when the turn the monitor is in began (monotonic), None while it waits for the next
        self.busy_since: float | None = None
        self._beat = None if beat_fd is None else LivenessBeat(beat_fd, settings, self)

    def hold(self, task, runner=None) -> None:
        with self._lock:
            self._held[id(task)] = (task, runner)

    def drop(self, task) -> None:
        with self._lock:
            self._held.pop(id(task), None)

    def stop(self) -> None:
        self.halted.set()

    def run(self) -> None:
        if self._beat is not None:
            self._beat.start()
        next_hb = time.monotonic() + self.interval
        while not self.halted.is_set():
            now = self.busy_since = time.monotonic()
            if now >= next_hb:
                self._heartbeat_all()
                next_hb = now + self.interval
            if self.settler is not None and self.settler.due():
                self.settler.flush()
            self.busy_since = None
            wake = next_hb if self.settler is None else min(next_hb, now + self.settler.delay)
            self.halted.wait(max(0.01, wake - time.monotonic()))

    def _heartbeat_all(self) -> None:
        with self._lock:
            held = list(self._held.values())
        for task, runner in held:
            if task.done:
                continue
            try:
                task.heartbeat(alive_time=self.alive_time)
            except CancelRequestedError as exc:
                log.info("cancel requested task=%s type=%s", task.key, task.type)
                self._kill(runner, exc)
            except IdempotentAlreadyFinishedError:
                self.drop(task)  # finished by its own holder between our look and the heartbeat
            except (PreemptedError, AlreadyFinishedError) as exc:
                if not task.done:  # else settled by its holder meanwhile (a schedule may be leased again)
                    log.warning("lease lost task=%s type=%s: %s", task.key, task.type, exc)
                    task.lost = True
                    self._kill(runner, exc)
                self.drop(task)
            except TaskError as exc:
                log.warning("heartbeat failed task=%s: %s", task.key, exc)
            except Exception:  # noqa: BLE001 - the monitor must survive anything
                log.exception("heartbeat crashed task=%s", task.key)

    @staticmethod
    def _kill(runner, reason) -> None:
        if runner is None or getattr(runner, "_pq_killed", None) is type(reason):
            return
        runner._pq_killed = type(reason)
        try:
            runner.kill(reason)
        except BaseException:  # noqa: BLE001 - SystemExit too: the monitor thread must go on
            log.exception("handler kill() raised")


def run_handler(target: Any, task, monitor: TaskMonitor) -> BaseException | None:
    """Run ``target``'s handler on ``task`` under ``monitor``; return what it raised, if anything.

    Nothing a handler raises (SystemExit and KeyboardInterrupt included) ends the caller's loop.
    """
    monitor.hold(task)
    try:
        runner = make_runner(target, task)
        monitor.hold(task, runner)
        runner.run()
    except BaseException as exc:  # noqa: BLE001 - a handler error is the task's outcome
        return exc
    finally:
        monitor.drop(task)
    return None
