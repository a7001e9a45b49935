"""The worker: processors that poll and run handlers, supervised, obeying signals.

Process model (``processor_type = "process"``, the default)::

    supervisor (the process you start)
      ├── child 1: poll loop + task monitor thread (lease heartbeats, liveness beats)
      └── child N: ...

A child silent for ``child_heartbeat_limit`` is SIGKILLed and replaced; a child that dies is
replaced. With ``processor_type = "thread"`` the processors are threads of one process.

Signals: TERM/INT graceful stop (a second one: immediate), QUIT immediate stop (running
tasks are not finished; their leases expire and they run again), USR1 graceful restart
(config re-read), HUP immediate restart, USR2 reopen log files.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .app import describe_types, make_runner, served_types
from .config import DEFAULTS
from .errors import (
    AlreadyFinishedError,
    CancelRequestedError,
    DatabaseError,
    IdempotentAlreadyFinishedError,
    PreemptedError,
    TaskError,
)
from .loader import load_target
from .logs import reopen_logs, setup_logging
from .wakeup import Wakeup

log = logging.getLogger("queue_core.worker")

EXIT_OK = 0
EXIT_RECYCLE = 75  # child reached max_request_per_child: replace it
EXIT_IMMEDIATE = 137

__all__ = ["Processor", "load_target", "run_worker"]


class TaskMonitor(threading.Thread):
    """Heartbeats every task this processor holds, from a thread CPU-bound handlers can't block.

    Also beats the supervisor's liveness pipe (process mode) and tells a handler, through
    its ``kill(reason)``, when its task was cancelled or its lease taken over.
    """

    def __init__(self, settings: dict, beat_fd: int | None = None, settler: Settler | None = None):
        super().__init__(name="pq-task-monitor", daemon=True)
        self.interval = settings["task_heartbeat_interval"]
        self.child_interval = settings["child_heartbeat_interval"]
        self.alive_time = settings["alive_time"]
        self.beat_fd = beat_fd
        self.settler = settler
        self._held: dict[int, tuple[Any, Any]] = {}  # id(task) -> (task, runner)
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def hold(self, task, runner=None) -> None:
        with self._lock:
            self._held[id(task)] = (task, runner)

    def drop(self, task) -> None:
        with self._lock:
            self._held.pop(id(task), None)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        next_hb = time.monotonic() + self.interval
        next_beat = 0.0
        while not self._halt.is_set():
            now = time.monotonic()
            if now >= next_hb:
                self._heartbeat_all()
                next_hb = now + self.interval
            if self.settler is not None and self.settler.due():
                self.settler.flush()
            if self.beat_fd is not None and now >= next_beat:
                try:
                    os.write(self.beat_fd, b"\0")
                except OSError:  # the supervisor is gone: nobody will replace us, so stop hard
                    os._exit(EXIT_IMMEDIATE)
                next_beat = now + self.child_interval
            wake = min(next_hb, next_beat if self.beat_fd is not None else next_hb)
            if self.settler is not None:
                wake = min(wake, now + self.settler.delay)
            self._halt.wait(max(0.01, wake - time.monotonic()))

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
        except Exception:  # noqa: BLE001
            log.exception("handler kill() raised")


class Waker(threading.Thread):
    """Wakes idle processors when tasks are submitted (PostgreSQL LISTEN/NOTIFY).

    Without it, an idle processor finds new work at its next poll (``poll_interval``); with it,
    within milliseconds. A lost connection is re-established with backoff; meanwhile polling
    goes on as usual, so a missed notification delays a task by at most one poll interval.
    """

    def __init__(self, queue, wake: Callable[[], None]):
        super().__init__(name="pq-waker", daemon=True)
        self.queue = queue
        self.wake = wake
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        backoff = 0.5
        while not self._halt.is_set():
            try:
                self.queue.listen(self.wake, self._halt, timeout=0.5)
            except DatabaseError as exc:
                log.warning("wake-up listener lost its connection (polling meanwhile): %s", exc)
                self._halt.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            except Exception:  # noqa: BLE001 - never take the worker down; polling still works
                log.exception("wake-up listener crashed (polling meanwhile)")
                self._halt.wait(10.0)
            backoff = 0.5


def start_waker(queue, wake: Callable[[], None]) -> Waker | None:
    if not queue.notifies:
        return None
    waker = Waker(queue, wake)
    waker.start()
    return waker


class Settler:
    """Successes waiting to be written, in one transaction per batch.

    A processor's successful tasks are finished together with its next claim (one commit
    for the batch); when a handler runs long, the monitor thread writes them after
    ``delay`` seconds instead, so a finish is never held back by another task. Until then
    the task keeps its lease: it is finished exactly as ``task.finish()`` would, fenced.
    """

    def __init__(self, queue, delay: float = 0.05, release: Callable[[Any], None] | None = None):
        self.queue = queue
        self.delay = delay
        #: called with each task once its finish is written (or refused): the monitor stops
        #: heartbeating it, having kept its lease alive while the write waited (e.g. an outage)
        self.release = release or (lambda task: None)
        self._items: list[tuple[Any, float]] = []
        self._since: float | None = None
        self._lock = threading.Lock()

    def add(self, task, elapsed: float) -> None:
        with self._lock:
            self._items.append((task, elapsed))
            if self._since is None:
                self._since = time.monotonic()

    def take(self) -> list[tuple[Any, float]]:
        with self._lock:
            items, self._items, self._since = self._items, [], None
        return items

    def put_back(self, items: list[tuple[Any, float]]) -> None:
        if items:
            with self._lock:
                self._items[:0] = items
                self._since = self._since or time.monotonic()

    def due(self) -> bool:
        since = self._since
        return since is not None and time.monotonic() - since >= self.delay

    def flush(self) -> None:
        items = self.take()
        if not items:
            return
        try:
            self.queue.finish_many([t for t, _ in items])
        except DatabaseError as exc:
            log.error("finish failed (will retry): %s", exc)
            self.put_back(items)
            return
        except Exception:  # noqa: BLE001 - the monitor thread calls this: it must survive anything
            log.exception("could not finish %d tasks (their leases will expire and they run again)", len(items))
            for task, _ in items:
                self.release(task)
            return
        self.report(items)

    def report(self, items: list[tuple[Any, float]]) -> None:
        for task, elapsed in items:
            self.release(task)
            if task.lost:
                log.warning("could not finish task=%s type=%s: its lease was taken over", task.key, task.type)
            elif task.deferred is not None and not task.done:
                log.error("could not finish task=%s type=%s (its lease will expire and it runs again)",
                          task.key, task.type)
            else:
                log.info("finished task=%s type=%s (%.3fs)", task.key, task.type, elapsed)


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


class Processor:
    """One poll loop: lease tasks, run their handlers, settle the outcome."""

    def __init__(self, target: Any, settings: dict, *, burst: bool = False, queue=None,
                 beat_fd: int | None = None, name: str = "processor"):
        from .queue import Queue

        self.target = target
        self.types = served_types(target)  # leased: only tasks of these types (None: any)
        self.settings = settings
        self.burst = burst
        self.name = name
        self.queue = queue or Queue(**{k: v for k, v in settings.items() if k in _QUEUE_KEYS})
        self.settler = Settler(self.queue)
        self.monitor = TaskMonitor(settings, beat_fd, self.settler)
        self.settler.release = self.monitor.drop
        self.stopping = False  # a plain flag and a self-pipe: stop() runs in signal handlers
        self.processed = 0
        self._wake = Wakeup()
        self._avg_task_time: float | None = None

    def stop(self) -> None:
        """Stop after the current task. Safe in a signal handler (takes no lock)."""
        self.stopping = True
        self._wake.set()

    def wake(self) -> None:
        """Poll now instead of at the end of the idle wait (called from other threads)."""
        self._wake.set()

    def run(self, *, listen: bool = True) -> int:
        """Run until stopped, burst-empty or recycled. Returns an exit code.

        ``listen``: start this processor's own wake-up listener (thread workers share one).
        """
        self.monitor.start()
        waker = start_waker(self.queue, self.wake) if listen and not self.burst else None
        try:
            return self._loop()
        finally:
            if waker is not None:
                waker.stop()
            self.monitor.stop()
            self.monitor.join(5)
            self.settler.flush()

    def batch_size(self) -> int:
        """How many tasks to lease: as many as this processor expects to finish in
        BATCH_WINDOW seconds (at least 1 + task_prefetch, at most batch_size)."""
        s = self.settings
        n = 1 + s["task_prefetch"]
        if self._avg_task_time is not None:
            fit = int(BATCH_WINDOW / max(self._avg_task_time, 1e-5))
            n = max(n, min(s["batch_size"], fit))
        if s.get("max_request_per_child"):
            n = min(n, max(1, s["max_request_per_child"] - self.processed))
        return n

    def _loop(self) -> int:
        s = self.settings
        limit = s.get("max_request_per_child")
        next_cleanup = time.monotonic() + random.uniform(0, s["cleanup_interval"])
        db_wait = 0.1
        while not self.stopping:
            if time.monotonic() >= next_cleanup:
                self._cleanup()
                next_cleanup = time.monotonic() + s["cleanup_interval"]
            settled = self.settler.take()
            try:
                tasks = self.queue.poll_multi(self.batch_size(), alive_time=s["alive_time"],
                                              finish=[t for t, _ in settled], types=self.types)
                db_wait = 0.1
            except DatabaseError as exc:
                self.settler.put_back(settled)
                log.error("poll failed (will retry in %.1fs): %s", db_wait, exc)
                self._wake.wait(db_wait)
                self._wake.clear()
                db_wait = min(db_wait * 2, 10.0)
                continue
            self.settler.report(settled)
            if not tasks:
                if self.burst:
                    return EXIT_OK
                self._wake.wait(s["poll_interval"])
                self._wake.clear()
                continue
            for t in tasks:
                self.monitor.hold(t)
            prefetch(self.target, self.queue, tasks)
            for i, t in enumerate(tasks):
                if self.stopping:
                    self._release(tasks[i:])
                    break
                self.process(t)
                self.processed += 1
                if t.max_attempts is not None:
                    # Its attempts are limited: its success must be written before any other
                    # handler of the batch runs (and could bring the process down first).
                    self.settler.flush()
            if limit and self.processed >= limit:
                return EXIT_RECYCLE
        return EXIT_OK

    def _cleanup(self) -> None:
        try:
            n = self.queue.cleanup()
            if n:
                log.info("purged %d finished tasks past retention", n)
        except TaskError as exc:
            log.warning("cleanup failed: %s", exc)

    def _release(self, tasks) -> None:
        for t in tasks:
            self.monitor.drop(t)
            try:
                t.release()
                log.info("released task=%s type=%s (stopping)", t.key, t.type)
            except TaskError as exc:
                log.warning("release failed task=%s: %s", t.key, exc)

    def process(self, task) -> None:
        if task.lost or (task.cancel_requested and not task.owned):  # learned while it waited its turn
            self.monitor.drop(task)
            self._settle(task, None, 0.0)
            return
        log.debug("acquired task=%s type=%s attempt=%d", task.key, task.type, task.attempts)
        started = time.monotonic()
        error = run_handler(self.target, task, self.monitor)  # KeyboardInterrupt included: the task's error
        elapsed = time.monotonic() - started
        avg = self._avg_task_time
        self._avg_task_time = elapsed if avg is None else 0.8 * avg + 0.2 * elapsed
        self._settle(task, error, elapsed)

    def _settle(self, task, error, elapsed) -> None:
        try:
            if getattr(task, "lost", False):
                log.warning("task=%s type=%s finished its run after losing the lease; result dropped",
                            task.key, task.type)
            elif task.done:
                log.info("%s task=%s type=%s (%.3fs)", _verb(task), task.key, task.type, elapsed)
            elif task.deferred is not None and error is None:
                self.monitor.hold(task)  # its handler's own finish, written with the next batch
                self.settler.add(task, elapsed)
            elif task.cancel_requested:
                task.finish(outcome="cancelled")
                log.info("cancelled task=%s type=%s", task.key, task.type)
            elif error is not None:
                what = task.retry_or_fail(error)
                level = logging.ERROR if what == "failure" else logging.WARNING
                log.log(level, "%s task=%s type=%s attempt=%d: %s: %s",
                        "failed" if what == "failure" else "retry", task.key, task.type, task.attempts,
                        type(error).__name__, error)
            else:
                self.monitor.hold(task)  # heartbeated until its finish is written
                self.settler.add(task, elapsed)  # finished with the next claim, or by the monitor
        except (PreemptedError, AlreadyFinishedError) as exc:
            log.warning("could not settle task=%s: %s", task.key, exc)
        except TaskError as exc:
            log.error("could not settle task=%s (lease will expire and it will run again): %s", task.key, exc)
        except Exception:  # noqa: BLE001 - nothing a handler left behind may end the processor
            log.exception("could not settle task=%s (lease will expire and it will run again)", task.key)


def prefetch(target: Any, queue, tasks: list) -> None:
    """Let a handler class read what a whole batch needs at once (``target.prefetch(queue,
    tasks)``, e.g. the inputs of workflow steps); a failure only means each reads its own."""
    fn = getattr(target, "prefetch", None)
    if fn is None or not callable(fn):
        return
    try:
        fn(queue, tasks)
    except Exception:  # noqa: BLE001 - an optimisation: handlers read what is missing themselves
        log.exception("prefetch of %d tasks failed (each will read its own)", len(tasks))


def _verb(task) -> str:
    if task.status == "finished":
        return {"success": "finished", "failure": "failed", "cancelled": "cancelled"}.get(task.outcome, "finished")
    return "retry/release"


_QUEUE_KEYS = set(DEFAULTS)

#: a processor leases as many short tasks as it expects to finish in this time (seconds)
BATCH_WINDOW = 0.1


# -- thread mode --------------------------------------------------------------------------
class ThreadWorker:
    def __init__(self, target, settings, *, burst, config_loader):
        self.target, self.settings, self.burst, self.config_loader = target, settings, burst, config_loader
        self.processors: list[Processor] = []
        self.threads: list[threading.Thread] = []
        self.waker: Waker | None = None
        self.exit_code = EXIT_OK

    def _start(self) -> None:
        from .queue import Queue

        q = Queue(**{k: v for k, v in self.settings.items() if k in _QUEUE_KEYS})
        self.processors = [Processor(self.target, self.settings, burst=self.burst, queue=q, name=f"thread-{i}")
                           for i in range(self.settings["processors"])]
        self.threads = [threading.Thread(target=p.run, kwargs={"listen": False}, name=p.name, daemon=True)
                        for p in self.processors]
        if self.waker is not None:
            self.waker.stop()
        processors = self.processors
        self.waker = None if self.burst else start_waker(q, lambda: [p.wake() for p in processors])
        for t in self.threads:
            t.start()
        log.info("worker started: %d thread processors pid=%d", len(self.threads), os.getpid())

    def run(self) -> int:
        signals = _SignalQueue()
        self._start()
        stopping = False
        while True:
            sig = signals.wait(0.2)
            if sig in (signal.SIGTERM, signal.SIGINT):
                if stopping:
                    log.warning("second stop signal: stopping immediately")
                    _immediate_exit()
                stopping = True
                log.info("graceful stop")
                for p in self.processors:
                    p.stop()
            elif sig == signal.SIGQUIT:
                log.warning("immediate stop")
                _immediate_exit()
            elif sig == signal.SIGUSR1 or (sig == signal.SIGHUP):
                log.info("restart: stopping processors after their current task")
                for p in self.processors:
                    p.stop()
                for t in self.threads:
                    t.join()
                self.settings = self.config_loader() if self.config_loader else self.settings
                self._start()
            elif sig == signal.SIGUSR2:
                reopen_logs()
            if not any(t.is_alive() for t in self.threads):
                signals.restore()
                return EXIT_OK


def _immediate_exit() -> None:
    logging.shutdown()
    os._exit(EXIT_OK)


class _SignalQueue:
    """Signal handlers only enqueue; the main loop acts (no work in signal context)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGHUP,
               signal.SIGUSR2, signal.SIGCHLD)

    def __init__(self) -> None:
        self._pending: list[int] = []
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        os.set_blocking(self._r, False)
        self._old = {s: signal.signal(s, self._handler) for s in self.SIGNALS}

    def _handler(self, signum, _frame) -> None:
        self._pending.append(signum)
        try:
            os.write(self._w, b"s")
        except OSError:
            pass

    def wait(self, timeout: float, extra_fds=()) -> int | None:
        if not self._pending:
            try:
                select.select([self._r, *extra_fds], [], [], timeout)
            except InterruptedError:
                pass
        try:
            os.read(self._r, 4096)
        except OSError:
            pass
        return self._pending.pop(0) if self._pending else None

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        os.close(self._r)
        os.close(self._w)


