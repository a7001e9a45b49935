"""What every long-running pq service does: signals, the stop cascade, database backoff, reloads.

The worker supervisor (:mod:`queue_core.worker.supervisor`), a worker child (:mod:`queue_core.worker.main`),
the thread-mode worker (:mod:`queue_core.worker.thread_worker`) and ``perfectsched run``
(:mod:`perfectsched.runner`) each declare what a signal means to them (an :class:`Intent`) and
what each intent does to them; the rest is here, the same for all of them:

* **The only signal handler.** A handler runs in the main thread between any two bytecodes, so
  it must never take a lock: no ``threading.Event.set()``, no logging, no ``Condition``, no log
  file reopened (a worker child once hung for good on a restart signal: its handler waited for
  an event's lock that its own thread held). :class:`SignalQueue` catches the signals through
  the interpreter's wakeup fd: its C-level handler writes the signal's number to a self-pipe
  (:class:`~queue_core.worker.wakeup.Wakeup`), and the Python-level handler is a C function that only
  notes the signal (should a full pipe drop its byte). What a signal causes happens outside the
  handler, in whoever reads the queue: the main loop of a service whose main thread only waits
  (the supervisor, the thread-mode worker), or a signal thread of its own where the main thread
  runs handlers (a worker child, the scheduler). A forked child holds the signals until its own
  queue catches them (:func:`~queue_core.worker.forked_check.fork_holding`), so none reaches the handler
  inherited from its parent.
* **The stop cascade** (:class:`Dispatcher`, explicit :class:`Phase`): the first stop signal stops
  gracefully, a second one immediately (not in a worker child: its supervisor resends TERM on
  purpose until it exits); once a stop began, restart signals are ignored.
* **What each signal means** to each kind of service: the three signal tables below, side by
  side (docs/worker.md and docs/cron.md, "Signals"), and the one way a service ends at once
  (:func:`exit_now`).
* **A loop's stop flag and idle wait** (:class:`LoopControl`), **the wait while the database
  fails** (:class:`OutageWait`, the policy's ``OUTAGE_BACKOFF``) and **config reloads** that keep
  the old config when the new one is broken (:func:`reload_settings`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, NoReturn

from ..errors import AccessDeniedError, DatabaseError, ForeignTableError
from ..exit_codes import EXIT_IMMEDIATE, EXIT_OK, EXIT_RECYCLE
from ..rules import policy
from .forked_check import CheckApart
from .wakeup import Wakeup

log = logging.getLogger("queue_core.service")

__all__ = [
    "CHILD_SIGNALS",
    "EXIT_IMMEDIATE",
    "EXIT_OK",
    "EXIT_RECYCLE",
    "IMMEDIATE_GRACE",
    "SCHEDULER_SIGNALS",
    "WORKER_SIGNALS",
    "Dispatcher",
    "Intent",
    "LoopControl",
    "OutageWait",
    "Phase",
    "SignalQueue",
    "Signals",
    "exit_now",
    "reload_settings",
]


class Intent(Enum):
    """What a signal asks of a service."""

    STOP = "graceful stop"
    STOP_NOW = "immediate stop"
    RESTART = "graceful restart, configuration re-read"
    RESTART_NOW = "immediate restart, configuration re-read"
    REOPEN_LOGS = "log files reopened"


# -- what each signal means: the three tables ---------------------------------------------
#: to a worker, its supervisor in process mode or the thread-mode worker (docs/worker.md, "Signals")
WORKER_SIGNALS: dict[int, Intent] = {
    signal.SIGTERM: Intent.STOP,
    signal.SIGINT: Intent.STOP,
    signal.SIGQUIT: Intent.STOP_NOW,
    signal.SIGUSR1: Intent.RESTART,
    signal.SIGHUP: Intent.RESTART_NOW,
    signal.SIGUSR2: Intent.REOPEN_LOGS,
}
#: to a worker child: its supervisor sends TERM for a stop or a graceful restart, again every
#: ``child_kill_interval`` until the child exits (a repeat is no escalation); a restart of the
#: worker is a stop of the child, which the supervisor replaces
CHILD_SIGNALS: dict[int, Intent] = {
    signal.SIGTERM: Intent.STOP,
    signal.SIGINT: Intent.STOP,
    signal.SIGUSR1: Intent.STOP,
    signal.SIGQUIT: Intent.STOP_NOW,
    signal.SIGHUP: Intent.STOP_NOW,
    signal.SIGUSR2: Intent.REOPEN_LOGS,
}
#: to ``perfectsched run``, which keeps PerfectSched's meanings: QUIT stops and HUP restarts
#: gracefully; a second stop signal is immediate only while a handler runs (docs/cron.md)
SCHEDULER_SIGNALS: dict[int, Intent] = {
    signal.SIGTERM: Intent.STOP,
    signal.SIGINT: Intent.STOP,
    signal.SIGQUIT: Intent.STOP,
    signal.SIGUSR1: Intent.RESTART,
    signal.SIGHUP: Intent.RESTART,
    signal.SIGUSR2: Intent.REOPEN_LOGS,
}


#: seconds a process stopped at once (QUIT, HUP) has to give back what it has not started before
#: it ends; a worker's supervisor SIGKILLs a child still there after that
IMMEDIATE_GRACE = 2.0


def exit_now(code: int, why: str) -> NoReturn:
    """End this process at once (an immediate stop): ``why`` as one line on stderr, written
    without a lock (a log call could wait for one a handler's thread holds), and ``os._exit``:
    no cleanup, leases left to expire. A service exits 0 (it did what it was asked); a worker
    child exits 137 so its supervisor's log tells it from a normal end."""
    try:
        os.write(2, f"{why}\n".encode(errors="replace"))
    except OSError:
        pass
    os._exit(code)


_KIND = {
    Intent.STOP: "stop",
    Intent.STOP_NOW: "stop",
    Intent.RESTART: "restart",
    Intent.RESTART_NOW: "restart",
    Intent.REOPEN_LOGS: "reopen",
}


class Phase(Enum):
    RUNNING = "running"
    STOPPING = "stopping gracefully"
    STOPPING_NOW = "stopping immediately"


_PHASE_AFTER = {Intent.STOP: Phase.STOPPING, Intent.STOP_NOW: Phase.STOPPING_NOW}
#: logged once done: an immediate stop may end the process (and a log call may wait for a lock),
#: and reopened log files should get the line
_LOGGED_AFTER = {Intent.STOP_NOW, Intent.REOPEN_LOGS}


#: how many deliveries of one signal wait at most to be acted on (see :class:`SignalQueue`)
MOST_WAITING = 2


#: a turn acts on the calls a full pipe left without bytes when its drain or one of this many
#: before it found the pipe full (see :class:`SignalQueue`)
FULL_LATELY = 2


class SignalQueue:
    """Catches signals through the interpreter's wakeup fd: the C-level handler writes each
    signal's number to a pipe, read back in order by :meth:`wait` (no Python code, no lock, runs
    in the handler). One per process: it owns the process's wakeup fd until :meth:`restore`.

    A signal is queued at most :data:`MOST_WAITING` times while it waits to be acted on: a flood
    is acted on at most twice per signal and turn of the reader, and a stop sent after it waits
    behind at most two of each other signal, not behind every delivery of the flood (a 2 s flood
    of USR1/USR2 once queued 290,000 actions before the TERM: the scheduler took a minute to
    stop). Two, not one: the stop cascade has two steps, and a second stop sent while the reader
    is busy (a reload's check of the new configuration) must still make the stop immediate.

    **A full pipe.** A flood can keep the main thread inside signal delivery for a second or
    more: the pipe fills (64 KiB of deliveries) and the byte of a TERM sent then is dropped. The
    interpreter still marks the TERM delivered and, once the main thread runs Python again,
    calls its Python-level handler: the ``insert`` of the signal's own deque in :attr:`_noted`
    (a C function, so no bytecode a signal could nest in; called as ``(signum, frame)`` it puts
    the frame at index ``signum``, or at the end of a shorter deque), one entry per call. A
    reader in the main thread (the supervisor, the thread-mode worker) compares, per signal, the
    calls noted before a drain with the bytes the drain read: each call more than the bytes is a
    delivery whose byte was dropped, and is acted on (a byte is written before its handler runs,
    and the drain reads the pipe empty, so it would have read the byte). Calls noted during or
    after a drain wait for the next turn (review 22: acting on them at once acted on one TERM
    twice, an immediate stop), unless the drain read more bytes than there were calls before it:
    the extra bytes are theirs. A byte the drain read may be that of a call noted during it, not
    of one noted before whose byte was dropped: then one call noted during it waits in its
    stead, and the next turn finds it without a byte. A drop needs a full pipe, which the first drain after it finds; so
    a turn acts on calls without bytes only when its drain or one of the :data:`FULL_LATELY`
    before it found the pipe full (review 22c: one before was too few for the case above).

    Limits. The interpreter calls the handler once for all the deliveries of one signal since
    its last call, so two stops sent before the main thread runs Python again, whose bytes were
    both dropped, or one read and one dropped, count as one (as the kernel counts a signal sent
    while the same one is pending). A dropped stop whose call waits in two turns running because
    later stops' bytes stood for it is not acted on (those later stops are). A signal another
    thread catches is marked a moment before its byte is written: a reader that notes its call
    and drains the pipe before the byte comes, soon after a full drain, acts on it twice. A
    signal thread cannot rely on the order at all (the main thread runs the handler whenever it
    next runs Python code): it reads only the pipe and empties :attr:`_noted`, so a signal whose
    byte was dropped is lost (a flood reaches every thread that does not block the signals, the
    signal thread included).
    """

    def __init__(self, signums: Iterable[int]) -> None:
        self._pending: list[int] = []
        self._noted: dict[int, deque[Any]] = {s: deque() for s in signums}  # one frame per handler call
        self._wakeup = Wakeup()
        self._capacity = self._wakeup.capacity
        self._drains_since_full = FULL_LATELY + 1
        self._old_fd = signal.set_wakeup_fd(self._wakeup.write_fd, warn_on_full_buffer=False)
        self._previous = {s: signal.signal(s, calls.insert) for s, calls in self._noted.items()}
        signal.pthread_sigmask(signal.SIG_UNBLOCK, list(self._previous))  # held since a fork: now ours

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> int | None:
        """The next signal caught, waiting up to ``timeout`` s (less if one of ``fds`` is readable)."""
        if not self._pending:
            self._wakeup.wait(timeout, fds)
        noted_before = {s: len(calls) for s, calls in self._noted.items() if calls}
        read = self._wakeup.drain()
        for signum in read:
            self._queue(signum)
        self._recover(noted_before, read)
        return self._pending.pop(0) if self._pending else None

    def _queue(self, signum: int) -> None:
        if signum in self._previous and self._pending.count(signum) < MOST_WAITING:  # 0: a poke
            self._pending.append(signum)

    def _recover(self, noted_before: dict[int, int], read: bytes) -> None:
        """Queue the deliveries whose bytes a full pipe dropped (see the class's docstring)."""
        self._drains_since_full = 0 if len(read) >= self._capacity else self._drains_since_full + 1
        if threading.current_thread() is not threading.main_thread():
            self._forget_all()  # a signal thread reads only the pipe
            return
        full_lately = self._drains_since_full <= FULL_LATELY
        for signum, calls in self._noted.items():
            before, got = noted_before.get(signum, 0), read.count(signum)
            if full_lately:
                for _ in range(min(before - got, MOST_WAITING)):
                    self._queue(signum)
            _forget(calls, max(got, before))

    def _forget_all(self) -> None:
        for calls in self._noted.values():
            calls.clear()

    def poke(self) -> None:
        """End a ``wait`` without a signal."""
        self._wakeup.set()

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._old_fd)
        self._wakeup.close()
        self._forget_all()


