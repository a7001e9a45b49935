"""Wake-ups: an idle worker starts a new task at once, not at its next poll, on every database:
by LISTEN/NOTIFY on PostgreSQL, by the wake-up probe (``wake_interval``) on SQLite and MariaDB
and on PostgreSQL with ``notify`` off.

The workers below poll only every 60 s, so a task that starts within seconds was started by a
wake-up.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from procs import finish, runs, start_worker, wait_for

ALL = pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"], indirect=True)
POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
SERVERS = pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)

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


@ALL
@pytest.mark.parametrize("mode", ["process", "thread"])
def test_idle_worker_is_woken_by_a_submission(wq, tmp_path, mode):
    proc = _idle_worker(wq, tmp_path, processors=2, processor_type=mode)
    try:
        for i in range(3):
            assert _submit_and_wait(wq, tmp_path, f"k{i}") < 10.0
    finally:
        _stop(proc)
    assert wq.stats()["outcomes"]["success"] == 4


@POSTGRES
def test_listener_reconnects_after_its_connection_is_killed(wq, tmp_path, db_url):
    proc = _idle_worker(wq, tmp_path)
    try:
        admin = sa.create_engine(db_url)
        with admin.begin() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
                )
            ).all()
        admin.dispose()
        assert killed, "no listening session found"
        time.sleep(1.5)  # the listener waits 0.5 s before reconnecting
        assert _submit_and_wait(wq, tmp_path, "after-kill") < 10.0
    finally:
        _stop(proc)


@SERVERS
def test_probe_reconnects_after_its_connection_is_killed(wq, tmp_path, db_url, backend):
    """The probe's session is killed by the server: it reads again on a new connection."""
    proc = _idle_worker(wq, tmp_path, notify=False)
    try:
        assert _kill_sessions(db_url, backend, "%max(%", proc.pid) >= 1, "no probing session found"
        time.sleep(1.5)  # the listener waits 0.5 s before probing again
        assert _submit_and_wait(wq, tmp_path, "after-kill") < 10.0
    finally:
        _stop(proc)


def _kill_sessions(db_url: str, backend: str, like: str, worker: int) -> int:
    """Kill the server sessions of the worker (process ``worker`` and its children): on PostgreSQL those whose
    last statement matches ``like``, on MariaDB all of them (its process list does not show an
    idle session's last statement). How many."""
    admin = sa.create_engine(db_url)
    try:
        with admin.begin() as conn:
            if backend == "postgres":
                return len(
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE lower(query) LIKE :like AND pid <> pg_backend_pid()"
                        ),
                        {"like": like},
                    ).all()
                )
            ports = _client_ports(worker)
            rows = conn.execute(sa.text("SELECT id, host FROM information_schema.processlist")).all()
            ids = [
                i
                for i, host in rows
                if host and host.rsplit(":", 1)[-1].isdigit() and int(host.rsplit(":", 1)[-1]) in ports
            ]
            for i in ids:
                conn.execute(sa.text(f"KILL {int(i)}"))
            return len(ids)
    finally:
        admin.dispose()


def _client_ports(root: int) -> set[int]:
    """The local TCP ports of the sockets open in process ``root`` and its descendants (a worker
    child sets up a process group of its own) (Linux /proc)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    inodes = set()
    for pid in tree:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return {
        int(line.split()[1].split(":")[1], 16)
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[9] in inodes
    }


@ALL
def test_no_wakeups_means_polling_only(wq, tmp_path):
    """``notify`` off and ``wake_interval`` 0: nobody is woken; the task waits for the poll."""
    import queue_core

    quiet = queue_core.open(wq.config["url"], wq.table, notify=False, wake_interval=0)
    assert not quiet.wakes and not quiet.notifies
    proc = _idle_worker(quiet, tmp_path, notify=False, wake_interval=0)
    try:
        quiet.submit("late", "plain", {"log": str(tmp_path / "runs.log")})
        time.sleep(3)
        assert quiet["late"].metadata().status == "waiting"  # nobody was woken
    finally:
        _stop(proc)
        quiet.close()


@POSTGRES
def test_notify_off_falls_back_to_the_probe(wq, tmp_path):
    """PostgreSQL with ``notify`` off wakes its workers as SQLite and MariaDB do: by the probe."""
    import queue_core

    quiet = queue_core.open(wq.config["url"], wq.table, notify=False)
    assert wq.notifies and not quiet.notifies and quiet.wakes
    proc = _idle_worker(quiet, tmp_path, notify=False)
    try:
        assert _submit_and_wait(quiet, tmp_path, "probed") < 10.0
    finally:
        _stop(proc)
        quiet.close()
