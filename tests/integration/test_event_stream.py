"""The event stream on SQLite, MariaDB and PostgreSQL: submissions and every later
change of every task, oldest first, resumable from any event's cursor with nothing missed and
nothing twice.

Interleavings covered: a transaction that got a lower id commits after a higher one was read (a
late commit: delivered late, also to a reader that resumed from a cursor taken before it), an id
that never commits (a rolled-back transaction: forgotten after the gap timeout), a reader that
stops in the middle of a read and resumes from the last cursor it saw, hostile arguments (typed
errors before anything is read)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import ValidationError

T0 = 1_700_000_000.0


def seen(events) -> list[tuple[str, str]]:
    return [(e.kind, e.key) for e in events]


def test_every_change_of_every_task_in_time_order(queue):
    queue.submit("a", "t", now=T0)
    queue.submit("b", "t", now=T0 + 1)
    queue.poll(now=T0 + 2).finish(now=T0 + 3)
    queue.submit("c", "t", now=T0 + 4)
    assert seen(queue.events()) == [
        ("submitted", "a"),
        ("submitted", "b"),
        ("claimed", "a"),
        ("finished", "a"),
        ("submitted", "c"),
    ]


def test_a_reader_resumes_after_any_event_with_nothing_missed_or_twice(queue):
    for i in range(5):
        queue.submit(f"k{i}", "t", now=T0 + i)
    for i in range(3):
        queue.poll(now=T0 + 10 + i).finish(now=T0 + 10 + i)
    everything = list(queue.events())
    assert len(everything) == 11
    for i, e in enumerate(everything):
        assert seen(queue.events(since=e.cursor)) == seen(everything[i + 1 :])


def test_since_a_time_or_now(queue, clock):
    queue.submit("old", "t", now=T0)
    queue.submit("new", "t", now=T0 + 100)
    queue.poll(now=T0 + 101).finish(now=T0 + 102)
    assert seen(queue.events(since=T0 + 50)) == [("submitted", "new"), ("claimed", "old"), ("finished", "old")]
    assert seen(queue.events(since=dt.datetime.fromtimestamp(T0 + 101.5, dt.UTC))) == [("finished", "old")]
    assert list(queue.events(since=T0 + 500)) == []
    assert list(queue.events(since="now")) == []
    start = list(queue.events())[-1].cursor
    queue.submit("after", "t", now=T0 + 200)
    assert seen(queue.events(since=start)) == [("submitted", "after")]


def test_filters_by_queue_tracked_kind_and_key(queue):
    queue.submit("a", "t", queue="mail", now=T0)
    queue.submit("b", "t", now=T0)
    queue["b"].track()
    queue.poll(now=T0 + 1, queues="default").finish(now=T0 + 2)
    assert seen(queue.events(queue="mail")) == [("submitted", "a")]
    assert seen(queue.events(tracked=True)) == [("submitted", "b"), ("claimed", "b"), ("finished", "b")]
    assert seen(queue.events(kinds=["finished"])) == [("finished", "b")]
    assert seen(queue.events(key="a")) == [("submitted", "a")]


def test_hostile_arguments_are_refused_before_anything_is_read(queue):
    for bad in (
        dict(since="t1.eX"),
        dict(since="../../etc"),
        dict(since="t" + "9" * 30 + ".e0"),
        dict(since=dt.datetime(2026, 1, 1)),
        dict(since=-5),
        dict(since=float("nan")),
        dict(kinds=["finished", "dropped; DROP TABLE x"]),
        dict(queue="a b"),
        dict(queue="x" * 100),
        dict(key="\udcff"),
        dict(poll_interval=0),
    ):
        with pytest.raises(ValidationError):
            queue.events(**bad)


def _insert_task_uncommitted(db_url: str, queue, key: str):
    """A connection of its own that inserted task ``key`` (its id handed out) and has not committed."""
    engine = sa.create_engine(db_url)
    conn = engine.connect()
    tx = conn.begin()
    row = queue_core.store.tasks.task_row(queue_core.store.tasks.NewTask(key=key, type="t", data="{}", run_at=T0), T0)
    conn.execute(sa.insert(queue.store.t).values(**row))
    return engine, conn, tx


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_a_late_commit_is_delivered_late_also_after_a_resume(queue, db_url):
    engine, conn, tx = _insert_task_uncommitted(db_url, queue, "slow")  # gets the lower id
    try:
        queue.submit("fast", "t", now=T0 + 1)
        first = list(queue.events())
        assert seen(first) == [("submitted", "fast")]
        assert "-" in first[-1].cursor  # the passed-over id is remembered in the cursor
        tx.commit()
    finally:
        conn.close()
        engine.dispose()
    assert seen(queue.events(since=first[-1].cursor)) == [("submitted", "slow")]
    resumed = list(queue.events(since=first[-1].cursor))
    assert seen(queue.events(since=resumed[-1].cursor)) == []  # delivered once


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_an_id_that_never_commits_is_forgotten_after_the_gap_timeout(queue, db_url, clock):
    engine, conn, tx = _insert_task_uncommitted(db_url, queue, "never")
    tx.rollback()
    conn.close()
    engine.dispose()
    queue.submit("fast", "t", now=T0 + 1)
    stop = threading.Event()
    got, cursors = [], []
    polls = {"n": 0}

    def wait(_seconds):
        polls["n"] += 1
        clock.advance(31)
        if polls["n"] >= 3:
            stop.set()

    from queue_core.api import event_stream as stream

    for e in stream.follow(
        queue.store,
        stream.Cursor(),
        stream.StreamFilter(),
        clock=queue.now,
        follow=True,
        wait=wait,
        poll_interval=1,
        gap_timeout=60,
        stop=stop,
    ):
        got.append(e)
        cursors.append(e.cursor)
    assert seen(got) == [("submitted", "fast")]
    assert "-" in cursors[0]
    reader = stream.SourceReader(stream.Cursor.parse(cursors[0]).tasks)
    reader.take([], clock.now(), 60)
    assert reader.position.missing  # a fresh reader waits for it again, for a timeout of its own
    reader.take([], clock.now() + 61, 60)
    assert reader.position.missing == ()


def test_a_follower_sees_what_happens_after_it_started(queue):
    stop = threading.Event()
    got = []
    stream = queue.events(since="now", follow=True, poll_interval=0.05, stop=stop)

    def read():
        for e in stream:
            got.append(e)
            if len(got) == 3:
                stop.set()

    reader = threading.Thread(target=read)
    reader.start()
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0).finish(now=T0)
    reader.join(30)
    stop.set()
    assert seen(got) == [("submitted", "k"), ("claimed", "k"), ("finished", "k")]
