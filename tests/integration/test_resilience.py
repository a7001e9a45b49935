"""Transient database failures are retried inside the store; persistent ones raise DatabaseError."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

import queue_core


def _kill_pooled_connections(queue, db_url, backend):
    """Kill every server connection of this queue's pool from another session."""
    ids = set()
    eng = queue.db.engine
    with eng.connect() as c:
        if backend == "mysql":
            ids.add(c.exec_driver_sql("SELECT CONNECTION_ID()").scalar())
        else:
            ids.add(c.exec_driver_sql("SELECT pg_backend_pid()").scalar())
    admin = sa.create_engine(db_url)
    with admin.connect() as a:
        for i in ids:
            if backend == "mysql":
                a.exec_driver_sql(f"KILL {int(i)}")
            else:
                a.exec_driver_sql(f"SELECT pg_terminate_backend({int(i)})")
    admin.dispose()
    return ids


def test_dropped_connection_is_retried(queue, db_url, backend):
    if backend == "sqlite":
        pytest.skip("no server connection to drop")
    queue.submit("before", "t")
    _kill_pooled_connections(queue, db_url, backend)
    queue.submit("after", "t")  # the dead pooled connection is replaced transparently
    assert queue["after"].exists()
    t = queue.poll()
    _kill_pooled_connections(queue, db_url, backend)
    t.finish()
    assert queue[t.key].metadata().outcome == "success"


def test_sqlite_busy_writer_is_waited_for(queue, db_url, backend):
    if backend != "sqlite":
        pytest.skip("SQLite locking")
    raw = sa.create_engine(db_url, connect_args={"isolation_level": None})
    conn = raw.connect()
    conn.exec_driver_sql("BEGIN IMMEDIATE")  # another process holds the write lock
    release = threading.Timer(0.5, lambda: conn.exec_driver_sql("COMMIT"))
    release.start()
    t0 = time.monotonic()
    queue.submit("k", "t")
    assert time.monotonic() - t0 >= 0.4
    release.join()
    conn.close()
    raw.dispose()
    assert queue["k"].exists()


def test_unreachable_database_raises_database_error_with_masked_url():
    q = queue_core.open("mysql+pymysql://u:s3cretpw@127.0.0.1:1/x", max_retry_count=1, connect_timeout=1)
    with pytest.raises(queue_core.DatabaseError) as ei:
        q.submit("k", "t")
    assert "s3cretpw" not in str(ei.value) and "***" in str(ei.value)
    q.close()
