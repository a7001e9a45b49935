"""Database passwords out of every message: remembered URLs, and anything shaped like one."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

from sqlalchemy.engine import make_url  # parsing only: no SQL here

_secrets: set[str] = set()
_URL_PASSWORD_RE = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*:)[^@/\s'\"]+@")


def url_password(url: Any) -> str | None:
    """The password of database URL ``url`` (None without one, or when it does not parse)."""
    if not url:
        return None
    try:
        pw = make_url(str(url)).password
    except Exception:  # noqa: BLE001 - not a URL: the regex in scrub still applies
        return None
    return str(pw) if pw else None


def remember_url(url: Any) -> None:
    """Note the password of ``url`` so :func:`scrub` removes it from any later message."""
    pw = url_password(url)
    if pw:
        _secrets.update({pw, quote(pw, safe=""), quote_plus(pw)})


def scrub(text: str, urls: Iterable[Any] = ()) -> str:
    """``text`` with database passwords replaced by ``***``.

    Removes the passwords of ``urls`` and of every URL given to :func:`remember_url`, and
    the password part of anything that looks like ``scheme://user:password@``.
    """
    for url in urls:
        remember_url(url)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret and secret != "***":
            text = text.replace(secret, "***")
    return _URL_PASSWORD_RE.sub(r"\1***@", text)
