"""PyMySQL's "preferred TLS" context, built once per process (store layer).

Given no ``ssl*`` option, PyMySQL offers TLS when the server does: it builds an
``ssl.SSLContext`` for that in every connection, reading the system's certificate store each
time (some 20-25 ms of CPU per connection, whether the server speaks TLS or not). That context
is the same for every connection (no certificate checked, no client certificate), so a
connection of pq's MySQL engines takes the one built first in its process. A connection given
``ssl*`` options (TLS required, certificates checked) builds its own, as PyMySQL does.
"""

from __future__ import annotations

import threading
from typing import Any

import pymysql
import sqlalchemy as sa

_lock = threading.Lock()
_preferred: list[Any] = []  # the context, once built


class SharedPreferredTLS(pymysql.connections.Connection):
    """A PyMySQL connection that takes the process's preferred-TLS context."""

    def _create_ssl_ctx(self, sslp):  # PyMySQL calls it with {} for "preferred TLS"
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        with _lock:
            if not _preferred:
                _preferred.append(super()._create_ssl_ctx(sslp))
            return _preferred[0]


def build_preferred() -> None:
    """Build the process's preferred-TLS context now, without connecting: a process that forks
    (a worker's supervisor) builds it once and each child inherits it. PyMySQL's builder reads
    nothing of its connection; were that to change, the first connection builds it instead."""
    try:
        SharedPreferredTLS.__new__(SharedPreferredTLS)._create_ssl_ctx({})
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


def connect(*cargs: Any, **cparams: Any) -> SharedPreferredTLS:
    """A PyMySQL connection of ``cargs`` and ``cparams`` through :class:`SharedPreferredTLS`."""
    return SharedPreferredTLS(*cargs, **cparams)


def share_preferred_tls(engine: sa.Engine) -> None:
    """Connect ``engine`` (PyMySQL) through :class:`SharedPreferredTLS`. Its dialect's own
    ``connect`` is replaced, not a ``do_connect`` listener added: SQLAlchemy calls the dialect
    after every ``do_connect`` listener, so one its user adds (to change the password of each new
    connection, say) still runs and is obeyed."""
    engine.dialect.connect = connect  # type: ignore[method-assign]
