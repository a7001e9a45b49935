"""One clock for every machine, with real processes whose clocks are wrong (Debian's faketime).

Workers, submitters and schedulers run under ``faketime`` shifted by ±30 s or ±10 min, or with a
clock that is stepped while they run; the test process and the database servers keep the real
time. Before the queue took the server's clock, each of these failed: a fast machine took live
leases (a task ran twice), a slow one's heartbeats made its lease look expired, a fast submitter's
"run now" tasks waited ten minutes, a slow worker's retries skipped their backoff, a fast submitter found
idempotency windows closed and a fast scheduler fired ten minutes of occurrences early.

MySQL/MariaDB and PostgreSQL only: SQLite has no server clock; its processes share one host's clock
(docs/queue.md, "One clock"). How the clocks are shifted: reliability/skew.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from procs import ROOT, finish, runs, start_worker, wait_for

from reliability import skew


def _need_faketime() -> None:
    if skew.available():
        return
    msg = "faketime not installed (scripts/test.sh installs it: apt-get install faketime)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def shifted(seconds: int) -> dict:
    _need_faketime()
    return skew.shifted(seconds)


def stepping(offset_file) -> dict:
    _need_faketime()
    return skew.stepping(offset_file)


def cli(program: str, *args: str, offset: int | None = None) -> subprocess.CompletedProcess:
    """``program``'s CLI in a process of its own, its clock shifted by ``offset`` seconds."""
    env = shifted(offset) if offset is not None else {}
    code = f"import sys; from {program} import main; sys.argv[0] = {program!r}; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT, **env},
        timeout=60,
    )


def ran_by(log, key: str) -> set[int]:
    return {pid for k, pid in runs(log) if k == key}


@pytest.fixture(params=["mysql", "postgres"])
def backend(request):
    return request.param


@pytest.fixture
def log(tmp_path):
    return tmp_path / "runs.log"


def test_the_skewed_process_really_is_off():
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        capture_output=True,
        text=True,
        env={**os.environ, **shifted(600)},
        check=True,
    )
    assert float(out.stdout) - time.time() == pytest.approx(600, abs=5)


def test_the_stepped_process_really_steps(tmp_path):
    offset = tmp_path / "offset"
    env = stepping(offset)
    code = (
        "import sys, time, threading; a = time.time(); open(sys.argv[1], 'w').write('-600'); "
        "threading.Event().wait(0.2); print(time.time() - a)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(offset)], capture_output=True, text=True, env={**os.environ, **env}, check=True
    )
    assert float(out.stdout) == pytest.approx(-600, abs=5)


def holder_and_other(wq, log, holder_env: dict, other_env: dict | None = None, *, sleep: float = 4, step=None) -> None:
    """A long task held by a worker (``holder_env``), another worker (``other_env``) started
    while it runs and shown to be claiming (it runs a marker task), then both stopped: the long
    task must have run once, on its first attempt, whatever the two workers' clocks say."""
    wq.submit("slow", "handler", {"log": str(log), "sleep": sleep})
    holder = start_worker(wq.config["url"], wq.table, alive_time=2, env=holder_env)
    wait_for(lambda: runs(log), what="the holder's start")
    if step is not None:
        step()
    other = start_worker(wq.config["url"], wq.table, alive_time=2, env=other_env)
    wq.submit("marker", "plain", {"log": str(log)})  # the holder is busy: the other one runs it
    wait_for(lambda: ran_by(log, "marker"), what="the other worker's first claim")
    assert ran_by(log, "marker").isdisjoint(ran_by(log, "slow"))
    wait_for(lambda: runs(log, "done"), timeout=30, what="the long task's end")
    for p in (holder, other):
        p.send_signal(signal.SIGTERM)
        code, out = finish(p)
        assert code == 0, out
    assert Counter(k for k, _ in runs(log)) == {"slow": 1, "marker": 1}, "a live lease was taken over"
    m = wq["slow"].metadata()
    assert m.outcome == "success" and m.attempts == 1


@pytest.mark.parametrize("skew", [600, 30])
def test_a_fast_worker_never_takes_a_live_lease(wq, log, skew):
    holder_and_other(wq, log, {}, shifted(skew))


