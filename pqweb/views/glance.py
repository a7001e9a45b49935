"""The overview's places for the other packages, each a fragment the overview loads and keeps
live: the schedules due next (perfectsched) and the workflow runs running and failed lately
(pqflow)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import pqflow

from ..render import render
from .common import queue_of
from .schedules import due_next, overdue, scheduler_of

#: rows of each part
SHOWN = 5


def schedules_due(request: Request) -> Response:
    sched = scheduler_of(request)
    due = []
    if sched is not None:
        now = sched.queue.now()
        due = [(m, f, overdue(m, now)) for m, f in due_next(list(sched.list()), SHOWN)]
    return render(request, "_glance_schedules.html", {"sched": sched, "due": due})


def runs_recent(request: Request) -> Response:
    queue = queue_of(request)
    running = pqflow.runs_page(queue, status="running", limit=SHOWN)
    failed = pqflow.runs_page(queue, status="failed", limit=SHOWN)
    return render(request, "_glance_runs.html", {"running": running.runs, "failed": failed.runs})


ROUTES = [Route("/live/schedules-due", schedules_due), Route("/live/runs-recent", runs_recent)]
