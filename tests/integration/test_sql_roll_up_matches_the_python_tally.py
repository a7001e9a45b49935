"""The roll-up counted in SQL (``store/stats.py``): the database's
grouping must equal ``statistics.group_of``/``tally_events`` for any values a column holds, on all
three databases, and every event is counted exactly once across gaps, races and chunking."""

from __future__ import annotations

import math
import threading

import pytest
import sqlalchemy as sa
from test_stats_grouping import as_dict

from queue_core.rules import statistics
from queue_core.rules.statistics import group_of, tally_events

T0 = 1_700_000_040.0


def ev(i, **kw) -> dict:
    base = {
        "task_id": i,
        "key": f"k{i}",
        "queue": "q",
        "type": "t",
        "kind": "finished",
        "at": T0,
        "attempt": 1,
        "owner": None,
        "outcome": "success",
        "detail": None,
        "waited": 1.0,
        "ran": 0.5,
        "due_at": None,
        "tracked": 0,
    }
    return base | kw


def insert_events(queue, events) -> list[int]:
    store = queue.store
    e = store.events_t

    def work(c):
        before = c.execute(sa.select(sa.func.max(e.c.id))).scalar() or 0
        c.execute(sa.insert(e), events)
        return [i for (i,) in c.execute(sa.select(e.c.id).where(e.c.id > before).order_by(e.c.id))]

    return queue.db.run(work)


def stats(queue) -> dict:
    return {key: tally for span in statistics.SPANS for key, tally in queue.store.stats_rows(span, -1e300, 1e300)}


def assert_tallies_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, tally in want.items():
        mine = got[key]
        assert [getattr(mine, n) for n in statistics.COUNTS] == [getattr(tally, n) for n in statistics.COUNTS], key
        assert (mine.wait.counts, mine.run.counts) == (tally.wait.counts, tally.run.counts), key
        assert mine.wait.total == pytest.approx(tally.wait.total, rel=1e-12, abs=1e-300), key
        assert mine.run.total == pytest.approx(tally.run.total, rel=1e-12, abs=1e-300), key


# -- guarantee 7: the SQL floor --------------------------------------------------------------------
FLOOR_VALUES = [
    0.5,
    -0.5,
    -0.0,
    5e-324,
    -5e-324,
    2.0**53 - 0.5,
    -(2.0**53) + 0.5,
    2.0**62,
    -(2.0**62) - 1024.0,
    2.0**63,
    -(2.0**63),
    math.nextafter(-(2.0**63), -math.inf),
    1e21,
    -1e21,
    1e300,
    -1e300,
    1.7976931348623157e308,
    -1.7976931348623157e308,
]


@pytest.mark.parametrize("value", FLOOR_VALUES)
def test_the_dialect_floor_is_math_floor(queue, value):
    d = queue.db.dialect
    got = queue.db.run(lambda c: c.execute(sa.select(d.floor(sa.literal(value, sa.Double())))).scalar())
    assert got == math.floor(value), (value, got)


def test_groups_of_huge_times_and_durations_are_the_references(queue):
    """Times and durations a hand edit can leave (the columns hold any double): the minute of
    ``at`` = 1e21 and the start ``at - ran`` of a run of 1e22 s."""
    events = [
        ev(1, at=1e21),
        ev(2, at=6e20, kind="claimed", outcome=None, ran=None),
        ev(3, ran=1e22),  # finished, carrying its claim: the attempt started 1e22 s before T0
        ev(4, ran=-1e22),
        ev(5, at=1.7976931348623157e308, kind="retried", outcome=None, waited=None),
    ]
    insert_events(queue, events)
    store = queue.store
    got = as_dict(queue.db.run(lambda c: store.stats._groups_where(c, sa.true())))
    assert got == as_dict(group_of(e) for e in events)


def test_a_roll_up_of_a_run_of_1e22_seconds_counts_its_start_in_the_references_minute(queue):
    events = [ev(1, ran=1e22), ev(2, ran=-1e22)]
    insert_events(queue, events)
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0) == 2
    assert_tallies_equal(stats(queue), tally_events(events))


# -- NaN (PostgreSQL stores it) --------------------------------------------------------------------
def test_a_nan_wait_or_run_counts_as_the_reference_and_never_blocks_later_roll_ups(queue, backend):
    """A hand-edited NaN wait (a claim) and run (a retry): the reference counts each in bucket 0
    with 0 s (``max(0.0, nan)`` is 0.0); the statistics rows must stay readable and later
    roll-ups must go on."""
    if backend != "postgres":
        pytest.skip("only PostgreSQL stores NaN in a DOUBLE column (SQLite: NULL; MySQL refuses it)")
    nan = float("nan")
    events = [
        ev(1, kind="claimed", outcome=None, waited=nan, ran=None),
        ev(2, kind="retried", outcome=None, waited=None, ran=nan),
    ]
    insert_events(queue, events)
    queue.store.stats_roll_up(now=T0, gap_timeout=60.0)
    assert_tallies_equal(stats(queue), tally_events(events))
    later = [ev(3)]
    insert_events(queue, later)
    assert queue.store.stats_roll_up(now=T0 + 1, gap_timeout=60.0) == 1
    assert_tallies_equal(stats(queue), tally_events(events + later))


