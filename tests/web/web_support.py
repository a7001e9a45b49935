"""What the dashboard's tests share: a TestClient of the app over a queue, logging in, the
CSRF token of a page, and hostile strings. (Not a conftest.py: one here would shadow
tests/conftest.py as the module ``conftest``.)"""

from __future__ import annotations

import re
import warnings

import sqlalchemy as sa

from pqweb.app import create_app
from pqweb.settings import WebSettings

with warnings.catch_warnings():  # Starlette 1.x asks for httpx2; httpx serves its TestClient the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "test-token-0123456789abcdef"
HOSTILE = ("<script>alert(1)</script>", '"onmouseover=alert(1) x="', "</textarea><img src=x onerror=alert(1)>")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"|"X-CSRF-Token": "([^"]+)"')


def client(queue, *, actions: bool = True, page_size: int = 50, scheduler=None) -> TestClient:
    web = WebSettings(allow_actions=actions, token=TOKEN if actions else None, page_size=page_size)
    app = create_app(queue, web, scheduler=scheduler)
    return TestClient(app, raise_server_exceptions=True, follow_redirects=False)


def csrf_of(c: TestClient, path: str = "/login") -> str:
    found = _CSRF.search(c.get(path).text)
    assert found, f"no CSRF field on {path}"
    return found[1] or found[2]


def login(c: TestClient) -> str:
    """Log ``c`` in; the session's CSRF token after."""
    r = c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN})
    assert r.status_code == 303, r.text
    return csrf_of(c, "/")


def statements(queue, fn) -> int:
    """How many statements ``fn()`` sends through ``queue``'s engine (transaction control left out)."""
    seen: list[str] = []

    def spy(conn, cursor, statement, *rest):
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "SET", "SAVEPOINT", "RELEASE")):
            seen.append(statement)

    sa.event.listen(queue.db.engine, "before_cursor_execute", spy)
    try:
        fn()
    finally:
        sa.event.remove(queue.db.engine, "before_cursor_execute", spy)
    return len(seen)
