"""The dashboard as an ASGI application: :func:`create_app` builds it around one open Queue
(thread-safe: its engine's pool serves the threads that run the page handlers)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from perfectsched import Scheduler
from pqflow.errors import UnknownRunError, UnknownStepError
from queue_core.api.queue import Queue
from queue_core.errors import DatabaseError, NotFoundError, TaskError, ValidationError

from .errors import ConfirmationNeeded, TooManyAttemptsError, WebError
from .render import render, templates
from .security import Guard, Logins, SessionKeys
from .settings import WebSettings
from .throttle import LoginThrottle
from .views import auth, failures, glance, overview, runs, schedules, task, tasks, workers

log = logging.getLogger("pqweb")
STATIC = Path(__file__).parent / "static"


def create_app(
    queue: Queue,
    web: WebSettings | None = None,
    *,
    secret: bytes | None = None,
    scheduler: Scheduler | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The dashboard of ``queue`` and of ``scheduler``'s schedules, if given (both closed by the
    caller); ``clock`` (seconds) ages logins and failed login attempts."""
    web = web or WebSettings()
    keys = SessionKeys(secret, secure=web.secure_cookie, logins=Logins(clock))
    app = Starlette(
        routes=_routes(),
        middleware=[Middleware(Guard, keys=keys)],
        exception_handlers={
            WebError: _error_page,
            TaskError: _error_page,
            HTTPException: _error_page,
            ConfirmationNeeded: _confirmation_page,
        },
    )
    app.state.logins = keys.logins
    app.state.login_throttle = LoginThrottle(clock)
    app.state.queue = queue
    app.state.scheduler = scheduler
    app.state.web = web
    app.state.templates = templates(web)
    return app


def _routes() -> list:
    return [
        *overview.ROUTES,
        *tasks.ROUTES,
        *task.ROUTES,
        *failures.ROUTES,
        *workers.ROUTES,
        *schedules.ROUTES,
        *runs.ROUTES,
        *glance.ROUTES,
        *auth.ROUTES,
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]


#: (error class, HTTP status, title) in the order they are matched
_STATUSES: tuple[tuple[type, int, str], ...] = (
    (NotFoundError, 404, "Not found"),
    (UnknownRunError, 404, "Not found"),
    (UnknownStepError, 404, "Not found"),
    (ValidationError, 400, "Not accepted"),
    (DatabaseError, 503, "Database unavailable"),
    (TaskError, 409, "Not done"),
)


def _confirmation_page(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConfirmationNeeded)
    context = {"question": exc.question, "fields": exc.fields, "back": exc.back, "path": request.url.path}
    return render(request, "confirm_action.html", context)


def _error_page(request: Request, exc: Exception) -> Response:
    status, title, message = _described(exc)
    page = render(request, "error.html", {"title": title, "message": message}, status)
    if isinstance(exc, TooManyAttemptsError):
        page.headers["retry-after"] = str(exc.retry_after)
    return page


def _described(exc: Exception) -> tuple[int, str, str]:
    if isinstance(exc, WebError):
        return exc.status, "Refused", exc.message
    if isinstance(exc, HTTPException):
        return exc.status_code, str(exc.detail), ""
    for cls, status, title in _STATUSES:
        if isinstance(exc, cls):
            if status == 503:  # the detail may name hosts: it goes to the log, not the page
                log.warning("database error: %s", exc)
                return status, title, "The database cannot be reached or refused the read; try again shortly."
            return status, title, str(exc)
    return 500, "Error", "The dashboard failed on this page; its log says why."
