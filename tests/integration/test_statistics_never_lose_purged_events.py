"""Statistics never lose an event: events that are deleted or passed over before any roll-up
counted them are counted all the same."""

from __future__ import annotations

import threading

import pytest
from conftest import own_queue

GAP = 60.0


def _totals(q, clock):
    st = q.statistics(since=clock.now() - 7 * 3600, until=clock.now() + 1)
    return st.totals()


def _counts(tally):
    return (tally.started, tally.succeeded, tally.failed, tally.cancelled, tally.retried)


def test_per_call_retention_shorter_than_horizon_is_counted(queue, clock):
    """finish(retention_time=1): the task is purged 1 s after it finished, the roll-up at
    cleanup only counts events older than event_gap_timeout (60 s)."""
    queue.submit("a", "t")
    clock.advance(2)
    task = queue.poll(alive_time=60)
    clock.advance(1)
    task.finish(retention_time=1)
    clock.advance(2)
    assert queue.cleanup() == 1  # purged with its events
    clock.advance(GAP + 1)
    totals = _totals(queue, clock)
    assert ("default", "t") in totals, "the claim and the finish of a purged task were never counted"
    assert _counts(totals[("default", "t")]) == (1, 1, 0, 0, 0)


def test_cleanup_exactly_at_purge_time_counts_the_task(db_url, table_name, clock, backend):
    """retention_time (30 s) below event_gap_timeout: the horizon is the retention; a cleanup
    at exactly the purge time rolls up events with at < now - 30 (strictly), but purges rows
    with timeout <= now: the finish event at now - 30 is deleted uncounted."""
    with own_queue(db_url, table_name, backend, clock=clock, retention_time=30) as q:
        q.submit("a", "t")
        task = q.poll(alive_time=60)
        task.finish()
        clock.advance(30)
        assert q.cleanup() == 1
        clock.advance(GAP + 1)
        totals = _totals(q, clock)
        assert ("default", "t") in totals
        assert _counts(totals[("default", "t")]) == (1, 1, 0, 0, 0)


def test_key_resubmitted_after_retention_keeps_old_counts(queue, clock):
    """A key re-submitted after the retention of its finished row deletes the old row and its
    events in the submit; nothing rolls them up first."""
    queue.submit("k", "t")
    task = queue.poll(alive_time=60)
    task.finish()
    clock.advance(301)  # past retention_time (300 s)
    assert queue.submit("k", "t")  # frees the key: the old row and its events deleted
    clock.advance(GAP + 1)
    totals = _totals(queue, clock)
    assert ("default", "t") in totals, "the first run of key k was never counted"
    assert _counts(totals[("default", "t")]) == (1, 1, 0, 0, 0)


def test_trimmed_history_keeps_its_counts(queue, clock):
    """A task retried 40 times within the horizon: each retry trims its history past 60 events,
    deleting claimed/retried events no roll-up has counted."""
    queue.submit("k", "t")
    n = 40
    for _ in range(n):
        task = queue.poll(alive_time=60)
        assert task is not None
        task.retry(retry_wait=0)
    clock.advance(GAP + 1)
    totals = _totals(queue, clock)
    tally = totals[("default", "t")]
    assert (tally.started, tally.retried) == (n, n)


def test_events_out_of_id_order_within_the_gap_are_counted(queue, clock, backend):
    """Two transactions, each open less than event_gap_timeout: B (started at T-59) writes its
    event after A (started at T) wrote its own, and commits first. A roll-up at T+1 counts B's
    event (older than the horizon) and moves its position past A's id, which commits at T+2."""
    if backend == "sqlite":
        pytest.skip("one writer on SQLite")
    queue.submit("a", "t")
    queue.submit("b", "t")
    ta = queue.poll(alive_time=600)
    tb = queue.poll(alive_time=600)
    clock.advance(GAP + 10)
    t0 = clock.now()
    a_wrote, a_go = threading.Event(), threading.Event()

    def a_fn(tx):
        tx.finish(ta)
        a_wrote.set()
        assert a_go.wait(30)

    def b_fn(tx):
        assert a_wrote.wait(30)
        tx.finish(tb)

    th = threading.Thread(target=lambda: queue.transaction(a_fn, now=t0))
    th.start()
    try:
        queue.transaction(b_fn, now=t0 - GAP + 0.5)  # started 59.5 s before A, commits after A wrote
        queue.roll_up_stats(now=t0 + 1)  # both transactions still within the gap
    finally:
        a_go.set()
        th.join(60)
    clock.set(t0 + 10 * GAP)
    totals = _totals(queue, clock)
    assert _counts(totals[("default", "t")]) == (2, 2, 0, 0, 0)
