"""The dashboard as an application (Starlette's TestClient, in this process) on every database:
each screen with data, filters and pages, actions and their refusals, hostile strings, the
headers, and the statements a page costs."""

from __future__ import annotations

import json
import re

import markupsafe
import pytest
import sqlalchemy as sa
from web_support import HOSTILE, TOKEN, client, csrf_of, login, statements

import queue_core
from pqweb.security import CSP
from queue_core.store.workers import WorkerIdentity

PAGES = ("/", "/live/overview", "/tasks", "/failures", "/workers", "/live/workers", "/login")
POSTS = (
    "/queues/pause",
    "/queues/resume",
    "/tasks/bulk",
    "/task/retry",
    "/task/cancel",
    "/task/force-finish",
    "/task/move",
    "/login",
    "/logout",
)


def _worker(queue, pid=4242):
    w = WorkerIdentity(owner=f"host-a:{pid}", host="host-a", pid=pid, queues='["q1"]', types=None, version="1")
    queue.store.worker_register(w, queue.now())


def _fill(queue):
    queue.submit("w1", "mail", {"to": "a"}, queue="q1", user="u1", tags=["red"])
    queue.submit("w2", "mail", queue="q1")
    queue.submit("f1", "sms", queue="q2")
    queue.poll(queues="q2").fail("ValueError: bad number")
    queue.roll_up_stats()
    _worker(queue)


def test_every_screen_renders_with_data(queue):
    _fill(queue)
    c = client(queue)
    overview = c.get("/").text
    row = re.search(r'<tr data-queue="q1">(.*?)</tr>', overview, re.S)[1]
    assert '<td class="num waiting">2</td>' in row and "running" in row
    q2 = re.search(r'<tr data-queue="q2">(.*?)</tr>', overview, re.S)[1]
    assert ">1</a></td>" in q2  # failed in the last hour, from the statistics
    assert "<polyline" in overview and 'id="workers-alive">1<' in overview
    assert 'id="schedules-due"' in overview and 'id="workflow-runs"' in overview  # the next phase's places
    assert "w1" in c.get("/tasks").text
    task = c.get("/task", params={"key": "f1"}).text
    assert "ValueError: bad number" in task and "claimed" in task and "Lease holder" in task
    failures = c.get("/failures").text
    assert "ValueError" in failures and "action=retry" in failures
    workers = c.get("/workers").text
    assert "host-a" in workers and "4242" in workers
    for path in PAGES:
        assert c.get(path).status_code == 200, path


def test_filters_and_keyset_pages_miss_nothing_while_tasks_are_added(queue):
    for i in range(23):
        queue.submit(f"k{i:02d}", "t", queue="q1" if i % 2 else "q2")
    c = client(queue, page_size=5)
    seen, path = [], "/tasks?queue=q1"
    while path:
        html = c.get(path).text
        seen += re.findall(r'<td class="key"><a href="[^"]*">([^<]+)</a>', html)
        queue.submit(f"later{len(seen)}", "t", queue="q1")  # newer than every page: shown on none
        older = re.search(r'href="(/tasks\?[^"]*)" id="older"', html)
        path = older[1].replace("&amp;", "&") if older else None
    assert seen == [f"k{i:02d}" for i in range(21, 0, -2)]
    html = client(queue).get("/tasks", params={"status": "waiting", "key_prefix": "k0", "type": "t"}).text
    assert re.findall(r'<td class="key"><a href="[^"]*">([^<]+)</a>', html) == [f"k0{i}" for i in range(9, -1, -1)]


