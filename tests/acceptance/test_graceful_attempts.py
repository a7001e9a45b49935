"""A graceful stop or restart (TERM, USR1) spends no attempt of the tasks a worker claimed but had
not started: real worker processes and threads, real signals, the three databases (issue 12 §2)."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from procs import finish, runs, start_worker, wait_for


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
