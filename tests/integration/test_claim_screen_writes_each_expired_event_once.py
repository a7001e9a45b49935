"""The claim's screen (``store/claim/screen.py``) computes the ``expired`` events of a
row's expired lease only for a row it ends. A row given up
or cancelled at claim still gets the ``expired`` event of the attempt its silent holder lost,
then its end; a row delivered gets its ``expired`` from ``claimed_events`` alone; no event twice.
Tracked (a ``claimed`` row of its own) and untracked (the claim carried by the end) alike."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

T0 = 1_700_000_000.0


def _rows(q, key) -> list[dict]:
    e = q.store.events_t
    return q.db.run(
        lambda c: [dict(r._mapping) for r in c.execute(sa.select(e).where(e.c.key == key).order_by(e.c.id))]
    )


def _held_and_silent(q, key, tracked, max_attempts):
    q.submit(key, "t", max_attempts=max_attempts, now=T0)
    if tracked:
        q[key].track()
    assert q.poll(alive_time=10, now=T0 + 1).key == key  # held until T0 + 11, then silent


@pytest.mark.parametrize("tracked", [False, True])
def test_a_row_given_up_at_claim_gets_its_expired_attempt_then_its_end(queue, tracked):
    _held_and_silent(queue, "k", tracked, max_attempts=1)
    assert queue.poll(alive_time=10, now=T0 + 20) is None  # the claim gives it up
    rows = _rows(queue, "k")
    kinds = [r["kind"] for r in rows]
    assert kinds.count("expired") == 1 and kinds[-1] != "expired", kinds
    [exp] = [r for r in rows if r["kind"] == "expired"]
    assert (exp["attempt"], exp["owner"], exp["at"], exp["ran"]) == (1, queue.owner, T0 + 20, 19.0)
    meta = queue["k"].metadata()
    assert (meta.status, meta.outcome) == ("finished", "failure")
    hist = [e.kind for e in queue["k"].history()]
    assert hist.count("expired") == 1 and hist.count("claimed") == 1, hist


@pytest.mark.parametrize("tracked", [False, True])
def test_a_row_cancelled_at_claim_gets_its_expired_attempt_then_its_cancel(queue, tracked):
    _held_and_silent(queue, "k", tracked, max_attempts=5)
    assert queue["k"].cancel(now=T0 + 5) != "finished"  # requested: its holder runs it
    assert queue.poll(alive_time=10, now=T0 + 20) is None  # the claim cancels it
    rows = _rows(queue, "k")
    kinds = [r["kind"] for r in rows]
    assert kinds.count("expired") == 1 and kinds[-2:] == ["expired", "gave_up"], kinds
    assert queue["k"].metadata().outcome == "cancelled"
    hist = [e.kind for e in queue["k"].history()]
    assert hist[-2:] == ["expired", "gave_up"] and hist.count("claimed") == 1, hist


@pytest.mark.parametrize("tracked", [False, True])
def test_a_row_delivered_again_gets_one_expired_event(queue, tracked):
    _held_and_silent(queue, "k", tracked, max_attempts=5)
    again = queue.poll(alive_time=10, now=T0 + 20)
    assert again is not None and again.key == "k"
    kinds = [r["kind"] for r in _rows(queue, "k")]
    assert kinds.count("expired") == 1, kinds
    again.finish(now=T0 + 21)
    hist = [e.kind for e in queue["k"].history()]
    assert hist.count("expired") == 1 and hist.count("claimed") == 2 and hist[-1] == "finished", hist


def test_a_batch_mixing_given_up_cancelled_and_delivered_rows(queue):
    queue.submit("gone", "t", max_attempts=1, now=T0)
    queue.submit("cancel", "t", max_attempts=5, now=T0)
    queue.submit("again", "t", max_attempts=5, now=T0)
    assert {queue.poll(alive_time=10, now=T0 + 1).key for _ in range(3)} == {"gone", "cancel", "again"}
    queue["cancel"].cancel(now=T0 + 5)
    got = queue.poll_multi(3, alive_time=10, now=T0 + 20)
    for _ in range(5):  # (each claim that only ended rows is followed by another, as a worker does)
        if got:
            break
        got = queue.poll_multi(3, alive_time=10, now=T0 + 20)
    assert [t.key for t in got] == ["again"]
    for key, end in (("gone", "gave_up"), ("cancel", "gave_up"), ("again", None)):
        kinds = [r["kind"] for r in _rows(queue, key)]
        assert kinds.count("expired") == 1, (key, kinds)
        if end:
            assert kinds[-1] == end, (key, kinds)
    e = queue.store.events_t
    n = queue.db.run(
        lambda c: c.execute(sa.select(sa.func.count()).select_from(e).where(e.c.kind == "expired")).scalar()
    )
    assert n == 3
