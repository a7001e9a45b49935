"""The workflow run screens (pqflow) with Starlette's TestClient on every database: the list by
workflow and status, a run's steps with their statuses and map counts, why a step is where it
is, its DAG as an SVG document, its timeline, cancel and retry and their refusals, hostile run
ids, and the overview's runs."""

from __future__ import annotations

import re

import markupsafe
import pytest
from web_support import HOSTILE, client, csrf_of, login, statements

import pqflow

flow = pqflow.Workflow("web_flow", retry_wait=0, retries=0)


@flow.step()
def fetch(ctx):
    if ctx.data.get("fail"):
        raise ValueError("fetch failed: <b>bad</b>")
    return list(range(ctx.data.get("n", 3)))


@flow.step(map=fetch)
def square(ctx, item):
    return item * item


@flow.step(after=square)
def total(ctx, square):
    return sum(square)


other = pqflow.Workflow("web_other")


@other.step()
def alone(ctx):
    return 1


class Decider(pqflow.Decider):
    workflows = [flow, other]


def drive(q, steps=10_000):
    """Serve due tasks in this process, as a worker would (at most ``steps`` of them)."""
    for _ in range(steps):
        task = q.poll(alive_time=30)
        if task is None:
            return
        Decider(task).run()
        if task.deferred is not None:
            q.finish_many([task])


def _rows(html: str) -> list[str]:
    return re.findall(r'<td class="key"><a href="/run\?id=[^"]*">([^<]*)</a>', html)


def test_the_runs_list_filters_by_workflow_and_status(queue):
    flow.start("ok1", {"n": 2}, queue=queue)
    flow.start("bad1", {"fail": True}, queue=queue)
    other.start("o1", queue=queue)
    drive(queue)
    flow.start("new1", queue=queue)
    c = client(queue)
    assert _rows(c.get("/runs").text) == ["new1", "o1", "bad1", "ok1"]
    assert _rows(c.get("/runs", params={"workflow": "web_flow"}).text) == ["new1", "bad1", "ok1"]
    assert _rows(c.get("/runs", params={"status": "failed"}).text) == ["bad1"]
    assert _rows(c.get("/runs", params={"status": "succeeded", "workflow": "web_flow"}).text) == ["ok1"]
    paged = client(queue, page_size=2)
    first = paged.get("/runs").text
    assert _rows(first) == ["new1", "o1"]
    older = re.search(r'href="(/runs\?[^"]*)" id="older"', first)[1].replace("&amp;", "&")
    assert _rows(paged.get(older).text) == ["bad1", "ok1"]
    assert c.get("/runs", params={"status": "nope"}).status_code == 400


def test_a_run_shows_its_steps_map_counts_timeline_and_dag(queue):
    flow.start("r1", {"n": 12}, queue=queue)
    drive(queue, steps=1 + 7)  # fetch, then 7 of the 12 squares
    c = client(queue)
    html = c.get("/run", params={"id": "r1"}).text
    steps = dict(re.findall(r'<tr class="step" data-step="(\w+)">.*?<span class="st st-(\w+)">', html, re.S))
    assert steps == {"fetch": "succeeded", "square": "waiting", "total": "pending"}
    assert "7/12 succeeded, 5 waiting" in html
    assert '<rect x="' in html and 'class="bar st-succeeded"' in html and " style=" not in html
    img = re.search(r'<img id="run-graph" class="dag" src="([^"]+)"', html)[1].replace("&amp;", "&")
    svg = c.get(img)
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in svg.text and "square" in svg.text and "7/12 succeeded" in svg.text
    live = c.get("/live/run", params={"id": "r1"}).text
    assert "7/12 succeeded" in live and "<html" not in live
    version = re.search(r"v=(\w+)", img)[1]
    unchanged = c.get("/live/run", params={"id": "r1", "v": version}).text
    assert "7/12 succeeded" in unchanged and "run-graph" not in unchanged  # the same picture: not sent again
    drive(queue)
    done = c.get("/live/run", params={"id": "r1"}).text
    assert "12/12 succeeded" in done and 'id="run-status"><span class="st st-succeeded">' in done
    assert re.search(r'src="([^"]+)"', done)[1] != re.search(r'src="([^"]+)"', live)[1]  # a new picture


def test_why_a_step_is_where_it_is(queue):
    flow.start("w1", {"fail": True}, queue=queue)
    drive(queue)
    c = client(queue)
    why = c.get("/run/why", params={"id": "w1", "step": "total"})
    assert why.status_code == 200 and "<html" not in why.text
    assert "is skipped: parent square skipped" in why.text and 'id="why-text"' in why.text
    assert c.get("/run/why", params={"id": "w1", "step": "nope"}).status_code == 404
    assert c.get("/run", params={"id": "missing"}).status_code == 404
    html = c.get("/run", params={"id": "w1"}).text
    assert "fetch failed: &lt;b&gt;bad&lt;/b&gt;" in html


