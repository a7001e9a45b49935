"""A form on another site posting to the dashboard (a hostile page the logged-in user opens)
changes nothing and does not end the user's session either.

With SameSite=Lax the cross-site POST arrives without the session cookie: pqweb answers 401 (not
logged in), but ``pqweb/security.py::Guard`` answers with a fresh anonymous session cookie, and
the browser stores a Lax cookie set on a top-level navigation: the user is logged out (a
cross-site logout the Strict→Lax change was meant to end for links)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_web_browser import _login, browser, page, server  # noqa: F401 - fixtures

#: the dashboard's reads are tested on every database in process (tests/web); the browser on two
pytestmark = pytest.mark.one_server
FORM = (
    "<!doctype html><title>elsewhere</title>"
    '<form id="f" method="post" action="{target}"><input name="queue" value="default">'
    '<input name="confirmed" value="yes"><button id="go">win a prize</button></form>'
)


@pytest.fixture
def hostile_site(server):  # noqa: F811
    body = FORM.format(target=server + "/queues/pause").encode()

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


def test_a_cross_site_form_post_neither_acts_nor_logs_the_user_out(wq, server, hostile_site, page):  # noqa: F811
    from playwright.sync_api import expect

    wq.submit("k", "t")
    _login(page, server)
    expect(page.locator("header .who button")).to_have_text("Log out")
    page.goto(hostile_site)
    with page.expect_navigation():
        page.click("#go")
    assert not wq.queue_settings("default").paused  # the action was refused
    page.goto(server + "/")
    expect(page.locator("header .who button")).to_have_text("Log out", timeout=3000)  # still logged in
