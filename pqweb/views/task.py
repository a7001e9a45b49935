"""One task: its data, error, attempts, lease holder and history; retry, cancel, force-finish
and move it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queue_core.errors import ValidationError

from ..render import render
from .common import action_form, blocking, queue_of, see_other


def _key(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("say which task: ?key=KEY")
    return value


def page(request: Request) -> Response:
    queue = queue_of(request)
    key = _key(request.query_params.get("key"))
    task = queue[key]
    meta = task.metadata()
    return render(request, "task.html", {"task": meta, "history": task.history()})


def _act(name: str, done: str):
    async def act(request: Request) -> Response:
        form = await action_form(request)
        key = _key(form.get("key"))
        await blocking(_ACTIONS[name], queue_of(request), key, form)
        return see_other("/task", key=key, done=done)

    return act


_ACTIONS = {
    "retry": lambda q, key, form: q.retry_task(key),
    "cancel": lambda q, key, form: q[key].cancel(),
    "force-finish": lambda q, key, form: q[key].force_finish(),
    "move": lambda q, key, form: q.move(key, str(form.get("queue", ""))),
}
_DONE = {"retry": "retried", "cancel": "cancelled", "force-finish": "force-finished", "move": "moved"}

ROUTES = [
    Route("/task", page),
    *(Route(f"/task/{name}", _act(name, _DONE[name]), methods=["POST"]) for name in _ACTIONS),
]
