"""Batched claims and finishes inside one processor (in-process, real database, real time)."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from queue_core import config
from queue_core.clock import FakeClock
from queue_core.worker.main import Processor
from queue_core.worker.settler import Settler


def _processor(wq, target, **settings):
    s = config.build({"url": wq.config["url"], "table": wq.table, "poll_interval": 0.05, **settings})
    return Processor(target, s, burst=True, queue=wq)


def test_a_drain_finishes_every_task_once_in_few_commits(wq):
    wq.submit_many({"key": f"k{i}", "type": "t"} for i in range(300))
    seen = []
    proc = _processor(wq, lambda task: seen.append(task.key))
    assert proc.run() == 0
    assert sorted(seen) == sorted(f"k{i}" for i in range(300))  # each ran once
    stats = wq.stats()
    assert stats["finished"] == 300 and stats["outcomes"]["success"] == 300
    assert proc.batch_size() > 1  # short tasks: it learned to lease several per poll


def test_a_long_task_does_not_hold_back_the_finish_of_a_short_one(wq):
    wq.submit("fast", "t")
    wq.submit("slow", "t")
    release = threading.Event()
    checked = {}

    def handler(task):
        if task.key == "slow":
            # While this runs, the monitor thread must have written "fast"'s finish.
            checked["fast"] = _wait_until(lambda: wq["fast"].metadata().status == "finished")
            release.set()

    proc = _processor(wq, handler, task_prefetch=1)  # both leased in one poll
    assert proc.run() == 0
    assert release.is_set() and checked["fast"] is True
    assert wq["slow"].metadata().outcome == "success"


def test_max_request_per_child_caps_the_batch(wq):
    wq.submit_many({"key": f"k{i}", "type": "t"} for i in range(20))
    proc = _processor(wq, lambda task: None, max_request_per_child=3, task_prefetch=10)
    assert proc.run() == 75  # recycle
    assert proc.processed == 3
    assert wq.stats()["finished"] == 3 and wq.stats()["running"] == 0


def _wait_until(predicate, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_finish_failing_on_a_database_error_is_tried_again_after_a_growing_wait(wq, db_url, caplog):
    # The monitor thread used to try a failed write again every 50 ms, logging an error each time.
    ticks = FakeClock(1000.0)  # the settler's monotonic clock
    settler = Settler(wq, delay=0.05, clock=ticks.now)
    wq.submit("a", "t")
    settler.add(wq.poll(), 0.0)
    ticks.advance(0.06)
    assert settler.due()
    _rename(db_url, wq.table, wq.table + "_away")  # every write fails (a missing table: not transient)
    for wait in (0.1, 0.2, 0.4):
        settler.flush()
        assert f"finish failed (will retry in {wait:.1f}s)" in caplog.text
        ticks.advance(wait * 0.9)
        assert not settler.due()
        ticks.advance(wait * 0.2)
        assert settler.due()
    _rename(db_url, wq.table + "_away", wq.table)
    settler.flush()
    assert wq["a"].metadata().outcome == "success"
    assert settler.backoff.failures == 0 and settler.backoff.failed() == 0.1  # a success ends the backoff


def _rename(url: str, old: str, new: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))
    finally:
        engine.dispose()