def _forget(calls: deque[Any], count: int) -> None:
    """Drop ``count`` of the handler calls noted in ``calls`` (all of them if fewer)."""
    if count >= len(calls):
        calls.clear()
    else:
        for _ in range(count):
            calls.popleft()


class Dispatcher:
    """Calls a service's action for each signal it is sent, through the stop cascade."""

    def __init__(
        self,
        meaning: Mapping[int, Intent],
        actions: Mapping[Intent, Callable[[], None]],
        *,
        repeated_stop_is_immediate: bool = True,
    ) -> None:
        missing = set(meaning.values()) - set(actions)
        if missing:
            raise ValueError(f"no action for {sorted(i.name for i in missing)}")
        self.meaning = dict(meaning)
        self.actions = dict(actions)
        self.repeated_stop_is_immediate = repeated_stop_is_immediate
        self.phase = Phase.RUNNING

    @property
    def stopping(self) -> bool:
        return self.phase is not Phase.RUNNING

    def dispatch(self, signum: int | None) -> None:
        if signum is None:  # a timeout
            return
        intent = self.meaning.get(signum)
        if intent is None:  # a signal that only wakes the loop (SIGCHLD)
            return
        name = signal.Signals(signum).name
        if intent in (Intent.RESTART, Intent.RESTART_NOW) and self.stopping:
            log.info("restart signal %s ignored: %s", name, self.phase.value)
        elif intent is Intent.STOP and self.stopping:
            if self.repeated_stop_is_immediate:
                self._act(Intent.STOP_NOW, f"second stop signal {name}: immediate stop")
        else:
            self._act(intent, f"{_KIND[intent]} signal {name}: {intent.value}")

    def _act(self, intent: Intent, line: str) -> None:
        self.phase = _PHASE_AFTER.get(intent, self.phase)
        if intent in _LOGGED_AFTER:
            self.actions[intent]()
            log.log(logging.WARNING if intent is Intent.STOP_NOW else logging.INFO, line)
        else:
            log.info(line)
            self.actions[intent]()


