"""Statistics of tasks on SQLite, MariaDB and PostgreSQL: what the roll-up counts, and
the interleavings that could count an event twice or never — two rollers at once, a roll-up whose
COMMIT acknowledgement is lost, an event whose id is passed over because its transaction is still
open, a purge or a key taken again or a history trimmed before any roll-up, a cleanup racing a
roller, a row edited by hand."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import downgrade
from workflow_faults.fault_support import ack_lost_once

import queue_core
from queue_core import CorruptRowError, ValidationError
from queue_core.rules.statistics import HOUR, MINUTE

GAP = 60.0  # event_gap_timeout's default: how long a passed-over id is looked for


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


def test_the_roll_up_counts_each_event_once(queue, clock):
    _work(queue, clock)
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


@pytest.mark.parametrize(
    "bad",
    [
        {"queue": "no spaces"},
        {"type": "x" * 300},
        {"since": "yesterday"},
        {"since": -1},
        {"until": float("nan")},
        {"type": "\x00"},
    ],
)
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
    """An id handed out to a transaction still open while a later id commits: the roll-up counts
    the later one and looks for the passed-over id again until it commits (within
    event_gap_timeout), whatever times the two events carry."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: no later event commits while a transaction is open")
    store = queue.store
    queue.submit("slow", "t")
    queue.submit("fast", "t")
    e = store.events_t
    row = {
        "key": "slow",
        "queue": "default",
        "type": "t",
        "kind": "finished",
        "attempt": 1,
        "outcome": "success",
        "waited": 1.0,
        "ran": 0.5,
        "tracked": 0,
    }  # an attempt's end, carrying its claim
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as open_conn:
            tx = open_conn.begin()
            open_conn.execute(sa.insert(e).values(task_id=1, at=clock.now() + 30, **row))
            queue.poll(alive_time=60).finish()  # a later event commits, with an earlier time
            assert queue.roll_up_stats() == 1  # that one; the open one's id is passed over
            clock.advance(GAP / 2)
            assert queue.roll_up_stats() == 0
            tx.commit()
    finally:
        engine.dispose()
    assert queue.roll_up_stats() == 1  # found at last
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 2


def test_cleanup_counts_the_events_of_the_tasks_it_purges(queue, clock):
    _work(queue, clock)
    clock.advance(301)  # past retention_time (300 s); no roll-up ran
    assert queue.cleanup() == 4  # four tasks, one of them started twice
    assert list(queue.list()) == []
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 5


def test_a_retention_given_per_call_and_a_purge_at_its_exact_end_count_everything(queue, clock):
    queue.submit("k", "t")
    queue.poll(alive_time=60).finish(retention_time=1)
    clock.advance(1)  # the purge time itself
    assert queue.cleanup() == 1
    totals, _ = _total(queue)
    assert (totals[("default", "t")].started, totals[("default", "t")].succeeded) == (1, 1)


def test_a_key_taken_again_after_retention_keeps_the_old_tasks_counts(queue, clock):
    queue.submit("k", "t")
    queue.poll(alive_time=60).finish()
    clock.advance(301)
    assert queue.submit("k", "t")  # the old row and its events deleted, counted first
    totals, _ = _total(queue)
    assert (totals[("default", "t")].started, totals[("default", "t")].succeeded) == (1, 1)


def test_a_trimmed_history_keeps_its_counts(queue, clock):
    queue.submit("k", "t")
    for _ in range(40):
        queue.poll(alive_time=60).retry(retry_wait=0)
    assert len(queue.history("k")) < 81  # trimmed: first and last events kept
    queue.roll_up_stats()  # the events kept; the trimmed ones were counted as they went
    totals, _ = _total(queue)
    assert (totals[("default", "t")].started, totals[("default", "t")].retried) == (40, 40)


def test_a_cleanup_racing_a_roller_loses_nothing(queue, clock, db_url, table_name, backend):
    """A roller holds the position's lock, the events not read yet, while a cleanup purges: the
    cleanup waits for it, then counts what is still uncounted before it deletes."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: the cleanup waits for the roller's whole transaction")
    _work(queue, clock)
    clock.advance(301)
    m = queue.store.meta
    engine = sa.create_engine(db_url)
    done = threading.Event()
    try:
        with engine.connect() as roller:
            tx = roller.begin()
            roller.execute(sa.select(m.c.value).where(m.c.name == "stats_after").with_for_update())
            cleaner = threading.Thread(target=lambda: (queue.cleanup(), done.set()))
            cleaner.start()
            assert not done.wait(1.0)  # the purge waits for the position
            tx.rollback()
            cleaner.join(30)
    finally:
        engine.dispose()
    assert done.is_set()
    totals, _ = _total(queue)
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
    queue.poll(alive_time=60).finish()  # its end (carrying its claim) is an event to add
    clock.advance(GAP + 1)
    with pytest.raises(CorruptRowError):  # the roll-up adds to that row: refused, nothing written
        queue.roll_up_stats()
    after = queue.db.run(
        lambda c: c.execute(
            sa.select(queue.store.meta.c.value).where(queue.store.meta.c.name == "stats_after")
        ).scalar()
    )
    assert int(after) < queue.db.run(lambda c: c.execute(sa.select(sa.func.max(queue.store.events_t.c.id))).scalar())


def test_init_upgrades_a_version_5_table_and_counts_its_retained_events(queue, clock):
    _work(queue, clock)
    downgrade(queue.store, (), 5)
    assert queue.store.tables_version() == 5
    queue.init()
    assert queue.store.tables_version() == 10
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    totals, _ = _total(queue)
    assert totals[("default", "t")].started == 5
