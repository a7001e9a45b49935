"""Workflow runs (pqflow): the list by workflow and status, newest first a page at a time; one
run with its DAG (an SVG document of its own, drawn by Graphviz), its steps, their timeline, why
a step is where it is; cancel and retry."""

from __future__ import annotations

import hashlib

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import pqflow
from pqflow.errors import RenderError
from queue_core.errors import ValidationError

from .. import charts
from ..actions import run_actions
from ..render import render
from .common import (
    action_form,
    blocking,
    check_confirmed,
    check_offered,
    int_param,
    query_string,
    queue_of,
    see_other,
    text_params,
    web_of,
)

FILTERS = ("workflow", "status")


def _run_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("say which run: ?id=RUN")
    return value


def page(request: Request) -> Response:
    filters = text_params(request.query_params, FILTERS)
    cursor = int_param(request.query_params.get("cursor"), "cursor")
    result = pqflow.runs_page(queue_of(request), **filters, cursor=cursor, limit=web_of(request).page_size)
    context = {
        "filters": filters,
        "statuses": pqflow.RUN_STATUSES,
        "page": result,
        "first_page": cursor is None,
        "first_query": query_string(filters),
        "next_query": query_string({**filters, "cursor": result.next_cursor}),
    }
    return render(request, "runs.html", context)


def run_data(request: Request) -> dict:
    """The run of ``?id=``, its map counts, its timeline and the version of its picture."""
    run = pqflow.get_run(_run_id(request.query_params.get("id")), queue=queue_of(request))
    steps = [(s.name, s.status, s.started_at, s.finished_at) for s in run.steps.values()]
    now = queue_of(request).now()
    unserved = run.unserved() if run.snapshot is None else None
    return {
        "run": run,
        "timeline": charts.timeline(steps, now),
        "version": _version(run),
        "now": now,
        "unserved": unserved,
    }


def _version(run: pqflow.Run) -> str:
    """Changes when the picture does (the image URL's cache-busting query)."""
    shown = [(n, s.status, str(s.items)) for n, s in run.steps.items()]
    return hashlib.sha256(repr((run.status, shown)).encode()).hexdigest()[:12]


def detail(request: Request) -> Response:
    return render(request, "run.html", run_data(request))


def live(request: Request) -> Response:
    """The run's live part; the DAG picture too (out of band) only when it changed since ``?v=``."""
    data = run_data(request)
    changed = request.query_params.get("v") != data["version"]
    return render(request, "_run_live.html", {**data, "graph_changed": changed})


def graph(request: Request) -> Response:
    """The run's DAG as an SVG document (an <img>: nothing in it runs, its styles are its own)."""
    run = pqflow.get_run(_run_id(request.query_params.get("id")), queue=queue_of(request))
    try:
        svg = pqflow.graph(run, "svg")
    except RenderError as exc:
        return Response(f"cannot draw the DAG: {exc}", status_code=503, media_type="text/plain")
    return Response(svg, media_type="image/svg+xml")


def why(request: Request) -> Response:
    run = pqflow.get_run(_run_id(request.query_params.get("id")), queue=queue_of(request))
    step = request.query_params.get("step", "")
    return render(request, "_why.html", {"run": run, "step": step, "why": run.why(step)})


def _act(fn, action: str, done: str):
    async def act(request: Request) -> Response:
        form = await action_form(request)
        run_id = _run_id(form.get("id"))
        run = await blocking(pqflow.get_run, run_id, queue=queue_of(request))
        check_offered(action, run_actions(run.status, run.cancel_requested), f"run {run_id!r} is {run.status}")
        question = f"Cancel run {run_id!r}? Nothing new starts and its running steps are told to stop."
        check_confirmed(form, action, question, "/run?" + query_string({"id": run_id}))
        await blocking(fn, queue_of(request), run_id)
        return see_other("/run", id=run_id, done=done)

    return act


ROUTES = [
    Route("/runs", page),
    Route("/run", detail),
    Route("/live/run", live),
    Route("/run/graph.svg", graph),
    Route("/run/why", why),
    Route("/run/cancel", _act(pqflow.cancel_run, "cancel-run", "run-cancelled"), methods=["POST"]),
    Route("/run/retry", _act(pqflow.retry_run, "retry-run", "run-retried"), methods=["POST"]),
]
