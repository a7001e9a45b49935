"""Which ends of a lease spend an attempt (queue_core.rules.policy, rule 3), through the queue and the
worker, on SQLite, MariaDB and PostgreSQL: a run and an expired lease do; a release, a graceful
stop and a lease taken over before the handler started do not."""

from __future__ import annotations

import pytest

from queue_core import PreemptedError, config
from queue_core.worker.main import Processor


def _processor(queue, target, **settings):
    s = config.build({"url": queue.config["url"], "table": queue.table, **settings})
    return Processor(target, s, burst=True, queue=queue)


def _lose_before_start(queue, clock, proc):
    """A task leased in a batch whose lease expires while it waits its turn: another worker takes
    it, and the first worker's monitor finds the lease lost. Returns (first lease, second lease)."""
    first = queue.poll(alive_time=10)
    clock.advance(11)
    second = queue.poll(alive_time=10)
    assert second is not None and second.key == first.key
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()  # what the monitor thread does every task_heartbeat_interval
    assert first.lost
    with pytest.raises(PreemptedError):
        first.heartbeat()
    return first, second


def test_a_lease_lost_before_its_handler_started_gives_its_attempt_back(queue, clock):
    queue.submit("k", "t")
    ran = []
    proc = _processor(queue, lambda task: ran.append(task.key))
    first, second = _lose_before_start(queue, clock, proc)
    assert queue["k"].metadata().attempts == 2  # two claims counted
    proc.process(first)  # its turn comes: not run here, its attempt given back
    assert ran == []
    assert queue["k"].metadata().attempts == 1  # only the second lease may run it
    second.finish()
    m = queue["k"].metadata()
    assert m.outcome == "success" and m.attempts == 1


def test_the_attempt_of_a_lease_lost_before_start_is_given_back_after_the_task_finished(queue, clock):
    queue.submit("k", "t")
    proc = _processor(queue, lambda task: None)
    first, second = _lose_before_start(queue, clock, proc)
    second.finish()
    proc.process(first)
    m = queue["k"].metadata()
    assert m.outcome == "success" and m.attempts == 1


def test_leases_lost_before_start_do_not_use_up_max_attempts(queue, clock):
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue, lambda task: None)
    first, second = _lose_before_start(queue, clock, proc)
    proc.process(first)
    second.release()  # nobody ran it yet: both attempts are left
    third = queue.poll(alive_time=10)
    assert third is not None and third.attempts == 1
    assert third.retry_or_fail(RuntimeError("first run")) == "retry"
    clock.advance(10_000)
    fourth = queue.poll(alive_time=10)
    assert fourth is not None and fourth.attempts == 2
    assert fourth.retry_or_fail(RuntimeError("second run")) == "failure"
    m = queue["k"].metadata()
    assert m.outcome == "failure" and m.attempts == 2 and "second run" in m.error


def test_an_expired_lease_spends_its_attempt(queue, clock):
    queue.submit("k", "t", max_attempts=2)
    queue.poll(alive_time=10)  # its worker dies: the lease expires
    clock.advance(11)
    again = queue.poll(alive_time=10)
    assert again is not None and again.attempts == 2
    assert again.retry_or_fail(RuntimeError("boom")) == "failure"


def test_a_graceful_stop_releases_the_rest_of_the_batch_without_spending_attempts(queue):
    queue.submit_many({"key": k, "type": "t"} for k in ("a", "b", "c"))
    ran = []

    def handler(task):
        ran.append(task.key)
        proc.stop()  # TERM arrives while the first task of the batch runs

    proc = _processor(queue, handler, task_prefetch=2)  # all three leased in one claim
    assert proc.run() == 0
    assert ran == ["a"]
    assert queue["a"].metadata().outcome == "success" and queue["a"].metadata().attempts == 1
    for key in ("b", "c"):
        m = queue[key].metadata()
        assert m.status == "waiting" and m.attempts == 0, (key, m)


def test_a_lease_lost_before_start_gives_its_attempt_back_when_the_worker_is_stopping(queue, clock):
    """A stopping worker releases the rest of its batch, a lost lease among it too: that release
    must not be refused, leaving the lost lease's attempt spent."""
    queue.submit("k", "t")
    proc = _processor(queue, lambda task: None)
    first, second = _lose_before_start(queue, clock, proc)
    proc.stop()
    proc._run_batch([first])  # its turn comes while the worker stops
    second.finish()
    m = queue["k"].metadata()
    assert m.outcome == "success" and m.attempts == 1
