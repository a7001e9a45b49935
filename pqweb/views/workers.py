"""The worker processes seen lately: host, pid, queues, started, last seen, tasks held."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..render import render
from .common import queue_of


def _data(request: Request) -> dict:
    queue = queue_of(request)
    now = queue.now()
    return {"workers": queue.workers(now=now), "now": now}


def page(request: Request) -> Response:
    return render(request, "workers.html", _data(request))


def live(request: Request) -> Response:
    return render(request, "_workers_live.html", _data(request))


ROUTES = [Route("/workers", page), Route("/live/workers", live)]
