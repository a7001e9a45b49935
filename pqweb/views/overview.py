"""The overview: per queue its waiting, running and failed tasks, its oldest wait, its
throughput over the last hour and whether it is paused; the workers alive. Pause and resume."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queue_core.api.queue import Queue, QueueInfo
from queue_core.rules.statistics import MINUTE, Statistics, bucket_start

from .. import charts
from ..actions import queue_actions
from ..render import render
from .common import action_form, blocking, check_confirmed, check_offered, queue_of, see_other

#: minutes of throughput a queue's chart shows
CHART_MINUTES = 60


@dataclass(frozen=True)
class QueueRow:
    """A queue as the overview shows it."""

    info: QueueInfo
    failed_last_hour: int
    throughput: charts.Sparkline


def overview_data(queue: Queue) -> dict:
    """What the overview shows, read in 5 statements (6 with workers alive): the queues'
    counts and settings, an hour of statistics (its buckets only: no percentile is shown), the
    workers."""
    now = queue.now()
    stats = queue.statistics(now=now, roll_up=False, exact=False)
    infos = queue.queues(now=now, finished=False, also={b.queue for b in stats.buckets})
    workers = queue.workers(now=now)
    rows = [_row(info, stats, now) for info in infos]
    return {"queues": rows, "workers_alive": len(workers), "now": now}


def _row(info: QueueInfo, stats: Statistics, now: float) -> QueueRow:
    since = bucket_start(MINUTE, now) - (CHART_MINUTES - 1) * MINUTE
    mine = [b for b in stats.buckets if b.queue == info.name]
    finished = [(b.start, b.tally.succeeded + b.tally.failed + b.tally.cancelled) for b in mine]
    failed = sum(b.tally.failed for b in mine)
    return QueueRow(info, failed, charts.sparkline(charts.per_minute(finished, since=since, minutes=CHART_MINUTES)))


def page(request: Request) -> Response:
    return render(request, "overview.html", overview_data(queue_of(request)))


def live(request: Request) -> Response:
    """The part of the overview that updates itself."""
    return render(request, "_overview_live.html", overview_data(queue_of(request)))


def _queue_action(name: str, done: str):
    """The POST handler calling ``Queue.<name>(queue)`` for the form's queue (pause, resume)."""

    async def act(request: Request) -> Response:
        form = await action_form(request)
        queue, name_of = queue_of(request), str(form.get("queue", ""))
        paused = (await blocking(queue.queue_settings, name_of)).paused
        check_offered(name, queue_actions(paused), f"queue {name_of!r}")
        check_confirmed(form, name, f"Pause queue {name_of!r}? Its waiting tasks stop being started.", "/")
        await blocking(getattr(queue, name), name_of)
        return see_other("/", done=done)

    return act


ROUTES = [
    Route("/", page),
    Route("/live/overview", live),
    Route("/queues/pause", _queue_action("pause", "paused"), methods=["POST"]),
    Route("/queues/resume", _queue_action("resume", "resumed"), methods=["POST"]),
]
