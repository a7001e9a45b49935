"""What an operator reads of everything (queue layer), mixed into :class:`~queue_core.api.queue.Queue`:
the event stream of every task (``events``), a task's history (``history``), the registered
workers (``workers``).

Reads only: nothing here changes a task.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import DatabaseError, ValidationError
from ..rules.failure_groups import FailureGroup, group_failures
from ..rules.validate import check_duration, check_name, check_queue, check_tag, check_time
from ..store.protocol import EVENT_KINDS, Store
from . import event_stream as stream
from .task_history import TaskEvent, read_history
from .worker_registry import WorkerInfo, worker_info


class QueueInsight:
    """Needs ``store``, ``config``, ``now()`` and ``notifies`` (the queue's)."""

    store: Store
    config: dict
    now: Callable[..., float]

    def workers(self, *, now: float | None = None) -> list[WorkerInfo]:
        """The worker processes seen within ``registry_timeout``, oldest first, each with the
        number of tasks it holds now."""
        now = self.now(now)
        rows = self.store.worker_rows(now - self.config["registry_timeout"], now)
        return [worker_info(r) for r in rows]

    def failures(
        self, *, queue: str | None = None, type: str | None = None, tag: str | None = None
    ) -> list[FailureGroup]:
        """The tasks that ended as failure (and are still kept: ``failure_retention``), grouped by
        queue, type and the class their error names, the largest group first."""
        queue, type, tag = (
            None if queue is None else check_queue(queue),
            None if type is None else check_name(type, "task type"),
            None if tag is None else check_tag(tag),
        )
        heads = self.store.failure_heads(queue=queue, type=type, tag=tag)
        return group_failures(heads, self.store.failure_samples([h["newest"] for h in heads]))

    def history(self, key: str) -> list[TaskEvent]:
        """What happened to task ``key``, oldest first (``Task.history``)."""
        return read_history(self.store, check_name(key, "task key"))

    def events(
        self,
        *,
        since: Any = None,
        follow: bool = False,
        queue: str | None = None,
        tracked: bool = False,
        kinds: Iterable[str] | None = None,
        key: str | None = None,
        poll_interval: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[TaskEvent]:
        """The events of every task (submitted, claimed, finished, retried, ...), oldest first,
        each with the ``cursor`` after it.

        ``since``: where to start: None, everything still retained; ``"now"``, only what happens
        from now on; epoch seconds or a datetime, what happened from then on; the ``cursor`` of
        an event, what came after it (nothing missed, nothing twice). ``follow``: keep reading
        as events happen (woken by a notification on PostgreSQL when a tracked task changes or a
        task is submitted, else every ``poll_interval`` seconds) until ``stop`` is set; else end
        once everything there is has been read. Filters: ``queue``, ``tracked`` (events of
        tasks tracked when they changed), ``kinds``, ``key``."""
        wanted = stream.StreamFilter(
            queue=None if queue is None else check_queue(queue),
            tracked=bool(tracked),
            kinds=_kinds(kinds),
            key=None if key is None else check_name(key, "task key"),
        )
        interval = check_duration(
            poll_interval if poll_interval is not None else self.config["poll_interval"], "poll_interval", positive=True
        )
        start, not_before = self._stream_start(since)
        wanted = dataclasses.replace(wanted, not_before=not_before)
        return self._read_events(start, wanted, follow, interval, stop or threading.Event())

    def _read_events(
        self, start: stream.Cursor, wanted: stream.StreamFilter, follow: bool, interval: float, stop: threading.Event
    ) -> Iterator[TaskEvent]:
        """The reading of :meth:`events`; a follower's listener (PostgreSQL) ends with it."""
        done = threading.Event()
        wait = self._stream_waiter(stop, done) if follow else stop.wait
        try:
            yield from stream.follow(
                self.store,
                start,
                wanted,
                clock=self.now,
                follow=follow,
                wait=wait,
                poll_interval=interval,
                gap_timeout=self.config["event_gap_timeout"],
                stop=stop,
            )
        finally:
            done.set()

    def _stream_start(self, since: Any) -> tuple[stream.Cursor, float | None]:
        """Where a read of the events ``since`` starts, and (since a time) the time before which
        it delivers nothing."""
        if since is None:
            return stream.Cursor(), None
        if isinstance(since, str):
            if since == "now":
                ends = [self.store.stream_end(s) for s in stream.SOURCES]
                return stream.Cursor(stream.Position(ends[0]), stream.Position(ends[1])), None
            return stream.Cursor.parse(since), None
        if isinstance(since, dt.datetime):
            if since.tzinfo is None:
                raise ValidationError("since: give a datetime with a timezone (an aware datetime)")
            since = since.timestamp()
        at = check_time(since, "since")
        starts = [self.store.stream_start(s, at) for s in stream.SOURCES]
        return stream.Cursor(stream.Position(starts[0]), stream.Position(starts[1])), at

    def _stream_waiter(self, stop: threading.Event, done: threading.Event) -> Callable[[float], Any]:
        """How a follower waits for more: until the next notification (PostgreSQL with notify
        on: a listener thread, reconnecting after a failure, until ``done``) or ``seconds``, or
        ``stop``."""
        if not self.notifies:  # type: ignore[attr-defined]  # Queue.notifies, a property
            return stop.wait
        woken = threading.Event()

        def listen() -> None:
            while not done.is_set():
                try:
                    self.store.wakeup_listen(woken.set, done, timeout=0.5)
                except DatabaseError:
                    done.wait(1.0)

        threading.Thread(target=listen, name="pq-events-listener", daemon=True).start()

        def wait(seconds: float) -> None:
            woken.wait(seconds)
            woken.clear()

        return wait


def _kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        listed = list(kinds)
    except TypeError:
        raise ValidationError(f"kinds must be a list of event kinds, not {type(kinds).__name__}") from None
    if not all(isinstance(k, str) for k in listed):
        raise ValidationError("kinds must be a list of event kinds (strings)")
    out = frozenset(listed)
    unknown = sorted(k for k in out if k not in EVENT_KINDS)
    if unknown:
        raise ValidationError(f"unknown event kind {unknown[0]!r}; kinds: {', '.join(EVENT_KINDS)}")
    return out
