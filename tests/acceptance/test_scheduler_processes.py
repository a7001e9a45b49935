"""``perfectsched run`` with real processes, real signals and real databases (docs/cron.md).

Its signals, stop cascade, database backoff and config reloads are the worker's own code
(queue_core.worker.service); what it keeps as its own is firing occurrences: running a handler on each
(TARGET) or submitting them into the queue.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import ROOT, finish, runs, start_scheduler, wait_for

import perfectsched

pytestmark = pytest.mark.one_server


@pytest.fixture
def sched(db_url, table_name, backend):
    sc = perfectsched.open(db_url, table_name + "_s", table_name)  # the real clock: real processes
    sc.init()
    sc.url = db_url  # with its password (the queue's url masks it)
    yield sc
    sc.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name, table_name + "_s")


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "runs.log"


_started: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_scheduler_left():
    """A test that failed half-way leaves no scheduler process running."""
    yield
    while _started:
        p = _started.pop()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()


def start(sched, tmp_path, target="occurrence", **settings):
    logfile = tmp_path / "sched.log"
    p = start_scheduler(
        sched.url,
        sched.queue.table,
        sched.table,
        target,
        config_file=tmp_path / "sched.json",
        log=str(logfile),
        **settings,
    )
    _started.append(p)
    return p, logfile


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def add_due(sched, log, sleep: float) -> None:
    """A schedule with ten occurrences due now (every minute, from ten minutes ago)."""
    sched.add("s", "job", cron="* * * * *", data={"log": str(log), "sleep": sleep}, next_time=time.time() - 600)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
def test_a_stop_signal_lets_the_running_handler_finish(sched, log, tmp_path, sig):
    add_due(sched, log, sleep=1.5)
    p, logfile = start(sched, tmp_path)
    ((first, _),) = wait_for(lambda: runs(log), what="handler start")
    p.send_signal(sig)
    code, out = finish(p)
    assert code == 0, out
    assert runs(log, "done") == runs(log)  # the one it was running finished; no other started
    assert sched["s"].metadata().next_time > int(first.rsplit(".", 1)[1])  # finished: the schedule advanced
    assert f"stop signal {sig.name}: graceful stop" in text(logfile)


def test_a_second_stop_signal_during_a_handler_exits_at_once(sched, log, tmp_path):
    add_due(sched, log, sleep=30)
    p, logfile = start(sched, tmp_path)
    wait_for(lambda: runs(log), what="handler start")
    p.send_signal(signal.SIGTERM)
    wait_for(lambda: "stop signal SIGTERM" in text(logfile), what="the first stop signal acted upon")
    p.send_signal(signal.SIGTERM)
    code, out = finish(p, timeout=10)
    assert code == 0 and "second stop signal during a handler: exiting now" in out, out
    assert runs(log, "done") == []
    assert sched["s"].metadata().leased  # its lease expires and the occurrence runs again


def test_a_restart_waits_for_the_handler_and_rereads_the_config(sched, log, tmp_path):
    add_due(sched, log, sleep=1.0)
    p, logfile = start(sched, tmp_path)
    config = tmp_path / "sched.json"
    try:
        wait_for(lambda: runs(log), what="handler start")
        good = config.read_text()
        config.write_text("{not json")
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: "config reload failed, keeping the old config" in text(logfile), what="a broken reload")
        assert len(runs(log, "done")) >= 1  # the restart waited for the handler
        config.write_text(good.replace('"poll_interval": 0.1', '"poll_interval": 0.2'))
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: text(logfile).count("restarted") == 2, what="a second restart")
        n = len(runs(log))
        wait_for(lambda: len(runs(log)) > n, what="an occurrence handled after the restarts")
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    assert runs(log, "done") == runs(log)


def test_usr2_reopens_the_log_file(sched, tmp_path):
    p, logfile = start(sched, tmp_path, target=None)
    try:
        wait_for(lambda: "submitting" in text(logfile), what="startup line")
        rotated = tmp_path / "sched.log.1"
        logfile.rename(rotated)
        p.send_signal(signal.SIGUSR2)
        wait_for(lambda: "log files reopened" in text(logfile), what="a new log file")
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    assert "log files reopened" not in rotated.read_text()
    assert "stop signal SIGTERM" in text(logfile)


@pytest.mark.every_database
def test_database_errors_back_off_exponentially_and_the_loop_goes_on(sched, db_url, tmp_path):
    p, logfile = start(sched, tmp_path, target=None)
    try:
        wait_for(lambda: "submitting" in text(logfile), what="startup line")
        _drop(db_url, sched.table)  # every tick fails from now on
        waits = ["retrying in 0.1s", "retrying in 0.2s", "retrying in 0.4s"]
        wait_for(lambda: all(w in text(logfile) for w in waits), what="three failures in a row, backing off")
        sched.init()
        sched.add("after", "job", cron="* * * * *", next_time=time.time() - 60)
        wait_for(lambda: any(m.key.startswith("after.") for m in sched.queue.list()), what="a submission again")
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    lines = text(logfile)
    assert lines.index("retrying in 0.1s") < lines.index("retrying in 0.2s") < lines.index("retrying in 0.4s")
    assert "submitted" in lines[lines.index("retrying in 0.4s") :]


def _drop(url: str, table: str) -> None:
    from conftest import drop_tables

    drop_tables(url, table)


# -- a schedule this host cannot compute ---------------------------------------------------------
def host_without(tmp_path: Path) -> dict:
    """The environment of a host whose tzdata has UTC only: PYTHONTZPATH names a directory holding
    just UTC, and an empty ``tzdata`` package hides the Python one (zoneinfo's fallback)."""
    zones = tmp_path / "zoneinfo"
    zones.mkdir()
    shutil.copy("/usr/share/zoneinfo/UTC", zones / "UTC")
    (tmp_path / "hide" / "tzdata").mkdir(parents=True)
    (tmp_path / "hide" / "tzdata" / "__init__.py").write_text("")
    return {"PYTHONTZPATH": str(zones), "PYTHONPATH": f"{tmp_path / 'hide'}{os.pathsep}{ROOT}"}


def start_script(sched, tmp_path, env):
    """The installed ``perfectsched run`` command, submitting into the queue."""
    logfile = tmp_path / "sched.log"
    opts = ["-D", sched.url, "--table", sched.queue.table, "--schedule-table", sched.table]
    p = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "perfectsched"),
            "run",
            *opts,
            "--poll-interval",
            "0.1",
            "--log",
            str(logfile),
        ],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _started.append(p)
    return p, logfile


