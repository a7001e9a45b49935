"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright, against a
real ``pqweb`` server process on each database. Never ``playwright install``: nothing is
downloaded. Without chromium (or Playwright) these tests skip, and FAIL when CI is set, as the
database tests do (tests/conftest.py). PQWEB_SCREENSHOTS=1 writes docs/dashboard/*.png."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import httpx
import pytest
from test_web_schedules import MARCH_5
from web_support import TOKEN

import pqflow

#: the dashboard's reads are tested on every database in process (tests/web); the browser on two
pytestmark = pytest.mark.one_server
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "dashboard"
#: seconds a pqweb process may take to answer (a -D URL with a password re-executes it once at
#: start; a loaded 2-core CI machine needs the margin)
STARTUP_DEADLINE = 90
PAYLOAD = '<script>window.pwned = 1; document.title = "pwned"</script><img src=x onerror="window.pwned = 2">'


def _missing(what: str):
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing (CI): the browser tests cannot run")
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (pip install playwright)")
    if not shutil.which(CHROMIUM):
        _missing(f"{CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(proc: subprocess.Popen, base: str, deadline: float) -> None:
    """Until the server answers (or it exits, or the deadline passes: a failure)."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"pqweb exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(base + "/login", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)  # the next try of a condition, not a wait for time to pass
    pytest.fail(f"pqweb did not answer within {STARTUP_DEADLINE} s")


@pytest.fixture
def server(wq, db_url):
    """A pqweb process on ``wq``'s table, actions on; its base URL."""
    port = _free_port()
    env = {**os.environ, "PQWEB_TOKEN": TOKEN, "PQ_WEB_REFRESH": "0.5"}
    cmd = [
        sys.executable,
        "-m",
        "pqweb",
        "-D",
        db_url,
        "--table",
        wq.table,
        "--schedule-table",
        wq.table + "_s",  # the sched fixture's
        "--allow-actions",
        "--listen",
        f"127.0.0.1:{port}",
    ]
    # forked from pq's imports (tests/forkserver.py); test_web_process_args starts one afresh
    proc = forkserver.popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, base, time.monotonic() + STARTUP_DEADLINE)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    pg = context.new_page()
    pg.csp_errors = []  # type: ignore[attr-defined]
    pg.on("console", lambda m: "Content Security Policy" in m.text and pg.csp_errors.append(m.text))
    yield pg
    context.close()


def _shot(page, name: str, backend: str) -> None:
    if os.environ.get("PQWEB_SCREENSHOTS") == "1" and backend == "sqlite":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _login(page, base: str) -> None:
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(base + "/?done=logged-in")


def test_overview_updates_live_and_pauses_a_queue(wq, server, page, backend):
    from playwright.sync_api import expect

    wq.submit("a1", "mail", queue="q1")
    page.goto(server + "/")
    waiting = page.locator('tr[data-queue="q1"] td.waiting')
    expect(waiting).to_have_text("1")
    page.evaluate("window.stillHere = true")
    wq.submit("a2", "mail", queue="q1")
    expect(waiting).to_have_text("2")  # by the live update, no reload:
    assert page.evaluate("window.stillHere") is True
    _shot(page, "overview", backend)
    _login(page, server)
    page.click('tr[data-queue="q1"] button:has-text("Pause")')
    expect(page.locator("#confirm-question")).to_contain_text("Pause queue 'q1'?")
    page.click("#confirm-yes")
    expect(page.locator('tr[data-queue="q1"] td.state')).to_have_text("paused")
    assert wq.queue_settings("q1").paused
    page.click('tr[data-queue="q1"] button:has-text("Resume")')
    expect(page.locator('tr[data-queue="q1"] td.state')).to_have_text("running")
    assert not wq.queue_settings("q1").paused
    assert page.csp_errors == []


def test_filters_and_pages(wq, server, page, backend):
    from playwright.sync_api import expect

    wq.submit_many([{"key": f"k{i:03d}", "type": "t", "queue": "qa" if i % 3 else "qb"} for i in range(90)])
    page.goto(server + "/tasks")
    page.fill("input[name=queue]", "qa")
    page.click("form.filters button")
    rows = page.locator("tr.task td.key")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_text("k089")
    _shot(page, "tasks", backend)
    page.click("#older")
    expect(rows).to_have_count(10)
    expect(rows.last).to_have_text("k001")
    assert page.csp_errors == []


def test_retry_and_cancel_from_the_task_page(wq, server, page, backend):
    from playwright.sync_api import expect

    wq.submit("bad", "t", {"n": 1})
    wq.poll().fail("ValueError: nope")
    wq.submit("later", "t", run_at=wq.now() + 3600)
    _login(page, server)
    page.goto(server + "/task?key=bad")
    _shot(page, "task", backend)
    page.click("#action-retry")
    expect(page.locator(".done")).to_have_text("Task retried: it waits to run again.")
    assert wq["bad"].metadata().status == "waiting"
    page.goto(server + "/task?key=later")
    page.click("#action-cancel")
    page.click("#confirm-yes")
    expect(page.locator("#task-status")).to_contain_text("cancelled")
    assert wq["later"].metadata().outcome == "cancelled"


def test_a_script_in_task_data_is_shown_as_text_and_never_runs(wq, server, page, backend):
    from playwright.sync_api import expect

    wq.submit(PAYLOAD[:200], "t", {"html": PAYLOAD}, tags=["x"])
    wq.submit("plain", "t", {"html": PAYLOAD})
    for path in ("/tasks", "/task?key=plain", "/"):
        page.goto(server + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned") is None
        assert page.title() != "pwned"
    expect(page.locator("#task-data")).to_have_count(0)
    page.goto(server + "/task?key=plain")
    expect(page.locator("#task-data")).to_contain_text("<script>window.pwned = 1; document.title = ")
    expect(page.locator("#task-data")).to_contain_text('<img src=x onerror=\\"window.pwned = 2\\">')
    assert page.evaluate("window.pwned") is None and page.title() != "pwned"


def test_actions_are_refused_without_the_token(wq, server, page, backend):
    from playwright.sync_api import expect

    wq.submit("k", "t")
    page.goto(server + "/task?key=k")
    page.click("#action-cancel")
    expect(page.locator("h1")).to_have_text("Refused")
    assert wq["k"].metadata().status == "waiting"
    page.goto(server + "/login")
    page.fill("input[name=token]", "not-the-token-0123456789")
    page.click("form.login button")
    expect(page.locator("#error-message")).to_have_text("wrong token")
    page.goto(server + "/task?key=k")
    page.click("#action-cancel")
    expect(page.locator("h1")).to_have_text("Refused")
    assert wq["k"].metadata().status == "waiting"


def test_a_run_step_goes_from_running_to_succeeded_live(wq, server, page, backend):
    """A step held by a worker shows running; once it finishes the page shows it succeeded, by
    the live update (no reload): the step is driven in this process between the assertions."""
    from playwright.sync_api import expect
    from test_web_runs import Decider, flow

    flow.start("live-run", {"n": 3}, queue=wq)
    page.goto(server + "/run?id=live-run")
    page.evaluate("window.stillHere = true")
    fetch_status = page.locator('tr[data-step="fetch"] td.status')
    expect(fetch_status).to_have_text("waiting")
    task = wq.poll(alive_time=60)  # a worker holds fetch: it runs
    expect(fetch_status).to_have_text("running")
    Decider(task).run()
    if task.deferred is not None:
        wq.finish_many([task])
    expect(fetch_status).to_have_text("succeeded")
    expect(page.locator('tr[data-step="square"] td.items')).to_contain_text("0/3 succeeded")
    assert page.evaluate("window.stillHere") is True
    while (task := wq.poll(alive_time=60)) is not None:
        Decider(task).run()
        if task.deferred is not None:
            wq.finish_many([task])
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator('tr[data-step="square"] td.items')).to_contain_text("3/3 succeeded")
    page.click('tr[data-step="total"] button')
    expect(page.locator("#why-text")).to_contain_text("total")
    expect(page.locator("#run-graph")).to_have_attribute("src", re.compile(r"v=\w+"))
    assert page.evaluate("document.getElementById('run-graph').naturalWidth") > 0  # the SVG was drawn
    _shot(page, "run", backend)
    page.goto(server + "/runs")
    expect(page.locator("tr.run td.key").first).to_have_text("live-run")
    _shot(page, "runs", backend)
    assert page.csp_errors == []


def test_retry_and_cancel_a_run_from_its_page(wq, server, page, backend):
    from playwright.sync_api import expect
    from test_web_runs import drive, flow

    flow.start("broken", {"fail": True}, queue=wq)
    drive(wq)
    _login(page, server)
    page.goto(server + "/run?id=broken")
    expect(page.locator("#run-status")).to_have_text("failed")
    page.click("#action-retry")
    expect(page.locator(".done")).to_contain_text("Run retried")
    assert pqflow.get_run("broken", queue=wq).status == "running"
    page.click("#action-cancel")
    page.click("#confirm-yes")
    expect(page.locator(".done")).to_contain_text("Run cancelled")
    drive(wq)
    expect(page.locator("#run-status")).to_have_text("cancelled")
    assert pqflow.get_run("broken", queue=wq).status == "cancelled"
    assert page.csp_errors == []


def test_the_schedules_page_renders_and_adds_a_schedule(wq, sched, server, page, backend):
    from playwright.sync_api import expect

    sched.add("nightly", "report", cron="30 2 * * *", timezone="America/New_York", next_time=MARCH_5)
    page.goto(server + "/schedules")
    fires = page.locator('tr[data-key="nightly"] ol.fires li')
    expect(fires).to_have_count(10)
    expect(fires.nth(5)).to_contain_text("2024-03-10T03:00:00-04:00 shifted (DST gap)")
    _shot(page, "schedules", backend)
    _login(page, server)
    page.goto(server + "/schedules")
    page.fill("#add-schedule input[name=key]", "hourly")
    page.fill("#add-schedule input[name=type]", "ping")
    page.fill("#add-schedule input[name=cron]", "0 * * * *")
    page.fill("#add-schedule input[name=timezone]", "Nowhere/Atlantis")
    page.click("#action-add")
    expect(page.locator("#form-error")).to_contain_text("Nowhere/Atlantis")
    assert not sched["hourly"].exists()
    page.fill("#add-schedule input[name=timezone]", "Europe/Berlin")
    page.click("#action-add")
    expect(page.locator(".done")).to_have_text("Schedule added.")
    assert sched["hourly"].metadata().timezone == "Europe/Berlin"
    page.goto(server + "/")
    expect(page.locator("#due-next tr.due").first).to_be_visible()
    assert page.csp_errors == []
