"""Batched claims and finishes inside one processor (in-process, real database, real time)."""

from __future__ import annotations

import threading
import time

from queue_core import config
from queue_core.worker import Processor


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
