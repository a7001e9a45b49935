"""The statistics roll-up counts every event exactly once, on SQLite, MariaDB and PostgreSQL:
its groups made in the database equal the reference tally of the same rows for any values; its
pages count runs of ids without reading them and read a page with a hole id by id; no event is
lost or counted twice across gaps, evictions, id jumps, purges, races, rollbacks and positions
edited by hand."""

from __future__ import annotations

import math
import random
import threading
import time
import tracemalloc
from collections import defaultdict

import pytest
import sqlalchemy as sa
from conftest import downgrade, own_queue

from queue_core.errors import CorruptRowError
from queue_core.rules import statistics
from queue_core.rules.statistics import BOUNDS, group_of, tally_events
from queue_core.worker.periodic import Chore

# The roll-up counts events grouped in the database (``store/stats.py``): the groups must be the
# ones ``statistics.group_of`` makes of each row, on SQLite, MariaDB and PostgreSQL, for any values
# — times on and around minute boundaries, waits and runs exactly on a distribution's bounds and one
# step of a double either side, negative, zero, NULL, huge; every kind and outcome. And the buckets
# a roll-up writes equal the reference tally of the same rows (``statistics.tally_events``).


T0 = 1_700_000_040.0  # a minute's start


KINDS = [
    "claimed",
    "finished",
    "retried",
    "released",
    "expired",
    "force_finished",
    "gave_up",
    "cancelled",
    "set_aside",
    "moved",
    "cancel_requested",
]


OUTCOMES = [None, "success", "failure", "cancelled", "skipped"]


def seconds_values() -> list:
    near = [v for b in BOUNDS for v in (b, math.nextafter(b, 0.0), math.nextafter(b, math.inf))]
    return [None, None, 0.0, -0.0, -1.5, 1e-9, 5e-324, 1e9, 0.3, 2.0, 65.0, 123.456789, *near]


def random_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    times = [T0, T0 + 59.999999, T0 + 60.0, math.nextafter(T0, 0.0), T0 + 3599.5, T0 + 86_400.25, 123.0]
    values = seconds_values()
    out = []
    for i in range(n):
        at = rnd.choice(times) + rnd.choice([0.0, rnd.uniform(0, 7200)])
        out.append(
            {
                "task_id": i + 1,
                "key": f"k{i}",
                "queue": rnd.choice(["q", "other"]),
                "type": rnd.choice(["t", "u"]),
                "kind": rnd.choice(KINDS),
                "at": at,
                "attempt": 1,
                "owner": None,
                "outcome": rnd.choice(OUTCOMES),
                "detail": None,
                "waited": rnd.choice(values),
                "ran": rnd.choice(values),
                "due_at": None,
                "tracked": 0,
            }
        )
    return out


def as_dict(groups) -> dict:
    out: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for g in groups:
        key = (g.queue, g.type, g.kind, g.outcome, g.minute, g.start_minute, g.wait_bucket, g.run_bucket)
        out[key][0] += g.count
        out[key][1] += g.wait_sum
        out[key][2] += g.run_sum
    return dict(out)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_database_groups_events_as_the_reference_does(queue, seed):
    events = random_events(600, seed)
    store = queue.store
    queue.db.run(lambda c: c.execute(sa.insert(store.events_t), events))
    got = as_dict(queue.db.run(lambda c: store.stats._groups_where(c, sa.true())))
    want = as_dict(group_of(e) for e in events)
    assert got.keys() == want.keys()
    for key, (count, wait_sum, run_sum) in want.items():
        assert got[key][0] == count, key
        assert got[key][1] == pytest.approx(wait_sum, rel=1e-12, abs=1e-300), key  # summed in another order
        assert got[key][2] == pytest.approx(run_sum, rel=1e-12, abs=1e-300), key


def test_a_roll_up_writes_the_reference_tally_of_its_events(queue):
    events = random_events(400, 3)
    store = queue.store
    queue.db.run(lambda c: c.execute(sa.insert(store.events_t), events))
    assert store.stats_roll_up(now=T0 + 10**6, gap_timeout=60.0, batch=150) == len(events)  # several batches
    want = tally_events(events)
    got = {key: tally for span in statistics.SPANS for key, tally in store.stats_rows(span, -1e12, 1e12)}
    assert got.keys() == want.keys()
    for key, tally in want.items():
        mine = got[key]
        assert [getattr(mine, n) for n in statistics.COUNTS] == [getattr(tally, n) for n in statistics.COUNTS], key
        assert (mine.wait.counts, mine.run.counts) == (tally.wait.counts, tally.run.counts), key
        assert mine.wait.total == pytest.approx(tally.wait.total, rel=1e-12)
        assert mine.run.total == pytest.approx(tally.run.total, rel=1e-12)


