"""What an operator does to named queues (queue layer), mixed into :class:`~queue_core.api.queue.Queue`:
list them with their counts, pause and resume them, limit them, move a task to another queue.

The settings live in the database (``<table>_queues``): every worker on every host reads them at
each claim, so a pause or a limit holds from the next claim on, and survives restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import NotFoundError, ValidationError
from ..rules.validate import check_int, check_name, check_queue, check_rate
from ..store.protocol import QUEUE_STATUSES, QueueSettings, Store

#: the values a queue's rate limit may be kept per (None: one limit for the whole queue)
RATE_KEYS = ("user", "type")


@dataclass(frozen=True)
class QueueInfo:
    """A queue as ``queues()`` reads it: its settings and its tasks by status."""

    name: str
    paused: bool
    concurrency: int | None
    rate_limit: int | None
    rate_window: float | None
    rate_key: str | None
    waiting: int
    running: int
    pending: int
    #: None: not counted (``queues(finished=False)``)
    finished: int | None
    #: how long its longest-due waiting task has been due (seconds; None: none is due)
    oldest_waiting_age: float | None

    @property
    def rate(self) -> str | None:
        """The rate limit as ``N/Ws`` (None: none)."""
        if self.rate_limit is None or self.rate_window is None:
            return None
        return f"{self.rate_limit}/{self.rate_window:g}s"

    def to_dict(self) -> dict[str, Any]:
        return {**{f: getattr(self, f) for f in self.__dataclass_fields__}, "rate": self.rate}


class QueueControls:
    """Needs ``store`` (a Store) and ``now(now)``."""

    store: Store
    now: Callable[[float | None], float]

    def queues(self, *, now: float | None = None, finished: bool = True, also: Iterable[str] = ()) -> list[QueueInfo]:
        """Every queue that has tasks or settings (and those named in ``also``), by name.
        ``finished=False``: without counting the finished rows (their count is None, and a queue
        that has only finished rows and no settings is left out unless named in ``also``): read
        through the indexes only, as cheap on a table of a million finished rows as on an empty
        one (a dashboard asks every few seconds)."""
        now = self.now(now)
        counts = self.store.queue_counts(now) if finished else self.store.queue_live_counts(now)
        settings = self.store.queue_settings_all()
        blank = {**dict.fromkeys(QUEUE_STATUSES, 0), "finished": 0 if finished else None, "oldest_due": None}
        names = sorted({*counts, *settings, *also})
        return [self._info(name, settings.get(name), counts.get(name, blank), now) for name in names]

    @staticmethod
    def _info(name: str, settings: QueueSettings | None, counts: dict, now: float) -> QueueInfo:
        s = settings or QueueSettings(name)
        c = counts
        oldest = c["oldest_due"]
        return QueueInfo(
            name=name,
            paused=s.paused,
            concurrency=s.concurrency,
            rate_limit=s.rate_limit,
            rate_window=s.rate_window,
            rate_key=s.rate_key,
            waiting=int(c.get("waiting", 0)),
            running=int(c.get("running", 0)),
            pending=int(c.get("pending", 0)),
            finished=None if c.get("finished", 0) is None else int(c.get("finished", 0)),
            oldest_waiting_age=None if oldest is None else max(0.0, now - oldest),
        )

    def queue_settings(self, name: str) -> QueueSettings:
        """What an operator set for queue ``name`` (the defaults when nothing)."""
        check_queue(name)
        return self.store.queue_settings_all().get(name) or QueueSettings(name)

    def pause(self, name: str, *, now: float | None = None) -> QueueSettings:
        """Stop handing out the tasks of queue ``name`` (running ones finish; submits still succeed).
        NotFoundError for a queue without tasks or settings (a misspelt name)."""
        return self._set_paused(name, True, now)

    def resume(self, name: str, *, now: float | None = None) -> QueueSettings:
        """Hand out the tasks of a paused queue again."""
        return self._set_paused(name, False, now)

    def _set_paused(self, name: str, paused: bool, now: float | None) -> QueueSettings:
        check_queue(name)
        if not self.store.queue_known(name):
            raise NotFoundError(f"queue {name!r} not found (no task and no settings): check its name with 'queues'")
        return self.store.queue_set_paused(name, paused, self.now(now))

    def limit(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: Any = None,
        rate_key: str | None = None,
        now: float | None = None,
    ) -> QueueSettings:
        """Set the limits of queue ``name`` (each None: none): at most ``concurrency`` of its
        tasks run at once across all workers; at most ``rate`` starts (``"100/60s"``, or
        ``(100, 60.0)``) in any window of that length, per value of ``rate_key`` (``"user"`` or
        ``"type"``) or for the whole queue."""
        check_queue(name)
        if concurrency is not None:
            concurrency = check_int(concurrency, "concurrency", minimum=1)
        rate_limit, rate_window = check_rate(rate) if rate is not None else (None, None)
        if rate_key is not None:
            if rate is None:
                raise ValidationError("rate_key needs a rate")
            if rate_key not in RATE_KEYS:
                raise ValidationError(f"rate_key must be one of {', '.join(RATE_KEYS)}, not {rate_key!r}")
        return self.store.queue_set_limits(
            name,
            self.now(now),
            concurrency=concurrency,
            rate_limit=rate_limit,
            rate_window=rate_window,
            rate_key=rate_key,
        )

    def move(self, key: str, queue: str, *, now: float | None = None) -> None:
        """Move a waiting task to another queue (TaskRunningError while it runs)."""
        check_name(key, "task key")
        check_queue(queue)
        self.store.task_move(key, queue, self.now(now))