# -- process mode -------------------------------------------------------------------------
class _Child:
    def __init__(self, slot: int, pid: int, beat_fd: int):
        self.slot, self.pid, self.beat_fd = slot, pid, beat_fd
        self.last_beat = time.monotonic()
        self.started = time.monotonic()
        self.stopping_since: float | None = None
        self.last_signal = 0.0
        self.graceful = True


class Supervisor:
    def __init__(self, target, settings, *, burst, config_loader):
        self.target, self.settings, self.burst, self.config_loader = target, settings, burst, config_loader
        self.children: dict[int, _Child] = {}   # pid -> child
        self.slots_done: set[int] = set()
        self.last_fork: dict[int, float] = {}
        self.stopping = False
        self.restart_pending: set[int] = set()

    def run(self) -> int:
        self.signals = _SignalQueue()
        log.info("supervisor started pid=%d processors=%d", os.getpid(), self.settings["processors"])
        try:
            for slot in range(self.settings["processors"]):
                self._spawn(slot)
            while True:
                sig = self.signals.wait(0.2, [c.beat_fd for c in self.children.values()])
                self._on_signal(sig)
                self._read_beats()
                self._reap()
                self._keepalive()
                if not self.children and (self.stopping or len(self.slots_done) >= self.settings["processors"]):
                    log.info("supervisor exiting")
                    return EXIT_OK
        finally:
            self.signals.restore()

    # signals
    def _on_signal(self, sig) -> None:
        if sig is None or sig == signal.SIGCHLD:
            return
        if sig in (signal.SIGTERM, signal.SIGINT):
            if self.stopping:
                log.warning("second stop signal: immediate stop")
                self._kill_all()
            else:
                log.info("graceful stop: children finish their current task")
                self.stopping = True
                self._signal_all(signal.SIGTERM)
        elif sig == signal.SIGQUIT:
            log.warning("immediate stop")
            self.stopping = True
            self._kill_all()
        elif sig == signal.SIGUSR1:
            log.info("graceful restart")
            self._reload()
            self.restart_pending = {c.slot for c in self.children.values()}
            self._signal_all(signal.SIGTERM)
        elif sig == signal.SIGHUP:
            log.info("immediate restart")
            self._reload()
            self.restart_pending = {c.slot for c in self.children.values()}
            self._kill_all()
        elif sig == signal.SIGUSR2:
            reopen_logs()
            self._signal_all(signal.SIGUSR2)

    def _reload(self) -> None:
        if self.config_loader is None:
            return
        try:
            new = self.config_loader()
        except Exception as exc:  # noqa: BLE001 - keep running on a broken config
            log.error("config reload failed, keeping the old config: %s", exc)
            return
        old_n = self.settings["processors"]
        self.settings = new
        for slot in range(old_n, new["processors"]):
            self._spawn(slot)

    def _signal_all(self, sig) -> None:
        for c in self.children.values():
            _send(c.pid, sig)
            if sig == signal.SIGTERM:
                c.stopping_since = c.stopping_since or time.monotonic()
                c.last_signal = time.monotonic()

    def _kill_all(self) -> None:
        for c in self.children.values():
            _kill_tree(c.pid)

    # children
    def _spawn(self, slot: int) -> None:
        wait = self.settings["child_fork_frequency_limit"] - (time.monotonic() - self.last_fork.get(slot, -1e9))
        if wait > 0:
            time.sleep(min(wait, 5))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            code = 1
            try:
                code = _child_main(self.target, self.settings, self.burst, w, slot)
            except BaseException:  # noqa: BLE001
                log.exception("processor crashed")
            finally:
                logging.shutdown()
                os._exit(code)
        os.close(w)
        os.set_blocking(r, False)
        self.last_fork[slot] = time.monotonic()
        self.children[pid] = _Child(slot, pid, r)
        log.info("processor %d started pid=%d", slot, pid)

    def _read_beats(self) -> None:
        for c in self.children.values():
            try:
                while os.read(c.beat_fd, 4096):
                    c.last_beat = time.monotonic()
            except BlockingIOError:
                pass
            except OSError:
                pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                return
            c = self.children.pop(pid, None)
            if c is None:
                continue
            os.close(c.beat_fd)
            code = os.waitstatus_to_exitcode(status)
            log.info("processor %d pid=%d exited with %s", c.slot, pid, code)
            if self.stopping:
                continue
            if c.slot in self.restart_pending:
                self.restart_pending.discard(c.slot)
                if c.slot < self.settings["processors"]:
                    self._spawn(c.slot)
                continue
            if self.burst and code == EXIT_OK:
                self.slots_done.add(c.slot)
                continue
            if c.slot < self.settings["processors"]:
                self._spawn(c.slot)

    def _keepalive(self) -> None:
        now = time.monotonic()
        limit = self.settings["child_heartbeat_limit"]
        kill_limit = self.settings["child_graceful_kill_limit"]
        for c in list(self.children.values()):
            if now - c.last_beat > limit:
                log.error("processor %d pid=%d silent for %.0fs: killing it", c.slot, c.pid, now - c.last_beat)
                _kill_tree(c.pid)
                c.last_beat = now
            elif c.stopping_since is not None:
                if kill_limit is not None and now - c.stopping_since > kill_limit:
                    _kill_tree(c.pid)
                elif now - c.last_signal > self.settings["child_kill_interval"]:
                    _send(c.pid, signal.SIGTERM)
                    c.last_signal = now


