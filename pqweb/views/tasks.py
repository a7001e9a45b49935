"""The task list: filters (queue, type, status, user, tag, key prefix), pages newest first by
keyset (``Queue.browse``), and the bulk retry or cancel of the filtered selection behind a page
that states the count."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queue_core.api.queue_browse import BROWSE_STATUSES
from queue_core.errors import ValidationError
from queue_core.rules.validate import check_int

from ..render import render
from .common import FILTERS, action_form, blocking, query_string, queue_of, see_other, text_params, web_of

#: what a bulk action takes: the filters ``retry_failed`` and ``cancel_waiting`` know
BULK_FILTERS = ("queue", "type", "tag", "error")
BULK_ACTIONS = ("retry", "cancel")


def page(request: Request) -> Response:
    params = request.query_params
    filters = text_params(params, FILTERS)
    cursor = params.get("cursor") or None
    result = queue_of(request).browse(**filters, cursor=_int(cursor, "cursor"), limit=web_of(request).page_size)
    context = {
        "filters": filters,
        "statuses": BROWSE_STATUSES,
        "page": result,
        "first_page": cursor is None,
        "first_query": query_string(filters),
        "next_query": query_string({**filters, "cursor": result.next_cursor}),
        "bulk_query": query_string({k: filters[k] for k in ("queue", "type", "tag")}),
        "bulk_refused": _bulk_refusal(filters),
    }
    return render(request, "tasks.html", context)


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return check_int(int(value), what, minimum=0)
    except ValueError:
        raise ValidationError(f"{what} must be a whole number") from None


def _bulk_refusal(filters: dict[str, Any]) -> str | None:
    """Why the bulk actions cannot take these filters (None: they can)."""
    extra = [name for name in ("user", "key_prefix", "status") if filters.get(name)]
    if extra:
        return f"bulk actions select by queue, type and tag only (not {', '.join(extra)})"
    return None


def _bulk_args(params: Any) -> tuple[str, dict[str, str | None]]:
    action = params.get("action")
    if action not in BULK_ACTIONS:
        raise ValidationError(f"action must be one of {', '.join(BULK_ACTIONS)}")
    args = text_params(params, BULK_FILTERS)
    if action == "cancel" and args["error"]:
        raise ValidationError("cancel selects waiting tasks: it takes no error class")
    if action == "cancel":
        args.pop("error")
    return action, args


def _bulk(queue: Any, action: str, args: dict, dry_run: bool) -> int:
    if action == "retry":
        return queue.retry_failed(**args, dry_run=dry_run)
    return queue.cancel_waiting(**args, dry_run=dry_run)


def confirm(request: Request) -> Response:
    """The page that says how many tasks a bulk action would change, with its button."""
    action, args = _bulk_args(request.query_params)
    count = _bulk(queue_of(request), action, args, dry_run=True)
    return render(request, "confirm.html", {"action": action, "args": args, "count": count})


async def bulk(request: Request) -> Response:
    form = await action_form(request)
    action, args = _bulk_args(form)
    await blocking(_bulk, queue_of(request), action, args, False)
    shown = {k: v for k, v in args.items() if k != "error"}
    return see_other("/tasks", **shown, done=f"bulk-{action.replace('retry', 'retri')}ed")


ROUTES = [
    Route("/tasks", page),
    Route("/tasks/bulk", confirm),
    Route("/tasks/bulk", bulk, methods=["POST"]),
]
