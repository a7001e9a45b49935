"""An attempt costs one event row (the drain's budget) on SQLite, MariaDB and PostgreSQL:
the event that ends an attempt carries its claim (owner, wait, start), a ``claimed`` row is
written only for a tracked task, and the history, the event stream and the statistics still tell
every claim, once.

Interleavings covered: a task tracked while it runs and one untracked while it runs (no claim
lost, none twice in the history), a lease that expires and is taken over (the first attempt's
claim on its ``expired`` event, the second's wait counted from the expiry), a retry and a
release (their change clears the owner and moves the due time: the event keeps the attempt's),
a reader that resumes from a carried claim's cursor (its end once, the claim not again), a
claim older than a read's ``since``.
"""

from __future__ import annotations

import sqlalchemy as sa

import queue_core

T0 = 1_700_000_000.0


def event_rows(q) -> list[dict]:
    e = q.store.events_t
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(e).order_by(e.c.id))])


def claims(q, key):
    return [(e.attempt, e.owner, e.at, e.waited) for e in q[key].history() if e.kind == "claimed"]


def test_a_drained_untracked_task_writes_one_event_row_that_carries_its_claim(queue):
    for k in ("a", "b", "c"):
        queue.submit(k, "t", now=T0)
    held = queue.poll_multi(3, now=T0 + 2)
    assert event_rows(queue) == []  # the claim wrote no event: it is on the rows
    assert queue.finish_many(held, now=T0 + 5) == []
    rows = event_rows(queue)
    assert [(r["kind"], r["attempt"], r["owner"], r["waited"], r["ran"]) for r in rows] == [
        ("finished", 1, queue.owner, 2.0, 3.0)
    ] * 3
    assert claims(queue, "b") == [(1, queue.owner, T0 + 2, 2.0)]


def test_a_running_task_shows_its_claim_from_its_row(queue):
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0 + 4)
    assert [e.kind for e in queue["k"].history()] == ["submitted", "claimed"]
    assert claims(queue, "k") == [(1, queue.owner, T0 + 4, 4.0)]


def test_a_tracked_task_records_its_claim_live_and_shows_it_once(queue):
    queue.submit("k", "t", now=T0)
    queue["k"].track()
    t = queue.poll(now=T0 + 1)
    assert [r["kind"] for r in event_rows(queue)] == ["claimed"]
    t.finish(now=T0 + 3)
    assert [e.kind for e in queue["k"].history()] == ["submitted", "claimed", "finished"]
    assert [(e.kind, e.key) for e in queue.events()] == [("submitted", "k"), ("claimed", "k"), ("finished", "k")]


def test_tracking_changed_while_it_runs_loses_no_claim_in_the_history(queue):
    queue.submit("on", "t", now=T0)
    queue.submit("off", "t", now=T0)
    queue["off"].track()
    a, b = queue.poll_multi(2, now=T0 + 1)
    queue["on"].track()
    queue["off"].untrack()
    queue.finish_many([a, b], now=T0 + 2)
    for key in ("on", "off"):
        assert [e.kind for e in queue[key].history()] == ["submitted", "claimed", "finished"], key


def test_a_retry_and_a_release_keep_the_attempts_holder_and_wait(queue):
    queue.owner = "host-a:1"
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0 + 3).retry(10, now=T0 + 4, error="down")  # due again at T0 + 14
    queue.poll(now=T0 + 20).release(now=T0 + 21)  # due again at T0 + 21
    queue.poll(now=T0 + 22).finish(now=T0 + 23)
    h = queue["k"].history()
    assert [(e.kind, e.attempt) for e in h] == [
        ("submitted", 0),
        ("claimed", 1),
        ("retried", 1),
        ("claimed", 2),
        ("released", 1),
        ("claimed", 2),
        ("finished", 2),
    ]
    assert [(e.owner, e.at, e.waited) for e in h if e.kind == "claimed"] == [
        ("host-a:1", T0 + 3, 3.0),
        ("host-a:1", T0 + 20, 6.0),
        ("host-a:1", T0 + 22, 1.0),
    ]


def test_an_expired_attempt_is_counted_once_and_the_next_waits_from_the_expiry(db_url, table_name, backend, clock):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, alive_time=10) as a:
        clock.set(T0)
        a.clock = clock
        b = queue_core.open(db_url, table_name, clock=clock)
        a.submit("k", "t", now=T0)
        a.poll(now=T0 + 1)  # held until T0 + 11, then silent
        clock.set(T0 + 15)
        b.poll(now=T0 + 15).finish(now=T0 + 17)
        rows = event_rows(a)
        assert [(r["kind"], r["attempt"], r["waited"], r["ran"]) for r in rows] == [
            ("expired", 1, 1.0, 14.0),
            ("finished", 2, 4.0, 2.0),
        ]
        clock.set(T0 + 3600)
        stats = a.statistics(since=T0 - 60).totals()[("default", "t")]
        b.close()
    assert (stats.started, stats.succeeded, stats.wait.count, stats.wait.total) == (2, 1, 2, 5.0)


