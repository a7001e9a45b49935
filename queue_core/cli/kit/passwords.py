"""Database passwords out of every message: remembered URLs, and anything shaped like one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...rules import url_secrets

_secrets: set[str] = set()


def url_password(url: Any) -> str | None:
    """A secret of database URL ``url``: its password, else a ``?password=`` value (None without
    one, or when it does not parse)."""
    found = url_secrets.secrets_of(url)
    return found[0] if found else None


def remember_url(url: Any) -> None:
    """Note the secrets of ``url`` so :func:`scrub` removes them from any later message."""
    _secrets.update(url_secrets.spellings(url))


def forget_urls() -> None:
    """Forget every remembered URL: a command's invocation masks the secrets of its own URLs (run
    in one process one after another, as click's test runner does, one does not mask another's)."""
    _secrets.clear()


def scrub(text: str, urls: Iterable[Any] = ()) -> str:
    """``text`` with database passwords replaced by ``***``.

    Removes the secrets of ``urls`` and of every URL given to :func:`remember_url`, the
    password part of anything that looks like ``scheme://user:password@``, and the value of
    anything that looks like ``?password=`` (:mod:`queue_core.rules.url_secrets`).
    """
    for url in urls:
        remember_url(url)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret and secret != "***":
            text = text.replace(secret, "***")
    return url_secrets.hide_secrets(text)
