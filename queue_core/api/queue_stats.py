"""Statistics of tasks as the queue API gives them (queue layer), mixed into
:class:`~queue_core.api.queue.Queue`: the roll-up of the events into buckets (workers do it every
``stats_interval`` and before each purge), the pruning of old buckets, and reads of them.

A read is answered from minute buckets while they are kept (:data:`statistics.MINUTE_KEEP`),
else from hour buckets; the all-time buckets feed the metrics' counters. An event is counted by
the first roll-up after it commits, or by the delete that removes it (``store/stats.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from ..errors import ValidationError
from ..rules import statistics
from ..rules.statistics import Bucket, Statistics
from ..rules.validate import check_name, check_queue, check_time
from ..store.protocol import Store


class QueueStatistics:
    """Needs ``store``, ``config`` and ``now()`` (the queue's)."""

    store: Store
    config: dict
    now: Callable[..., float]

    def roll_up_stats(self, *, now: float | None = None) -> int:
        """Count the events not counted yet (ids passed over before included, until
        ``event_gap_timeout``); how many (0 while another process rolls up)."""
        return self.store.stats_roll_up(self.now(now), self.config["event_gap_timeout"])

    def prune_stats(self, *, now: float | None = None) -> int:
        """Delete minute buckets older than two days and hour buckets older than
        ``stats_retention``; how many."""
        now = self.now(now)
        return self.store.stats_prune(
            [(statistics.MINUTE, now - statistics.MINUTE_KEEP), (statistics.HOUR, now - self.config["stats_retention"])]
        )

    def statistics(
        self,
        since: Any = None,
        *,
        until: Any = None,
        queue: str | None = None,
        type: str | None = None,
        now: float | None = None,
        roll_up: bool = True,
        exact: bool = True,
    ) -> Statistics:
        """Tasks started, succeeded, failed, cancelled and retried, with their wait and run
        times, per bucket of time (a minute, or an hour for reads reaching back more than two
        days) and summed per queue and type (``Statistics.totals``), from ``since`` (epoch
        seconds or an aware datetime; default: an hour ago) until ``until`` (default: now).
        ``roll_up``: count what the workers have not rolled up yet first (needs write access);
        without it the read adds those events itself, writing nothing. ``exact``: percentiles of
        a total of at most ``statistics.EXACT_MOST`` values from the values themselves
        (:meth:`_with_samples`)."""
        now = self.now(now)
        start = now - 3600 if since is None else _time(since, "since")
        end = now if until is None else _time(until, "until")
        queue = None if queue is None else check_queue(queue)
        type = None if type is None else check_name(type, "task type")
        if roll_up:
            self.roll_up_stats(now=now)
        span = statistics.read_span(start, now)
        rows = self.store.stats_rows(span, start, end, queue, type, uncounted=True)
        buckets = tuple(Bucket(k[2], k[3], k[0], k[1], tally) for k, tally in rows)
        read = Statistics(start, end, span, buckets)
        return self._with_samples(read) if exact else read

    def _with_samples(self, read: Statistics) -> Statistics:
        """``read`` with the values of its events, if a total counts few enough to be told
        exactly (``Statistics.small_samples``): from the newest ``EXACT_MOST + 1`` events, one
        read bounded along the primary key. A total whose values are not all among them (older
        events, or purged) keeps the percentiles of its buckets (``statistics.exactly``)."""
        if not read.small_samples():
            return read
        events = self.store.event_newest(statistics.EXACT_MOST + 1)
        samples = statistics.samples_of(events, read.span, read.since, read.until)
        return dataclasses.replace(read, samples=samples)

    def stats_totals(self) -> list[Bucket]:
        """The all-time buckets, one per queue and type, with the events no roll-up has counted
        yet (what the metrics' counters show: whole as soon as an event commits)."""
        return [Bucket(k[2], k[3], k[0], k[1], tally) for k, tally in self.store.stats_totals(uncounted=True)]


def _time(value: Any, what: str) -> float:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValidationError(f"{what}: give a datetime with a timezone (an aware datetime)")
        value = value.timestamp()
    return check_time(value, what)
