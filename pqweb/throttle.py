"""Login attempts per client: after :data:`MAX_FAILURES` wrong tokens from one client address
within :data:`WINDOW` seconds, its next attempts are refused (429, ``Retry-After``) until the
oldest of those failures leaves the window. Held in memory, per process; the clock is injected."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

#: wrong tokens a client may send within the window
MAX_FAILURES = 5
#: seconds a failure counts
WINDOW = 300.0
#: the most clients remembered at once (the least recently failing are forgotten past it)
MAX_CLIENTS = 10_000


class LoginThrottle:
    """The recent failed logins of each client address."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, limit: int = MAX_FAILURES, window: float = WINDOW
    ):
        self._clock = clock
        self._limit = limit
        self._window = window
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again; None when it may now."""
        times = self._recent(client)
        if len(times) < self._limit:
            return None
        return max(1, math.ceil(times[0] + self._window - self._clock()))

    def failed(self, client: str) -> None:
        times = self._recent(client)
        times.append(self._clock())
        self._failures.pop(client, None)
        self._failures[client] = times  # the most recent last: the first forgotten is the oldest
        while len(self._failures) > MAX_CLIENTS:
            del self._failures[next(iter(self._failures))]

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)

    def _recent(self, client: str) -> deque[float]:
        times = self._failures.get(client, deque())
        while times and times[0] <= self._clock() - self._window:
            times.popleft()
        return times
