"""Log in with the dashboard's token (a form: never in a URL), log out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import LoginRequiredError, ReadOnlyError, TooManyAttemptsError
from ..render import render
from ..security import check_csrf, check_token, session_of
from .common import see_other, web_of


def page(request: Request) -> Response:
    return render(request, "login.html", {})


async def login(request: Request) -> Response:
    web = web_of(request)
    if not web.allow_actions:
        raise ReadOnlyError("the dashboard is read-only: there is nothing to log in for")
    form = dict(await request.form())
    check_csrf(request, form)
    throttle, client = request.app.state.login_throttle, _client(request)
    wait = throttle.retry_after(client)
    if wait is not None:
        raise TooManyAttemptsError(f"too many wrong tokens from this address: try again in {wait} s", wait)
    if not check_token(form.get("token"), web.token):
        throttle.failed(client)
        raise LoginRequiredError("wrong token")
    throttle.succeeded(client)
    session_of(request).login(request.app.state.logins)
    return see_other("/", done="logged-in")


def _client(request: Request) -> str:
    """The address the login comes from (the proxy's, behind one: see docs/dashboard.md)."""
    return request.client.host if request.client else "-"


async def logout(request: Request) -> Response:
    if not web_of(request).allow_actions:
        raise ReadOnlyError("the dashboard is read-only: nobody is logged in")
    check_csrf(request, dict(await request.form()))
    session_of(request).logout(request.app.state.logins)
    return see_other("/", done="logged-out")


ROUTES = [
    Route("/login", page),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