@pytest.mark.parametrize("skew", [-600, -30])
def test_a_slow_worker_keeps_its_lease_against_honest_ones(wq, log, skew):
    """A holder 10 min slow used to write lease expiries 10 min in the past: others took its task."""
    holder_and_other(wq, log, shifted(skew))


def test_a_clock_stepped_back_while_holding_a_lease_keeps_it(wq, log, tmp_path):
    offset = tmp_path / "offset"
    # NTP steps the holder's clock back 10 minutes while it runs the task
    holder_and_other(wq, log, stepping(offset), sleep=5, step=lambda: offset.write_text("-600"))


@pytest.mark.parametrize("skew", [600, 30])
def test_run_now_from_a_skewed_submitter_is_due_now(wq, log, skew):
    url, table = wq.config["url"], wq.table
    done = cli(
        "queue_core.cli.main",
        "submit",
        "-D",
        url,
        "--table",
        table,
        "now-1",
        "plain",
        f'{{"log": "{log}"}}',
        offset=skew,
    )
    assert done.returncode == 0, done.stderr
    code, out = finish(start_worker(url, table, burst=True))  # honest; exits when nothing is due
    assert code == 0, out
    assert [k for k, _ in runs(log)] == ["now-1"], "a 'run now' task was not due for an honest worker"


@pytest.mark.parametrize("skew", [-600])
def test_a_slow_workers_retry_waits_its_backoff(wq, log, skew):
    """The backoff is added to the one clock: a worker 10 min slow used to write a retry time
    10 min in the past, and the retry ran at once."""
    wq.submit("flaky", "handler", {"log": str(log), "fail": True}, max_attempts=2)
    worker = start_worker(wq.config["url"], wq.table, retry_wait=4, env=shifted(skew))
    first = wait_for(lambda: runs(log) and time.monotonic(), what="the first attempt")
    second = wait_for(lambda: len(runs(log)) == 2 and time.monotonic(), timeout=30, what="the retry")
    worker.send_signal(signal.SIGTERM)
    code, out = finish(worker)
    assert code == 0, out
    assert second - first >= 4 * 0.8 - 0.2, f"the retry ran {second - first:.1f} s after the failure"
    assert wq["flaky"].metadata().attempts == 2


@pytest.mark.parametrize("skew", [600])
def test_a_skewed_submitter_finds_the_idempotency_window_open(wq, skew):
    url, table = wq.config["url"], wq.table
    wq.submit("once", "plain", {})
    task = wq.poll(alive_time=30)
    task.finish()  # kept for retention_time (300 s) by the server's clock
    again = cli("queue_core.cli.main", "submit", "-D", url, "--table", table, "once", "plain", offset=skew)
    assert again.returncode == 3 and "already exists" in again.stderr, (again.returncode, again.stderr)
    assert [m.key for m in wq.list()] == ["once"]


def _schedule(url: str, sched_table: str, queue_table: str) -> None:
    done = cli("perfectsched.cli", "init", "-D", url, "--table", queue_table, "--schedule-table", sched_table)
    assert done.returncode == 0, done.stderr
    done = cli(
        "perfectsched.cli",
        "add",
        "-D",
        url,
        "--table",
        queue_table,
        "--schedule-table",
        sched_table,
        "every-minute",
        "tick",
        "* * * * *",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("skew", [600])
def test_a_fast_scheduler_fires_nothing_early(wq, skew, table_name):
    url, sched_table = wq.config["url"], f"{table_name}_s"
    _schedule(url, sched_table, wq.table)
    start = time.time()
    ran = cli(
        "perfectsched.cli",
        "run",
        "--burst",
        "-D",
        url,
        "--table",
        wq.table,
        "--schedule-table",
        sched_table,
        offset=skew,
    )
    assert ran.returncode == 0, ran.stderr
    fired = [m for m in wq.list() if m.type == "tick"]
    # the first occurrence is the next minute after the schedule was added: not due yet unless
    # the minute turned meanwhile
    due = int(time.time() // 60) > int(start // 60)
    assert len(fired) <= int(due), [m.key for m in fired]