# -- MySQL collations: kind and outcome are plain (case-folding, space-padding) strings ---------
@pytest.mark.parametrize("other", ["SUCCESS", "Success", "success "])
def test_outcomes_that_differ_only_in_case_or_trailing_space_are_separate_groups(queue, other):
    """A hand-edited outcome the tally does not count ('SUCCESS') must not merge into the group
    of one it counts ('success'): GROUP BY on MySQL compares by the column's collation."""
    events = [ev(1), ev(2, outcome=other), ev(3, outcome=other)]
    insert_events(queue, events)
    store = queue.store
    got = as_dict(queue.db.run(lambda c: store.stats._groups_where(c, sa.true())))
    assert got == as_dict(group_of(e) for e in events)
    assert store.stats_roll_up(now=T0, gap_timeout=60.0) == 3
    assert_tallies_equal(stats(queue), tally_events(events))


def test_kinds_that_differ_only_in_case_are_separate_groups(queue):
    events = [ev(1, kind="FINISHED"), ev(2, kind="FINISHED"), ev(3, kind="finished")]
    insert_events(queue, events)
    store = queue.store
    assert store.stats_roll_up(now=T0, gap_timeout=60.0) == 3
    assert_tallies_equal(stats(queue), tally_events(events))


# -- SQLite: text in a REAL column -----------------------------------------------------------------
def test_text_in_a_real_column_is_counted_once_and_blocks_nothing(queue, backend):
    if backend != "sqlite":
        pytest.skip("only SQLite keeps text in a REAL column")
    store, e = queue.store, queue.store.events_t
    events = [ev(1), ev(2), ev(3, kind="claimed", outcome=None, ran=None)]
    ids = insert_events(queue, events)
    name = e.name
    queue.db.run(lambda c: c.exec_driver_sql(f"UPDATE {name} SET waited = 'abc' WHERE id = {ids[2]}"))
    queue.db.run(lambda c: c.exec_driver_sql(f"UPDATE {name} SET ran = 'x1' WHERE id = {ids[1]}"))
    assert store.stats_roll_up(now=T0, gap_timeout=60.0) == 3
    assert store.stats_roll_up(now=T0, gap_timeout=60.0) == 0
    [(_, total)] = store.stats_totals()
    assert (total.started, total.succeeded) == (3, 2)
    assert total.wait.count == 3 and total.run.count == 2
    # (the reference cannot place the text: float('abc') raises; the database puts it in the last
    # bucket with 0 s — not asserted)


# -- guarantee 5: exactly once --------------------------------------------------------------------
def test_hundreds_of_gap_ranges_are_each_counted_once(queue):
    """600 events rolled past with every other id passed over (300 one-id gaps: the reads are cut
    in runs of 200): the next roll-up counts those 300, once; a delete of some first counts them."""
    store = queue.store
    events = [ev(i, at=T0 + i, waited=0.001 * i, ran=0.5 + i) for i in range(600)]
    ids = insert_events(queue, events)
    m, g = store.meta, store.gaps_t
    gapped = ids[::2]

    def setup(c):
        c.execute(sa.update(m).where(m.c.name == "stats_after").values(value=str(ids[-1])))
        c.execute(sa.insert(g), [{"first_id": i, "last_id": i, "missed_at": T0} for i in gapped])

    queue.db.run(setup)
    gone = gapped[:50] + ids[1::2][:10]  # deleted before the roll-up: the gapped ones counted by the delete
    queue.db.run(
        lambda c: (
            store.stats.count_before_delete(c, store.events_t.c.id.in_(gone))
            or c.execute(sa.delete(store.events_t).where(store.events_t.c.id.in_(gone)))
        )
    )
    assert store.stats_roll_up(now=T0 + 1, gap_timeout=60.0) == len(gapped) - 50
    assert store.stats_roll_up(now=T0 + 2, gap_timeout=60.0) == 0
    counted = [events[k] for k in range(0, 600, 2)]
    assert_tallies_equal(stats(queue), tally_events(counted))
    # the deleted gapped ids never commit: awaited until the gap timeout, then dropped
    assert store.stats_roll_up(now=T0 + 1000, gap_timeout=60.0) == 0
    assert queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(g)).scalar()) == 0
    assert_tallies_equal(stats(queue), tally_events(counted))


