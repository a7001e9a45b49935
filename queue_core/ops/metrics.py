"""Prometheus metrics of a queue (queue layer), read from the database at each scrape through
``prometheus_client`` (the ``metrics`` extra): ``perfectqueue metrics --listen``, or
:func:`wsgi_app` / :func:`asgi_app` to mount in an application's own server.

What a scrape reads (docs/operations.md#metrics): the tasks not finished by queue, type and status
through the claim indexes (never the finished rows), the all-time statistics buckets with the
events no roll-up has counted yet, in one snapshot (the counters and histograms: whole from the
moment an event commits, never going back; at 0 for a queue and type with unfinished tasks that
has counted nothing yet), the registered workers, the queues' settings, and what the packages
above the queue add through the entry point group ``pq.metrics`` (perfectsched: schedule lag;
pqflow: workflow runs by status): each such entry is a callable ``(queue, now, options) -> iterable of Sample``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .. import extras
from ..errors import TaskError
from ..rules import statistics

if TYPE_CHECKING:
    from ..api.queue import Queue

log = logging.getLogger("queue_core.metrics")

#: the entry point group of the metrics other packages add
ENTRY_POINTS = "pq.metrics"
_OUTCOMES = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled"}


@dataclass(frozen=True)
class Sample:
    """One value of a gauge another package adds (``name`` without the ``pq_`` prefix)."""

    name: str
    documentation: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0


def _prometheus(purpose: str = "metrics"):
    """``prometheus_client.core``; MissingExtraError naming the ``metrics`` extra without it."""
    return extras.require("prometheus_client.core", purpose)


def check_installed(purpose: str = "perfectqueue metrics") -> None:
    """Raise MissingExtraError (naming the ``metrics`` extra) unless prometheus_client is installed."""
    _prometheus(purpose)


class QueueCollector:
    """A ``prometheus_client`` collector reading ``queue`` at each scrape. ``options`` go to the
    added collectors (``schedule_table``)."""

    def __init__(self, queue: Queue, options: dict | None = None, added: Iterable[Callable] | None = None):
        self.queue = queue
        self.options = dict(options or {})
        self.added = list(_added() if added is None else added)
        self.core = _prometheus()

    def collect(self) -> Iterator:
        now = self.queue.now()
        live = self.queue.store.stats_live_counts(now)
        yield from self._tasks(now, live)
        yield from self._totals(set(live))
        yield from self._workers_and_queues(now)
        yield from self._added_samples(now)

    def describe(self) -> list:
        return []  # read at each scrape: nothing to check at registration

    def _tasks(self, now: float, live: dict) -> Iterator:
        core = self.core
        tasks = core.GaugeMetricFamily(
            "pq_tasks", "Tasks not finished, by queue, type and status", labels=["queue", "type", "status"]
        )
        oldest = core.GaugeMetricFamily(
            "pq_oldest_waiting_age_seconds",
            "How long the longest-due waiting task of a queue has waited",
            labels=["queue"],
        )
        earliest: dict[str, float] = {}
        for (queue, type_), counts in sorted(live.items()):
            for status in ("waiting", "scheduled", "running", "pending"):
                tasks.add_metric([queue, type_, status], counts[status])
            if counts["oldest_due"] is not None:
                earliest[queue] = min(earliest.get(queue, now), counts["oldest_due"])
        for queue, due in sorted(earliest.items()):
            oldest.add_metric([queue], max(0.0, now - due))
        yield tasks
        yield oldest

    def _totals(self, known: set[tuple[str, str]]) -> Iterator:
        """The counters and histograms of every queue and type that has counted anything, and
        at 0 of those ``known`` (with unfinished tasks) that have not: a counter exists before
        its first increment, so that a rate over it sees the first one."""
        core = self.core
        labels = ["queue", "type"]
        started = core.CounterMetricFamily(
            "pq_tasks_started", "Attempts started (counted when they end)", labels=labels
        )
        finished = core.CounterMetricFamily(
            "pq_tasks_finished", "Tasks finished, by outcome", labels=[*labels, "outcome"]
        )
        retried = core.CounterMetricFamily("pq_tasks_retried", "Attempts that ended in a retry", labels=labels)
        wait = core.HistogramMetricFamily("pq_task_wait_seconds", "Seconds from due to start", labels=labels)
        run = core.HistogramMetricFamily(
            "pq_task_run_seconds", "Seconds from start to end of an attempt", labels=labels
        )
        tallies = {(b.queue, b.type): b.tally for b in self.queue.stats_totals()}
        for pair in known - set(tallies):
            tallies[pair] = statistics.Tally()
        for (queue, type_), tally in sorted(tallies.items()):
            key = [queue, type_]
            started.add_metric(key, tally.started)
            retried.add_metric(key, tally.retried)
            for name, outcome in _OUTCOMES.items():
                finished.add_metric([*key, outcome], getattr(tally, name))
            wait.add_metric(key, _buckets(tally.wait), tally.wait.total)
            run.add_metric(key, _buckets(tally.run), tally.run.total)
        yield from (started, finished, retried, wait, run)

    def _workers_and_queues(self, now: float) -> Iterator:
        core = self.core
        workers = core.GaugeMetricFamily("pq_workers", "Worker processes seen within registry_timeout")
        workers.add_metric([], len(self.queue.workers(now=now)))
        paused = core.GaugeMetricFamily("pq_queue_paused", "1 when a queue is paused", labels=["queue"])
        for name, settings in sorted(self.queue.store.queue_settings_all().items()):
            paused.add_metric([name], 1.0 if settings.paused else 0.0)
        yield workers
        yield paused

    def _added_samples(self, now: float) -> Iterator:
        families: dict[str, Any] = {}
        for add in self.added:
            try:
                samples = list(add(self.queue, now, self.options))
            except Exception as exc:  # noqa: BLE001 - a broken or unreadable addition: only its metrics left out
                text = str(exc) if isinstance(exc, TaskError) else f"{type(exc).__name__}: {exc}"
                log.warning("metrics of %s left out: %s", getattr(add, "__module__", add), text)
                continue
            for s in samples:
                family = families.get(s.name)
                if family is None:
                    family = families[s.name] = self.core.GaugeMetricFamily(
                        "pq_" + s.name, s.documentation, labels=sorted(s.labels)
                    )
                family.add_metric([s.labels[k] for k in sorted(s.labels)], s.value)
        yield from families.values()


def _buckets(d: statistics.Distribution) -> list[tuple[str, float]]:
    """A distribution as Prometheus's cumulative buckets."""
    out: list[tuple[str, float]] = []
    seen = 0
    for bound, count in zip(statistics.BOUNDS, d.counts, strict=False):
        seen += count
        out.append((repr(float(bound)), seen))
    out.append(("+Inf", d.count))
    return out


def _added() -> list[Callable]:
    """The collectors other installed packages add (entry point group ``pq.metrics``)."""
    out = []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        try:
            out.append(ep.load())
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the queue's metrics down
            log.warning("metrics entry point %s could not be loaded: %s", ep.name, exc)
    return out


def registry_for(queue: Any, options: dict | None = None) -> Any:
    """A ``prometheus_client`` registry holding only this queue's collector."""
    core = _prometheus()
    registry = core.CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(queue, options))
    return registry


def wsgi_app(queue: Any, options: dict | None = None) -> Callable:
    """A WSGI application serving the metrics of ``queue`` (mount it at ``/metrics``)."""
    import prometheus_client

    return prometheus_client.make_wsgi_app(registry_for(queue, options))


def asgi_app(queue: Any, options: dict | None = None) -> Callable:
    """An ASGI application serving the metrics of ``queue``."""
    import prometheus_client

    return prometheus_client.make_asgi_app(registry_for(queue, options))


def exposition(queue: Any, options: dict | None = None) -> bytes:
    """The metrics of ``queue`` now, in Prometheus's text format."""
    import prometheus_client

    return prometheus_client.generate_latest(registry_for(queue, options))
