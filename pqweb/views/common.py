"""What every page handler uses: the app's queue and settings, the query's filters, and the
checked form of an action."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse

from queue_core.api.queue import Queue
from queue_core.errors import ValidationError

from ..actions import DESTRUCTIVE, WHY_NOT
from ..errors import ConfirmationNeeded, NotOfferedError
from ..security import CSRF_FIELD, check_action
from ..settings import WebSettings

T = TypeVar("T")
#: the filters of the task list, as query parameters
FILTERS = ("queue", "type", "status", "user", "tag", "key_prefix")


def queue_of(request: Request) -> Queue:
    return request.app.state.queue


def web_of(request: Request) -> WebSettings:
    return request.app.state.web


def text_params(params: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``names`` of ``params`` (a query or a form), an empty or missing value as None."""
    out: dict[str, Any] = {}
    for name in names:
        value = params.get(name)
        out[name] = value if isinstance(value, str) and value != "" else None
    return out


def query_string(values: Mapping[str, Any]) -> str:
    """``values`` (None left out) as a URL query."""
    return urlencode({k: v for k, v in values.items() if v is not None})


async def action_form(request: Request) -> dict[str, Any]:
    """The form of an action, once it passed :func:`~pqweb.security.check_action` (actions on,
    logged in, CSRF token)."""
    form = dict(await request.form())
    check_action(request, form, web_of(request).allow_actions)
    return form


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (a Queue call) in a worker thread."""
    return await run_in_threadpool(fn, *args, **kwargs)


def see_other(path: str, **query: Any) -> RedirectResponse:
    """A 303 redirect to ``path`` (a path of this dashboard) with ``query``."""
    qs = query_string(query)
    return RedirectResponse(f"{path}?{qs}" if qs else path, status_code=303)


def int_param(value: str | None, what: str) -> int | None:
    """A whole number >= 0 of a query (None when missing); ValidationError when it is not one."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        raise ValidationError(f"{what} must be a whole number")
    return int(value)


def check_offered(action: str, offered: tuple[str, ...], what: str) -> None:
    """NotOfferedError unless ``action`` is among the actions ``offered`` for ``what`` in its state."""
    if action not in offered:
        raise NotOfferedError(f"{what}: {WHY_NOT.get(action, 'not valid now')}")


def check_confirmed(form: Mapping[str, Any], action: str, question: str, back: str) -> None:
    """For a destructive ``action`` without ``confirmed=yes``: ConfirmationNeeded (its page asks
    ``question`` and posts the same form again, confirmed; ``back`` is the way out)."""
    if action in DESTRUCTIVE and form.get("confirmed") != "yes":
        fields = {k: str(v) for k, v in form.items() if k not in (CSRF_FIELD, "confirmed") and isinstance(v, str)}
        raise ConfirmationNeeded(question, fields, back)
