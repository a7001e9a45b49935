"""The worker registry with real worker processes on SQLite, MariaDB and PostgreSQL:
each claiming process is listed with its host, pid, queues, types and version while it runs,
with the tasks it holds; a worker that stops leaves the registry, one killed outright stops
being listed once silent past the limit and is swept by the next cleanup."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
import sqlalchemy as sa
from procs import finish, start_worker, wait_for

from queue_core.api.worker_registry import pq_version

pytestmark = pytest.mark.slow


def registry_rows(q) -> int:
    w = q.store.workers_t
    return q.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(w)).scalar())


def test_running_workers_are_listed_with_what_they_hold_and_leave_when_they_stop(wq, tmp_path):
    log = tmp_path / "runs.log"
    wq.submit_many([{"key": f"slow{i}", "type": "handler", "data": {"log": str(log), "sleep": 3}} for i in range(3)])
    workers = [
        start_worker(wq.config["url"], wq.table, processors=2, queues="urgent,default", registry_interval=0.2)
        for _ in range(2)
    ]
    try:
        listed = wait_for(
            lambda: (ws := wq.workers()) and len(ws) == 4 and sum(w.held for w in ws) == 3 and ws,
            timeout=60,
            what="4 processes holding the 3 tasks",
        )
        host = socket.gethostname()
        assert {w.host for w in listed} == {host}
        assert all(w.owner == f"{host}:{w.pid}" and w.queues == ("urgent", "default") for w in listed)
        assert all(w.version == pq_version() and w.last_seen >= w.started_at for w in listed)
        assert listed[0].types is None  # the handlers' router has a regex route: it serves every type
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            finish(w, timeout=60)
    assert wq.workers() == [] and registry_rows(wq) == 0


def test_a_worker_killed_outright_is_dropped_once_silent_past_the_limit(wq):
    worker = start_worker(wq.config["url"], wq.table, processors=1, registry_interval=0.2)
    try:
        found = wait_for(lambda: wq.workers(), timeout=60, what="the worker to register")
        os.killpg(worker.pid, signal.SIGKILL)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        finish(worker)
    assert registry_rows(wq) == 1  # it could not say goodbye
    later = found[0].last_seen + wq.config["registry_timeout"] + 1
    assert wq.workers(now=later) == []
    wq.cleanup(now=later)
    assert registry_rows(wq) == 0


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_a_registry_row_locked_by_another_transaction_never_stops_task_heartbeats(wq, tmp_path, db_url):
    """While a renewal of the registry waits for a lock (an operator's open transaction), the
    running task's lease is still heartbeated: the renewal has a thread of its own (in the
    monitor's thread, the lease would expire and the task run twice)."""
    log = tmp_path / "runs.log"
    wq.submit("slow", "handler", {"log": str(log), "sleep": 15})
    worker = start_worker(
        wq.config["url"], wq.table, processors=1, alive_time=3, task_heartbeat_interval=0.3, registry_interval=0.3
    )
    engine = sa.create_engine(db_url)
    conn = engine.connect()
    taken = None
    try:
        wait_for(
            lambda: wq.workers() and wq["slow"].metadata().status == "running",
            timeout=60,
            what="the worker running the task",
        )
        tx = conn.begin()
        conn.execute(sa.select(wq.store.workers_t).with_for_update()).all()
        try:
            time.sleep(7)  # more than twice alive_time: heartbeats every 0.3 s keep the lease
            taken = wq.poll(alive_time=60)
        finally:
            tx.rollback()
    finally:
        conn.close()
        engine.dispose()
        worker.terminate()
        code, out = finish(worker, timeout=60)
    assert taken is None, "the running task's lease expired while its worker was alive:\n" + out[-2000:]