def fired(sched, log: Path, key: str) -> bool:
    return any(m.key.startswith(key + ".") for m in sched.queue.list()) or any(
        k.startswith(key + ".") for k, _ in runs(log)
    )


@pytest.mark.parametrize("mode", ["submitting", "handler"])
def test_a_schedule_this_host_cannot_compute_is_set_aside_and_run_keeps_going(sched, log, tmp_path, mode):
    env = host_without(tmp_path)
    now = time.time()
    sched.add("tokyo", "job", cron="* * * * *", data={"log": str(log)}, timezone="Asia/Tokyo", next_time=now - 1200)
    sched.add("healthy", "job", cron="* * * * *", data={"log": str(log)}, next_time=now - 600)  # due behind it
    if mode == "submitting":
        p, logfile = start_script(sched, tmp_path, env)
    else:
        p, logfile = start(sched, tmp_path, env=env)
    try:
        wait_for(lambda: fired(sched, log, "healthy") or p.poll() is not None, what="the healthy schedule fired")
        assert p.poll() is None, finish(p)[1]
        m = sched["tokyo"].metadata()
        assert m.status == "set_aside" and "invalid timezone 'Asia/Tokyo': unknown IANA zone" in m.error
        sched.add("later", "job", cron="* * * * *", data={"log": str(log)}, next_time=time.time() - 60)
        wait_for(lambda: fired(sched, log, "later"), what="a schedule added afterwards fired")
    finally:
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
    assert code == 0, out
    lines = [line for line in text(logfile).splitlines() if "set aside" in line]
    assert len(lines) == 1 and "tokyo" in lines[0] and "unknown IANA zone" in lines[0], lines
    assert not fired(sched, log, "tokyo")