# The roll-up counted in SQL (``store/stats.py``): the database's grouping must equal
# ``statistics.group_of``/``tally_events`` for any values a column holds, on all three databases,
# and every event is counted exactly once across gaps, races and chunking.


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


# -- the SQL floor --------------------------------------------------------------------
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


# -- exactly once --------------------------------------------------------------------
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


# The roll-up's next page (``store/stats.py``: ``_next_page``): ids that follow one another are
# counted in the database without being read; a page with a hole (an id not committed yet, or rolled
# back) is read id by id and the hole kept for later. Either way each event is counted once, on all
# three databases.


def gaps(queue) -> list[tuple[int, int]]:
    g = queue.store.gaps_t
    return queue.db.run(lambda c: [(r.first_id, r.last_id) for r in c.execute(sa.select(g).order_by(g.c.first_id))])


def position(queue) -> int:
    m = queue.store.meta
    return int(queue.db.run(lambda c: c.execute(sa.select(m.c.value).where(m.c.name == "stats_after")).scalar()))


def delete_events(queue, ids) -> None:
    """Events gone without a count, as if their ids had been handed out and rolled back."""
    e = queue.store.events_t
    queue.db.run(lambda c: c.execute(sa.delete(e).where(e.c.id.in_(ids))))


def test_ids_without_a_hole_are_counted_whole_in_pages(queue):
    events = [ev(i, at=T0 + i, waited=0.01 * i, ran=0.1 * i) for i in range(23)]
    ids = insert_events(queue, events)
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0, batch=5) == 23
    assert position(queue) == ids[-1]
    assert gaps(queue) == []
    assert_tallies_equal(stats(queue), tally_events(events))


def test_a_hole_inside_a_page_is_kept_and_the_rest_counted(queue):
    events = [ev(i, at=T0 + i) for i in range(12)]
    ids = insert_events(queue, events)
    holes = [ids[3], ids[4], ids[9]]
    delete_events(queue, holes)
    kept = [e for e, i in zip(events, ids, strict=True) if i not in holes]
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0, batch=5) == len(kept)
    assert gaps(queue) == [(ids[3], ids[4]), (ids[9], ids[9])]
    assert position(queue) == ids[-1]
    assert_tallies_equal(stats(queue), tally_events(kept))


def test_a_hole_before_the_first_id_of_a_page_is_kept(queue):
    events = [ev(i, at=T0 + i) for i in range(6)]
    ids = insert_events(queue, events)
    delete_events(queue, ids[:2])
    m = queue.store.meta
    queue.db.run(lambda c: c.execute(sa.update(m).where(m.c.name == "stats_after").values(value=str(ids[0] - 1))))
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0, batch=10) == 4
    assert gaps(queue) == [(ids[0], ids[1])]
    assert_tallies_equal(stats(queue), tally_events(events[2:]))


def test_a_page_after_the_last_event_moves_nothing(queue):
    ids = insert_events(queue, [ev(1)])
    assert queue.store.stats_roll_up(now=T0, gap_timeout=60.0) == 1
    assert queue.store.stats_roll_up(now=T0 + 1, gap_timeout=60.0) == 0
    assert position(queue) == ids[-1]
    assert gaps(queue) == []


# The roll-up's page (``store/stats.py``: ``_next_page`` counts a page whose ids follow one another
# with one ``count``/``max`` statement, then groups the range ``(after + 1, last)``; a page with a
# hole is read again id by id). Every event must be counted exactly once across pages, whatever
# commits, rolls back or is deleted between the page's statements and the grouped count; and a
# position row edited by hand must not lose or double-count events, nor stop the roll-up's callers
# (statistics reads, purges).


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


# The statistics roll-up counts each event exactly once, with no horizon. Passed-over ids evicted by
# MAX_GAPS or by event_gap_timeout, an id jump (a v5 table upgraded after its old events were
# purged), and a roll-up racing a delete.


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


# Statistics never lose an event: events that are deleted or passed over before any roll-up counted
# them are counted all the same.


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