class Signals:
    """A service's signals: caught by a :class:`SignalQueue`, acted upon by a :class:`Dispatcher`.

    Create it in the main thread. Either the main loop calls :meth:`wait`, or
    :meth:`act_in_thread` starts a thread that does (where the main thread runs handlers).
    """

    def __init__(
        self,
        meaning: Mapping[int, Intent],
        actions: Mapping[Intent, Callable[[], None]],
        *,
        repeated_stop_is_immediate: bool = True,
        wake_on: Iterable[int] = (),
    ) -> None:
        self.dispatcher = Dispatcher(meaning, actions, repeated_stop_is_immediate=repeated_stop_is_immediate)
        self.queue = SignalQueue([*meaning, *wake_on])
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def stopping(self) -> bool:
        return self.dispatcher.stopping

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> None:
        """Wait up to ``timeout`` s for a signal (less if one of ``fds`` is readable); act on it."""
        self.dispatcher.dispatch(self.queue.wait(timeout, fds))

    def act_in_thread(self) -> Signals:
        self._thread = threading.Thread(target=self._act_until_closed, name="pq-signals", daemon=True)
        self._thread.start()
        return self

    def _act_until_closed(self) -> None:
        while not self._closing:
            try:
                self.wait(1.0)
            except Exception:  # noqa: BLE001 - the signal thread must outlive a failed action
                log.exception("signal action failed")

    def close(self) -> None:
        """Stop acting and put the previous handlers back."""
        self._closing = True
        if self._thread is not None:
            self.queue.poke()
            self._thread.join(5)
        self.queue.restore()


