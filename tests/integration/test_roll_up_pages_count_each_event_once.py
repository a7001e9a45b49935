"""The roll-up's page (``store/stats.py``: ``_next_page``
counts a page whose ids follow one another with one ``count``/``max`` statement, then groups
the range ``(after + 1, last)``; a page with a hole is read again id by id). Every event must be
counted exactly once across pages, whatever commits, rolls back or is deleted between the
page's statements and the grouped count; and a position row edited by hand must not lose or
double-count events, nor stop the roll-up's callers (statistics reads, purges)."""

from __future__ import annotations

import random
import threading
import time

import pytest
import sqlalchemy as sa
from test_sql_roll_up_matches_the_python_tally import T0, assert_tallies_equal, ev, insert_events, stats
from test_stats_page import gaps, position

from queue_core.errors import CorruptRowError
from queue_core.rules.statistics import tally_events
from queue_core.worker.periodic import Chore


def _set_position(queue, value: str) -> None:
    m = queue.store.meta
    queue.db.run(lambda c: c.execute(sa.update(m).where(m.c.name == "stats_after").values(value=value)))


def _after_page(store, action):
    """Run ``action(page)`` once, right after the first ``_next_page`` returns (before the
    grouped count of what it found)."""
    original = store.stats._next_page
    fired = {"n": 0}

    def next_page(conn, after, batch):
        page = original(conn, after, batch)
        if not fired["n"]:
            fired["n"] += 1
            action(page)
        return page

    store.stats._next_page = next_page
    return fired


def _between_count_and_ids(store, action):
    """Run ``action()`` once, between the page's count/max statement and its read of the ids
    (the path of a page with a hole)."""
    original_execute = None
    fired = {"n": 0}

    def wrap(conn):
        nonlocal original_execute
        original_execute = conn.execute

        def execute(stmt, *a, **kw):
            result = original_execute(stmt, *a, **kw)
            text = str(stmt)
            if not fired["n"] and "count(*)" in text and "max(" in text:
                fired["n"] += 1
                rows = result.all()
                action()
                return _Rows(rows)
            return result

        conn.execute = execute

    return wrap, fired


class _Rows:
    def __init__(self, rows):
        self._rows = rows

    def one(self):
        [row] = self._rows
        return row


def _servers_only(backend):
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: nothing commits during a roll-up")


def test_a_contiguous_page_then_a_commit_and_a_waiting_delete_before_its_grouped_count(queue, backend, db_url):
    """The page 1..3 is contiguous (counted in the database); before its grouped count, event 4
    commits and a purge of event 2 starts (it waits for the position the roll-up holds). Each of
    1..4 counted once: 1..3 by this roll-up, 4 by the next; 2 not again by the purge."""
    _servers_only(backend)
    store, e = queue.store, queue.store.events_t
    ids = insert_events(queue, [ev(i) for i in (1, 2, 3)])
    engine = sa.create_engine(db_url)
    done = threading.Event()

    def action(page):
        assert page.runs == [(ids[0], ids[-1])] and page.passed == []
        with engine.begin() as c2:
            c2.execute(sa.insert(e).values(**ev(4)))

        def delete():
            store.db.run(
                lambda c: (
                    store.stats.count_before_delete(c, e.c.id == ids[1]),
                    c.execute(sa.delete(e).where(e.c.id == ids[1])),
                )
            )
            done.set()

        threading.Thread(target=delete, daemon=True).start()
        assert not done.wait(0.5)

    fired = _after_page(store, action)
    try:
        n1 = store.stats_roll_up(now=T0, gap_timeout=60.0)
    finally:
        del store.stats._next_page
        engine.dispose()
    assert fired["n"] == 1 and done.wait(30)
    n2 = store.stats_roll_up(now=T0 + 1, gap_timeout=60.0)
    assert (n1, n2) == (3, 1)
    assert gaps(queue) == []
    assert_tallies_equal(stats(queue), tally_events([ev(i) for i in (1, 2, 3, 4)]))


def test_a_hole_that_commits_between_the_count_and_the_read_of_the_ids(queue, backend, db_url):
    """Events 1, (2 uncommitted), 3: the count/max finds a hole; before the ids are read, 2
    commits and 4 commits. Whatever the read then sees (READ COMMITTED: all four; MariaDB's
    REPEATABLE READ: the snapshot), each event is counted once over two roll-ups."""
    _servers_only(backend)
    store, e = queue.store, queue.store.events_t
    insert_events(queue, [ev(1)])
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as open_conn:
            tx = open_conn.begin()
            open_conn.execute(sa.insert(e).values(**ev(2)))
            insert_events(queue, [ev(3)])

            def action():
                tx.commit()
                with engine.begin() as c2:
                    c2.execute(sa.insert(e).values(**ev(4)))

            wrap, fired = _between_count_and_ids(store, action)
            original_roll = store.stats._roll_batch

            def roll(conn, *a):
                wrap(conn)
                try:
                    return original_roll(conn, *a)
                finally:
                    del conn.execute

            store.stats._roll_batch = roll
            try:
                n1 = store.stats_roll_up(now=T0, gap_timeout=60.0)
            finally:
                del store.stats._roll_batch
        n2 = store.stats_roll_up(now=T0 + 1, gap_timeout=60.0)
        n3 = store.stats_roll_up(now=T0 + 2, gap_timeout=60.0)
    finally:
        engine.dispose()
    assert fired["n"] == 1
    assert n1 + n2 + n3 == 4
    assert_tallies_equal(stats(queue), tally_events([ev(i) for i in (1, 2, 3, 4)]))


