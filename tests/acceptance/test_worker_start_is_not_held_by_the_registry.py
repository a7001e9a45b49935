"""A worker's start-up is never held by the worker registry: the first write of its registry row
is the registry thread's (``queue_core/api/worker_registry.py``), not the first processor's before its first
claim, so a registry table that another transaction keeps locked (as for renewals in
tests/acceptance/test_worker_registry.py) does not keep a starting worker from claiming, and the
worker still stops when asked. Thread and process workers register once and leave. Real worker
processes on real databases.
"""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
import sqlalchemy as sa
from procs import finish, runs, start_worker, wait_for

pytestmark = pytest.mark.slow


def _registry_rows(q) -> list[dict]:
    w = q.store.workers_t
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(w))], write=False)


def _lock_registry(conn, q, backend):
    """In ``conn``'s open transaction: keep every other session from writing the registry table
    (an operator's open transaction, a migration, a VACUUM FULL...). Reads stay possible."""
    w = q.store.workers_t
    if backend == "postgres":
        conn.exec_driver_sql(f'LOCK TABLE "{w.name}" IN EXCLUSIVE MODE')
    else:  # InnoDB, REPEATABLE READ: the next-key lock on the supremum blocks every insert
        conn.execute(sa.select(w).with_for_update()).all()


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
@pytest.mark.parametrize("processor_type", ["process", "thread"])
def test_a_locked_registry_table_does_not_keep_a_starting_worker_from_its_tasks(
    wq, tmp_path, db_url, backend, processor_type
):
    """The registry table is locked by another session while a worker starts: the worker still
    claims and runs its tasks (the registration waits on a thread of its own, as renewals do).
    Before 30cbece it did; now the first processor writes the row in ``Registration.join``,
    before its first claim, and waits there for the lock (PostgreSQL: for ever; MariaDB:
    innodb_lock_wait_timeout, retried max_retry_count times), claiming nothing; in thread mode
    the other processors wait behind it on the registration's lock."""
    log = tmp_path / "runs.log"
    wq.submit_many([{"key": f"k{i}", "type": "handler", "data": {"log": str(log)}} for i in range(4)])
    engine = sa.create_engine(db_url)
    conn = engine.connect()
    worker = None
    try:
        tx = conn.begin()
        _lock_registry(conn, wq, backend)
        worker = start_worker(
            wq.config["url"],
            wq.table,
            processors=2,
            processor_type=processor_type,
            registry_interval=0.3,
            cleanup_interval=3600,
        )
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and len(runs(log, "done")) < 4 and worker.poll() is None:
            time.sleep(0.1)
        done = len(runs(log, "done"))
        tx.rollback()
    finally:
        conn.close()
        engine.dispose()
        if worker is not None:
            worker.terminate()
    code, out = finish(worker, timeout=120)
    assert done == 4, f"{done} of 4 tasks run in 25 s while the registry table was locked:\n" + out[-3000:]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_worker_asked_to_stop_while_its_registration_waits_stops(wq, tmp_path, db_url):
    """SIGTERM to a worker whose first registration waits for a lock: it must stop within the
    usual grace (it has started nothing). The lock: another session's uncommitted insert of the
    worker's own registry row (its owner, host:pid, is known once the process exists), which
    makes the registration's INSERT .. ON CONFLICT wait for that transaction, but not the
    DELETE of the unregistration (it does not see the uncommitted row). The lock is released
    40 s after the signal at the latest; the worker must have exited long before. Before
    30cbece it did (its loop saw the stop at once; leave() gave up on the renewer thread after
    registry_interval + 5 s, then unregistered); now the processor's own thread is blocked
    inside ``Registration.join`` and never looks at its stop flag."""
    engine = sa.create_engine(db_url)
    conn = engine.connect()
    worker = None
    took = None
    w = wq.store.workers_t
    try:
        tx = conn.begin()
        worker = start_worker(
            wq.config["url"],
            wq.table,
            processors=1,
            processor_type="thread",
            registry_interval=0.3,
            cleanup_interval=3600,
        )
        owner = f"{socket.gethostname()}:{worker.pid}"
        conn.execute(
            sa.insert(w).values(
                owner=owner,
                host="x",
                pid=worker.pid,
                queues='["default"]',
                types=None,
                version="x",
                started_at=0.0,
                last_seen=0.0,
            )
        )
        wait_for(lambda: _waiting_on_lock(engine, wq), timeout=60, what="the registration waiting for the lock")
        start = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        while time.monotonic() - start < 40 and worker.poll() is None:
            time.sleep(0.1)
        took = time.monotonic() - start
        tx.rollback()
    finally:
        conn.close()
        engine.dispose()
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
    code, out = finish(worker, timeout=120)
    assert took is not None and took < 15, f"stopped {took:.1f} s after SIGTERM:\n" + out[-3000:]


def _waiting_on_lock(engine, q) -> bool:
    """Whether a session waits for a lock in a statement on the registry table (PostgreSQL)."""
    with engine.connect() as c:
        return bool(
            c.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                f"AND query LIKE '%%{q.store.workers_t.name}%%'"
            ).scalar()
        )


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"], indirect=True)
def test_a_thread_worker_of_several_processors_registers_once_and_leaves(wq, tmp_path):
    worker = start_worker(
        wq.config["url"], wq.table, processors=3, processor_type="thread", registry_interval=0.2, cleanup_interval=3600
    )
    try:
        rows = wait_for(lambda: _registry_rows(wq), timeout=60, what="the registry row")
        time.sleep(1.0)  # several renewals
        rows = _registry_rows(wq)
        assert len(rows) == 1 and rows[0]["pid"] == worker.pid
        assert rows[0]["last_seen"] > rows[0]["started_at"]
    finally:
        worker.terminate()
        code, out = finish(worker, timeout=60)
    assert code == 0, out[-3000:]
    assert _registry_rows(wq) == []


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"], indirect=True)
def test_process_workers_are_registered_as_they_start_and_leave(wq, tmp_path):
    """The row is written as a processor starts (by its registry thread, beside its first claim:
    the synchronous write before the first claim was reverted, findings 1 and 2): the processor
    that ran a task is listed, with registry_interval 30 s, so by its first write."""
    log = tmp_path / "runs.log"
    wq.submit("first", "handler", {"log": str(log)})
    worker = start_worker(wq.config["url"], wq.table, processors=2, registry_interval=30, cleanup_interval=3600)
    try:
        wait_for(lambda: runs(log, "done"), timeout=60, what="the task")
        [(_, pid)] = runs(log, "done")
        wait_for(lambda: pid in {r["pid"] for r in _registry_rows(wq)}, timeout=20, what="its registry row")
    finally:
        worker.terminate()
        code, out = finish(worker, timeout=60)
    assert code == 0, out[-3000:]
    assert _registry_rows(wq) == []
