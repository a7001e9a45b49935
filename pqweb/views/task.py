"""One task: its data, error, attempts, lease holder and history; retry, cancel, force-finish
and move it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queue_core.errors import ValidationError

from ..actions import task_actions
from ..render import render
from .common import action_form, blocking, check_confirmed, check_offered, query_string, queue_of, see_other


def _key(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("say which task: ?key=KEY")
    return value


def page(request: Request) -> Response:
    queue = queue_of(request)
    key = _key(request.query_params.get("key"))
    task = queue[key]
    meta = task.metadata()
    context = {"task": meta, "history": task.history(), "actions": task_actions(meta)}
    return render(request, "task.html", context)


def _act(name: str, done: str):
    async def act(request: Request) -> Response:
        form = await action_form(request)
        key = _key(form.get("key"))
        meta = await blocking(queue_of(request)[key].metadata)
        check_offered(name, task_actions(meta), f"task {key!r} is {meta.status}")
        back = "/task?" + query_string({"key": key})
        check_confirmed(form, name, f"{_LABELS[name]} task {key!r} ({meta.status})?", back)
        await blocking(_ACTIONS[name], queue_of(request), key, form)
        return see_other("/task", key=key, done=done)

    return act


_ACTIONS = {
    "retry": lambda q, key, form: q.retry_task(key),
    "cancel": lambda q, key, form: q[key].cancel(),
    "force-finish": lambda q, key, form: q[key].force_finish(),
    "move": lambda q, key, form: q.move(key, str(form.get("queue", ""))),
}
_LABELS = {"retry": "Retry", "cancel": "Cancel", "force-finish": "Force-finish", "move": "Move"}
_DONE = {"retry": "retried", "cancel": "cancelled", "force-finish": "force-finished", "move": "moved"}

ROUTES = [
    Route("/task", page),
    *(Route(f"/task/{name}", _act(name, _DONE[name]), methods=["POST"]) for name in _ACTIONS),
]
