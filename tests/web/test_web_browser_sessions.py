"""Sessions and actions in a real browser (Debian's chromium, headless) against a real pqweb
process on each database: a link from another site keeps the login, a destructive action asks
first, and a live part whose refresh fails says so on the page."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_web_browser import _login, browser, page, server  # noqa: F401 - fixtures

#: the dashboard's reads are tested on every database in process (tests/web); the browser on two
pytestmark = pytest.mark.one_server
LINKER = '<!doctype html><title>elsewhere</title><a id="go" href="{target}">the dashboard</a>'


@pytest.fixture
def other_site(server):  # noqa: F811
    """A page on another site (``localhost``, not ``127.0.0.1``: another site for SameSite)
    linking to the dashboard's task page; its URL."""
    target = server + "/task?key=linked"
    body = LINKER.format(target=target).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_a_link_from_another_site_keeps_the_login(wq, server, other_site, page):  # noqa: F811
    from playwright.sync_api import expect

    wq.submit("linked", "t")
    _login(page, server)
    page.goto(other_site)
    expect(page).to_have_title("elsewhere")
    page.click("#go")
    page.wait_for_url(server + "/task?key=linked")
    expect(page.locator("header .who button")).to_have_text("Log out")  # logged in on arrival
    expect(page.locator("#action-cancel")).to_be_visible()
    page.goto(server + "/")
    expect(page.locator("header .who button")).to_have_text("Log out")  # and the session was kept


def test_a_destructive_action_asks_first(wq, server, page):  # noqa: F811
    from playwright.sync_api import expect

    wq.submit("k", "t")
    wq.submit("w", "t")
    _login(page, server)
    page.goto(server + "/task?key=k")
    expect(page.locator("#action-retry")).to_have_count(0)  # a waiting task: no retry offered
    page.click("#action-cancel")
    expect(page.locator("#confirm-question")).to_contain_text("Cancel task 'k'")
    assert wq["k"].metadata().status == "waiting"
    page.click("#confirm-back")
    page.wait_for_url(server + "/task?key=k")
    assert wq["k"].metadata().status == "waiting"
    page.click("#action-force-finish")
    page.click("#confirm-yes")
    expect(page.locator(".done")).to_have_text("Task force-finished.")
    assert wq["k"].metadata().finished
    expect(page.locator("#no-actions")).to_be_visible()
    assert page.csp_errors == []


def test_a_live_part_that_cannot_be_refreshed_says_so(wq, server, page):  # noqa: F811
    from playwright.sync_api import expect

    wq.submit("a1", "mail", queue="q1")
    page.goto(server + "/")
    stale = page.locator("#stale")
    expect(page.locator('tr[data-queue="q1"] td.waiting')).to_have_text("1")
    expect(stale).to_be_hidden()
    page.route("**/live/overview", lambda route: route.fulfill(status=503, body="down"))
    expect(stale).to_be_visible()
    expect(stale).to_contain_text("answered 503")
    page.unroute("**/live/overview")
    page.route("**/live/overview", lambda route: route.abort())
    expect(stale).to_contain_text("did not answer")
    page.unroute("**/live/overview")
    wq.submit("a2", "mail", queue="q1")
    expect(page.locator('tr[data-queue="q1"] td.waiting')).to_have_text("2")
    expect(stale).to_be_hidden()  # refreshed again
    assert page.csp_errors == []
