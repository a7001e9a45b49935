"""A commit whose acknowledgement is lost (guarantee 8): the retry neither
duplicates nor loses tags (submit_many, tag past a near-full task, a key re-used after
retention)."""

from __future__ import annotations

import sqlalchemy as sa
from test_submit_faults import _commit_ack_lost_on_the_transaction

T0 = 1_700_000_000.0


def tag_rows(q):
    tg = q.store.tags_t
    return q.db.run(lambda c: sorted(tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id))))


def test_lost_ack_of_a_tagged_submit_many_stores_each_tag_once(queue):
    """Guarantee 8: submit_many of 3 tagged tasks commits, its ack is lost, the retry runs."""
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit_many([{"key": f"k{i}", "type": "t", "tags": [f"a{i}", "b"]} for i in range(3)], now=T0)
    assert state["fired"] == 1
    assert [queue[f"k{i}"].metadata().tags for i in range(3)] == [(f"a{i}", "b") for i in range(3)]
    assert len(tag_rows(queue)) == 6


def test_lost_ack_of_tag_at_the_limit_is_not_refused_on_retry(queue):
    """Guarantee 8 and 4: a task with 30 tags; tag('x', 'y') commits (32), its ack is lost; the
    retry finds 32 (its own two) and returns them, no ValidationError, no change."""
    tags = [f"t{i:02d}" for i in range(30)]
    queue.submit("k", "t", tags=tags, now=T0)
    with _commit_ack_lost_on_the_transaction(queue) as state:
        got = queue["k"].tag("x", "y")
    assert state["fired"] == 1
    assert got == sorted([*tags, "x", "y"])
    assert len(tag_rows(queue)) == 32


def test_lost_ack_of_a_tagged_submit_re_using_an_expired_key(queue):
    """Guarantee 8 and 2: k (tag 'old') finished past retention; submit of k with tag 'new'
    purges and re-inserts in one transaction, its ack is lost; the retry finds its own task:
    tags ('new',) once, no 'old'."""
    queue.submit("k", "t", tags=["old"], now=T0)
    queue.poll(now=T0).finish(now=T0)
    later = T0 + queue.config["retention_time"] + 10
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit("k", "t", {"v": 2}, tags=["new"], now=later)
    assert state["fired"] == 1
    assert queue["k"].metadata(now=later).tags == ("new",)
    assert [t for t, _ in tag_rows(queue)] == ["new"]