def test_statistics_count_a_tracked_tasks_start_once(queue, clock):
    clock.set(T0)
    queue.submit("t1", "t", now=T0)
    queue.submit("u1", "t", now=T0)
    queue["t1"].track()
    for t in queue.poll_multi(2, now=T0 + 1):
        t.finish(now=T0 + 2)
    clock.set(T0 + 3600)
    stats = queue.statistics(since=T0 - 60).totals()[("default", "t")]
    assert (stats.started, stats.succeeded, stats.wait.count, stats.run.count) == (2, 2, 2, 2)


def test_a_reader_resuming_at_a_carried_claim_gets_its_end_once(queue):
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0 + 1).finish(now=T0 + 2)
    everything = list(queue.events())
    assert [e.kind for e in everything] == ["submitted", "claimed", "finished"]
    claim = everything[1]
    assert (claim.owner, claim.at, claim.waited) == (queue.owner, T0 + 1, 1.0)
    assert [e.kind for e in queue.events(since=claim.cursor)] == ["finished"]
    assert [e.kind for e in queue.events(since=everything[0].cursor)] == ["claimed", "finished"]
    assert [e.kind for e in queue.events(since=T0 + 1.5)] == ["finished"]  # its claim is older


# -- a claim told once, whatever happened ------------------------------------------------------
def _stream_claims(q, key):
    return [(e.attempt, e.owner) for e in q.events(key=key) if e.kind == "claimed"]


def test_tracking_changed_while_it_runs_tells_the_claim_once_in_the_stream(queue):
    queue.submit("on", "t", now=T0)
    queue.submit("off", "t", now=T0)
    queue["off"].track()
    on, off = queue.poll_multi(2, now=T0 + 1)
    queue["on"].track()  # its claim has no row: its end carries it
    queue["off"].untrack()  # its claim has a row: its end carries none
    on.fail("ValueError: x", now=T0 + 2)
    off.retry(5, now=T0 + 2, error="x")
    for key in ("on", "off"):
        assert _stream_claims(queue, key) == [(1, queue.owner)], key
        assert [e.kind for e in queue[key].history()].count("claimed") == 1, key
    stats = queue.statistics(since=T0 - 60, now=T0 + 3600).totals()[("default", "t")]
    assert (stats.started, stats.wait.count) == (2, 2)


def test_a_cancel_of_an_expired_lease_keeps_that_attempts_claim(db_url, table_name, backend, clock):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, alive_time=10) as q:
        q.clock = clock
        clock.set(T0)
        for k in ("one", "bulk"):
            q.submit(k, "t", now=T0)
        q.poll_multi(2, now=T0 + 1)  # held until T0 + 11, then silent
        clock.set(T0 + 20)
        assert q["one"].cancel(now=T0 + 20) == "finished"
        assert q.cancel_waiting(now=T0 + 20) == 1
        for key in ("one", "bulk"):
            kinds = [e.kind for e in q[key].history()]
            assert kinds == ["submitted", "claimed", "expired", "cancelled"], (key, kinds)
        clock.set(T0 + 3600)
        assert q.statistics(since=T0 - 60).totals()[("default", "t")].started == 2


def test_a_reader_resuming_at_a_claim_gets_a_late_commit_once(queue, db_url, backend):
    """An event id held open by a transaction while a later end (carrying its claim) commits and
    is read; the reader resumes from that claim's cursor after the late row commits."""
    import pytest

    if backend == "sqlite":
        pytest.skip("SQLite has one writer: no later event commits while a transaction is open")
    queue.submit("late", "t", now=T0)
    queue.submit("k", "t", now=T0)
    late, k = queue.poll_multi(2, now=T0 + 1)
    e = queue.store.events_t
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            tx = conn.begin()
            conn.execute(
                sa.insert(e).values(
                    task_id=late.row_id,
                    key="late",
                    queue="default",
                    type="t",
                    kind="finished",
                    at=T0 + 2,
                    attempt=1,
                    owner="x:1",
                    outcome="success",
                    waited=1.0,
                    ran=1.0,
                    tracked=0,
                )
            )
            k.finish(now=T0 + 3)  # a higher id, committed first
            first = list(queue.events())
            assert [(x.kind, x.key) for x in first] == [
                ("submitted", "late"),
                ("submitted", "k"),
                ("claimed", "k"),
                ("finished", "k"),
            ]
            tx.commit()
    finally:
        engine.dispose()
    rest = list(queue.events(since=first[2].cursor))
    assert sorted((x.kind, x.key) for x in rest) == [("claimed", "late"), ("finished", "k"), ("finished", "late")]
    for i, ev in enumerate(rest):
        assert [(x.kind, x.key) for x in queue.events(since=ev.cursor)] == [(x.kind, x.key) for x in rest[i + 1 :]]


def test_a_release_many_whose_acknowledgement_was_lost_counts_what_it_released(queue):
    from integration.test_history import commit_ack_lost_once

    queue.submit("d", "t", now=T0)
    held = queue.poll_multi(1, now=T0 + 1)
    with commit_ack_lost_once(queue) as state:
        assert queue.release_many(held, now=T0 + 2) == 1
    assert state["fired"] == 1
    assert [(r["kind"], r["owner"], r["waited"]) for r in event_rows(queue)] == [("released", queue.owner, 1.0)]
