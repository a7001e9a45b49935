"""A child waiting on the database is alive; one frozen, or stuck in its monitor for a lease, is not.

CI saw a worker's supervisor kill three children at once on SQLite: one froze (SIGSTOP) while its
monitor held the database's write lock, and the lease heartbeats of the others waited for that
lock; their liveness beats, written by the same monitor thread between its database calls,
stopped too. The beats now come from a thread of their own (queue_core.worker.monitor.LivenessBeat),
which stops only when the monitor has been stuck in one turn too long for its leases. Here
another connection holds SQLite's write lock (BEGIN IMMEDIATE), or on a server the task's row
(SELECT ... FOR UPDATE), while a real worker's task runs.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from procs import finish, start_worker, wait_for

import queue_core

LIMIT = 1.0  # child_heartbeat_limit


def _hold_sqlite_write_lock(url: str, table: str, seconds: float) -> None:
    locker = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # the write lock: the task's lease heartbeats wait for it
    time.sleep(seconds)
    locker.execute("ROLLBACK")
    locker.close()


def _hold_task_row_lock(url: str, table: str, seconds: float) -> None:
    eng = sa.create_engine(url)
    try:
        with eng.begin() as conn:  # the row lock: the task's lease heartbeat (an UPDATE) waits for it
            quoted = conn.dialect.identifier_preparer.quote(table)
            conn.exec_driver_sql(f"SELECT id FROM {quoted} FOR UPDATE").all()  # its one row: the task
            time.sleep(seconds)
    finally:
        eng.dispose()


def _run_while_locked(url: str, table: str, tmp_path, lock_seconds: float, alive_time: float) -> tuple[str, list[str]]:
    log = tmp_path / "runs.log"
    with queue_core.open(url, table) as q:
        q.init()
        q.submit("long", "handler", {"log": str(log), "sleep": lock_seconds + 1.5})
    worker = start_worker(
        url,
        table,
        processors=1,
        child_heartbeat_limit=LIMIT,
        alive_time=alive_time,
        task_heartbeat_interval=0.2,
        child_heartbeat_interval=0.2,
        child_kill_interval=0.5,
    )
    try:
        wait_for(lambda: log.exists() and "long" in log.read_text(), timeout=30, what="the task started")
        hold = _hold_sqlite_write_lock if url.startswith("sqlite") else _hold_task_row_lock
        hold(url, table, lock_seconds)
        with queue_core.open(url, table) as q:
            wait_for(lambda: q["long"].metadata().status == "finished", timeout=60, what="the task finished")
    finally:
        worker.terminate()
        _, out = finish(worker, timeout=60)
    return out, log.read_text().splitlines()


@pytest.fixture(params=["sqlite", "mysql", "postgres"])
def locked_db(request, tmp_path):
    """(url, table) of a fresh task table on each database (a server's table dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/q.db", "pq_tasks"
        return
    from conftest import _server_url, drop_tables

    url, table = _server_url(request.param), f"lb{os.getpid() % 10000}_{uuid.uuid4().hex[:8]}"
    yield url, table
    drop_tables(url, table)


def test_a_child_whose_heartbeat_waits_on_the_database_past_the_limit_is_not_killed(locked_db, tmp_path):
    out, runs = _run_while_locked(*locked_db, tmp_path, lock_seconds=3 * LIMIT, alive_time=30.0)
    assert "silent for" not in out, out[-3000:]
    assert [line.split()[2] for line in runs] == ["run", "done"], runs  # one run, to its end


def test_a_child_whose_monitor_is_stuck_for_a_whole_lease_is_killed_as_silent(tmp_path):
    url = f"sqlite:///{tmp_path}/q.db"
    out, runs = _run_while_locked(url, "pq_tasks", tmp_path, lock_seconds=2.0 + 2 * LIMIT + 1.5, alive_time=2.0)
    assert "silent for" in out, out[-3000:]
    first_pid = runs[0].split()[1]
    assert f"long {first_pid} done" not in runs and runs[-1].endswith(" done"), runs  # killed, run again


def test_a_handler_kill_that_exits_leaves_the_monitor_beating_and_renewing(tmp_path):
    # SystemExit from a handler's kill() (a cancel) must not end the monitor thread: its liveness
    # beat would go on for a lease, and the task's lease lapse meanwhile
    url, log = f"sqlite:///{tmp_path}/q.db", tmp_path / "runs.log"
    with queue_core.open(url, "pq_tasks") as q:
        q.init()
        q.submit("t", "kill_exits", {"log": str(log), "sleep": 4.0})
    handlers = str(Path(__file__).with_name("liveness_handlers.py"))
    worker = start_worker(
        url,
        "pq_tasks",
        "Worker",
        _file=handlers,
        processors=1,
        child_heartbeat_limit=LIMIT,
        alive_time=2.0,
        task_heartbeat_interval=0.2,
        child_heartbeat_interval=0.2,
    )
    try:
        wait_for(lambda: log.exists() and "run" in log.read_text(), timeout=30, what="the task started")
        with queue_core.open(url, "pq_tasks") as q:
            q["t"].cancel_request()
            wait_for(lambda: q["t"].metadata().status == "finished", timeout=60, what="the task finished")
            outcome = q["t"].metadata().outcome
    finally:
        worker.terminate()
        _, out = finish(worker, timeout=60)
    runs = [line.split()[2] for line in log.read_text().splitlines()]
    assert "handler kill() raised" in out and "SystemExit: 3" in out, out[-3000:]
    assert "silent for" not in out and "lease lost" not in out, out[-3000:]
    assert runs == ["run", "kill", "done"] and outcome is not None, (runs, outcome)
