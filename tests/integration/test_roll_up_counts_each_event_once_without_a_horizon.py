"""The statistics roll-up counts each event exactly once, with no horizon. Passed-over ids evicted
by MAX_GAPS or by event_gap_timeout, an id jump (a v5 table upgraded after its old events were
purged), and a roll-up racing a delete."""

from __future__ import annotations

import threading
import time
import tracemalloc

import pytest
import sqlalchemy as sa
from conftest import downgrade

GAP = 60.0


def _started(q, clock):
    st = q.statistics(since=clock.now() - 7 * 3600, until=clock.now() + 3600)
    tally = st.totals().get(("default", "t"))
    return 0 if tally is None else tally.started


def _ended_event(q, task_id: int, key: str, at: float) -> dict:
    """The end of an attempt, carrying its claim (what counts a task started)."""
    return {
        "task_id": task_id,
        "key": key,
        "queue": "default",
        "type": "t",
        "kind": "finished",
        "at": at,
        "attempt": 1,
        "owner": "other:1",
        "outcome": "success",
        "waited": 0.0,
        "ran": 0.0,
        "tracked": 0,
    }


@pytest.fixture
def server(backend):
    if backend == "sqlite":
        pytest.skip("an event held uncommitted while the roll-up runs needs a second writer")
    return backend


@pytest.mark.parametrize("rolled_back", [10, 10_001], ids=["control", "max_gaps_plus_1"])
def test_more_than_max_gaps_passed_over_forgets_an_event_still_in_flight(server, queue, clock, db_url, rolled_back):
    """A transaction holds event X uncommitted; a later bulk transaction of MAX_GAPS + 1 events rolls
    back (ids consumed on MariaDB and PostgreSQL alike); a task is claimed. The roll-up passes over X
    and the rolled-back ids and keeps only the newest MAX_GAPS: X is forgotten at once (no timeout
    passed), and when it commits a second later it is never counted."""
    queue.submit("a", "t")
    queue.submit("x", "t")
    queue.roll_up_stats()
    x_id = queue.store.task_get("x")["id"]
    e = queue.store.events_t
    eng = sa.create_engine(db_url)
    try:
        held = eng.connect()
        tx = held.begin()
        held.execute(sa.insert(e), [_ended_event(queue, x_id, "x", clock.now())])  # in flight
        with eng.connect() as other:
            with other.begin() as bulk:
                rows = [_ended_event(queue, 10**9, "gone", clock.now()) for _ in range(rolled_back)]
                other.execute(sa.insert(e), rows)
                bulk.rollback()
        queue.poll(alive_time=60).finish()  # its event commits after them
        queue.roll_up_stats()
        clock.advance(1)
        tx.commit()
        held.close()
    finally:
        eng.dispose()
    assert _started(queue, clock) == 2, "the event of x, passed over 1 s before it committed, was never counted"


def test_rolling_up_a_v5_table_whose_old_events_were_purged_does_not_list_every_purged_id(queue, clock, backend):
    """A version-5 table has been running for months: its event ids are in the millions, the old
    events purged. After the upgrade the position is 0, and the first roll-up computes
    ``passed_over(0, ids)``: a Python list (and then a dict, and a sorted list of pairs) of every
    purged id, only to keep the newest MAX_GAPS of them. At 1,000,000 purged ids that is ~140 MiB
    and seconds; a real table's 10**8 or more cannot be rolled up at all (every worker's chore dies)."""
    if backend != "sqlite":
        pytest.skip("one backend is enough: the cost is in Python")
    queue.submit("a", "t")
    task = queue.poll(alive_time=60)
    e = queue.store.events_t
    jump = 1_000_000
    assert task is not None
    a_id = queue.store.task_get("a")["id"]
    queue.db.run(lambda c: c.execute(sa.insert(e), [{**_ended_event(queue, a_id, "a", clock.now()), "id": jump}]))
    downgrade(queue.store, (), 5)
    queue.init()  # the upgrade: position 0
    tracemalloc.start()
    started = time.monotonic()
    try:
        queue.roll_up_stats()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    assert peak < 50 * 2**20, f"the first roll-up after the upgrade peaked at {peak / 2**20:.0f} MiB ({took:.1f} s)"


def test_a_roll_up_and_a_cleanup_interleaved_count_each_event_once(server, queue, clock):
    """The roller holds the position mid-transaction (paused in _write_gaps); a cleanup purges tasks whose
    events the roller is counting, and one whose events came after the roller's read. Once both
    committed every event is counted exactly once."""
    for k in ("a", "b"):
        queue.submit(k, "t")
        queue.poll(alive_time=60).finish(retention_time=1)
    clock.advance(5)
    store = queue.store
    real_write = store.stats._write_gaps
    in_write, go = threading.Event(), threading.Event()

    def paused_write(*args, **kw):
        in_write.set()
        assert go.wait(30)
        return real_write(*args, **kw)

    store.stats._write_gaps = paused_write
    errors = []

    def roll():
        try:
            queue.roll_up_stats()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    roller = threading.Thread(target=roll)
    roller.start()
    assert in_write.wait(30)
    store.stats._write_gaps = real_write
    queue.submit("c", "t")
    queue.poll(alive_time=60).finish(retention_time=1)  # after the roller's read
    clock.advance(5)
    cleaner = threading.Thread(target=lambda: errors.append(queue.cleanup()))
    cleaner.start()
    time.sleep(0.5)  # the cleanup waits for the position's lock
    go.set()
    roller.join(30)
    cleaner.join(30)
    assert not roller.is_alive() and not cleaner.is_alive()
    assert 3 in errors, errors
    tally = queue.statistics(since=clock.now() - 3600, until=clock.now() + 60).totals()[("default", "t")]
    assert (tally.started, tally.succeeded) == (3, 3)


def _corrupt_all_time_row(q):
    s = q.store.stats_t
    q.db.run(lambda c: c.execute(sa.update(s).where(s.c.span == 0).values(wait_counts="[oops")))


@pytest.mark.parametrize("path", ["cleanup", "retry", "key_reuse"])
def test_a_broken_statistics_row_never_stops_a_purge_a_retry_or_a_submit(queue, clock, path):
    """Each delete of events now adds the uncounted ones to ``<table>_stats`` in its own
    transaction, reading the bucket rows it adds to (_tally raises CorruptRowError on a row pq never
    writes). One hand-edited (or otherwise broken) statistics row then fails the purge (cleanup
    chore: finished tasks are never purged again), a retry past 60 events (the worker cannot settle
    the task) and the submission of an expired key: the statistics' problem stops the queue's core
    transitions, not only the statistics."""
    queue.submit("seed", "t")
    queue.poll(alive_time=60).finish(retention_time=1)
    queue.roll_up_stats()
    _corrupt_all_time_row(queue)
    if path == "cleanup":
        queue.submit("a", "t")
        queue.poll(alive_time=60).finish(retention_time=1)
        clock.advance(5)
        assert queue.cleanup() == 2
    elif path == "retry":
        queue.submit("r", "t")
        for _ in range(35):  # a claimed and a retried event each: past 60 the retry trims
            task = queue.poll(alive_time=60)
            task.retry(retry_wait=0)
        assert len(queue.history("r")) <= 60
    else:
        queue.submit("b", "t")
        queue.poll(alive_time=60).finish(retention_time=1)  # its events not rolled up yet
        clock.advance(5)  # its retention ended: a submission of b purges it first
        assert queue.submit("b", "t")
