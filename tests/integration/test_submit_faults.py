"""The one-statement submit and the pool's reset under faults."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import in_transaction, kill_session, own_queue, session_of
from lock_waits import join_unless_blocked, statement_in_flight

import queue_core
from queue_core.errors import IdempotentAlreadyExistsError

T0 = 1_700_000_000.0
ROOT = Path(__file__).resolve().parents[2]


def _count(q, key=None) -> int:
    t = q.store.t
    stmt = sa.select(sa.func.count()).select_from(t)
    if key is not None:
        stmt = stmt.where(t.c.key == key)
    return q.db.run(lambda c: c.execute(stmt).scalar(), write=False)


_CHILD = r"""
import json, sys
import queue_core
from queue_core.errors import DatabaseError, IdempotentAlreadyExistsError
url, table = sys.argv[1], sys.argv[2]
q = queue_core.open(url, table, max_retry_count=0)
out = {}
for attempt in ("first", "caller_retry"):
    try:
        q.submit("k", "t", {"n": 1}, now=1_700_000_000.0)
        out[attempt] = "ok"
    except IdempotentAlreadyExistsError:
        out[attempt] = "already exists"
    except DatabaseError as exc:
        out[attempt] = type(exc).__name__ + ": " + str(exc)
q.close()
print(json.dumps(out))
"""


def test_a_submit_whose_outcome_is_unknown_says_so_and_its_retry_finds_it(queue, tmp_path):
    """A real process, the project's own lost-acknowledgement injection (the statement is applied,
    then the client sees the connection drop), no retry left (``max_retry_count = 0``, or a server
    that stays away for the retries). The submit raises OutcomeUnknownError, saying the write
    may have been applied (a plain DatabaseError would nowhere say the task may have been
    stored); the caller's retry of the same submit then finds it stored
    (IdempotentAlreadyExistsError), and there is one row."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'reliability' / 'lost_ack_site'}:{ROOT}",
        "PQ_LOST_ACK": "0.0",
        "PQ_LOST_ACK_LOG": str(tmp_path / "faults.log"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, queue.config["url"], queue.table],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "submit" in (tmp_path / "faults.log").read_text()  # the fault fired on the submit
    assert out["first"].startswith("OutcomeUnknownError: ") and "may have been applied" in out["first"], out
    assert out["caller_retry"] == "already exists", out
    assert _count(queue, "k") == 1


