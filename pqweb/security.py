"""The dashboard's guard: the signed session cookie (its CSRF token, the id of its login),
the check every POST passes, and the headers every response carries.

The session is a cookie signed with a key made at start (a restart logs everyone out), HttpOnly
and SameSite=Lax: a link from another site keeps the session, while a POST from another site
carries no cookie (and no CSRF token). A POST carries the session's CSRF token in the form field
``csrf`` or the header ``X-CSRF-Token``; tokens are compared with :func:`hmac.compare_digest`.
A login is an id the process holds (:class:`Logins`): logging out forgets it, so a copy of the
cookie replayed afterwards is an anonymous session.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import CSRFError, LoginRequiredError, ReadOnlyError

log = logging.getLogger("pqweb")
COOKIE = "pqweb_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
#: how long a session lasts (seconds)
SESSION_AGE = 12 * 3600
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
HEADERS = (
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
)


#: the most logins a process holds at once (the oldest is forgotten past it)
MAX_LOGINS = 10_000


class Logins:
    """The logins this process holds, by id, each until its logout or :data:`SESSION_AGE`.

    Held in memory: a restart, like the per-process signing key, logs everyone out, and a second
    pqweb process knows neither this one's key nor its logins (see docs/dashboard.md)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: int = MAX_LOGINS):
        self._clock = clock
        self._limit = limit
        self._started: OrderedDict[str, float] = OrderedDict()

    def open(self) -> str:
        """A new login's id."""
        sid = secrets.token_urlsafe(24)
        self._started[sid] = self._clock()
        while len(self._started) > self._limit:
            self._started.popitem(last=False)
        return sid

    def alive(self, sid: object) -> bool:
        started = self._started.get(sid) if isinstance(sid, str) else None
        return started is not None and self._clock() - started < SESSION_AGE

    def close(self, sid: str | None) -> None:
        if sid is not None:
            self._started.pop(sid, None)


@dataclass
class Session:
    """One browser's session: its CSRF token and the id of its login (None: not logged in)."""

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    login_id: str | None = None
    #: whether the cookie must be (re)sent
    changed: bool = True
    #: changed by a login or a logout (a new session is only ``changed``)
    renewed: bool = False

    @property
    def authenticated(self) -> bool:
        return self.login_id is not None

    def login(self, logins: Logins) -> None:
        """Logged in: a new login id and CSRF token (one seen before the login is worth nothing after)."""
        logins.close(self.login_id)
        self.csrf, self.login_id, self.changed = secrets.token_urlsafe(32), logins.open(), True
        self.renewed = True

    def logout(self, logins: Logins) -> None:
        """Logged out here and on the server: the login id is forgotten, so a copy of this
        session's cookie (and its CSRF token) is worth nothing after."""
        logins.close(self.login_id)
        self.csrf, self.login_id, self.changed = secrets.token_urlsafe(32), None, True
        self.renewed = True


class SessionKeys:
    """Signs and reads session cookies with a key of this process; checks their logins."""

    def __init__(self, secret: bytes | None = None, *, secure: bool = False, logins: Logins | None = None):
        self._signer = URLSafeTimedSerializer(secret or secrets.token_bytes(32), salt="pqweb-session")
        self.secure = secure
        self.logins = logins or Logins()

    def load(self, cookie: str | None) -> Session:
        """The session of ``cookie``; a new one when it is missing, forged or too old; not
        logged in when its login ended (logout, age)."""
        if not cookie:
            return Session()
        try:
            value = self._signer.loads(cookie, max_age=SESSION_AGE)
        except BadSignature:
            return Session()
        if not isinstance(value, dict) or not isinstance(value.get("c"), str):
            return Session()
        sid = value.get("s")
        return Session(value["c"], sid if self.logins.alive(sid) else None, changed=False)

    def cookie(self, session: Session) -> str:
        """The Set-Cookie value of ``session``."""
        value = self._signer.dumps({"c": session.csrf, "s": session.login_id})
        secure = "; Secure" if self.secure else ""
        return f"{COOKIE}={value}; Path=/; Max-Age={SESSION_AGE}; HttpOnly; SameSite=Lax{secure}"


class Guard:
    """ASGI middleware: loads the session into ``request.state.session``, and adds the security
    headers (and the session cookie when it changed) to every response."""

    def __init__(self, app: ASGIApp, keys: SessionKeys):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = self.keys.load(Request(scope).cookies.get(COOKIE))
        scope.setdefault("state", {})["session"] = session

        started = False

        async def send_guarded(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS:
                    headers[name] = value
                if sends_cookie(session, scope["method"], message["status"]):
                    headers.append("set-cookie", self.keys.cookie(session))
            await send(message)

        try:
            await self.app(scope, receive, send_guarded)
        except Exception:
            log.exception("error in a page")
            if started:
                raise
            await PlainTextResponse("The dashboard failed on this page; its log says why.", 500)(
                scope, receive, send_guarded
            )


def sends_cookie(session: Session, method: str, status: int) -> bool:
    """Whether a response carries the session's cookie: after a login or a logout; a new session
    only on a page a browser asked for itself (a successful GET). A request that came without
    the cookie (a form posted from another site: SameSite=Lax keeps the cookie back) must not
    replace the browser's session with an empty one."""
    if session.renewed:
        return True
    return session.changed and method in ("GET", "HEAD") and status < 400


def session_of(request: Request) -> Session:
    return request.state.session


def check_token(given: Any, expected: str | None) -> bool:
    """Whether ``given`` is the dashboard's token (never when none is set)."""
    if not expected or not isinstance(given, str):
        return False
    return hmac.compare_digest(_bytes(given), _bytes(expected))


def _bytes(text: str) -> bytes:
    """``text`` as bytes to compare (a lone surrogate sent by a hostile form is compared, not an error)."""
    return text.encode("utf-8", "surrogatepass")


def check_csrf(request: Request, form: Mapping[str, Any]) -> None:
    """CSRFError unless the POST carries the session's CSRF token (form field or header)."""
    given = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    if not isinstance(given, str) or not hmac.compare_digest(_bytes(given), _bytes(session_of(request).csrf)):
        raise CSRFError("this form has expired or was not sent by the dashboard (CSRF token missing or wrong)")


def check_action(request: Request, form: Mapping[str, Any], allow_actions: bool) -> None:
    """What every action passes: actions on, a logged-in session, its CSRF token."""
    if not allow_actions:
        raise ReadOnlyError("the dashboard is read-only: start it with --allow-actions to change tasks and queues")
    if not session_of(request).authenticated:
        raise LoginRequiredError("log in with the dashboard's token to change tasks and queues")
    check_csrf(request, form)
