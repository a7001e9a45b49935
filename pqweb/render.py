"""Pages from templates: :func:`templates` (autoescape on for every template) and :func:`render`."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from . import actions, formatting
from .security import CSRF_FIELD, session_of
from .settings import WebSettings

#: the messages a page shows after an action (the query names one: no text of the request is shown)
DONE = {
    "paused": "Queue paused.",
    "resumed": "Queue resumed.",
    "retried": "Task retried: it waits to run again.",
    "cancelled": "Task cancelled (a running task is told to stop).",
    "force-finished": "Task force-finished.",
    "moved": "Task moved.",
    "bulk-retried": "Tasks retried.",
    "bulk-cancelled": "Tasks cancelled.",
    "schedule-added": "Schedule added.",
    "schedule-modified": "Schedule changed.",
    "schedule-deleted": "Schedule deleted (the tasks it submitted stay).",
    "run-cancelled": "Run cancelled: nothing new starts, running steps are told to stop.",
    "run-retried": "Run retried: what did not succeed runs again.",
    "logged-in": "Logged in: actions are enabled.",
    "logged-out": "Logged out.",
}


def templates(web: WebSettings) -> Jinja2Templates:
    """The page templates, everything they show escaped."""
    env = Environment(
        loader=PackageLoader("pqweb", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        finalize=formatting.shown,  # every {{ }}: bidirectional controls shown, never applied
    )
    env.filters.update(age=formatting.age, when=formatting.when, pretty=formatting.pretty_json, cut=formatting.cut)
    env.filters.update(field=formatting.field, plain=formatting.plain)
    env.globals.update(web=web, csrf_field=CSRF_FIELD, queue_actions=actions.queue_actions)
    env.globals.update(run_actions=actions.run_actions)
    return Jinja2Templates(env=env)


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """Page ``name`` with ``context``, the session (its CSRF token) and the message of ``?done=``."""
    tpl: Jinja2Templates = request.app.state.templates
    done = DONE.get(request.query_params.get("done", ""))
    full = {"session": session_of(request), "done": done, **context}
    return tpl.TemplateResponse(request, name, full, status_code=status)
