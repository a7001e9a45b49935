"""Dashboard sessions on every database: a logout ends the login on the server (a copy of the
cookie replayed afterwards acts on nothing), wrong tokens are throttled per client address (429
with Retry-After, on an injected clock), ``--secure-cookie`` / ``web_secure_cookie`` mark the
cookie Secure."""

from __future__ import annotations

import warnings

from click.testing import CliRunner
from web_support import TOKEN, client, csrf_of, login

from pqweb.app import create_app
from pqweb.security import SESSION_AGE
from pqweb.settings import WebSettings

#: wrong tokens a client may send in WINDOW seconds (docs/dashboard.md)
MAX_FAILURES, WINDOW = 5, 300.0

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _client(queue, clock: Clock, **web) -> TestClient:
    settings = WebSettings(allow_actions=True, token=TOKEN, **web)
    return TestClient(create_app(queue, settings, clock=clock), follow_redirects=False)


def replay_works(app, cookie: str, csrf: str) -> bool:
    other = TestClient(app, follow_redirects=False)
    other.cookies.set("pqweb_session", cookie)
    return "Log out" in other.get("/").text and csrf_of(other, "/") == csrf


def test_a_cookie_replayed_after_logout_acts_on_nothing(queue):
    queue.submit("k", "t", queue="q1")
    c = client(queue)
    csrf = login(c)
    saved = c.cookies["pqweb_session"]
    assert replay_works(c.app, saved, csrf)  # before the logout the copy is a logged-in session
    assert c.post("/logout", data={"csrf": csrf}).status_code == 303
    replay = TestClient(c.app, follow_redirects=False)  # another browser of the same server
    replay.cookies.set("pqweb_session", saved)
    r = replay.post("/queues/pause", data={"queue": "q1", "csrf": csrf, "confirmed": "yes"})
    assert r.status_code == 401, r.text
    assert not queue.queue_settings("q1").paused
    assert "Log in for actions" in replay.get("/").text  # shown as logged out, too


def test_a_login_ends_after_its_age(queue):
    queue.submit("k", "t", queue="q1")
    clock = Clock()
    c = _client(queue, clock)
    csrf = login(c)
    clock.t += SESSION_AGE + 1
    r = c.post("/queues/pause", data={"queue": "q1", "csrf": csrf, "confirmed": "yes"})
    assert r.status_code == 401 and not queue.queue_settings("q1").paused


def test_wrong_tokens_are_throttled_per_client(queue):
    clock = Clock()
    c = _client(queue, clock)
    for _ in range(MAX_FAILURES):
        assert c.post("/login", data={"csrf": csrf_of(c), "token": "wrong-token-0123456789"}).status_code == 401
    refused = c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN})  # even the right one
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) == int(WINDOW)
    assert "too many wrong tokens" in refused.text
    clock.t += WINDOW / 2
    again = c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN})
    assert again.status_code == 429 and int(again.headers["retry-after"]) == int(WINDOW / 2)
    elsewhere = TestClient(c.app, client=("192.0.2.9", 5000), follow_redirects=False)  # another address
    assert elsewhere.post("/login", data={"csrf": csrf_of(elsewhere), "token": TOKEN}).status_code == 303
    clock.t += WINDOW / 2
    assert c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN}).status_code == 303


def test_a_good_login_clears_the_failures(queue):
    clock = Clock()
    c = _client(queue, clock)
    for _ in range(MAX_FAILURES - 1):
        c.post("/login", data={"csrf": csrf_of(c), "token": "wrong-token-0123456789"})
    assert c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN}).status_code == 303
    for _ in range(MAX_FAILURES - 1):
        assert c.post("/login", data={"csrf": csrf_of(c), "token": "wrong-token-0123456789"}).status_code == 401
    assert c.post("/login", data={"csrf": csrf_of(c), "token": TOKEN}).status_code == 303


def test_secure_cookie_marks_the_session_cookie_secure(queue):
    c = _client(queue, Clock(), secure_cookie=True)
    cookie = c.get("/login").headers["set-cookie"]
    assert "; Secure" in cookie and "SameSite=Lax" in cookie and "HttpOnly" in cookie


def test_secure_cookie_comes_from_the_flag_or_the_config_key(tmp_path, monkeypatch):
    import pqweb.cli as web_cli

    seen: list[WebSettings] = []
    monkeypatch.setattr(web_cli, "serve", lambda cfg, web, host, port, verbose=False: seen.append(web))
    monkeypatch.setenv("PQWEB_TOKEN", TOKEN)
    url = f"sqlite:///{tmp_path}/pq.db"
    for args, env in (([], {}), (["--secure-cookie"], {}), ([], {"PQ_WEB_SECURE_COOKIE": "true"})):
        r = CliRunner().invoke(web_cli.cli, ["-D", url, *args], env=env)
        assert r.exit_code == 0, r.output
    cfg = tmp_path / "pq.toml"
    cfg.write_text(f'[development]\nurl = "{url}"\nweb_secure_cookie = true\n')
    assert CliRunner().invoke(web_cli.cli, ["-c", str(cfg)]).exit_code == 0
    assert [w.secure_cookie for w in seen] == [False, True, True, True]
