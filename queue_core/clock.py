"""Clocks: the only place queue_core reads the time (leaf module).

Every time-dependent call takes ``now=`` (Unix epoch seconds); without it the queue's
clock is asked. On MySQL/MariaDB and PostgreSQL that is a :class:`ServerClock`: the database
server's clock is the one clock of every machine (docs/queue.md, "One clock"); on SQLite the
host's :class:`SystemClock`. Tests inject a :class:`FakeClock` instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .rules.validate import MAX_TIME

#: how often a :class:`ServerClock` reads the server's clock again (s)
SERVER_CLOCK_REFRESH = 60.0
#: a reading that took longer than this is too imprecise to replace a good one (s)
SERVER_CLOCK_MAX_RTT = 0.5
#: after a failed or imprecise reading, the next try comes this soon (s)
SERVER_CLOCK_RETRY = 5.0


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    """Wall-clock time from ``time.time()``."""

    def now(self) -> float:
        return time.time()


@dataclass(frozen=True)
class ClockReading:
    """One reading of the server's clock."""

    server: float  #: the server's time (epoch seconds)
    at: float  #: this process's monotonic time when the server read it (its round trip's middle)
    rtt: float  #: the round trip's length (s): the reading is this precise


class ServerClock:
    """The database server's clock, carried between readings by this process's monotonic clock.

    ``now = server time at the last reading + monotonic time elapsed since``. The host's wall
    clock is never read: a machine whose clock is minutes off, or is stepped by NTP, tells the
    same time as every other. The server is read at first use and every ``refresh`` seconds
    (``read(monotonic)``: one short query, timed without the connection's set-up); a failed
    reading keeps the last one (the monotonic clock drifts by parts per million), and only a
    clock that was never read raises (DatabaseError). Thread-safe without a lock: a reading is
    one object, replaced whole.
    """

    def __init__(
        self,
        read: Callable[[Callable[[], float]], ClockReading],
        *,
        refresh: float = SERVER_CLOCK_REFRESH,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._read_server, self._refresh, self._monotonic = read, refresh, monotonic
        self._reading: ClockReading | None = None
        self._next_read = -math.inf

    def now(self) -> float:
        if self._monotonic() >= self._next_read:
            self._read()
        reading = self._reading
        assert reading is not None  # set by _read, or it raised
        return reading.server + (self._monotonic() - reading.at)

    def _read(self) -> None:
        try:
            reading = self._read_server(self._monotonic)
        except Exception:
            if self._reading is None:
                raise
            self._retry_soon()
            return
        if reading.rtt > SERVER_CLOCK_MAX_RTT and self._reading is not None:
            self._retry_soon()  # imprecise: the last good reading stays
            return
        self._reading = reading
        self._next_read = self._monotonic() + self._refresh

    def _retry_soon(self) -> None:
        self._next_read = self._monotonic() + min(self._refresh, SERVER_CLOCK_RETRY)


class FakeClock:
    """A clock that only moves when told to (thread-safe)."""

    def __init__(self, start: float = 1_700_000_000.0):
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def set(self, t: float) -> None:
        with self._lock:
            self._now = float(t)

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now


def resolve_now(now: float | int | None, clock: Clock) -> float:
    """Return ``now`` as a float, asking ``clock`` when it is None."""
    if now is None:
        return float(clock.now())
    from .errors import ValidationError

    if isinstance(now, bool) or not isinstance(now, (int, float)):
        raise ValidationError(f"now must be epoch seconds (int or float), got {type(now).__name__}")
    try:
        value = float(now)
    except OverflowError:  # an int beyond any float
        value = math.inf
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME):  # the range check_time accepts
        raise ValidationError(f"now must be epoch seconds between 0 and {MAX_TIME:g}, got {value!r}")
    return value
