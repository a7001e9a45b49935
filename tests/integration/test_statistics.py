"""Statistics of tasks (issue 15) on SQLite, MariaDB and PostgreSQL: what the roll-up counts, and
the interleavings that could count an event twice or never — two rollers at once, a roll-up whose
COMMIT acknowledgement is lost, an event whose id is passed over because its transaction is still
open, a purge of tasks whose events were not counted yet, a row edited by hand."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import downgrade
from workflow_faults.fault_support import ack_lost_once

import queue_core
from queue_core import CorruptRowError, ValidationError
from queue_core.statistics import HOUR, MINUTE

GAP = 60.0  # event_gap_timeout's default: the roll-up's horizon


def _work(queue, clock, *, queue_name="default", n=4):
    """``n`` tasks of type t: claimed after waiting 2 s; one succeeds after 1.5 s, one fails, one
    is retried and succeeds at its second attempt, the rest succeed."""
    for i in range(n):
        queue.submit(f"{queue_name}-{i}", "t", queue=queue_name)
    clock.advance(2)
    tasks = queue.poll_multi(n, alive_time=60, queues=queue_name)
    clock.advance(1.5)
    tasks[0].finish()
    tasks[1].finish(outcome="failure")
    tasks[2].retry(retry_wait=0)
    for t in tasks[3:]:
        t.finish()
    again = queue.poll(alive_time=60, queues=queue_name)
    again.finish()


def _total(queue, **filters):
    st = queue.statistics(since=queue.now() - 3600, roll_up=False, **filters)
    totals = st.totals()
    return totals, st


def test_the_roll_up_counts_each_event_once_after_the_horizon(queue, clock):
    _work(queue, clock)
    assert queue.roll_up_stats() == 0  # every event is newer than the horizon
    clock.advance(GAP + 1)
    assert queue.roll_up_stats() > 0
    assert queue.roll_up_stats() == 0  # nothing left
    totals, _ = _total(queue)
    tally = totals[("default", "t")]
    assert (tally.started, tally.succeeded, tally.failed, tally.cancelled, tally.retried) == (5, 3, 1, 0, 1)
    assert tally.wait.count == 5 and tally.wait.total == pytest.approx(4 * 2.0 + 0.0)
    assert tally.run.count == 5 and tally.run.total == pytest.approx(4 * 1.5 + 0.0)
    [all_time] = queue.stats_totals()
    assert all_time.span == 0 and all_time.tally.started == 5


def test_reads_filter_by_queue_and_type_and_roll_up_first(queue, clock):
    _work(queue, clock, queue_name="billing", n=4)
    _work(queue, clock, queue_name="reports", n=6)
    clock.advance(GAP + 1)
    st = queue.statistics(since=clock.now() - 3600, queue="billing")  # rolls up itself
    assert list(st.totals()) == [("billing", "t")]
    assert st.totals()[("billing", "t")].started == 5
    assert queue.statistics(since=clock.now() - 3600, type="other").buckets == ()
    assert all(b.span == MINUTE for b in st.buckets)
    assert queue.statistics(since=clock.now() - 3 * 86400).span == HOUR


@pytest.mark.parametrize("bad", [{"queue": "no spaces"}, {"type": "x" * 300}, {"since": "yesterday"},
                                 {"since": -1}, {"until": float("nan")}, {"type": "\x00"}])
def test_hostile_filters_are_typed_errors(queue, bad):
    with pytest.raises(ValidationError):
        queue.statistics(**bad)


def test_two_rollers_at_once_count_each_event_once(queue, clock, db_url, table_name):
    _work(queue, clock, n=40)
    clock.advance(GAP + 1)
    others = [queue_core.open(db_url, table_name, clock=clock) for _ in range(3)]
    try:
        barrier = threading.Barrier(len(others))
        counted: list[int] = []

        def roll(q):
            barrier.wait()
            counted.append(q.roll_up_stats())

        threads = [threading.Thread(target=roll, args=(q,)) for q in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counted.append(queue.roll_up_stats())  # whatever a skipped roller left
    finally:
        for q in others:
            q.close()
    events = queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(queue.store.events_t)).scalar())
    assert sum(counted) == events
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 41


def test_a_roll_up_whose_commit_acknowledgement_was_lost_counts_nothing_twice(queue, clock):
    _work(queue, clock)
    clock.advance(GAP + 1)
    with ack_lost_once(queue, "roll up statistics") as fired:
        queue.roll_up_stats()
    assert fired["fired"] == 1
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 5
    assert [b.tally.started for b in queue.stats_totals()] == [5]


def test_an_event_whose_transaction_is_still_open_is_counted_once_it_commits(queue, clock, backend, db_url):
    """An id handed out to a transaction still open while a later id commits: the roll-up must
    not move past it for good while it may still commit (within the horizon)."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: no later event commits while a transaction is open")
    store = queue.store
    queue.submit("slow", "t")
    queue.submit("fast", "t")
    e = store.events_t
    row = {"key": "slow", "queue": "default", "type": "t", "kind": "claimed", "attempt": 1, "waited": 1.0,
           "tracked": 0}
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as open_conn:
            tx = open_conn.begin()
            open_conn.execute(sa.insert(e).values(task_id=1, at=clock.now(), **row))
            assert queue.poll(alive_time=60) is not None  # a later event commits
            clock.advance(GAP / 2)
            assert queue.roll_up_stats() == 0  # inside the horizon: wait
            tx.commit()
    finally:
        engine.dispose()
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 2


