"""Log in with the dashboard's token (a form: never in a URL), log out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import LoginRequiredError, ReadOnlyError
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
    if not check_token(form.get("token"), web.token):
        raise LoginRequiredError("wrong token")
    session_of(request).login()
    return see_other("/", done="logged-in")


async def logout(request: Request) -> Response:
    if not web_of(request).allow_actions:
        raise ReadOnlyError("the dashboard is read-only: nobody is logged in")
    check_csrf(request, dict(await request.form()))
    session_of(request).logout()
    return see_other("/", done="logged-out")


ROUTES = [
    Route("/login", page),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
