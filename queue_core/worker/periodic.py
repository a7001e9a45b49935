"""The periodic chores of a worker's poll loop (the purge of finished rows, the roll-up of the
statistics): each due every so many seconds, the first at a random point of its period (workers
started together do not all do it at once), a failure logged once until it changes or ends (an
account without a grant fails at every try)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import TaskError

log = logging.getLogger("queue_core.worker")


@dataclass
class Chore:
    """``work()`` every ``interval`` seconds; ``done(result)`` says what it did, or None."""

    name: str
    interval: float
    work: Callable[[], int]
    done: Callable[[int], str | None] = lambda _n: None
    due: float = field(default=0.0)
    failed: str | None = None

    def __post_init__(self) -> None:
        self.due = time.monotonic() + random.uniform(0, self.interval)

    def run_if_due(self) -> None:
        if time.monotonic() < self.due:
            return
        try:
            said = self.done(self.work())
        except TaskError as exc:
            if str(exc) != self.failed:
                log.warning("%s failed (tried again every %gs, logged once): %s", self.name, self.interval, exc)
            self.failed = str(exc)
        else:
            if self.failed is not None:
                log.info("%s works again", self.name)
                self.failed = None
            if said:
                log.info("%s", said)
        self.due = time.monotonic() + self.interval