@pytest.mark.parametrize("batch", [1, 2, 7, 2000])
def test_writers_committing_and_rolling_back_during_repeated_roll_ups_count_each_event_once(
    queue, backend, db_url, batch
):
    """Four writers insert events in transactions that stay open a while (ids handed out, not
    committed), a third of them rolled back (holes for ever), while a roller rolls up again and
    again with small pages. At the end every committed event is counted once."""
    _servers_only(backend)
    e = queue.store.events_t
    engine = sa.create_engine(db_url, pool_size=6)
    committed: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(w):
        rnd = random.Random(w)
        try:
            for j in range(25):
                rows = [
                    ev(1000 * w + 10 * j + k, at=T0 + rnd.randrange(600), waited=rnd.random(), ran=rnd.random())
                    for k in range(rnd.randrange(1, 4))
                ]
                with engine.connect() as c:
                    tx = c.begin()
                    c.execute(sa.insert(e), rows)
                    time.sleep(rnd.random() * 0.02)
                    if rnd.random() < 0.33:
                        tx.rollback()
                    else:
                        tx.commit()
                        with lock:
                            committed.extend(rows)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def roller():
        try:
            while not stop.is_set():
                queue.store.stats_roll_up(now=T0, gap_timeout=3600.0, batch=batch)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    r = threading.Thread(target=roller)
    r.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    r.join(120)
    engine.dispose()
    assert errors == []
    queue.store.stats_roll_up(now=T0 + 1, gap_timeout=3600.0, batch=batch)
    assert_tallies_equal(stats(queue), tally_events(committed))
    # the holes of the rolled-back transactions are given up once past the gap timeout
    queue.store.stats_roll_up(now=T0 + 7200, gap_timeout=3600.0, batch=batch)
    assert gaps(queue) == []
    assert_tallies_equal(stats(queue), tally_events(committed))


def test_a_position_set_beyond_the_last_id_counts_nothing_until_ids_pass_it(queue):
    ids = insert_events(queue, [ev(i) for i in range(3)])
    _set_position(queue, str(ids[-1] + 5))
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0) == 0
    assert position(queue) == ids[-1] + 5 and gaps(queue) == []
    more = insert_events(queue, [ev(i) for i in range(3, 12)])
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0) == len([i for i in more if i > ids[-1] + 5])


def test_a_negative_position_counts_each_event_once_and_its_gap_expires(queue):
    events = [ev(i, at=T0 + i) for i in range(5)]
    ids = insert_events(queue, events)
    _set_position(queue, "-7")
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0, batch=2) == 5
    assert queue.store.stats_roll_up(now=T0 + 120, gap_timeout=60.0, batch=2) == 0
    assert gaps(queue) == [] and position(queue) == ids[-1]
    assert_tallies_equal(stats(queue), tally_events(events))


@pytest.mark.parametrize("value", ["abc", "5.0", "", "1e3"])
def test_a_position_edited_to_what_pq_never_writes_does_not_stop_the_purge(queue, clock, value):
    """A statistics row edited by hand never stops a delete (``count_before_delete``'s own
    promise: "those counts are left out, and said in the log"); the position row edited to a
    non-integer text raises ValueError from ``int(after)`` in ``count_before_delete``: every
    delete of events (the purge of finished tasks, a forget, a history trim) fails."""
    queue.submit("k", "t", now=clock.now())
    queue.poll(now=clock.now()).finish(now=clock.now())
    _set_position(queue, value)
    assert queue.cleanup(now=clock.now() + 10**7) == 1  # the purge of the finished task and its events


@pytest.mark.parametrize("value", ["abc", "5.0", "", "1e3"])
def test_a_position_edited_to_what_pq_never_writes_does_not_stop_statistics_reads(queue, clock, value):
    """The same in ``_roll_batch``: ``Queue.statistics()`` and every worker's roll-up chore raised
    ValueError (no TaskError: ``Chore.run_if_due`` did not catch it, the processor's loop ended
    with it). Now refused as a corrupt statistics row is: a CorruptRowError naming the row and
    what to write there; a worker's chore logs it and goes on; nothing counted meanwhile."""
    queue.submit("k", "t", now=clock.now())
    queue.poll(now=clock.now()).finish(now=clock.now())
    _set_position(queue, value)
    with pytest.raises(CorruptRowError, match=r"'stats_after' of \w+_meta holds .* set it to the largest id"):
        queue.statistics(now=clock.now() + 1)
    chore = Chore("statistics roll-up", 10.0, lambda: queue.roll_up_stats(now=clock.now() + 2))
    chore.due = 0.0  # due now (its first turn is at a random point of its period)
    chore.run_if_due()  # logged once, not raised: the processor's loop goes on
    assert chore.failed is not None and "stats_after" in chore.failed
    assert stats(queue) == {}
    _set_position(queue, "0")  # repaired: what was not counted is counted from there
    assert queue.roll_up_stats(now=clock.now() + 3) >= 1