@contextmanager
def _commit_ack_lost_on_the_transaction(q):
    """The first non-autocommit ``submit`` transaction commits, then its client sees the
    connection drop (the second path of submit_one: a taken key)."""
    db = q.db
    original = db._connection
    state = {"fired": 0}

    @contextmanager
    def conn(write, autocommit=False):
        with original(write, autocommit) as c:
            yield c
        if not autocommit and not state["fired"]:
            state["fired"] += 1
            raise sa.exc.OperationalError("COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True)

    db._connection = conn
    try:
        yield state
    finally:
        db._connection = original


def test_a_lost_ack_while_taking_an_expired_key_succeeds_once(queue):
    queue.submit("k", "t", {"v": "old"}, now=T0)
    queue.poll(now=T0 + 1).finish(now=T0 + 2)
    later = T0 + 2 + queue.config["retention_time"] + 1
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit("k", "t", {"v": "new"}, now=later)
    assert state["fired"] == 1
    assert _count(queue, "k") == 1
    assert queue["k"].metadata().data == {"v": "new"}
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", {"v": "new"}, now=later + 1)


def test_threads_of_one_queue_through_the_autocommit_pool(db_url, table_name, backend):
    """24 threads of one Queue: 16 distinct keys and 8 submits of one key at once (MySQL: one
    pooled autocommit connection plus overflow)."""
    with own_queue(db_url, table_name, backend) as q:
        q.submit("warm", "t", now=T0)
        barrier = threading.Barrier(24)
        out: dict = {}

        def go(i):
            key = f"d{i}" if i < 16 else "same"
            barrier.wait()
            try:
                q.submit(key, "t", {"i": i}, now=T0)
                out[i] = "ok"
            except IdempotentAlreadyExistsError:
                out[i] = "taken"
            except Exception as exc:  # noqa: BLE001
                out[i] = repr(exc)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(24)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert all(out[i] == "ok" for i in range(16)), out
        assert sorted(out[i] for i in range(16, 24)) == ["ok"] + ["taken"] * 7, out
        assert _count(q) == 18


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_submit_is_committed_and_unlocked_when_it_returns(queue, tmp_path):
    """INSERT ... RETURNING in autocommit: once submit() returned, another connection sees the row
    and takes the write lock at once (a statement left un-reset would hold both)."""
    queue.submit("k", "t", {"n": 1}, now=T0)
    path = queue.config["url"].split("sqlite:///", 1)[1]
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        assert other.execute(f'SELECT COUNT(*) FROM "{queue.table}" WHERE key = ?', ("k",)).fetchone()[0] == 1
        other.execute("ROLLBACK")
    finally:
        other.close()


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_a_session_killed_between_two_statements_applies_the_transaction_once(db_url, table_name, backend):
    with own_queue(db_url, table_name, backend, pool_size=1) as q:
        q.submit("a", "t", priority=0, now=T0)
        t = q.store.t
        state = {"killed": 0}

        def work(conn):
            conn.execute(sa.update(t).where(t.c.key == "a").values(priority=t.c.priority + 1))
            if not state["killed"]:
                state["killed"] += 1
                kill_session(db_url, backend, session_of(conn, backend))
            conn.execute(sa.update(t).where(t.c.key == "a").values(attempts=t.c.attempts + 1))

        q.db.run(work)
        meta = q.db.run(
            lambda c: c.execute(sa.select(t.c.priority, t.c.attempts).where(t.c.key == "a")).one(), write=False
        )
        assert tuple(meta) == (1, 1)
        with q.db.engine.connect() as conn:
            assert not in_transaction(conn.connection.dbapi_connection)


def test_a_base_exception_mid_transaction_leaves_nothing(db_url, table_name, backend):
    """KeyboardInterrupt (not an Exception) raised between two writes of one transaction: the
    writes never commit, and the pool's one connection is handed on clean."""
    with own_queue(db_url, table_name, backend, pool_size=1) as q:
        q.submit("a", "t", now=T0)
        t = q.store.t

        def work(conn):
            conn.execute(sa.update(t).where(t.c.key == "a").values(priority=42))
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            q.db.run(work)
        with q.db.engine.connect() as conn:
            assert not in_transaction(conn.connection.dbapi_connection)
        q.submit("b", "t", now=T0)  # the next user commits its own write...
        assert q["a"].metadata().priority == 0  # ... and not the interrupted one
        other = queue_core.open(db_url, table_name)
        try:
            assert other["a"].metadata().priority == 0 and other["b"].exists()
        finally:
            other.close()


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_an_expired_key_purged_by_cleanup_mid_submit_is_taken(db_url, table_name, backend):
    """The key's finished row is past retention. The submit's transaction (the key was taken for
    its one-statement INSERT) inserts nothing, reads the expired row's id, and, just before it
    deletes it, a worker's cleanup purges that row and commits. The key is free: the submit must
    take it (or retry), not report it as existing."""
    with own_queue(db_url, table_name, backend) as q:
        q.submit("k", "t", {"v": "old"}, now=T0)
        q.poll(now=T0 + 1).finish(now=T0 + 2)
        later = T0 + 2 + q.config["retention_time"] + 1
        worker = queue_core.open(db_url, table_name)
        fired = []

        threads = []

        def before(conn, cursor, statement, params, context, executemany):
            if not fired and statement.lstrip().upper().startswith("DELETE"):
                fired.append(1)
                th = threading.Thread(target=lambda: fired.append(worker.cleanup(now=later)), name="cleanup")
                threads.append(th)
                th.start()
                # The submit holds the expired row's lock (MySQL, PostgreSQL): the cleanup waits
                # for its commit; go on. SQLite: the cleanup waits for the file's write lock.
                join_unless_blocked(th, in_flight)

        sa.event.listen(q.db.engine, "before_cursor_execute", before)
        try:
            with statement_in_flight("cleanup") as in_flight:  # watched until the cleanup ended
                try:
                    q.submit("k", "t", {"v": "new"}, now=later)
                    outcome = "ok"
                except IdempotentAlreadyExistsError:
                    outcome = "already exists"
                finally:
                    for th in threads:
                        th.join(60)
        finally:
            sa.event.remove(q.db.engine, "before_cursor_execute", before)
            worker.close()
        assert fired, "the submit never reached its purge"
        rows = _count(q, "k")
        assert outcome == "ok" and rows == 1, (outcome, rows, fired)
