"""The wake-up listener: idle processors poll as soon as a task is submitted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..errors import DatabaseError
from ..rules import policy
from .service import OutageWait

log = logging.getLogger("queue_core.worker")


class WakeupListener(threading.Thread):
    """Wakes idle processors when tasks are submitted: by PostgreSQL's LISTEN/NOTIFY, elsewhere by
    the wake-up probe (``Queue.listen``).

    Without it, an idle processor finds new work at its next poll (``poll_interval``); with it,
    within milliseconds (``wake_interval`` without notifications). A lost connection is
    re-established with backoff; meanwhile polling goes on as usual, so a missed wake-up delays a
    task by at most one poll interval.
    """

    def __init__(self, queue, wake: Callable[[], None]):
        super().__init__(name="pq-waker", daemon=True)
        self.queue = queue
        self.wake = wake
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        backoff = OutageWait(policy.Backoff(0.5, cap=policy.OUTAGE_BACKOFF.cap, jitter=0.0))
        while not self._halt.is_set():
            try:
                self.queue.listen(self.wake, self._halt, timeout=0.5)
            except DatabaseError as exc:
                log.warning("wake-up listener lost its connection (polling meanwhile): %s", exc)
                self._halt.wait(backoff.failed())
                continue
            except Exception:  # noqa: BLE001 - never take the worker down; polling still works
                log.exception("wake-up listener crashed (polling meanwhile)")
                self._halt.wait(10.0)
            backoff.succeeded()


def start_listener(queue, wake: Callable[[], None]) -> WakeupListener | None:
    """A started listener calling ``wake`` on each notification; None where there are none."""
    if not queue.wakes:
        return None
    listener = WakeupListener(queue, wake)
    listener.start()
    return listener
