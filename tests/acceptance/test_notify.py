"""PostgreSQL LISTEN/NOTIFY: an idle worker starts a new task at once, not at its next poll.

The workers below poll only every 60 s, so a task that starts within seconds was started
by a notification.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy as sa
from procs import finish, runs, start_worker, wait_for

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

SLOW_POLL = 60.0


def _idle_worker(wq, tmp_path, **settings):
    proc = start_worker(wq.config["url"], wq.table, poll_interval=SLOW_POLL, **settings)
    # Once it has polled once (and found nothing) it sleeps for SLOW_POLL seconds.
    wq.submit("warmup", "plain", {"log": str(tmp_path / "runs.log")})
    wait_for(lambda: wq["warmup"].metadata().status == "finished", what="the first poll")
    return proc


def _submit_and_wait(wq, tmp_path, key, timeout=10.0) -> float:
    started = time.monotonic()
    wq.submit(key, "plain", {"log": str(tmp_path / "runs.log")})
    wait_for(lambda: key in {k for k, _ in runs(tmp_path / "runs.log")}, timeout, f"{key} to run")
    return time.monotonic() - started


def _stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    code, out = finish(proc)
    assert code == 0, out


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_idle_worker_is_woken_by_a_submission(wq, tmp_path, mode):
    proc = _idle_worker(wq, tmp_path, processors=2, processor_type=mode)
    try:
        for i in range(3):
            assert _submit_and_wait(wq, tmp_path, f"k{i}") < 10.0
    finally:
        _stop(proc)
    assert wq.stats()["outcomes"]["success"] == 4


def test_listener_reconnects_after_its_connection_is_killed(wq, tmp_path, db_url):
    proc = _idle_worker(wq, tmp_path)
    try:
        admin = sa.create_engine(db_url)
        with admin.begin() as conn:
            killed = conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()")).all()
        admin.dispose()
        assert killed, "no listening session found"
        time.sleep(1.5)  # the listener waits 0.5 s before reconnecting
        assert _submit_and_wait(wq, tmp_path, "after-kill") < 10.0
    finally:
        _stop(proc)


def test_notify_off_means_polling_only(wq, tmp_path):
    import queue_core

    quiet = queue_core.open(wq.config["url"], wq.table, notify=False)
    assert wq.notifies and not quiet.notifies
    proc = _idle_worker(quiet, tmp_path, notify=False)
    try:
        quiet.submit("late", "plain", {"log": str(tmp_path / "runs.log")})
        time.sleep(3)
        assert quiet["late"].metadata().status == "waiting"  # nobody was woken
    finally:
        _stop(proc)
        quiet.close()
