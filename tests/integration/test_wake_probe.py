"""The wake-up probe (``store/watch.py``): what it sees, what it holds, how it fails.

Guarantees and the interleavings that could break them:
- a new row is seen at the next read, by a watch on another connection (another host's
  submitter); no change is no wake-up, so an idle worker does not claim for nothing;
- a purge that lowers the highest id, then a new row that brings it back to a value seen
  before (SQLite re-uses freed ids), is still a change;
- between reads the probe holds no transaction: SQLite's WAL checkpoint is never held back
  (a read transaction left open would let the WAL grow without bound), a server session is idle;
- a probe whose database fails raises DatabaseError without the password and can read again;
- ``wake_interval = 0`` (and no notifications) means no wake-ups: ``listen`` refuses.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import kill_session, session_of

import queue_core
from queue_core.errors import DatabaseError, ValidationError
from queue_core.store.watch import NewestIdWatch, watch_newest_id

T0 = 1_700_000_000.0


def _watch(queue) -> NewestIdWatch:
    return NewestIdWatch(queue.db, queue.store.t)


def test_a_new_row_is_a_change_and_nothing_new_is_none(queue):
    other = queue_core.open(queue.config["url"], queue.table)  # another submitter, its own pool
    try:
        with _watch(queue) as watch:
            assert not watch.changed()  # the first read only sets the mark
            assert not watch.changed()
            other.submit("a", "t", now=T0)
            assert watch.changed()
            assert not watch.changed()
            other.submit("b", "t", now=T0)
            other.submit("c", "t", now=T0)
            assert watch.changed()
    finally:
        other.close()


def test_an_id_given_out_again_after_a_purge_is_a_change(queue):
    t = queue.store.t
    queue.submit("a", "t", now=T0)
    queue.submit("b", "t", now=T0)
    with _watch(queue) as watch:
        watch.changed()
        top = queue.db.run(lambda c: c.execute(sa.select(sa.func.max(t.c.id))).scalar())
        queue.db.run(lambda c: c.execute(sa.delete(t).where(t.c.id == top, t.c.key == "b")))
        assert watch.changed()  # lower: a spurious wake-up, harmless
        queue.submit("c", "t", now=T0)
        assert watch.changed()


def test_the_probe_holds_no_transaction_between_reads(queue, backend, db_url):
    with _watch(queue) as watch:
        watch.changed()
        queue.submit("a", "t", now=T0)
        watch.changed()
        dbapi = watch._conn.connection.dbapi_connection
        if backend == "sqlite":
            assert not dbapi.in_transaction
            checkpoint = sa.create_engine(db_url)
            try:
                with checkpoint.connect() as conn:
                    busy, _, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
                assert busy == 0  # no reader held the WAL back
            finally:
                checkpoint.dispose()
        elif backend == "mysql":
            assert dbapi.get_autocommit()
        else:
            from psycopg.pq import TransactionStatus

            assert dbapi.info.transaction_status == TransactionStatus.IDLE


def test_a_read_is_one_statement_and_no_commit(queue, backend, mysql_commands):
    """One round trip a read on a server (MySQL: no COMMIT after the SELECT, which doubled them);
    SQLite's read is a deferred BEGIN and the SELECT, in-process."""
    seen: list[str] = []
    with _watch(queue) as watch:
        watch.changed()
        if mysql_commands is not None:
            mysql_commands.clear()
        sa.event.listen(queue.db.engine, "before_cursor_execute", lambda *a: seen.append(a[2].split()[0]))
        watch.changed()
        sent = list(mysql_commands or [])
    assert seen == (["BEGIN", "SELECT"] if backend == "sqlite" else ["SELECT"])
    if mysql_commands is not None:
        assert sent == ["SELECT"]


def test_a_memory_database_is_probed_between_its_users():
    q = queue_core.open("sqlite://", "mem")
    try:
        q.init()
        with _watch(q) as watch:
            assert not watch.changed()
            q.submit("a", "t", now=T0)
            assert watch.changed()
    finally:
        q.close()


def test_a_failed_probe_is_a_database_error_without_the_password(backend):
    if backend == "sqlite":
        pytest.skip("a file database has no server to lose")
    driver = "mysql+pymysql" if backend == "mysql" else "postgresql+psycopg"
    q = queue_core.open(f"{driver}://someone:s3cret-pw@127.0.0.1:1/nowhere", "t", connect_timeout=1, max_retry_count=0)
    try:
        with _watch(q) as watch, pytest.raises(DatabaseError) as err:
            watch.changed()
        assert "s3cret-pw" not in str(err.value)
        assert str(err.value).startswith(f"cannot connect to {driver}://someone:***@127.0.0.1:1/nowhere: "), str(
            err.value
        )
    finally:
        q.close()


def test_a_probe_reads_again_after_its_connection_failed(queue, backend, db_url):
    if backend == "sqlite":
        pytest.skip("a file database has no server to lose")
    with _watch(queue) as watch:
        watch.changed()
        kill_session(db_url, backend, session_of(watch._conn, backend))  # as a server restart or an operator does
        with pytest.raises(DatabaseError):
            watch.changed()
        assert watch._conn is None
        assert not watch.changed()  # a new connection; the mark is kept
        queue.submit("a", "t", now=T0)
        assert watch.changed()


def test_the_watch_loop_calls_back_on_each_change_until_stopped(queue):
    stop, woken = threading.Event(), threading.Event()
    thread = threading.Thread(target=watch_newest_id, args=(queue.db, queue.store.t, woken.set, stop, 0.01))
    thread.start()
    try:
        queue.submit("a", "t", now=T0)
        assert woken.wait(10.0)
    finally:
        stop.set()
        thread.join(10.0)
    assert not thread.is_alive()


def test_no_wake_interval_and_no_notifications_means_no_wakeups(db_url, table_name):
    q = queue_core.open(db_url, table_name, wake_interval=0, notify=False)
    try:
        assert not q.wakes
        with pytest.raises(ValidationError):
            q.listen(lambda: None, threading.Event())
    finally:
        q.close()
    with pytest.raises(queue_core.ConfigError):
        queue_core.open(db_url, table_name, wake_interval=-1)
