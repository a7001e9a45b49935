"""A stop or restart spends no attempt of the tasks a worker claimed but had not started: graceful
(TERM, USR1) and immediate (QUIT, HUP) alike; real worker processes and threads, real signals, on
SQLite and one server database (marker one_server)."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from procs import finish, runs, start_worker, wait_for

pytestmark = pytest.mark.one_server


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "runs.log"


@pytest.mark.parametrize("processor_type", ["process", "thread"])
def test_tasks_claimed_but_not_started_at_a_graceful_restart_and_stop_keep_their_attempts(wq, log, processor_type):
    n = 24
    for i in range(n):  # batches of 8: at each signal, most of a batch waits its turn
        wq.submit(f"k{i:02}", "handler", {"log": str(log), "sleep": 0.15}, max_attempts=1 if i % 8 == 0 else None)
    url, table = wq.config["url"], wq.table
    p = start_worker(url, table, processors=2, task_prefetch=7, processor_type=processor_type)
    try:
        wait_for(lambda: len(runs(log)) >= 2, what="the first tasks")
        p.send_signal(signal.SIGUSR1)  # graceful restart: running tasks finish, the rest go back
        wait_for(lambda: len(runs(log, "done")) >= 6, timeout=30, what="tasks after the restart")
    finally:
        p.send_signal(signal.SIGTERM)  # graceful stop
        code, out = finish(p, timeout=60)
    assert code == 0, out
    assert "released task=" in out  # the interleaving happened: claimed tasks went back unrun
    code, out = finish(start_worker(url, table, burst=True, processors=2, task_prefetch=7), timeout=60)
    assert code == 0, out
    assert Counter(k for k, _ in runs(log)) == {f"k{i:02}": 1 for i in range(n)}  # each ran once
    tasks = list(wq.list())
    assert {m.outcome for m in tasks} == {"success"}
    assert [m.key for m in tasks if m.attempts != 1] == []  # no release spent one


@pytest.mark.parametrize(
    "processor_type, signals",
    [
        ("process", [signal.SIGHUP, signal.SIGQUIT]),  # immediate restart, then immediate stop
        ("thread", [signal.SIGQUIT]),  # thread mode: HUP is graceful; QUIT ends the process at once
    ],
)
def test_an_immediate_stop_or_restart_spends_an_attempt_only_of_the_tasks_that_ran(wq, log, processor_type, signals):
    """Each attempt a task spent is a run of its handler: the tasks of a batch that had not started
    when QUIT or HUP arrived are given back before the process ends; the running ones, abandoned,
    keep theirs (they ran) and run again once their lease expired."""
    n = 24
    for i in range(n):  # batches of 8: at each signal, most of a batch waits its turn
        wq.submit(f"k{i:02}", "handler", {"log": str(log), "sleep": 0.3}, max_attempts=1 if i % 8 == 0 else None)
    url, table = wq.config["url"], wq.table
    p = start_worker(url, table, processors=2, task_prefetch=7, alive_time=2, processor_type=processor_type)
    try:
        for sig in signals:
            started = len(runs(log))
            wait_for(lambda started=started: len(runs(log)) >= started + 2, what="tasks running")
            p.send_signal(sig)
    finally:
        code, out = finish(p, timeout=60)
    assert code == 0, out
    assert "released task=" in out  # the interleaving happened: claimed tasks went back unrun
    code, out = finish(start_worker(url, table, burst=True, processors=2, task_prefetch=7), timeout=60)
    assert code == 0, out
    started = Counter(k for k, _ in runs(log))
    tasks = {m.key: m for m in wq.list()}
    assert {k: m.attempts for k, m in tasks.items()} == {f"k{i:02}": started[f"k{i:02}"] for i in range(n)}
    unrun_failures = [k for k, m in tasks.items() if m.outcome != "success" and started[k] != 1]
    assert unrun_failures == []  # a task that failed ran exactly once: abandoned at its one attempt


def test_an_immediate_stop_is_not_held_by_a_claim_stuck_on_the_database(tmp_path, log):
    """QUIT while a claim waits for a locked SQLite file (30 s busy timeout, then retries): the
    give-back waits for that claim at most IMMEDIATE_GRACE, and the process ends at once after."""
    import sqlite3
    import time

    import queue_core
    from queue_core.worker.service import IMMEDIATE_GRACE

    url, table = f"sqlite:///{tmp_path / 'q.db'}", "q"
    with queue_core.open(url, table) as q:
        q.init()
    worker_log = tmp_path / "worker.log"
    p = start_worker(url, table, processors=1, processor_type="thread", log=str(worker_log))
    blocker = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    try:
        wait_for(lambda: worker_log.exists() and "thread processors" in worker_log.read_text(), what="polling")
        blocker.execute("BEGIN EXCLUSIVE")  # its next claim now waits for the lock
        time.sleep(1.0)
        p.send_signal(signal.SIGQUIT)
        sent = time.monotonic()
        code, out = finish(p, timeout=30)
        took = time.monotonic() - sent
    finally:
        blocker.close()
    assert code == 0, out
    assert "immediate stop: exiting" in out
    assert took < IMMEDIATE_GRACE + 3, f"the stop waited {took:.1f} s for the stuck claim"
