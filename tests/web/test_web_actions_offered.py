"""Actions on every database: a row offers only the actions its state allows and the handler
refuses the others with why (409, nothing changed); pausing, cancelling, force-finishing,
cancelling a run and deleting a schedule ask on a page first; the overview shows each queue's
limits and the schedules mark the overdue ones."""

from __future__ import annotations

import re

import markupsafe
from test_web_runs import drive, flow
from web_support import client, login

import pqflow

ACTIONS = re.compile(r'id="action-([a-z-]+)"')


def _offered(c, key: str) -> list[str]:
    return ACTIONS.findall(c.get("/task", params={"key": key}).text)


def _confirm(c, r) -> dict[str, str]:
    """The fields of the confirmation page's form (csrf and confirmed=yes included)."""
    assert r.status_code == 200 and 'id="confirm-form"' in r.text, r.text[:500]
    form = re.search(r'<form method="post" action="[^"]*" id="confirm-form">(.*?)</form>', r.text, re.S)[1]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form))


def test_a_task_offers_only_the_actions_its_state_allows(queue):
    queue.submit("waits", "t", queue="q1")
    queue.submit("fails", "t", queue="q2")
    queue.poll(queues="q2").fail("ValueError: no")
    queue.submit("runs", "t", queue="q3")
    queue.poll(queues="q3", alive_time=600)
    queue.submit("done", "t", queue="q4")
    queue.poll(queues="q4").finish()
    c = client(queue)
    csrf = login(c)
    assert _offered(c, "waits") == ["cancel", "force-finish", "move"]
    assert _offered(c, "fails") == ["retry"]
    assert _offered(c, "runs") == ["cancel", "force-finish"]
    assert _offered(c, "done") == [] and 'id="no-actions"' in c.get("/task?key=done").text
    r = c.post("/task/retry", data={"key": "waits", "csrf": csrf})
    assert r.status_code == 409 and "only a failed task can be retried" in r.text
    r = c.post("/task/move", data={"key": "runs", "queue": "q9", "csrf": csrf})
    assert r.status_code == 409 and "only a task nobody runs can be moved" in r.text
    assert queue["waits"].metadata().status == "waiting" and queue["runs"].metadata().queue_name == "q3"
    assert c.post("/task/retry", data={"key": "fails", "csrf": csrf}).status_code == 303  # no confirmation
    assert queue["fails"].metadata().status == "waiting"


def test_destructive_actions_ask_first_and_act_once_confirmed(queue, sched):
    queue.submit("k1", "t", queue="q1")
    queue.submit("k2", "t", queue="q1")
    sched.add("nightly", "report", cron="30 2 * * *")
    flow.start("r1", {"n": 2}, queue=queue)
    c = client(queue, scheduler=sched)
    csrf = login(c)
    cases = [
        ("/queues/pause", {"queue": "q1"}, "Pause queue 'q1'?", lambda: queue.queue_settings("q1").paused),
        ("/task/cancel", {"key": "k1"}, "Cancel task 'k1'", lambda: queue["k1"].metadata().finished),
        ("/task/force-finish", {"key": "k2"}, "Force-finish task 'k2'", lambda: queue["k2"].metadata().finished),
        ("/run/cancel", {"id": "r1"}, "Cancel run 'r1'?", lambda: pqflow.get_run("r1", queue=queue).cancel_requested),
        ("/schedule/delete", {"key": "nightly"}, "Delete schedule 'nightly'?", lambda: not sched["nightly"].exists()),
    ]
    for path, fields, question, changed in cases:
        asked = c.post(path, data={**fields, "csrf": csrf})
        assert str(markupsafe.escape(question)) in asked.text, path
        assert not changed(), f"{path} acted before it was confirmed"
        form = _confirm(c, asked)
        assert form == {**fields, "csrf": csrf, "confirmed": "yes"}, path
        assert c.post(path, data=form).status_code == 303, path
        assert changed(), path


def test_a_run_offers_cancel_while_running_and_retry_once_failed(queue):
    flow.start("bad", {"fail": True}, queue=queue)
    c = client(queue)
    csrf = login(c)
    assert ACTIONS.findall(c.get("/run?id=bad").text) == ["cancel"]
    drive(queue)
    assert pqflow.get_run("bad", queue=queue).status == "failed"
    assert ACTIONS.findall(c.get("/run?id=bad").text) == ["retry"]
    r = c.post("/run/cancel", data={"id": "bad", "csrf": csrf, "confirmed": "yes"})
    assert r.status_code == 409 and "only a running run can be cancelled" in r.text


def test_the_overview_shows_each_queues_limits(queue):
    queue.submit("a", "t", queue="limited")
    queue.submit("b", "t", queue="free")
    queue.limit("limited", concurrency=3, rate="5/1s")
    html = client(queue).get("/live/overview").text
    limited = re.search(r'<tr data-queue="limited">.*?<td class="limits">(.*?)</td>', html, re.S)[1]
    free = re.search(r'<tr data-queue="free">.*?<td class="limits">(.*?)</td>', html, re.S)[1]
    assert limited == "at most 3 running · 5/1s starts"
    assert "none" in free


def test_an_overdue_schedule_is_marked(sched, clock):
    sched.add("late", "report", cron="* * * * *", next_time=clock.now() - 600)
    sched.add("soon", "report", cron="* * * * *", next_time=clock.now() + 600)
    c = client(sched.queue, scheduler=sched)
    html = c.get("/schedules").text
    late = re.search(r'<tr class="schedule" data-key="late">(.*?)</tr>', html, re.S)[1]
    soon = re.search(r'<tr class="schedule" data-key="soon">(.*?)</tr>', html, re.S)[1]
    assert 'class="overdue"' in late and 'class="overdue"' not in soon
    glance = c.get("/live/schedules-due").text
    rows = re.findall(r'<tr class="due">(.*?)</tr>', glance, re.S)
    assert 'class="overdue"' in rows[0] and "late" in rows[0]
    assert all('class="overdue"' not in r for r in rows if ">soon<" in r)