class LoopControl:
    """A service loop's stop flag and idle wait, shared by the worker's processors and the scheduler.

    :meth:`stop` and :meth:`wake` take no lock (a plain flag and a self-pipe write), so any thread
    may call them, even a signal handler; only the loop's own thread calls :meth:`idle`.
    """

    def __init__(self) -> None:
        self.stopping = False
        self._wakeup = Wakeup()

    def stop(self) -> None:
        """Stop the loop at its next check; end its idle wait now."""
        self.stopping = True
        self._wakeup.set()

    def wake(self) -> None:
        """End the loop's idle wait now (there may be work)."""
        self._wakeup.set()

    def idle(self, seconds: float) -> None:
        """Wait ``seconds``, or less if woken or stopped meanwhile."""
        self._wakeup.wait(seconds)
        self._wakeup.clear()


class OutageWait:
    """How long a service waits after each failure in a row of its database work (a poll, a
    finish, a tick, the wake-up listener's connection): ``backoff``'s wait of that failure
    (:func:`policy.backoff`; the policy's ``OUTAGE_BACKOFF`` unless given), until a success."""

    def __init__(self, backoff: policy.Backoff = policy.OUTAGE_BACKOFF) -> None:
        self.backoff = backoff
        self.failures = 0

    def failed(self) -> float:
        """The wait after this failure (the next one in a row waits longer, up to the cap)."""
        self.failures += 1
        return policy.backoff(self.backoff, self.failures, _NO_DRAW)

    def succeeded(self) -> None:
        self.failures = 0


