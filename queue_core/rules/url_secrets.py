"""The secrets a database URL may hold, and the URL with them hidden (pure: no I/O).

A password may sit in the userinfo (``mysql+pymysql://pq:SECRET@host/db``) or in the query,
where both drivers also take it (libpq and PyMySQL read ``?password=``, PyMySQL ``?passwd=``,
libpq ``?sslpassword=`` for a client key). Every message pq prints about a database goes through
:func:`masked`, and every error text through a scrub of :func:`secrets_of` (``Database.scrub``,
``clikit.passwords.scrub``), so neither place shows one.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, quote_plus

from sqlalchemy.engine import URL, make_url  # parsing only: no SQL here

#: query parameters whose value is a secret (compared in lower case): a password, a client key's
#: password, or psycopg's ``conninfo`` (a whole connection string, password included)
SECRET_QUERY_KEYS = frozenset(
    {"password", "passwd", "pass", "pwd", "sslpassword", "ssl_password", "ssl_key_password", "conninfo"}
)

#: ``password=VALUE`` in a URL's query, in any text, after ``?`` or ``&`` and before ``=``, as they
#: are or %-quoted (a driver's warning, or a URL rendered, quotes a query it does not take apart):
#: VALUE ends at ``&``, a space or a quote
_QUERY_SECRET_RE = re.compile(
    r"((?:[?&]|%3F|%26)(?:" + "|".join(sorted(SECRET_QUERY_KEYS, key=len, reverse=True)) + r")(?:=|%3D))[^&\s'\"]+",
    re.IGNORECASE,
)
#: ``scheme://user:PASSWORD@`` in any text: PASSWORD runs to the last ``@`` before a space or a quote
_USERINFO_SECRET_RE = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*:)[^\s'\"]+@")


def parsed(url: Any) -> URL | None:
    """``url`` as a SQLAlchemy URL; None when it is empty or does not parse."""
    if not url:
        return None
    try:
        return make_url(url if isinstance(url, URL) else str(url))
    except Exception:  # noqa: BLE001 - not a URL: callers fall back to the text patterns
        return None


def secrets_of(url: Any) -> list[str]:
    """The secrets of database URL ``url``: its password and secret query values (none when
    it does not parse)."""
    u = parsed(url)
    if u is None:
        return []
    found = [u.password] if u.password else []
    if u.password and u.host and "@" in u.host:  # ``u:p@rt@host``: the password is ``p@rt``
        found.append(f"{u.password}@{u.host.rsplit('@', 1)[0]}")
    for key, value in u.query.items():
        if _secret_key(key):
            found.extend([value] if isinstance(value, str) else value)
    return [str(s) for s in found if s]


def _secret_key(key: str) -> bool:
    """Whether query key ``key`` names a secret: ``password``, or a key ending in ``?password``
    (``db?x?password=SECRET``: the query a parser sees starts at the first ``?``, a driver may
    read it from the second)."""
    return re.split(r"[?&]", key.lower())[-1] in SECRET_QUERY_KEYS


def spellings(url: Any) -> list[str]:
    """Every way the secrets of ``url`` may be written (as they are, %-quoted, +-quoted), the
    longest first, so that a replacement of each in turn leaves no part of one."""
    found = {form for s in secrets_of(url) for form in (s, quote(s, safe=""), quote_plus(s))}
    return sorted((f for f in found if f != "***"), key=len, reverse=True)


def hide_query_secrets(text: str) -> str:
    """``text`` with the value of every ``?password=`` (and the other secret keys) as ``***``."""
    if "?" not in text and "&" not in text and "%" not in text:  # most log lines: no query to look at
        return text
    return _QUERY_SECRET_RE.sub(r"\1***", text)


def hide_secrets(text: str) -> str:
    """``text`` with the password of anything shaped like ``scheme://user:password@`` and the
    secret query values of :func:`hide_query_secrets` as ``***`` (for text whose URLs are unknown)."""
    return hide_query_secrets(_USERINFO_SECRET_RE.sub(r"\1***@", text) if "://" in text else text)


def masked(url: URL) -> str:
    """``url`` as text, its password and secret query values replaced by ``***``."""
    return hide_secrets(url.render_as_string(hide_password=True))