def _send(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


def _kill_tree(pid: int) -> None:
    """SIGKILL a child and everything in its process group."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        _send(pid, signal.SIGKILL)


def install_child_signals(proc: Processor) -> None:
    """A child's signal handlers. They run in the main thread at any bytecode, so they take
    no lock (see :mod:`queue_core.wakeup`)."""
    def graceful(_s, _f):
        proc.stop()

    def immediate(_s, _f):
        os._exit(EXIT_IMMEDIATE)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, graceful)
    signal.signal(signal.SIGQUIT, immediate)
    signal.signal(signal.SIGHUP, immediate)
    signal.signal(signal.SIGUSR2, lambda _s, _f: reopen_logs())


def _child_main(target, settings, burst, beat_fd, slot) -> int:
    os.setpgid(0, 0)
    for s in (signal.SIGCHLD,):
        signal.signal(s, signal.SIG_DFL)
    proc = Processor(target, settings, burst=burst, beat_fd=beat_fd, name=f"processor-{slot}")
    install_child_signals(proc)
    log.info("processor %d running pid=%d", slot, os.getpid())
    return proc.run()


def run_worker(target: Any, settings: dict, *, burst: bool = False,
               config_loader: Callable[[], dict] | None = None) -> int:
    """Serve ``target`` until stopped (or, with ``burst``, until no task is due). Returns an exit code."""
    setup_logging(settings.get("log"), settings.get("log_level", "INFO"))
    log.info("serving %s", describe_types(served_types(target)))
    if settings.get("processor_type", "process") == "thread":
        return ThreadWorker(target, settings, burst=burst, config_loader=config_loader).run()
    if not hasattr(os, "fork"):  # pragma: no cover - non-POSIX
        return ThreadWorker(target, settings, burst=burst, config_loader=config_loader).run()
    sys.stdout.flush()
    sys.stderr.flush()
    return Supervisor(target, settings, burst=burst, config_loader=config_loader).run()