class _NoDraw:
    """The random source of an unjittered backoff, which never draws."""

    def random(self) -> float:
        raise AssertionError("an outage backoff has no jitter")


_NO_DRAW = _NoDraw()


def reload_settings(
    loader: Callable[[], dict] | None, current: dict, opens: Callable[[dict], Any] | None = None, *, apart: bool = False
) -> dict:
    """The settings ``loader`` reads now; ``current`` itself without a loader or when the new
    configuration is broken (logged: the service keeps running as it was). ``opens`` is how the
    service opens and checks its database from settings: a configuration it cannot use (an
    unknown driver, a URL option the driver refuses, a table not its own, a read-only database)
    is broken too; one whose database only cannot be used now (unreachable, its table not made
    yet) is taken, and the service keeps trying it as it does from its start. What ``opens``
    returns is closed at once. ``apart``: check in a child process (a process that forks must
    not connect itself: :mod:`queue_core.worker.forked_check`)."""
    if loader is None:
        return current
    try:
        new = loader()
        if opens is not None and apart:
            CheckApart(lambda: opens(new).close(), WORKER_SIGNALS).result(RELOAD_CHECK_TIME)
        elif opens is not None:
            _check_in_time(opens, new, RELOAD_CHECK_TIME)
    except TimeoutError as exc:
        log.warning("config reloaded; %s (retried as at start)", exc)
    except DatabaseError as exc:
        if isinstance(exc, (ForeignTableError, AccessDeniedError)):
            return _kept(current, exc)
        log.warning("config reloaded; its database cannot be used now (retried as at start): %s", exc)
    except Exception as exc:  # noqa: BLE001 - keep running on a broken config
        return _kept(current, exc)
    return new


#: the longest a reload waits for its check of the new configuration's database: meanwhile the
#: service's loop does not act on signals (a lock held on the table, a server that never answers)
RELOAD_CHECK_TIME = 5.0


def _check_in_time(opens: Callable[[dict], Any], settings: dict, limit: float) -> None:
    """``opens(settings).close()`` in a thread of its own; raise what it raised, or TimeoutError
    when it has not ended within ``limit`` seconds (it is left to end on its own, and closes
    what it opened then)."""
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            opens(settings).close()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller
            outcome.append(exc)

    checker = threading.Thread(target=check, name="pq-reload-check", daemon=True)
    checker.start()
    checker.join(limit)
    if not outcome:
        raise TimeoutError(f"its database did not answer its check within {limit:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _kept(current: dict, exc: BaseException) -> dict:
    log.error("config reload failed, keeping the old config: %s", exc)
    return current
