"""A database check run in a child process of its own, for a process that forks.

A database client library is not always safe to fork after use: libpq's GSSAPI (Kerberos)
code keeps process-wide locks, and one held at the instant of a fork (by a thread using the
library, or ending) stays held for ever in the child, whose first connect then hangs (seen: a
worker processor hung in its first connect about once in fifty starts under load, after its
supervisor had checked the database in a thread). So a supervisor never connects itself: its
checks run in a short-lived child that sends back what the check raised through a pipe and
exits, and the supervisor's memory holds no client state for its processors to inherit.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import select
import signal
import time
from collections.abc import Callable, Iterable, Sequence

from ..errors import DatabaseError

#: a wait that acts on the caller's signals meanwhile: ``wait(seconds, fds)`` returns when one
#: of ``fds`` is readable or ``seconds`` passed
Wait = Callable[[float, Sequence[int]], None]

_STEP = 0.2


def fork_holding(signums: Iterable[int]) -> int:
    """``os.fork()``, the child holding ``signums`` (blocked: they stay pending) until it sets
    handlers of its own (:class:`~queue_core.worker.service.SignalQueue`). Sent before that, a signal
    would reach the handler inherited from the parent, a copy of the parent's queue that nobody
    reads: lost.

    The child gets the parent's objects out of its garbage collector's reach (``gc.freeze`` just
    before the fork, undone in the parent just after): its collections would otherwise walk every
    one of them, writing to each page that holds one, and so copy the parent's memory page by page
    (a third of a processor's start-up, seen). The parent collects as before."""
    held = set(signums)
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    pid = -1
    try:
        gc.freeze()
        pid = os.fork()
        return pid
    finally:
        if pid != 0:  # the parent (or no child): its objects collectable again, its signals caught
            gc.unfreeze()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


class CheckApart:
    """``check()`` running in a forked child; :meth:`result` waits for its outcome. ``signums``:
    the caller's signals, held across the fork and given their default actions in the child (a
    signal meant for the caller, sent to the child, must not reach the caller's handlers)."""

    def __init__(self, check: Callable[[], None], signums: Iterable[int] = ()) -> None:
        r, w = os.pipe()
        held = set(signums)
        self.pid = fork_holding(held)  # the caller's handlers are not the child's
        if self.pid == 0:
            os.close(r)
            _be_checker(check, w, held)
        os.close(w)
        self._r = r
        self._reply = b""

    def result(self, limit: float | None = None, wait: Wait | None = None) -> None:
        """Wait for the check (``wait``: how, acting on signals; else a plain ``select``); raise
        what it raised, or TimeoutError when it has not ended within ``limit`` seconds (it is
        killed then)."""
        deadline = None if limit is None else time.monotonic() + limit
        try:
            while not self._read():
                left = _STEP if deadline is None else min(_STEP, deadline - time.monotonic())
                if left <= 0:
                    raise TimeoutError(f"its database did not answer its check within {limit:g} s")
                (wait or _select)(left, [self._r])
        finally:
            self.kill()
        _raise(self._reply)

    def _read(self) -> bool:
        """Read what the child sent; True at its end (the pipe closed)."""
        readable, _, _ = select.select([self._r], [], [], 0)
        if not readable:
            return False
        chunk = os.read(self._r, 65536)
        self._reply += chunk
        return not chunk

    def kill(self) -> None:
        """End the child (at once, if it still runs) and close the pipe; once."""
        if self.pid <= 0:
            return
        pid, self.pid = self.pid, -1
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(self._r)


def _select(seconds: float, fds: Sequence[int]) -> None:
    select.select(list(fds), [], [], seconds)


def _raise(reply: bytes) -> None:
    if not reply:
        raise DatabaseError("the database check ended without an answer (its process was killed)")
    outcome = pickle.loads(reply)
    if outcome is not None:
        raise outcome


def _be_checker(check: Callable[[], None], w: int, held: set[int]) -> None:
    """The child: signals back to their defaults (the parent's handlers would write to the
    parent's wake-up pipe), run ``check``, send its outcome, exit; never return."""
    code = 0
    try:
        signal.set_wakeup_fd(-1)
        for signum in held:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        _send(w, _outcome(check))
    except BaseException:  # noqa: BLE001 - the parent sees no answer: "ended without an answer"
        code = 1
    finally:
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(code)


def _outcome(check: Callable[[], None]) -> bytes:
    try:
        check()
    except BaseException as exc:  # noqa: BLE001 - raised again by the parent
        try:
            data = pickle.dumps(exc)
            pickle.loads(data)  # an error whose class cannot be made again from its args fails here
            return data
        except Exception:  # noqa: BLE001 - an error that does not pickle: its class and text
            return pickle.dumps(DatabaseError(f"{type(exc).__name__}: {exc}"))
    return pickle.dumps(None)


def _send(w: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(w, view) :]
    os.close(w)
