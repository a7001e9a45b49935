"""The settler: successes of a processor's batch, waiting to be finished in one transaction."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import DatabaseError
from .service import OutageWait

log = logging.getLogger("queue_core.worker")


class Settler:
    """Successes waiting to be written, in one transaction per batch.

    A processor's successful tasks are finished together with its next claim (one commit
    for the batch); when a handler runs long, the monitor thread writes them after
    ``delay`` seconds instead, so a finish is never held back by another task. Until then
    the task keeps its lease: it is finished exactly as ``task.finish()`` would, fenced. A write
    that failed on a database error is tried again after a backoff (:class:`~queue_core.worker.service.OutageWait`).
    """

    def __init__(
        self,
        queue,
        delay: float = 0.05,
        release: Callable[[Any], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.queue = queue
        self.delay = delay
        self.clock = clock
        self.backoff = OutageWait()
        self._retry_at = 0.0  # after a failed write: not due before
        #: called with each task once its finish is written (or refused): the monitor stops
        #: heartbeating it, having kept its lease alive while the write waited (e.g. an outage)
        self.release = release or (lambda task: None)
        self._items: list[tuple[Any, float]] = []
        self._since: float | None = None
        self._lock = threading.Lock()
        #: held while a batch is written: a flush waits for one under way in another thread
        self._writing = threading.Lock()
        #: how many batches were written on their own (by the monitor thread or a flush), not
        #: with a claim: a burst processor's empty claim may have begun before one committed
        self.writes = 0

    def add(self, task, elapsed: float) -> None:
        with self._lock:
            self._items.append((task, elapsed))
            if self._since is None:
                self._since = self.clock()

    def take(self) -> list[tuple[Any, float]]:
        with self._lock:
            items, self._items, self._since = self._items, [], None
        return items

    def put_back(self, items: list[tuple[Any, float]]) -> None:
        if items:
            with self._lock:
                self._items[:0] = items
                self._since = self._since or self.clock()

    @property
    def waiting(self) -> bool:
        """Whether successes wait to be written."""
        with self._lock:
            return bool(self._items)

    def due(self) -> bool:
        """Whether the monitor thread should write the waiting finishes now."""
        since, now = self._since, self.clock()
        return since is not None and now - since >= self.delay and now >= self._retry_at

    def flush(self) -> None:
        """Write the waiting successes now (after any write another thread has under way)."""
        with self._writing:
            self._write()

    def _write(self) -> None:
        items = self.take()
        if not items:
            return
        try:
            self.queue.finish_many([t for t, _ in items])
        except DatabaseError as exc:
            wait = self.backoff.failed()
            self._retry_at = self.clock() + wait
            log.error("finish failed (will retry in %.1fs): %s", wait, exc)
            self.put_back(items)
            return
        except Exception:  # noqa: BLE001 - the monitor thread calls this: it must survive anything
            log.exception("could not finish %d tasks (their leases will expire and they run again)", len(items))
            for task, _ in items:
                self.release(task)
            return
        self.writes += 1
        self.report(items)

    def wrote_since(self, writes: int) -> bool:
        """Whether successes were written on their own since :attr:`writes` was ``writes``, or
        still wait to be (after waiting for a write under way, and writing what waits): what
        they set off (a workflow's next steps) may be due where a claim begun before saw nothing."""
        self.flush()
        with self._lock:
            waiting = bool(self._items)
        return waiting or self.writes != writes

    def report(self, items: list[tuple[Any, float]]) -> None:
        """Once ``items`` were written (here or with a claim): log each, and end any backoff."""
        self.backoff.succeeded()
        self._retry_at = 0.0
        for task, elapsed in items:
            self.release(task)
            if task.lost:
                log.warning("could not finish task=%s type=%s: its lease was taken over", task.key, task.type)
            elif task.deferred is not None and not task.done:
                log.error(
                    "could not finish task=%s type=%s (its lease will expire and it runs again)", task.key, task.type
                )
            else:
                log.info("finished task=%s type=%s (%.3fs)", task.key, task.type, elapsed)