def test_cancel_and_retry_change_the_run(queue):
    flow.start("c1", {"n": 3}, queue=queue)
    drive(queue, steps=2)
    flow.start("f1", {"fail": True}, queue=queue)
    drive(queue)
    c = client(queue)
    csrf = login(c)
    assert pqflow.get_run("f1", queue=queue).status == "failed"
    r = c.post("/run/retry", data={"id": "f1", "csrf": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/run?id=f1&done=run-retried"
    assert pqflow.get_run("f1", queue=queue).status == "running"
    r = c.post("/run/cancel", data={"id": "f1", "csrf": csrf, "confirmed": "yes"})
    assert r.status_code == 303
    drive(queue)
    assert pqflow.get_run("f1", queue=queue).status == "cancelled"
    assert c.post("/run/retry", data={"id": "c1", "csrf": csrf}).status_code == 409  # still running


def test_run_actions_need_the_login_and_the_csrf_token(queue):
    flow.start("k1", queue=queue)
    c = client(queue)
    anonymous = csrf_of(c)
    assert c.post("/run/cancel", data={"id": "k1", "csrf": anonymous}).status_code == 401
    csrf = login(c)
    assert c.post("/run/cancel", data={"id": "k1"}).status_code == 403
    assert c.post("/run/cancel", data={"id": "k1", "csrf": anonymous}).status_code == 403
    read_only = client(queue, actions=False)
    assert read_only.post("/run/retry", data={"id": "k1", "csrf": csrf}).status_code == 403
    assert "action-cancel" not in read_only.get("/run", params={"id": "k1"}).text
    run = pqflow.get_run("k1", queue=queue)
    assert run.status == "running" and not run.cancel_requested


def test_the_overview_lists_runs_running_and_failed(queue):
    flow.start("bad", {"fail": True}, queue=queue)
    drive(queue)
    other.start("busy", queue=queue)
    html = client(queue).get("/live/runs-recent").text
    running = re.search(r'id="runs-running">(.*?)</table>', html, re.S)[1]
    failed = re.search(r'id="runs-failed">(.*?)</table>', html, re.S)[1]
    assert _rows(running) == ["busy"] and _rows(failed) == ["bad"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_run_ids_are_shown_escaped(queue, hostile):
    flow.start(hostile, {"n": 2, "v": hostile}, queue=queue)
    drive(queue, steps=2)
    c = client(queue)
    login(c)
    pages = [c.get(p).text for p in ("/runs", "/live/runs-recent")]
    pages += [c.get(p, params={"id": hostile}).text for p in ("/run", "/live/run")]
    pages.append(c.get("/run/why", params={"id": hostile, "step": "square"}).text)
    for html in pages:
        assert hostile not in html and "<script>alert" not in html
    assert str(markupsafe.escape(hostile)) in pages[2]
    svg = c.get("/run/graph.svg", params={"id": hostile})
    assert svg.status_code == 200 and "<script" not in svg.text and "onerror" not in svg.text


def test_the_new_pages_carry_the_security_headers_and_no_inline_script_or_style(sched):
    from pqweb.security import CSP

    flow.start("h1", queue=sched.queue)
    sched.add("s", "t", cron="0 1 * * *")
    c = client(sched.queue, scheduler=sched)
    login(c)
    paths = ["/runs", "/run?id=h1", "/live/run?id=h1", "/run/graph.svg?id=h1", "/run/why?id=h1&step=fetch"]
    paths += ["/schedules", "/schedule?key=s", "/live/schedules-due", "/live/runs-recent", "/run?id=nope"]
    for path in paths:
        r = c.get(path)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff", path
        if "svg" not in path:
            assert " style=" not in r.text and "onclick" not in r.text.lower(), path
            scripts = ['<script src="/static/htmx.min.js">', '<script src="/static/pqweb.js" defer>']
            assert re.findall(r"<script[^>]*>", r.text) in ([], scripts), path


#: the statements a page of runs or schedules costs, as docs/dashboard.md states them (however
#: many workflows are recorded in the table)
RUN_BUDGET = {
    "/runs": 3,
    "/runs?workflow=web_flow&status=running": 2,
    # 2, and per map step its items' counts and, while they all wait, the wait of the one due first
    "/run?id=b1": 4,
    "/live/run?id=b1": 4,
    "/run/graph.svg?id=b1": 4,
    "/run/why?id=b1&step=total": 4,
    "/live/runs-recent": 6,
}
SCHEDULE_BUDGET = {"/schedules": 1, "/schedule?key=s": 3, "/live/schedules-due": 1}


def test_the_statements_a_page_costs_are_bounded(sched):
    queue = sched.queue
    flow.start("b1", {"n": 4}, queue=queue)
    drive(queue, steps=3)
    sched.add("s", "t", cron="@every:1h", next_time=sched.now() - 7200)
    sched.tick()
    c = client(queue, scheduler=sched)
    c.get("/schedules")  # the schedule table's version read once
    costs = {p: statements(queue, lambda p=p: c.get(p)) for p in RUN_BUDGET}
    costs |= {p: statements(sched.queue, lambda p=p: c.get(p)) for p in SCHEDULE_BUDGET}
    over = {p: n for p, n in costs.items() if n > {**RUN_BUDGET, **SCHEDULE_BUDGET}[p]}
    assert not over, costs


def test_a_run_no_decider_took_up_yet_says_so(queue):
    queue.submit("plain", "web_flow", {"n": 1})
    assert _rows(client(queue).get("/runs").text) == []  # listed once its workflow is recorded in the table
    flow.start("started", queue=queue)
    c = client(queue)
    html = c.get("/run", params={"id": "plain"}).text
    assert 'id="not-picked"' in html and 'id="run-graph"' not in html
    assert _rows(c.get("/runs").text) == ["started", "plain"]
    assert "not picked up yet" in c.get("/runs").text
    assert "not picked up yet: no live worker serves workflow web_flow" in c.get("/runs").text
    assert "no live worker serves workflow web_flow" in html  # the run page says what it waits for
    assert c.get("/run/why", params={"id": "plain", "step": "fetch"}).status_code == 200
