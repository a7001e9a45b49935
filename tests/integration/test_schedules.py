"""perfectsched against real databases: add/modify/delete, poll, tick, catch-up, exactly-once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import queue_core
from perfectsched import (
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentNotFoundError,
    InvalidCronError,
    InvalidTimezoneError,
    NotFoundError,
    PreemptedError,
)
from perfectsched.catchup import MAX_PER_TICK

H = 3600
T0 = 1_700_000_000 - 1_700_000_000 % 86400  # a UTC midnight
ROOT = str(Path(__file__).resolve().parents[2])


def task_keys(sc):
    return sorted(m.key for m in sc.queue.list())


def test_add_and_metadata(sched):
    s = sched.add("s1", "report", cron="0 * * * *", data={"a": 1}, delay=30, now=T0 + 10)
    m = s.metadata()
    assert (m.key, m.type, m.cron, m.delay, m.timezone, m.data) == ("s1", "report", "0 * * * *", 30, "UTC", {"a": 1})
    assert m.next_time == T0 + H and m.next_run_time == T0 + H + 30
    assert (m.catchup, m.dst) == ("all", "vixie")
    assert s.exists()


def test_add_start_and_at(sched):
    m = sched.add("s", "t", cron="0 0 * * *", next_time=T0, next_run_time=T0 + 5, now=T0 + 999).metadata()
    assert m.next_time == T0 and m.next_run_time == T0 + 5  # at-or-after the start


def test_timezone_daily(sched):
    utc = sched.add("utc", "t", cron="0 0 * * *", now=T0 + 1).metadata()
    tokyo = sched.add("tokyo", "t", cron="0 0 * * *", timezone="Asia/Tokyo", now=T0 + 1).metadata()
    assert utc.next_time == T0 + 86400
    assert tokyo.next_time == T0 + 15 * H  # midnight in Tokyo = 15:00 UTC
    assert tokyo.timezone == "Asia/Tokyo"


def test_duplicate_delete_and_add_again(sched):
    sched.add("s", "t", cron="* * * * *", now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        sched.add("s", "t", cron="* * * * *", now=T0)
    sched["s"].delete()
    with pytest.raises(IdempotentNotFoundError):
        sched["s"].delete()
    with pytest.raises(NotFoundError):
        sched["s"].metadata()
    sched.add("s", "t", cron="* * * * *", now=T0)


@pytest.mark.parametrize("cron", ["???", "* * * * * *", "0 0 30 2 *", "61 * * * *", ""])
def test_invalid_cron_rejected_at_add(sched, cron):
    with pytest.raises(InvalidCronError):
        sched.add("s", "t", cron=cron, now=T0)
    assert list(sched.list()) == []


def test_invalid_timezone_and_options(sched):
    with pytest.raises(InvalidTimezoneError):
        sched.add("s", "t", cron="* * * * *", timezone="JST-9", now=T0)
    with pytest.raises(ValueError):
        sched.add("s", "t", cron="* * * * *", catchup="some", now=T0)
    with pytest.raises(ValueError):
        sched.add("s", "t", cron="* * * * *", dst="none", now=T0)
    with pytest.raises(ValueError):
        sched.add("s", "t", cron="* * * * *", delay=-1, now=T0)
    with pytest.raises(ValueError):
        sched.add("s", "t", cron="* * * * *", data=[1], now=T0)
    assert list(sched.list()) == []


def test_tick_submits_time_derived_keys_once(sched):
    sched.add("s1", "job", cron="0 * * * *", data={"x": 1}, delay=60, now=T0 + 1)
    assert sched.tick(now=T0 + H) == 0  # due at +1h+60s
    assert sched.tick(now=T0 + H + 60) == 1
    assert sched.tick(now=T0 + H + 61) == 0
    assert task_keys(sched) == [f"s1.{T0 + H}"]
    m = sched.queue[f"s1.{T0 + H}"].metadata()
    assert m.type == "job" and m.data == {"x": 1} and m.run_at == T0 + H + 60
    assert sched["s1"].metadata().next_time == T0 + 2 * H


@pytest.mark.parametrize("hourly", ["0 * * * *", "@every:1h"])
def test_catchup_all_latest_skip(sched, hourly):
    for policy in ("all", "latest", "skip"):
        sched.add(policy, "job", cron=hourly, catchup=policy, now=T0 + 1)
    sched.tick(now=T0 + 5 * H + 1800)  # down for five hours
    keys = task_keys(sched)
    assert [k for k in keys if k.startswith("all.")] == [f"all.{T0 + i * H}" for i in range(1, 6)]
    assert [k for k in keys if k.startswith("latest.")] == [f"latest.{T0 + 5 * H}"]
    assert [k for k in keys if k.startswith("skip.")] == []
    for policy in ("all", "latest", "skip"):
        assert sched[policy].metadata().next_time == T0 + 6 * H
    # On time, skip does submit.
    sched.tick(now=T0 + 6 * H + 5)
    assert f"skip.{T0 + 6 * H}" in task_keys(sched)


def test_catchup_all_long_outage_is_bounded_per_tick(sched, monkeypatch):
    """A minutely schedule down for a day: its 1441 occurrences are submitted MAX_PER_TICK at
    most per transaction, the tick going on until every one is."""
    batches = []
    tick_batch = sched._tick_batch

    def recorded(tx, now):
        done, submitted, aside = tick_batch(tx, now)
        batches.append(submitted)
        return done, submitted, aside

    monkeypatch.setattr(sched, "_tick_batch", recorded)
    sched.add("m", "job", cron="* * * * *", now=T0)
    n = sched.tick(now=T0 + 86400)  # 1440 missed minutes
    assert n == 1441
    assert batches == [MAX_PER_TICK, 1441 - MAX_PER_TICK, 0]
    assert len(task_keys(sched)) == 1441


def test_poll_finish_cycle_replays_in_order(sched):
    sched.add("s", "t", cron="* * * * *", now=T0 + 1)
    seen = []
    while (t := sched.poll(now=T0 + 150)) is not None:
        seen.append(t.scheduled_time)
        t.finish(now=T0 + 150)
    assert seen == [T0 + 60, T0 + 120]
    assert sched["s"].metadata().next_time == T0 + 180


def test_poll_finish_and_fencing(sched):
    sched.add("s", "t", cron="* * * * *", now=T0 + 1)
    assert sched.poll(now=T0 + 59) is None
    a = sched.poll(alive_time=30, now=T0 + 60)
    assert a.scheduled_time == T0 + 60 and a.type == "t"
    assert sched.poll(now=T0 + 70) is None  # leased
    b = sched.poll(alive_time=30, now=T0 + 95)  # lease expired: same occurrence again
    assert b.scheduled_time == T0 + 60
    with pytest.raises(PreemptedError):
        a.finish(now=T0 + 96)
    b.finish(now=T0 + 96)
    with pytest.raises(IdempotentAlreadyFinishedError):
        b.finish(now=T0 + 97)
    c = sched.poll(now=T0 + 120)
    assert c.scheduled_time == T0 + 120
    c.retry(retry_wait=10, now=T0 + 121)
    assert sched.poll(now=T0 + 125) is None
    d = sched.poll(now=T0 + 131)
    assert d.scheduled_time == T0 + 120
    d.release(now=T0 + 132)
    assert sched.poll(now=T0 + 132).scheduled_time == T0 + 120


def test_a_failed_occurrence_waits_retry_wait_every_time(sched):
    """perfectsched's backoff (queue_core.rules.policy.Backoff.fixed): the same retry_wait after each
    error, neither doubled nor jittered, and never given up (an occurrence has no attempt limit)."""
    sched.queue.config["retry_wait"] = 40
    sched.add("s", "t", cron="* * * * *", now=T0 + 1)
    now = T0 + 60
    for _ in range(4):
        task = sched.poll(alive_time=30, now=now)
        assert task is not None and task.scheduled_time == T0 + 60
        assert task.retry_or_fail(RuntimeError("boom"), now=now) == "retry"
        assert sched["s"].metadata().timeout == now + 40
        assert sched.poll(now=now + 39) is None
        now += 40


def test_a_permanent_error_skips_its_occurrence_and_the_schedule_goes_on(sched):
    """An occurrence whose handler raised queue_core.PermanentError can never succeed: it is not
    retried (an occurrence has no attempt limit: it would be retried for ever); the schedule
    advances to its next occurrence, due then, not earlier."""
    sched.queue.config["retry_wait"] = 40
    sched.add("s", "t", cron="* * * * *", now=T0 + 1)
    task = sched.poll(alive_time=30, now=T0 + 61)
    assert task.retry_or_fail(queue_core.PermanentError("bad input"), now=T0 + 61) == "skip"
    m = sched["s"].metadata()
    assert (m.next_time, m.timeout) == (T0 + 120, T0 + 120)
    assert sched.poll(now=T0 + 119) is None
    assert sched.poll(now=T0 + 120).scheduled_time == T0 + 120


def test_modify_recomputes_from_now(sched):
    sched.add("s", "t", cron="0 0 * * *", now=T0 + 1)
    m = sched.modify("s", cron="0 * * * *", delay=5, data={"v": 2}, now=T0 + 2 * H + 1)
    assert m.next_time == T0 + 3 * H and m.next_run_time == T0 + 3 * H + 5
    m2 = sched["s"].metadata()
    assert (m2.cron, m2.delay, m2.data, m2.next_time) == ("0 * * * *", 5, {"v": 2}, T0 + 3 * H)
    sched.modify("s", type="other", now=T0 + 3 * H)  # type only: no recompute
    assert sched["s"].metadata().next_time == T0 + 3 * H
    with pytest.raises(NotFoundError):
        sched.modify("missing", cron="* * * * *")
    with pytest.raises(InvalidCronError):
        sched.modify("s", cron="bad")


def _tick_process(url, table, qtable, now, rounds):
    code = (
        "import perfectsched, sys\n"
        f"sc = perfectsched.open({url!r}, {table!r}, {qtable!r})\n"
        f"for i in range({rounds}):\n"
        f"    sc.tick(now={now} + i * 60)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_many_scheduler_processes_submit_each_occurrence_once(sched, db_url):
    n = 40
    for i in range(n):
        sched.add(f"s{i}", "job", cron="* * * * *", now=T0 + 1)
    procs = [_tick_process(db_url, sched.table, sched.queue.table, T0 + 60, 10) for _ in range(6)]
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out.decode()[-2000:]
    counts = Counter(m.key for m in sched.queue.list())
    assert len(counts) == n * 10 and set(counts.values()) == {1}
    for i in range(n):
        assert sched[f"s{i}"].metadata().next_time == T0 + 11 * 60


def test_scheduler_killed_mid_tick_loses_and_doubles_nothing(sched, db_url):
    n = 30
    for i in range(n):
        sched.add(f"s{i}", "job", cron="* * * * *", now=T0 + 1)
    for round_ in range(4):
        p = _tick_process(db_url, sched.table, sched.queue.table, T0 + 60, 30)
        time.sleep(0.2 + 0.15 * round_)
        p.send_signal(signal.SIGKILL)
        p.communicate()
    # A surviving scheduler finishes the job. Rows the killed one still had locked are skipped
    # (SKIP LOCKED) until the server has rolled its transaction back, so tick like a loop does.
    deadline = time.monotonic() + 30
    while True:
        sched.tick(now=T0 + 30 * 60)
        if sched.store.schedule_count_due(T0 + 30 * 60) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    counts = Counter(m.key for m in sched.queue.list())
    expected = {f"s{i}.{T0 + k * 60}" for i in range(n) for k in range(1, 31)}
    assert set(counts) == expected and set(counts.values()) == {1}


# -- interval schedules -----------------------------------------------------------------------------
def test_an_interval_schedule_fires_each_occurrence_once_with_time_derived_keys(sched):
    sched.add("sync", "job", cron="@every:15m+5m", data={"x": 1}, timezone="Asia/Tokyo", now=T0 + 1)
    m = sched["sync"].metadata()
    assert (m.cron, m.next_time) == ("@every:15m+5m", T0 + 300)
    assert sched.tick(now=T0 + 299) == 0
    assert sched.tick(now=T0 + 300) == 1
    assert sched.tick(now=T0 + 301) == 0
    assert sched.tick(now=T0 + 1200) == 1
    assert task_keys(sched) == [f"sync.{T0 + 300}", f"sync.{T0 + 1200}"]
    assert sched["sync"].metadata().next_time == T0 + 2100


@pytest.mark.parametrize("cron", ["@every:0s", "@every:15m+20m", "@every:soon", "@every:400d"])
def test_a_bad_interval_is_refused_at_add_and_nothing_is_written(sched, cron):
    with pytest.raises(InvalidCronError):
        sched.add("s", "t", cron=cron, now=T0)
    with pytest.raises(NotFoundError):
        sched["s"].metadata()


def test_a_schedule_submits_its_tasks_to_its_queue(sched):
    sched.add("nightly", "report", cron="0 * * * *", queue="reports", now=T0 + 1)
    assert sched["nightly"].metadata().queue_name == "reports"
    sched.tick(now=T0 + H)
    assert sched.queue[f"nightly.{T0 + H}"].metadata().queue_name == "reports"
    assert sched.queue.poll(now=T0 + H) is None  # the default queue has nothing
    assert sched.queue.poll(now=T0 + H, queues="reports").key == f"nightly.{T0 + H}"
    sched.modify("nightly", queue="urgent", now=T0 + H + 1)
    m = sched["nightly"].metadata()
    assert (m.queue_name, m.next_time) == ("urgent", T0 + 2 * H)  # a new queue keeps the times
    sched.tick(now=T0 + 2 * H)
    assert sched.queue[f"nightly.{T0 + 2 * H}"].metadata().queue_name == "urgent"
    with pytest.raises(queue_core.ValidationError, match="not a queue name"):
        sched.modify("nightly", queue="no way", now=T0 + 2 * H)
    with pytest.raises(queue_core.ValidationError, match="not a queue name"):
        sched.add("bad", "report", cron="0 * * * *", queue="", now=T0)
    assert sched["nightly"].metadata().queue_name == "urgent"
