"""The failure groups (``Queue.failures``): failed tasks by queue, type and error class, each
with a bulk retry (through the confirmation page of ``views/tasks.py``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..render import render
from .common import query_string, queue_of


def page(request: Request) -> Response:
    groups = queue_of(request).failures()
    rows = [
        (g, query_string({"action": "retry", "queue": g.queue, "type": g.type, "error": g.error_class})) for g in groups
    ]
    return render(request, "failures.html", {"rows": rows})


ROUTES = [Route("/failures", page)]
