"""Worker behaviour with real processes, real signals and real databases."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from procs import finish, runs, start_worker, wait_for

pytestmark = pytest.mark.one_server


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "runs.log"


def test_burst_drains_with_processes(wq, log):
    for i in range(40):
        wq.submit(f"k{i}", "handler", {"log": str(log), "fail": i == 7}, max_attempts=2)
    code, out = finish(start_worker(wq.config["url"], wq.table, burst=True, processors=2))
    assert code == 0, out
    assert Counter(k for k, _ in runs(log)) == {**{f"k{i}": 1 for i in range(40)}, "k7": 2}
    s = wq.stats()
    assert s["finished"] == 40 and s["outcomes"] == {"success": 39, "failure": 1, "cancelled": 0, "skipped": 0}
    assert "RuntimeError: asked to fail" in wq["k7"].metadata().error


def test_thread_mode_burst(wq, log):
    for i in range(20):
        wq.submit(f"k{i}", "plain", {"log": str(log)})
    code, out = finish(start_worker(wq.config["url"], wq.table, burst=True, processors=3, processor_type="thread"))
    assert code == 0, out
    assert sorted(k for k, _ in runs(log)) == sorted(f"k{i}" for i in range(20))
    assert wq.stats()["outcomes"]["success"] == 20


def test_unknown_type_is_retried_not_fatal(wq, log):
    wq.submit("weird", "no-such-type", max_attempts=2)
    wq.submit("ok", "plain", {"log": str(log)})
    code, out = finish(start_worker(wq.config["url"], wq.table, burst=True))
    assert code == 0, out
    m = wq["weird"].metadata()
    assert m.outcome == "failure" and "no handler for task type" in m.error and m.attempts == 2
    assert runs(log) and runs(log)[0][0] == "ok"


@pytest.mark.every_database
def test_concurrent_workers_never_run_a_task_twice(wq, log):
    n = 150
    wq.submit_many([{"key": f"k{i}", "type": "plain", "data": {"log": str(log)}} for i in range(n)])
    procs = [start_worker(wq.config["url"], wq.table, burst=True, processors=2, alive_time=120) for _ in range(3)]
    for p in procs:
        code, out = finish(p, timeout=120)
        assert code == 0, out
    counts = Counter(k for k, _ in runs(log))
    assert len(counts) == n and set(counts.values()) == {1}
    assert wq.stats()["outcomes"]["success"] == n


def test_graceful_stop_lets_running_task_finish(wq, log):
    wq.submit("slow", "handler", {"log": str(log), "sleep": 1.5})
    p = start_worker(wq.config["url"], wq.table)
    wait_for(lambda: runs(log), what="task start")
    p.send_signal(signal.SIGTERM)
    code, out = finish(p)
    assert code == 0, out
    assert runs(log, "done") == [("slow", runs(log)[0][1])]
    assert wq["slow"].metadata().outcome == "success"


def test_immediate_stop_leaves_task_to_run_again(wq, log):
    wq.submit("slow", "handler", {"log": str(log), "sleep": 30})
    p = start_worker(wq.config["url"], wq.table, alive_time=2)
    wait_for(lambda: runs(log), what="task start")
    p.send_signal(signal.SIGQUIT)
    code, out = finish(p, timeout=10)
    assert runs(log, "done") == []
    m = wq["slow"].metadata()
    assert m.status in ("running", "waiting") and m.outcome is None
    # Another worker takes it over once the lease expired.
    wq.submit("x", "plain", {"log": str(log)})
    p2 = start_worker(wq.config["url"], wq.table, alive_time=2)
    try:
        wait_for(lambda: len([k for k, _ in runs(log) if k == "slow"]) == 2, timeout=20, what="re-run")
    finally:
        p2.send_signal(signal.SIGQUIT)
        finish(p2)
    assert wq["slow"].metadata().attempts == 2


def test_second_term_is_immediate(wq, log):
    wq.submit("slow", "handler", {"log": str(log), "sleep": 30})
    p = start_worker(wq.config["url"], wq.table)
    wait_for(lambda: runs(log), what="task start")
    p.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert p.poll() is None  # still finishing its task
    p.send_signal(signal.SIGTERM)
    finish(p, timeout=10)
    assert runs(log, "done") == []


def test_killed_child_is_replaced(wq, log):
    p = start_worker(wq.config["url"], wq.table)
    try:
        wq.submit("a", "plain", {"log": str(log)})
        ((_, pid1),) = wait_for(lambda: runs(log), what="first task")
        os.kill(pid1, signal.SIGKILL)
        wq.submit("b", "plain", {"log": str(log)})
        (pid2,) = wait_for(lambda: pids_of(log, "b"), what="second task")
        assert pid2 != pid1
        # "a" ran; if its success died with the child before it was written, it runs once more.
        wait_for(lambda: wq["a"].metadata().status == "finished", what="first task finished")
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    assert len(pids_of(log, "a")) in (1, 2) and wq["a"].metadata().outcome == "success"


def test_sigkilled_worker_task_is_rerun_after_lease_expiry(wq, log):
    wq.submit("t", "handler", {"log": str(log), "sleep": 30})
    p = start_worker(wq.config["url"], wq.table, alive_time=2)
    wait_for(lambda: runs(log), what="task start")
    os.killpg(p.pid, signal.SIGKILL)  # supervisor and child, no cleanup at all
    finish(p)
    wq["t"]  # still there
    assert wq["t"].metadata().outcome is None
    # A second worker does not take it while the lease is live, then re-runs it.
    p2 = start_worker(wq.config["url"], wq.table, alive_time=2)
    try:
        wait_for(lambda: len(runs(log)) == 2, timeout=20, what="re-run")
    finally:
        p2.send_signal(signal.SIGQUIT)
        finish(p2)
    assert wq["t"].metadata().attempts == 2


def test_heartbeat_keeps_lease_of_cpu_bound_task(wq, log):
    wq.submit("cpu", "handler", {"log": str(log), "sleep": 4})
    p1 = start_worker(wq.config["url"], wq.table, alive_time=1.5, task_heartbeat_interval=0.3)
    wait_for(lambda: runs(log), what="task start")
    p2 = start_worker(wq.config["url"], wq.table, alive_time=1.5)
    try:
        wait_for(lambda: runs(log, "done"), timeout=20, what="task done")
    finally:
        for p in (p1, p2):
            p.send_signal(signal.SIGTERM)
            finish(p)
    assert len(runs(log)) == 1
    assert wq["cpu"].metadata().outcome == "success"


def test_cancel_running_task_reaches_kill_hook(wq, log):
    wq.submit("k", "kill-me", {"log": str(log), "sleep": 30})
    p = start_worker(wq.config["url"], wq.table, task_heartbeat_interval=0.2)
    try:
        wait_for(lambda: runs(log), what="task start")
        assert wq["k"].cancel_request() == "running"
        wait_for(lambda: runs(log, "killed"), timeout=10, what="kill hook")
        wait_for(lambda: wq["k"].metadata().status == "finished", timeout=10, what="finish")
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)
    assert wq["k"].metadata().outcome == "cancelled"


def test_max_request_per_child_recycles(wq, log):
    for i in range(6):
        wq.submit(f"k{i}", "plain", {"log": str(log)})
    code, out = finish(start_worker(wq.config["url"], wq.table, burst=True, max_request_per_child=2))
    assert code == 0, out
    pids = {pid for _, pid in runs(log)}
    assert len(runs(log)) == 6 and len(pids) == 3


def test_max_request_per_child_replaces_a_thread_processor(wq, log):
    """Thread mode: a processor that reached max_request_per_child is replaced by a new one in its
    thread (it used to end, leaving the rest due while a burst worker exited 0)."""
    for i in range(5):
        wq.submit(f"k{i}", "plain", {"log": str(log)})
    code, out = finish(
        start_worker(wq.config["url"], wq.table, burst=True, max_request_per_child=2, processor_type="thread")
    )
    assert code == 0, out
    assert sorted(k for k, _ in runs(log)) == [f"k{i}" for i in range(5)]
    assert wq.stats()["outcomes"]["success"] == 5


def test_silent_child_is_killed_and_replaced(wq, log):
    p = start_worker(wq.config["url"], wq.table, child_heartbeat_limit=1.5, alive_time=2)
    try:
        wq.submit("a", "plain", {"log": str(log)})
        ((_, pid1),) = wait_for(lambda: runs(log), what="first task")
        os.kill(pid1, signal.SIGSTOP)  # alive but silent: no liveness beats, no heartbeats
        wq.submit("b", "plain", {"log": str(log)})
        (pid2,) = wait_for(lambda: pids_of(log, "b"), timeout=20, what="task on the replacement child")
        assert pid2 != pid1
        wait_for(lambda: not _alive(pid1), timeout=10, what="stopped child killed")
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)


def pids_of(log: Path, key: str) -> list[int]:
    """The processes that ran ``key``, in the order they started it."""
    return [pid for k, pid in runs(log) if k == key]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_usr1_graceful_restart_finishes_task_and_replaces_child(wq, log):
    wq.submit("slow", "handler", {"log": str(log), "sleep": 1.0})
    p = start_worker(wq.config["url"], wq.table)
    try:
        ((_, pid1),) = wait_for(lambda: runs(log), what="task start")
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: runs(log, "done"), timeout=15, what="task finished despite restart")
        wq.submit("next", "plain", {"log": str(log)})
        wait_for(lambda: len(runs(log)) == 2, timeout=15, what="task on the new child")
        assert runs(log)[1][1] != pid1
        assert p.poll() is None  # the supervisor keeps running
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)
    assert wq["slow"].metadata().outcome == "success" and wq["slow"].metadata().attempts == 1


def test_hup_immediate_restart_kills_running_task(wq, log):
    wq.submit("slow", "handler", {"log": str(log), "sleep": 30})
    p = start_worker(wq.config["url"], wq.table, alive_time=2)
    try:
        ((_, pid1),) = wait_for(lambda: runs(log), what="task start")
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: not _alive(pid1), timeout=10, what="child killed")
        wq.submit("next", "plain", {"log": str(log)})
        wait_for(lambda: any(k == "next" for k, _ in runs(log)), timeout=15, what="new child working")
        # the interrupted task runs again once its lease expires
        wait_for(lambda: [k for k, _ in runs(log)].count("slow") == 2, timeout=20, what="re-run")
    finally:
        p.send_signal(signal.SIGQUIT)
        finish(p)
    assert ("slow", pid1) not in runs(log, "done")  # the killed child never finished it


def test_usr2_reopens_log_file(wq, log, tmp_path):
    logfile = tmp_path / "worker.log"
    p = start_worker(wq.config["url"], wq.table, log=str(logfile))
    try:
        wq.submit("a", "plain", {"log": str(log)})
        wait_for(lambda: "finished task=a" in (logfile.read_text() if logfile.exists() else ""), what="log line")
        rotated = tmp_path / "worker.log.1"
        logfile.rename(rotated)
        p.send_signal(signal.SIGUSR2)
        time.sleep(0.5)
        wq.submit("b", "plain", {"log": str(log)})
        wait_for(lambda: logfile.exists() and "finished task=b" in logfile.read_text(), what="new log file")
        assert "finished task=b" not in rotated.read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)


def test_idle_worker_purges_finished_rows(wq, log):
    wq.submit("old", "plain")
    wq.poll().finish(retention_time=0)
    assert wq["old"].exists()
    p = start_worker(wq.config["url"], wq.table, cleanup_interval=0.2)
    try:
        wait_for(lambda: not wq["old"].exists(), timeout=10, what="purge on an idle queue")
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("processor_type", ["process", "thread"])
def test_a_restart_whose_config_does_not_load_keeps_the_old_one(wq, log, tmp_path, processor_type):
    # Thread mode used to let the loader's error end the worker (its processors already stopped).
    config, logfile = tmp_path / "worker.json", tmp_path / "worker.log"
    p = start_worker(wq.config["url"], wq.table, config_file=config, processor_type=processor_type, log=str(logfile))
    try:
        wq.submit("a", "plain", {"log": str(log)})
        wait_for(lambda: runs(log), what="first task")
        config.write_text("{not json")
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: "config reload failed, keeping the old config" in _text(logfile), what="reload error")
        wq.submit("b", "plain", {"log": str(log)})
        wait_for(lambda: len(runs(log)) == 2, timeout=15, what="a task after the failed reload")
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out


def _restarting_thread_worker(wq, log: Path, logfile: Path, sleep: float):
    """A thread-mode worker restarting gracefully, waiting for a task that takes ``sleep`` s."""
    wq.submit("slow", "handler", {"log": str(log), "sleep": sleep})
    p = start_worker(wq.config["url"], wq.table, processor_type="thread", log=str(logfile))
    try:
        wait_for(lambda: runs(log), what="task start")
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: "restart" in _text(logfile), what="the restart begun")
    except AssertionError:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return p


def test_thread_mode_quit_during_a_graceful_restart_stops_at_once(wq, log, tmp_path):
    # The restart used to wait for the running tasks in the main thread, deaf to signals meanwhile:
    # QUIT (and a second TERM) waited for the 30 s task.
    p = _restarting_thread_worker(wq, log, tmp_path / "worker.log", sleep=30)
    p.send_signal(signal.SIGQUIT)
    code, out = finish(p, timeout=10)  # kills it if it did not exit
    assert code == 0, out
    assert runs(log, "done") == []


def test_thread_mode_stop_during_a_graceful_restart_starts_nothing_new(wq, log, tmp_path):
    logfile = tmp_path / "worker.log"
    p = _restarting_thread_worker(wq, log, logfile, sleep=1.5)
    p.send_signal(signal.SIGTERM)
    code, out = finish(p)
    assert code == 0, out
    assert runs(log, "done") == runs(log)  # the running task finished
    assert _text(logfile).count("worker started") == 1  # and no processors were started again
    assert wq["slow"].metadata().outcome == "success"


def test_a_restart_to_more_processors_replaces_only_the_running_children(wq, log, tmp_path):
    # The slots a restart adds were forked, then stopped at once with the old children, and forked again.
    config, logfile = tmp_path / "worker.json", tmp_path / "worker.log"
    p = start_worker(wq.config["url"], wq.table, config_file=config, log=str(logfile), child_kill_interval=0.1)
    try:
        wait_for(lambda: "processor 0 started" in _text(logfile), what="the first child")
        config.write_text(
            config.read_text().replace('"child_kill_interval": 0.1', '"processors": 2, "child_kill_interval": 0.1')
        )
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: _text(logfile).count("processor 0 started") == 2, what="the first child replaced")
        wq.submit_many([{"key": f"k{i}", "type": "plain", "data": {"log": str(log)}} for i in range(20)])
        wait_for(lambda: len(runs(log)) == 20, timeout=15, what="tasks on the new children")
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    assert _text(logfile).count("processor 1 started") == 1