def test_cleanup_counts_the_events_of_the_tasks_it_purges(queue, clock):
    _work(queue, clock)
    clock.advance(301)  # past retention_time (300 s), past the horizon
    assert queue.cleanup() == 4  # four tasks, one of them started twice
    assert list(queue.list()) == []
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 5


def test_a_retention_shorter_than_the_horizon_still_counts_before_the_purge(db_url, table_name, clock, backend):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, clock=clock, retention_time=5) as q:
        _work(q, clock)
        clock.advance(6)
        assert q.cleanup() == 4
        totals, _ = _total(q)
        assert totals[("default", "t")].started == 5


def test_old_buckets_are_pruned_and_all_time_is_kept(queue, clock):
    _work(queue, clock)
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    clock.advance(3 * 86400)  # minutes kept two days
    queue.prune_stats()
    spans = {b.span for b in queue.statistics(since=clock.now() - 4 * 86400, roll_up=False).buckets}
    assert spans == {HOUR}
    clock.advance(31 * 86400)  # hours kept stats_retention (30 days)
    queue.prune_stats()
    assert queue.statistics(since=clock.now() - 40 * 86400, roll_up=False).buckets == ()
    assert [b.tally.started for b in queue.stats_totals()] == [5]


def test_a_statistics_row_edited_by_hand_is_a_typed_error(queue, clock):
    _work(queue, clock)
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    s = queue.store.stats_t
    queue.db.run(lambda c: c.execute(sa.update(s).values(wait_counts="[1,2")))
    with pytest.raises(CorruptRowError, match="delete it"):
        queue.statistics(since=clock.now() - 3600, roll_up=False)
    queue.submit("later", "t")
    queue.poll(alive_time=60)
    clock.advance(GAP + 1)
    with pytest.raises(CorruptRowError):  # the roll-up adds to that row: refused, nothing written
        queue.roll_up_stats()
    after = queue.db.run(lambda c: c.execute(sa.select(queue.store.meta.c.value).where(
        queue.store.meta.c.name == "stats_after")).scalar())
    assert int(after) < queue.db.run(lambda c: c.execute(sa.select(sa.func.max(queue.store.events_t.c.id))).scalar())


def test_init_upgrades_a_version_5_table_and_counts_its_retained_events(queue, clock):
    _work(queue, clock)
    downgrade(queue.store, (), 5)
    assert queue.store.schema_version() == 5
    queue.init()
    assert queue.store.schema_version() == 6
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 5
