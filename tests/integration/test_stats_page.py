"""The roll-up's next page (``store/stats.py``: ``_next_page``): ids that follow one another are
counted in the database without being read; a page with a hole (an id not committed yet, or
rolled back) is read id by id and the hole kept for later. Either way each event is counted once,
on all three databases."""

from __future__ import annotations

import sqlalchemy as sa
from test_sql_roll_up_matches_the_python_tally import T0, assert_tallies_equal, ev, insert_events, stats

from queue_core.rules.statistics import tally_events


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
