"""Schedules (perfectsched): each with its cron or interval, zone, DST and catch-up policies and
its next fire times in its own zone, DST shifts marked; one schedule with its latest occurrences
and the tasks they submitted; add, modify and delete. Shown when a schedule table exists."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from perfectsched import ScheduleMetadata, Scheduler, preview
from perfectsched.catchup import POLICIES
from perfectsched.cron import DST_POLICIES
from perfectsched.history import latest_occurrences
from queue_core.errors import AlreadyExistsError, NotFoundError, SchemaError, ValidationError

from ..render import render
from .common import action_form, blocking, check_confirmed, query_string, see_other

#: seconds past its due time after which an active schedule is shown as overdue (no runner fired it)
OVERDUE_AFTER = 60
#: fire times shown per schedule
FIRES = 10
#: the form's fields, as perfectsched's add and modify take them
FIELDS = ("key", "type", "cron", "timezone", "catchup", "dst", "delay", "queue", "data")
FORM_ERRORS = (ValidationError, AlreadyExistsError, NotFoundError)


def scheduler_of(request: Request) -> Scheduler | None:
    """The dashboard's scheduler once its schedule table exists (checked until it does)."""
    state = request.app.state
    sched: Scheduler | None = getattr(state, "scheduler", None)
    if sched is None or getattr(state, "schedule_table_seen", False):
        return sched
    try:
        sched.check_tables()
    except SchemaError:  # absent (or made by an older release): no schedules section
        return None
    state.schedule_table_seen = True
    return sched


def fires(m: ScheduleMetadata, n: int = FIRES) -> list[preview.Fire]:
    """The next ``n`` fire times of ``m`` from its stored next time (none when it cannot be computed)."""
    if m.problem is not None or m.status != "active":
        return []
    return preview.fires_from(m.cron, int(m.next_time), n, m.timezone, m.dst)


def overdue(m: ScheduleMetadata, now: float) -> bool:
    """Whether active schedule ``m`` should have fired more than :data:`OVERDUE_AFTER` s ago
    (its runner is down or behind)."""
    return m.status == "active" and m.problem is None and m.next_time < now - OVERDUE_AFTER


def due_next(metas: list[ScheduleMetadata], n: int = 5) -> list[tuple[ScheduleMetadata, preview.Fire]]:
    """The next ``n`` fire times across the schedules, soonest first."""
    pairs = [(m, f) for m in metas for f in fires(m, n)]
    return sorted(pairs, key=lambda p: (p[1].time, p[0].key))[:n]


def _listed(sched: Scheduler) -> list[tuple[ScheduleMetadata, list[preview.Fire], bool]]:
    now = sched.queue.now()
    return [(m, fires(m), overdue(m, now)) for m in sched.list()]


def _page_context(request: Request, **extra: Any) -> dict:
    sched = scheduler_of(request)
    rows = _listed(sched) if sched is not None else []
    base = {"sched": sched, "rows": rows, "catchups": POLICIES, "dsts": DST_POLICIES}
    return {**base, "form": {}, "form_error": None, **extra}


def page(request: Request) -> Response:
    return render(request, "schedules.html", _page_context(request))


def detail(request: Request) -> Response:
    sched = _required(request)
    key = _key(request.query_params.get("key"))
    return render(request, "schedule.html", _detail_context(sched, key))


def _detail_context(sched: Scheduler, key: str, **extra: Any) -> dict:
    meta = sched[key].metadata(check=False)
    past = latest_occurrences(sched.queue, key)
    base = {"m": meta, "fires": fires(meta), "past": past, "catchups": POLICIES, "dsts": DST_POLICIES}
    return {**base, "form": {}, "form_error": None, **extra}


def _required(request: Request) -> Scheduler:
    sched = scheduler_of(request)
    if sched is None:
        raise NotFoundError("no schedule table: this dashboard shows no schedules")
    return sched


def _key(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("say which schedule: ?key=KEY")
    return value


def parse_form(form: dict) -> dict[str, Any]:
    """The schedule fields of a form, an empty one as None; ValidationError for bad data or delay."""
    values: dict[str, Any] = {k: _text(form.get(k)) for k in FIELDS}
    delay, data = values["delay"], values["data"]
    if delay is not None and not (delay.isascii() and delay.isdigit() and len(delay) < 10):
        raise ValidationError("delay must be a whole number of seconds")
    values["delay"] = None if delay is None else int(delay)
    values["data"] = None if data is None else _data(data)
    return values


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _data(text: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        raise ValidationError('data must be a JSON object, e.g. {"n": 1}') from None
    if not isinstance(data, dict):
        raise ValidationError('data must be a JSON object, e.g. {"n": 1}')
    return data


def _add(sched: Scheduler, v: dict[str, Any]) -> None:
    sched.add(
        v.get("key") or "",
        v.get("type") or "",
        cron=v.get("cron") or "",
        timezone=v.get("timezone"),
        delay=v.get("delay") or 0,
        data=v.get("data"),
        catchup=v.get("catchup") or "all",
        dst=v.get("dst") or "vixie",
        queue=v.get("queue") or "default",
    )


def _modify(sched: Scheduler, v: dict) -> None:
    names = ("cron", "type", "data", "delay", "timezone", "catchup", "dst", "queue")
    changes = {k: v.get(k) for k in names}
    if all(x is None for x in changes.values()):
        raise ValidationError("nothing to change: fill at least one field")
    sched.modify(_key(v.get("key")), **changes)


async def add(request: Request) -> Response:
    form = await action_form(request)
    sched = _required(request)
    try:
        await blocking(_add, sched, parse_form(form))
    except FORM_ERRORS as exc:
        return render(request, "schedules.html", _page_context(request, form=form, form_error=str(exc)), 400)
    return see_other("/schedule", key=str(form.get("key")), done="schedule-added")


async def modify(request: Request) -> Response:
    form = await action_form(request)
    sched = _required(request)
    key = _key(form.get("key"))
    try:
        await blocking(_modify, sched, parse_form(form))
    except ValidationError as exc:
        return render(request, "schedule.html", _detail_context(sched, key, form=form, form_error=str(exc)), 400)
    return see_other("/schedule", key=key, done="schedule-modified")


async def delete(request: Request) -> Response:
    form = await action_form(request)
    sched = _required(request)
    key = _key(form.get("key"))
    question = f"Delete schedule {key!r}? It fires no more (the tasks it submitted stay)."
    check_confirmed(form, "delete-schedule", question, "/schedule?" + query_string({"key": key}))
    await blocking(sched[key].delete)
    return see_other("/schedules", done="schedule-deleted")


ROUTES = [
    Route("/schedules", page),
    Route("/schedule", detail),
    Route("/schedules/add", add, methods=["POST"]),
    Route("/schedule/modify", modify, methods=["POST"]),
    Route("/schedule/delete", delete, methods=["POST"]),
]