def test_batch_boundary_exactly(queue):
    store = queue.store
    events = [ev(i, at=T0 + i) for i in range(10)]
    insert_events(queue, events)
    assert store.stats_roll_up(now=T0, gap_timeout=60.0, batch=10) == 10
    assert store.stats_roll_up(now=T0, gap_timeout=60.0, batch=5) == 0
    more = [ev(i, at=T0 + i) for i in range(10, 15)]
    insert_events(queue, more)
    assert store.stats_roll_up(now=T0, gap_timeout=60.0, batch=5) == 5
    assert_tallies_equal(stats(queue), tally_events(events + more))


def test_events_committing_and_a_delete_waiting_during_the_grouped_count(queue, backend, db_url):
    """Between the roll-up's read of the ids and its grouped count: the event of an id it passed
    over commits, a new one commits, and a delete of an event it read starts (and waits)."""
    if backend == "sqlite":
        pytest.skip("SQLite has one writer")
    store = queue.store
    e = store.events_t
    first = insert_events(queue, [ev(1)])
    engine = sa.create_engine(db_url)
    deleter_done = threading.Event()
    try:
        with engine.connect() as open_conn:
            tx = open_conn.begin()
            open_conn.execute(sa.insert(e).values(**ev(2)))  # an id handed out, not committed
            later = insert_events(queue, [ev(3)])
            original = store.stats._groups
            fired = {"n": 0}

            def groups(conn, ranges):
                if not fired["n"]:
                    fired["n"] += 1
                    tx.commit()  # the passed-over id commits now
                    with engine.begin() as c2:
                        c2.execute(sa.insert(e).values(**ev(4)))  # and a new one

                    def delete():
                        store.db.run(
                            lambda c: (
                                store.stats.count_before_delete(c, e.c.id.in_(later)),
                                c.execute(sa.delete(e).where(e.c.id.in_(later))),
                            )
                        )
                        deleter_done.set()

                    threading.Thread(target=delete, daemon=True).start()
                    assert not deleter_done.wait(0.5)  # it waits for the position
                return original(conn, ranges)

            store.stats._groups = groups
            try:
                n1 = store.stats_roll_up(now=T0, gap_timeout=60.0)
            finally:
                del store.stats._groups
        assert deleter_done.wait(30)
        n2 = store.stats_roll_up(now=T0 + 1, gap_timeout=60.0)
        assert (n1, n2) == (2, 2)  # 1 and 3 in the first; 2 (its gap) and 4 in the second; 3 deleted once counted
    finally:
        engine.dispose()
    assert first
    want = tally_events([ev(1), ev(2), ev(3), ev(4)])
    assert_tallies_equal(stats(queue), want)


# -- arithmetic the database refuses (PostgreSQL raises on float underflow and overflow) -----------
def test_an_event_at_a_subnormal_time_is_rolled_up_and_its_task_purged(queue):
    """check_time accepts any time in [0, MAX_TIME], 5e-324 included: the roll-up (and the count
    before a delete) divides the event time by 60 in SQL, which PostgreSQL refuses ('value out of
    range: underflow') where Python gives 0.0 — roll-ups and purges would fail for ever."""
    queue.submit("purged", "t", now=0.0)
    queue.submit("rolled", "t", now=0.0)
    held = queue.poll_multi(2, alive_time=60, now=5e-324)
    by_key = {h.key: h for h in held}
    by_key["purged"].finish(now=5e-324, retention_time=1)
    by_key["rolled"].finish(now=1e-322)
    events = queue.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(queue.store.events_t))])
    assert sorted(e["at"] for e in events) == [5e-324, 1e-322]
    assert queue.cleanup(now=100.0) == 1  # counts the purged task's event before deleting it
    assert queue.roll_up_stats(now=100.0) == 1
    assert_tallies_equal(stats(queue), tally_events(events))


def test_a_delete_of_uncounted_events_is_not_stopped_by_the_sum_of_their_durations(queue):
    """Two hand-edited waits of 1e308 in one group: their sum overflows. The reference sums to inf
    in Python (the row is then refused as edited by hand, and left out: the delete goes on);
    a delete must never fail because of what its events hold."""
    ids = insert_events(queue, [ev(1, waited=1e308), ev(2, waited=1e308), ev(3)])
    store, e = queue.store, queue.store.events_t

    def delete(c):
        store.stats.count_before_delete(c, e.c.id.in_(ids))
        c.execute(sa.delete(e).where(e.c.id.in_(ids)))

    queue.db.run(delete)
    assert queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(e)).scalar()) == 0
