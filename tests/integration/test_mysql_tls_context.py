"""PyMySQL's "preferred TLS" context is built once per process (``store/pymysql_tls.py``).

Without ``ssl*`` options PyMySQL built an ``SSLContext`` in every connection, reading the
system's certificate store each time (20-25 ms of CPU); pq's connections now share the first
one built in the process. A connection given ``ssl*`` options (TLS required) still builds its
own, and refuses a server without TLS as PyMySQL does.
"""

from __future__ import annotations

import os

import pymysql
import pytest
import sqlalchemy as sa

import queue_core
from conftest import drop_tables
from queue_core.errors import DatabaseError
from queue_core.store import pymysql_tls
from queue_core.store.pymysql_tls import SharedPreferredTLS

URL = os.environ.get("TEST_MYSQL_URL")
pytestmark = pytest.mark.skipif(not URL, reason="TEST_MYSQL_URL not set")


def _raw_connections(q, n: int) -> list:
    engine = q.db.engine
    conns = [engine.raw_connection() for _ in range(n)]
    try:
        return [c.dbapi_connection for c in conns]
    finally:
        for c in conns:
            c.close()


def test_pq_connections_share_one_preferred_tls_context_and_still_work():
    table = f"tls{os.getpid()}"
    try:
        with queue_core.open(URL, table) as q:
            q.init()
            q.submit("k", "t", {})
            first, second = _raw_connections(q, 2)
            assert isinstance(first, SharedPreferredTLS) and isinstance(second, SharedPreferredTLS)
            assert first.ctx is second.ctx is pymysql_tls._preferred[0]
            assert not first._ssl_required  # still "preferred": a server without TLS is spoken to in plain
            assert [t.key for t in q.list()] == ["k"]
    finally:
        drop_tables(URL, table)


def test_a_plain_pymysql_connection_builds_a_context_of_its_own_each_time():
    # what the shared context saves: PyMySQL's own connections do not share theirs
    url = sa.make_url(URL)
    kw = {"host": url.host, "port": url.port, "user": url.username, "password": url.password,
          "database": url.database}
    a, b = pymysql.connect(**kw), pymysql.connect(**kw)
    try:
        assert a.ctx is not None and b.ctx is not None and a.ctx is not b.ctx
    finally:
        a.close()
        b.close()


def test_tls_options_build_their_own_context_and_require_tls():
    # TLS required (an ssl_ca given): PyMySQL's own context, not the shared one; this server
    # speaks no TLS, so the connection is refused rather than made in plain
    required = f"{URL}?ssl_ca=/etc/ssl/certs/ca-certificates.crt"
    engine = sa.create_engine(required)
    pymysql_tls.share_preferred_tls(engine)
    try:
        with pytest.raises(sa.exc.OperationalError, match="SSL"):
            engine.connect()
    finally:
        engine.dispose()
    q = queue_core.open(required, f"tls{os.getpid()}", max_retry_count=0)
    try:
        with pytest.raises(DatabaseError):
            q.init()
    finally:
        q.close()