def test_actions_change_the_database(queue):
    _fill(queue)
    queue.submit("m1", "mail", queue="q1")
    c = client(queue)
    csrf = login(c)
    assert c.post("/queues/pause", data={"queue": "q1", "csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert queue.queue_settings("q1").paused
    assert c.post("/queues/resume", data={"queue": "q1", "csrf": csrf}).status_code == 303
    assert not queue.queue_settings("q1").paused
    assert c.post("/task/retry", data={"key": "f1", "csrf": csrf}).status_code == 303
    assert queue["f1"].metadata().status == "waiting"
    assert c.post("/task/cancel", data={"key": "w1", "csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert queue["w1"].metadata().outcome == "cancelled"
    assert c.post("/task/move", data={"key": "m1", "queue": "q9", "csrf": csrf}).status_code == 303
    assert queue["m1"].metadata().queue_name == "q9"
    assert c.post("/task/force-finish", data={"key": "m1", "csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert queue["m1"].metadata().finished
    page = c.get("/task", params={"key": "m1", "done": "force-finished"}).text
    assert "Task force-finished." in page


def test_bulk_actions_state_the_count_first(queue):
    for i in range(4):
        queue.submit(f"b{i}", "t", queue="qb")
    queue.submit("other", "t", queue="qo")
    c = client(queue)
    csrf = login(c)
    confirm = c.get("/tasks/bulk", params={"action": "cancel", "queue": "qb"}).text
    assert '<strong id="bulk-count">4</strong>' in confirm
    assert queue.stats(queue="qb")["waiting"] == 4  # the confirmation changed nothing
    r = c.post("/tasks/bulk", data={"action": "cancel", "queue": "qb", "csrf": csrf})
    assert r.status_code == 303
    assert queue.stats(queue="qb")["finished"] == 4 and queue.stats(queue="qo")["waiting"] == 1
    for i in range(3):
        queue.submit(f"r{i}", "t", queue="qr")
        queue.poll(queues="qr").fail("KeyError: x")
    confirm = c.get("/tasks/bulk", params={"action": "retry", "queue": "qr", "error": "KeyError"}).text
    assert '<strong id="bulk-count">3</strong>' in confirm
    c.post("/tasks/bulk", data={"action": "retry", "queue": "qr", "error": "KeyError", "csrf": csrf})
    assert queue.stats(queue="qr")["waiting"] == 3
    refused = c.get("/tasks", params={"user": "u1"}).text
    assert "bulk actions select by queue, type and tag only" in refused


def test_actions_need_the_login_and_the_csrf_token(queue):
    queue.submit("k", "t", queue="q1")
    c = client(queue)
    anonymous_csrf = csrf_of(c)
    assert c.post("/queues/pause", data={"queue": "q1", "csrf": anonymous_csrf}).status_code == 401
    assert c.post("/login", data={"csrf": anonymous_csrf, "token": "wrong-token-0123456789"}).status_code == 401
    assert c.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF token
    csrf = login(c)
    assert csrf != anonymous_csrf  # a new token after the login
    assert c.post("/queues/pause", data={"queue": "q1"}).status_code == 403
    assert c.post("/queues/pause", data={"queue": "q1", "csrf": anonymous_csrf}).status_code == 403
    forged = ("y" if csrf[0] == "x" else "x") + csrf[1:]  # one character other than the token's
    assert c.post("/queues/pause", data={"queue": "q1", "csrf": forged}).status_code == 403
    assert not queue.queue_settings("q1").paused
    # as htmx sends it:
    r = c.post("/queues/pause", data={"queue": "q1", "confirmed": "yes"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 303 and queue.queue_settings("q1").paused
    other = client(queue)  # another browser: no session cookie
    assert other.post("/queues/resume", data={"queue": "q1", "csrf": csrf}).status_code == 401


def test_the_session_cookie_is_httponly_lax_and_signed(queue):
    c = client(queue)
    cookie = c.get("/login").headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    c.cookies.set("pqweb_session", c.cookies["pqweb_session"][:-2] + "AA")  # forged: a new session
    assert c.post("/queues/pause", data={"queue": "q1", "csrf": "x"}).status_code == 401


def test_read_only_refuses_every_post(queue):
    queue.submit("k", "t", queue="q1")
    c = client(queue, actions=False)
    csrf = csrf_of(c)
    for path in POSTS:
        r = c.post(path, data={"queue": "q1", "key": "k", "action": "cancel", "csrf": csrf, "token": TOKEN})
        assert r.status_code == 403, path
    assert queue["k"].metadata().status == "waiting" and not queue.queue_settings("q1").paused
    assert "read-only" in c.get("/").text and '<form method="post"' not in c.get("/task?key=k").text


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_are_shown_escaped(queue, hostile):
    queue.submit(
        hostile,
        hostile[:50].strip() or "t",
        {"v": hostile, hostile: [hostile]},
        user=hostile,
        queue="q1",
        tags=["t" + hostile[:90].strip()],
    )
    queue.submit("long", "t", {"v": "x" * 100_000, "s": "\udc80\ud800 lone"}, queue="q1")
    queue.submit("e", "err", queue="q1")
    queue.poll(types=["err"], queues="q1").fail(f"ValueError: {hostile}")
    c = client(queue)
    login(c)
    pages = [c.get(p).text for p in ("/", "/tasks", "/failures")]
    pages += [c.get("/task", params={"key": key}).text for key in ("e", hostile)]
    long_page = c.get("/task", params={"key": "long"})
    assert long_page.status_code == 200 and "more characters not shown" in long_page.text
    assert len(long_page.text) < 60_000
    assert "\\udc80" in long_page.text
    for html in pages:
        assert hostile not in html
        assert "<script>alert" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert str(markupsafe.escape(hostile)) in pages[-1]  # shown, as text
    assert str(markupsafe.escape(f"ValueError: {hostile}")) in pages[-2]


def test_every_response_carries_the_security_headers(queue):
    c = client(queue)
    for path in (*PAGES, "/task?key=missing", "/no-such-page", "/static/pqweb.css", "/tasks?status=bad"):
        r = c.get(path)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
    assert c.get("/task?key=missing").status_code == 404
    assert c.get("/tasks?status=bad").status_code == 400
    html = c.get("/").text
    assert "<script>" not in html and " style=" not in html and "onclick" not in html.lower()
    assert re.findall(r"<script[^>]*>", html) == [
        '<script src="/static/htmx.min.js">',
        '<script src="/static/pqweb.js" defer>',
    ]
    meta = re.search(r"<meta name=\"htmx-config\" content='([^']+)'>", html)[1]
    assert json.loads(meta)["allowEval"] is False and json.loads(meta)["includeIndicatorStyles"] is False


def test_no_password_of_the_url_on_any_page(queue, db_url):
    password = sa.engine.make_url(db_url).password
    _fill(queue)
    c = client(queue)
    login(c)
    for path in (*PAGES, "/task?key=f1", "/tasks/bulk?action=retry"):
        html = c.get(path).text
        assert not password or password not in html, path


def test_an_unreachable_database_is_a_503_page_without_its_password(tmp_path):
    q = queue_core.open("postgresql+psycopg://pq:s3cret-pw@127.0.0.1:1/pq", "t", max_retry_count=0, connect_timeout=2)
    try:
        c = client(q)
        for path in ("/", "/tasks", "/task?key=k", "/failures", "/workers", "/live/overview"):
            r = c.get(path)
            assert r.status_code == 503, path
            assert "cannot be reached" in r.text and "s3cret" not in r.text
    finally:
        q.close()


#: the statements a page costs, as docs/dashboard.md states them
BUDGET = {
    "/": 8,  # the hour of statistics with the events not rolled up yet: the roll-up's position, their groups
    "/live/overview": 8,
    "/tasks": 2,
    "/task?key=f1": 4,
    "/failures": 2,
    "/workers": 2,
    "/live/workers": 2,
}


def test_the_statements_a_page_costs_are_bounded(queue):
    _fill(queue)
    c = client(queue)
    c.get("/")  # the tables' metadata read once
    for path, most in BUDGET.items():
        n = statements(queue, lambda p=path: c.get(p))
        assert n <= most, f"{path}: {n} statements"
