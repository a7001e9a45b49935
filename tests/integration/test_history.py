"""The history of a task on SQLite, MariaDB and PostgreSQL: every state change after
its submission recorded in the transaction of the change, read back as a timeline, bounded, and
deleted with the task.

Interleavings covered: a lease that expires and is taken over by another worker (the history
names both holders), a commit whose acknowledgement is lost (the retried transaction records
nothing twice), a batch in which one lease was lost (no event for the task it did not finish),
a task retried over and over (first and last entries kept), a key re-used after retention (the
new task's history is its own), a row edited by hand (set aside with its event, the claim goes on).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import NotFoundError
from queue_core.store.events import HISTORY_FIRST, HISTORY_LAST, HISTORY_TRIM_AT
from queue_core.store.tasks import Settled

T0 = 1_700_000_000.0


def kinds(q, key: str) -> list[str]:
    return [e.kind for e in q[key].history()]


def event_rows(q) -> int:
    e = q.store.events_t
    return q.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(e)).scalar())


def test_a_task_that_fails_once_then_succeeds_tells_its_whole_life(queue):
    queue.submit("k", "t", {"n": 1}, now=T0)
    t = queue.poll(now=T0 + 2)
    t.retry(10, now=T0 + 3, error=ValueError("api down\nat line 3"))
    queue.poll(now=T0 + 20).finish(now=T0 + 25)
    h = queue["k"].history()
    assert [e.kind for e in h] == ["submitted", "claimed", "retried", "claimed", "finished"]
    sub, c1, retried, c2, fin = h
    assert (sub.at, sub.due_at, sub.attempt, sub.queue, sub.type) == (T0, T0, 0, "default", "t")
    assert (c1.at, c1.attempt, c1.owner, c1.waited) == (T0 + 2, 1, queue.owner, 2.0)
    assert (retried.at, retried.attempt, retried.due_at, retried.ran) == (T0 + 3, 1, T0 + 13, 1.0)
    assert retried.error.startswith("ValueError: api down\nat line 3")
    assert (c2.attempt, c2.waited) == (2, 7.0)
    assert (fin.at, fin.outcome, fin.ran, fin.owner, fin.attempt) == (T0 + 25, "success", 5.0, queue.owner, 2)
    assert queue.history("k") == h


def test_an_expired_lease_taken_over_names_both_holders(db_url, table_name, backend, clock):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, alive_time=10) as a:
        a.clock = clock
        b = queue_core.open(db_url, table_name, clock=clock)
        a.owner, b.owner = "host-a:1", "host-b:2"
        a.submit("k", "t", now=T0)
        a.poll(now=T0)
        b.poll(now=T0 + 11).finish(now=T0 + 12)
        b.close()
        h = a["k"].history()
    assert [(e.kind, e.owner, e.attempt) for e in h[1:]] == [
        ("claimed", "host-a:1", 1),
        ("expired", "host-a:1", 1),
        ("claimed", "host-b:2", 2),
        ("finished", "host-b:2", 2),
    ]
    assert h[3].waited == 1.0  # due again when the lease expired at T0 + 10


def test_release_cancel_move_and_force_finish_are_recorded(queue):
    queue.submit("r", "t", now=T0)
    queue.poll(now=T0 + 1).release(now=T0 + 2)
    assert [(e.kind, e.attempt, e.due_at) for e in queue["r"].history()[1:]] == [
        ("claimed", 1, None),
        ("released", 0, T0 + 2),
    ]
    queue.submit("c", "t", now=T0)
    queue.move("c", "other", now=T0 + 1)
    queue["c"].cancel(now=T0 + 2)
    assert [(e.kind, e.queue, e.outcome) for e in queue["c"].history()] == [
        ("submitted", "other", None),
        ("moved", "other", None),
        ("cancelled", "other", "cancelled"),
    ]
    queue.submit("run", "t", now=T0)
    queue.poll(now=T0 + 1)
    assert queue["run"].cancel(now=T0 + 2) == "running"
    queue["run"].force_finish(now=T0 + 3)
    assert kinds(queue, "run") == ["submitted", "claimed", "cancel_requested", "force_finished"]


def test_a_task_out_of_attempts_gives_up_at_claim_with_its_error(db_url, table_name, backend, clock):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, alive_time=5, max_attempts=1) as q:
        q.clock = clock
        q.submit("k", "t", now=T0)
        q.poll(now=T0)
        assert q.poll(now=T0 + 6) is None  # its one lease expired: it ends instead of running again
        h = q["k"].history()
    assert [e.kind for e in h] == ["submitted", "claimed", "expired", "gave_up"]  # its lease ended it first
    assert h[-1].outcome == "failure" and "attempt" in h[-1].error


def test_a_batch_with_one_lost_lease_records_only_what_it_finished(db_url, table_name, backend, clock):
    from conftest import own_queue

    with own_queue(db_url, table_name, backend, alive_time=10) as q:
        q.clock = clock
        for k in ("a", "b"):
            q.submit(k, "t", now=T0)
        held = q.poll_multi(2, now=T0)
        other = queue_core.open(db_url, table_name, clock=clock)
        taken = other.poll(now=T0 + 11)  # both expired; it takes one of them over
        lost = q.store.task_settle([Settled(t._id, t._token, T0 + 1000) for t in held], T0 + 12)
        other.close()
        assert [s.id for s in lost] == [taken._id]
        finished = [k for k in ("a", "b") if "finished" in kinds(q, k)]
        assert finished == [k for k in ("a", "b") if k != taken.key]
        assert kinds(q, taken.key)[-2:] == ["expired", "claimed"]


@contextmanager
def commit_ack_lost_once(q):
    """The next transaction (not a statement in autocommit) commits, then its client sees the
    connection drop: the store runs it again."""
    db, state = q.db, {"fired": 0}
    original = db._connection

    @contextmanager
    def conn(write, autocommit=False):
        with original(write, autocommit) as c:
            yield c
        if write and not autocommit and not state["fired"]:
            state["fired"] += 1
            raise sa.exc.OperationalError("COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True)

    db._connection = conn
    try:
        yield state
    finally:
        db._connection = original


def test_a_lost_acknowledgement_records_each_change_once(queue):
    for k in ("a", "b"):
        queue.submit(k, "t", now=T0)
    with commit_ack_lost_once(queue) as state:
        held = queue.poll_multi(2, now=T0 + 1)
    assert state["fired"] == 1 and len(held) == 2
    with commit_ack_lost_once(queue) as state:
        assert queue.finish_many(held, now=T0 + 2) == []
    assert state["fired"] == 1
    queue.submit("c", "t", now=T0)
    t = queue.poll(now=T0 + 3)
    with commit_ack_lost_once(queue) as state:
        t.retry(5, now=T0 + 4, error="again")
    assert state["fired"] == 1
    assert kinds(queue, "a") == kinds(queue, "b") == ["submitted", "claimed", "finished"]
    assert kinds(queue, "c") == ["submitted", "claimed", "retried"]


def test_a_task_retried_forever_keeps_its_first_and_last_entries(queue):
    queue.submit("k", "t", now=T0)
    now = T0
    for i in range(100):
        now += 1
        queue.poll(now=now).retry(0, now=now, error=f"failure {i}")
    h = queue["k"].history()
    assert len(h) - 1 <= HISTORY_TRIM_AT
    assert [e.attempt for e in h[1 : 1 + HISTORY_FIRST]] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert h[-1].kind == "retried" and h[-1].attempt == 100 and h[-1].error.endswith("failure 99")
    tail = h[len(h) - HISTORY_LAST :]
    assert [e.attempt for e in tail] == [a for a in range(81, 101) for _ in (0, 1)]


def test_events_go_with_their_task_and_a_reused_key_starts_a_new_history(queue, clock):
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0).finish(now=T0 + 1)
    later = T0 + 1 + queue.config["retention_time"] + 1
    queue.submit("k", "t", now=later)  # the old row's retention ended: its key is free
    assert kinds(queue, "k") == ["submitted"]
    assert event_rows(queue) == 0
    queue.submit("other", "t", now=later)
    queue.poll(now=later).finish(now=later)
    queue.poll(now=later).finish(now=later)
    clock.set(later + queue.config["retention_time"] + 1)
    assert queue.cleanup() == 2
    assert event_rows(queue) == 0
    try:
        queue["k"].history()
    except NotFoundError as exc:
        assert "not found" in str(exc)
    else:
        raise AssertionError("a purged task has no history")


def test_a_row_edited_by_hand_is_set_aside_with_its_event_and_the_claim_goes_on(queue):
    queue.submit("bad", "t", now=T0)
    queue.submit("good", "t", now=T0 + 1)
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "bad").values(outcome="bogus")))
    got = queue.poll(now=T0 + 2)
    assert got.key == "good"
    e = queue.store.events_t  # its row holds a value pq never writes: read its events directly
    rows = queue.db.run(lambda c: c.execute(sa.select(e.c.kind, e.c.detail).where(e.c.key == "bad")).all())
    assert [r.kind for r in rows] == ["set_aside"]
    assert "outcome" in rows[0].detail


def test_a_force_finish_whose_acknowledgement_was_lost_reports_success_once(queue):
    """Its re-run finds the row it force-finished and its event: no AlreadyFinished, one event."""
    queue.submit("ff", "t", now=T0)
    queue.poll(alive_time=60, now=T0 + 1)
    with commit_ack_lost_once(queue) as state:
        queue["ff"].force_finish(now=T0 + 2)
    assert state["fired"] == 1
    assert kinds(queue, "ff") == ["submitted", "claimed", "force_finished"]
    assert queue["ff"].metadata().outcome == "success"
    with pytest.raises(queue_core.errors.AlreadyFinishedError):  # a second call is still refused
        queue["ff"].force_finish(now=T0 + 3)


def test_operator_changes_whose_acknowledgement_was_lost_report_success_and_record_once(queue):
    """move, cancel (of a waiting task: it ends; of a running one: it is flagged): the store runs
    the transaction again after its COMMIT applied; the re-run recognises its own change by its
    event at that instant, reports what the first run did and records nothing twice."""
    for k in ("m", "c", "r"):
        queue.submit(k, "t", now=T0)
    queue.poll(alive_time=60, now=T0 + 1)  # "m", the oldest key first, is held: move "c" instead
    with commit_ack_lost_once(queue) as state:
        queue.move("c", "other", now=T0 + 2)
    assert state["fired"] == 1
    assert kinds(queue, "c") == ["submitted", "moved"] and queue["c"].metadata().queue_name == "other"
    with commit_ack_lost_once(queue) as state:
        assert queue["c"].cancel(now=T0 + 3) == "finished"
    assert state["fired"] == 1
    assert kinds(queue, "c") == ["submitted", "moved", "cancelled"]
    with commit_ack_lost_once(queue) as state:
        assert queue["m"].cancel(now=T0 + 4) == "running"
    assert state["fired"] == 1
    assert kinds(queue, "m") == ["submitted", "claimed", "cancel_requested"]
    with pytest.raises(queue_core.errors.AlreadyFinishedError):  # a second call is still refused
        queue["c"].cancel(now=T0 + 5)
    assert kinds(queue, "r") == ["submitted"]
