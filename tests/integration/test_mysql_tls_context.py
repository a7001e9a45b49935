"""PyMySQL's "preferred TLS" context is built once per process (``store/pymysql_tls.py``).

Without ``ssl*`` options PyMySQL built an ``SSLContext`` in every connection, reading the
system's certificate store each time (20-25 ms of CPU); pq's connections now share the first
one built in the process. A connection given ``ssl*`` options (TLS required) still builds its
own, and refuses a server without TLS as PyMySQL does. pq's own engines are checked in a process
of their own: the test process's engines share the context too (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pymysql
import pytest
import sqlalchemy as sa
from conftest import drop_tables

import queue_core
from queue_core.errors import DatabaseError
from queue_core.store import pymysql_tls

URL = os.environ.get("TEST_MYSQL_URL")
pytestmark = pytest.mark.skipif(not URL, reason="TEST_MYSQL_URL not set")

PQ_ENGINE = textwrap.dedent("""
    import sys
    import pymysql
    import sqlalchemy as sa
    import queue_core
    from queue_core.store import pymysql_tls
    url, table = sys.argv[1:3]
    real = sa.make_url(url).password
    with queue_core.open(sa.make_url(url).set(password="wrong").render_as_string(hide_password=False), table) as q:
        seen = []

        @sa.event.listens_for(sa.engine.Engine, "do_connect")  # each of pq's engines
        def fresh_password(dialect, conn_rec, cargs, cparams):  # SQLAlchemy's recipe: still obeyed
            seen.append(cparams["password"])
            cparams["password"] = real

        q.init()
        q.submit("k", "t", {})
        raws = [q.db.engine.raw_connection() for _ in range(2)]
        first, second = (r.dbapi_connection for r in raws)
        print(type(first).__name__, type(second).__name__)
        print(first.ctx is second.ctx is pymysql_tls._preferred[0], first._ssl_required, seen[:1])
        print([t.key for t in q.list()])
        for r in raws:
            r.close()
""")


def test_pq_connections_share_one_preferred_tls_context_and_obey_do_connect_listeners():
    table = f"tls{os.getpid()}"
    try:
        done = subprocess.run([sys.executable, "-c", PQ_ENGINE, URL, table], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines() == [
            "SharedPreferredTLS SharedPreferredTLS",
            "True False ['wrong']",  # shared; still "preferred" (plain to a server without TLS)
            "['k']",
        ]
    finally:
        drop_tables(URL, table)


def test_a_plain_pymysql_connection_builds_a_context_of_its_own_each_time():
    # what the shared context saves: PyMySQL's own connections do not share theirs
    url = sa.make_url(URL)
    kw = {"host": url.host, "port": url.port, "user": url.username, "password": url.password, "database": url.database}
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
