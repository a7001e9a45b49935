"""The one-statement submit (SqlStore.task_submit_one) under races, fork, close, killed sessions and
identical resubmissions: exactly one submission of a key wins, nothing else changes."""

from __future__ import annotations

import os
import threading

import pytest
import sqlalchemy as sa
from conftest import kill_session, session_of
from workflow_faults.fault_support import connection_drops_once

import queue_core
from queue_core.errors import IdempotentAlreadyExistsError

T0 = 1_700_000_000.0


def _rows(q, key=None):
    t = q.store.t
    stmt = sa.select(t.c.key, t.c.data, t.c.state)
    if key is not None:
        stmt = stmt.where(t.c.key == key)
    return q.db.run(lambda c: [tuple(r) for r in c.execute(stmt.order_by(t.c.id))], write=False)


def _race(url, table, key, n, now, data_of=lambda i: {"i": i}):
    """n queues of their own (n processes' worth of pools) submit ``key`` at once."""
    qs = [queue_core.open(url, table) for _ in range(n)]
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def go(i):
        barrier.wait()
        try:
            qs[i].submit(key, "t", data_of(i), now=now)
            out[i] = "ok"
        except IdempotentAlreadyExistsError:
            out[i] = "taken"
        except Exception as exc:  # noqa: BLE001
            out[i] = repr(exc)

    try:
        for q in qs:  # warm: tables checked, connections open
            q.stats(now=now)
        threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    finally:
        for q in qs:
            q.close()
    return out


def test_concurrent_submits_of_a_free_key_exactly_one_wins(queue):
    out = _race(queue.config["url"], queue.table, "k", 8, T0)
    assert sorted(out) == ["ok"] + ["taken"] * 7, out
    assert len(_rows(queue, "k")) == 1


def test_concurrent_submits_of_an_expired_key_exactly_one_wins(queue):
    queue.submit("k", "t", {"v": "old"}, now=T0)
    queue.poll(now=T0 + 1).finish(now=T0 + 2)
    later = T0 + 2 + queue.config["retention_time"] + 10
    out = _race(queue.config["url"], queue.table, "k", 8, later)
    assert sorted(out) == ["ok"] + ["taken"] * 7, out
    rows = _rows(queue, "k")
    assert len(rows) == 1 and rows[0][1] != '{"v": "old"}' and '"v"' not in rows[0][1]


def test_keys_differing_by_case_or_trailing_space_are_distinct(queue):
    for key in ("Key", "key", "key ", " key", "KEY", "ke\u0301y", "k\u00e9y"):
        queue.submit(key, "t", {"k": key}, now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("key ", "t", now=T0)
    assert sorted(k for k, _, _ in _rows(queue)) == sorted(
        ["Key", "key", "key ", " key", "KEY", "ke\u0301y", "k\u00e9y"]
    )


def test_a_future_submit_then_a_due_one_of_the_same_key_is_refused(queue):
    queue.submit("k", "t", {"v": 1}, run_at=T0 + 3600, now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", {"v": 2}, now=T0)
    assert queue["k"].metadata().data == {"v": 1}
    assert len(_rows(queue, "k")) == 1


def test_huge_data_round_trips(queue):
    big = {"x": "é" * 300_000}  # ~600 KB of JSON (UTF-8)
    queue.submit("big", "t", big, now=T0)
    assert queue["big"].metadata().data == big
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("big", "t", big, now=T0 + 1)


def test_an_identical_resubmission_whose_connection_could_not_open_is_refused(queue):
    """The caller submits the same task twice (same key, type, data and now, e.g. a retry of
    its own with a deterministic clock). The second submit's first attempt cannot even open its
    connection (nothing can have been applied), its retry finds the row of the FIRST submit:
    that is another submission's row, so the key is taken and the submit must be refused.
    A retried run counts as "maybe my own insert" only when its statement was under way
    (commit_was_uncertain)."""
    queue.submit("k", "t", {"n": 1}, now=T0)
    with connection_drops_once(queue, "submit", lambda: None):
        with pytest.raises(IdempotentAlreadyExistsError):
            queue.submit("k", "t", {"n": 1}, now=T0)


def test_a_child_process_submits_after_the_parent_did(queue, backend):
    """The statement engine (MySQL) and the main pool are inherited by a forked child: the child
    must open its own connections, the parent's keep working."""
    queue.submit("parent-1", "t", now=T0)
    queue.poll(now=T0)  # main pool used too
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            for i in range(5):
                queue.submit(f"child-{i}", "t", now=T0)
            try:
                queue.submit("parent-1", "t", now=T0)
                code = 3
            except IdempotentAlreadyExistsError:
                pass
        except BaseException as exc:  # noqa: BLE001
            os.write(w, repr(exc).encode()[:500])
            code = 2
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    msg = os.read(r, 1000).decode()
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0, msg
    for i in range(5):
        queue.submit(f"parent-{i + 2}", "t", now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("child-0", "t", now=T0)
    assert len(_rows(queue)) == 11


def _sessions_of(admin_url, backend, ids):
    eng = sa.create_engine(admin_url)
    try:
        with eng.connect() as c:
            if backend == "mysql":
                alive = {int(r[0]) for r in c.exec_driver_sql("SELECT ID FROM information_schema.PROCESSLIST")}
            else:
                alive = {int(r[0]) for r in c.exec_driver_sql("SELECT pid FROM pg_stat_activity")}
    finally:
        eng.dispose()
    return alive & ids


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_close_releases_every_connection_including_the_statement_engines(db_url, table_name, backend):
    ask = "SELECT CONNECTION_ID()" if backend == "mysql" else "SELECT pg_backend_pid()"
    q = queue_core.open(db_url, table_name)
    ids: set[int] = set()

    def grab(e):
        sa.event.listen(e, "checkout", lambda dbapi, rec, prox: ids.add(_sid(dbapi, ask)))

    try:
        q.init()
        grab(q.db.engine)
        q.submit("a", "t", now=T0)
        if q.db._statements is not None:
            grab(q.db._statements)
            q.db._statements.dispose()  # so the next checkout is seen by the listener
        q.submit("b", "t", now=T0)
        q.poll(now=T0)
        q.stats(now=T0)
    finally:
        q.close()
        from conftest import drop_tables

        drop_tables(db_url, table_name)
    assert ids
    import time

    time.sleep(0.3)
    assert _sessions_of(db_url, backend, ids) == set()


def _sid(dbapi, ask):
    cur = dbapi.cursor()
    cur.execute(ask)
    v = cur.fetchone()[0]
    cur.close()
    dbapi.rollback()  # the probe's own read: no transaction left open
    return int(v)


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_submit_after_its_pooled_session_was_killed(queue, db_url, backend):
    """The connection the autocommit insert would use was killed (server restart, operator):
    the submit succeeds, once, and the next submit of the key is refused."""
    queue.submit("warm", "t", now=T0)
    engine = queue.db._statements if queue.db._statements is not None else queue.db.engine
    with engine.connect() as c:
        session = session_of(c, backend)
        c.rollback()
    kill_session(db_url, backend, session)  # the pooled connection's session, now idle in the pool
    queue.submit("k", "t", {"n": 1}, now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", {"n": 2}, now=T0)
    assert len(_rows(queue, "k")) == 1
