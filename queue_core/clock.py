"""Clocks: the only place queue_core reads the time (leaf module).

Every time-dependent call takes ``now=`` (Unix epoch seconds); without it the queue's
clock is asked. Tests inject a :class:`FakeClock` instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    """Wall-clock time from ``time.time()``."""

    def now(self) -> float:
        return time.time()


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
    if not (math.isfinite(value) and 0 <= value <= 1e13):  # the range check_time accepts
        raise ValidationError(f"now must be epoch seconds between 0 and 1e13, got {value!r}")
    return value
