"""An idle ``perfectsched run`` says what it waits for: the next due occurrence, its schedule and
its time in the schedule's timezone, logged at INFO once each time it changes (a real process)."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from procs import finish, start_scheduler, wait_for

import perfectsched

pytestmark = pytest.mark.one_server


@pytest.fixture
def sched(db_url, table_name, backend):
    sc = perfectsched.open(db_url, table_name + "_s", table_name)
    sc.init()
    yield sc
    sc.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name, table_name + "_s")


def test_an_idle_scheduler_logs_the_next_due_occurrence(sched, db_url, table_name, tmp_path: Path):
    tomorrow = (int(time.time()) // 86400 + 1) * 86400  # midnight UTC, 01:00 in London in winter or 00:00 in summer
    sched.add("nightly", "etl", cron="0 * * * *", timezone="Europe/London", next_time=tomorrow)
    sched.add("weekly", "etl", cron="0 3 * * 1", timezone="UTC", next_time=tomorrow + 7 * 86400)
    logfile = tmp_path / "sched.log"
    proc = start_scheduler(
        db_url,
        table_name,
        table_name + "_s",
        None,
        config_file=tmp_path / "sched.json",
        log=str(logfile),
        poll_interval=0.1,
    )
    try:
        wait_for(lambda: logfile.exists() and "next: " in logfile.read_text(), timeout=60, what="the next-due line")
        time.sleep(0.5)  # several idle turns: the line is not repeated
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        finish(proc)
    lines = [ln.split(" perfectsched.runner: ", 1)[1] for ln in logfile.read_text().splitlines() if "next: " in ln]
    expected = datetime.fromtimestamp(tomorrow, ZoneInfo("Europe/London")).isoformat()
    assert lines == [f"next: schedule nightly at {expected} (Europe/London)"], lines
    assert " INFO " in next(ln for ln in logfile.read_text().splitlines() if "next: " in ln)
