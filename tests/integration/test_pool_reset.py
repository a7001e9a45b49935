"""The pool's reset (``_reset_on_return``): a connection whose transaction failed is handed to
the next user clean (no transaction, no locks); one whose transaction ended skips the rollback."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conftest import in_transaction

import queue_core
from queue_core.errors import DatabaseError, TaskError

T0 = 1_700_000_000.0


@pytest.fixture
def q1(db_url, table_name, backend):
    q = queue_core.open(db_url, table_name, pool_size=1, max_retry_count=0)
    q.init()
    q.submit("a", "t", now=T0)
    yield q
    q.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def _lock_then(q, exc):
    t = q.store.t

    def fn(conn):
        conn.execute(sa.update(t).where(t.c.key == "a").values(priority=99))
        raise exc

    return fn


def _clean(q, db_url):
    with q.db.engine.connect() as conn:  # the pool's one connection (pool_size=1: the same)
        assert not in_transaction(conn.connection.dbapi_connection)
    # another client writes the row at once: no lock left behind
    other = queue_core.open(db_url, q.table, max_retry_count=0)
    try:
        other.db.run(lambda c: c.execute(sa.update(other.store.t).where(other.store.t.c.key == "a").values(priority=1)))
        assert other["a"].metadata().priority == 1
    finally:
        other.close()


def test_a_task_error_inside_run_leaves_a_clean_connection(q1, db_url):
    with pytest.raises(TaskError):
        q1.db.run(_lock_then(q1, TaskError("handler's")))
    _clean(q1, db_url)


def test_a_failed_statement_mid_transaction_leaves_a_clean_connection(q1, db_url):
    t = q1.store.t

    def fn(conn):
        conn.execute(sa.update(t).where(t.c.key == "a").values(priority=99))
        conn.exec_driver_sql("SELECT * FROM no_such_table_r13_zz")

    with pytest.raises(DatabaseError):
        q1.db.run(fn)
    _clean(q1, db_url)


def test_a_failing_commit_leaves_a_clean_connection(q1, db_url, monkeypatch):
    """COMMIT fails without ending the transaction (SQLite busy at COMMIT, a server refusing
    it): the connection goes back to the pool with its transaction open; the reset must roll
    it back."""
    dialect = q1.db.engine.dialect
    real = dialect.do_commit
    fired = []

    def failing_commit(dbapi_conn):
        if not fired:
            fired.append(1)
            raise dialect.loaded_dbapi.OperationalError("database is locked (simulated busy at COMMIT)")
        return real(dbapi_conn)

    monkeypatch.setattr(dialect, "do_commit", failing_commit)
    with pytest.raises(DatabaseError):
        q1.db.run(lambda c: c.execute(sa.update(q1.store.t).where(q1.store.t.c.key == "a").values(priority=99)))
    assert fired
    _clean(q1, db_url)
    assert q1["a"].metadata().priority == 1


def test_a_failed_autocommit_insert_leaves_a_clean_connection(q1, db_url):
    """The autocommit path's statement fails (a non-transient error): the next transaction
    on the pool's one connection is a real transaction again (not autocommit)."""
    t = q1.store.t

    def bad(conn):
        conn.exec_driver_sql("SELECT * FROM no_such_table_r13_zz")

    with pytest.raises(DatabaseError):
        q1.db.run(bad, autocommit=True)

    def write_then_fail(conn):
        conn.execute(sa.update(t).where(t.c.key == "a").values(priority=42))
        raise ValueError("rolled back")

    with pytest.raises(ValueError):
        q1.db.run(write_then_fail)
    assert q1["a"].metadata().priority == 0  # the update was rolled back, not autocommitted
    _clean(q1, db_url)


def test_after_an_autocommit_submit_the_next_transaction_is_atomic(q1, db_url):
    t = q1.store.t
    q1.submit("b", "t", now=T0)  # autocommit path on the pool's one connection (not MySQL)

    def write_then_fail(conn):
        conn.execute(sa.update(t).where(t.c.key == "a").values(priority=42))
        raise ValueError("rolled back")

    with pytest.raises(ValueError):
        q1.db.run(write_then_fail)
    assert q1["a"].metadata().priority == 0
    _clean(q1, db_url)
