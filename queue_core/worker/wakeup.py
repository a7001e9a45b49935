"""A wake-up that a signal handler may set.

``threading.Event.set()`` takes the event's lock. A signal handler runs in the main thread
between two bytecodes, so when the signal lands while that same thread holds the lock (inside
``wait()`` or ``clear()``), ``set()`` waits for itself forever: the process hangs, still alive,
its monitor thread still beating. :class:`Wakeup` is a self-pipe instead: setting it is one
``os.write`` (async-signal-safe, no lock), waiting is ``select``.
"""

from __future__ import annotations

import fcntl
import os
import select
from collections.abc import Sequence


class Wakeup:
    """Set from any thread or signal handler; waited on by one thread."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def set(self) -> None:
        try:
            os.write(self._w, b"\0")
        except (BlockingIOError, OSError):  # full pipe: already set; closed: nobody waits
            pass

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> bool:
        """Wait until set, one of ``fds`` is readable, or ``timeout`` seconds passed; True if
        anything is readable. Does not clear."""
        try:
            readable, _, _ = select.select([self._r, *fds], [], [], max(0.0, timeout))
        except (InterruptedError, ValueError, OSError):  # ValueError/OSError: closed meanwhile
            return True
        return bool(readable)

    @property
    def read_fd(self) -> int:
        """The pipe's read end: readable once set (for a ``select`` that waits on more than this)."""
        return self._r

    @property
    def write_fd(self) -> int:
        """The pipe's write end (non-blocking): a byte written there sets the wake-up."""
        return self._w

    @property
    def capacity(self) -> int:
        """How many bytes the pipe holds unread before a write fails (Linux tells; elsewhere the
        least any pipe holds, so a check against it errs on the side of "was full")."""
        try:
            return fcntl.fcntl(self._r, fcntl.F_GETPIPE_SZ)
        except (AttributeError, OSError):
            return select.PIPE_BUF

    def drain(self) -> bytes:
        """Clear, returning the bytes that were written (a signal wakeup fd writes signal numbers)."""
        chunks = []
        try:
            while chunk := os.read(self._r, 65536):
                chunks.append(chunk)
        except (BlockingIOError, OSError):
            pass
        return b"".join(chunks)

    def clear(self) -> None:
        self.drain()

    def __del__(self) -> None:
        self.close()  # only once nothing can set it: a closed fd number may be reused

    def close(self) -> None:
        """Close the pipe (once: a second close could close a reused fd number)."""
        fds, self._r, self._w = (self._r, self._w), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
