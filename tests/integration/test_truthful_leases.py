"""Leases and claims that say the truth, on SQLite, MariaDB and PostgreSQL.

Each test is an interleaving that could break a promise: a holder paused past its lease that
heartbeats again, a claim whose COMMIT applied but whose acknowledgement was lost, a fair-share
claim that delivered the row as read before it was locked, and an uncapped claim of a user racing
a capped one.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from workflow_faults.fault_support import ack_lost_once, rolled_back_once  # the store's fault injection

import queue_core
from perfectsched import IdempotentAlreadyFinishedError
from queue_core import PreemptedError
from queue_core.worker.monitor import TaskMonitor


# -- a heartbeat never revives an expired lease -----------------------------------------------
def test_a_heartbeat_after_the_lease_expired_is_refused(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    clock.advance(10)  # the lease ends at exactly now: expired
    with pytest.raises(PreemptedError):
        task.heartbeat(alive_time=10)
    assert queue["k"].metadata().status == "waiting"  # not revived: any worker may take it


def test_a_paused_holder_cannot_exceed_its_users_cap_by_heartbeating_again(queue, clock):
    queue.submit("a", "t", user="u", max_running=1)
    queue.submit("b", "t", user="u", max_running=1)
    paused = queue.poll(alive_time=10)
    clock.advance(11)  # the holder was paused past its lease
    other = queue.poll(alive_time=10)  # the cap counts only live leases: the user's slot is free
    assert other is not None and other.key != paused.key
    with pytest.raises(PreemptedError):
        paused.heartbeat(alive_time=10)
    running = [m for m in queue.list() if m.status == "running"]
    assert [m.key for m in running] == [other.key]  # one live lease, as max_running says


def test_update_data_after_the_lease_expired_is_refused_and_writes_nothing(queue, clock):
    queue.submit("k", "t", {"n": 1})
    task = queue.poll(alive_time=10)
    clock.advance(12)
    with pytest.raises(PreemptedError):
        task.update_data({"n": 2})
    assert queue["k"].metadata().data == {"n": 1}


def test_a_heartbeat_within_the_lease_still_extends_it(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    clock.advance(9.5)
    task.heartbeat(alive_time=10)
    clock.advance(9.5)
    assert queue["k"].metadata().status == "running"
    task.finish()
    assert queue["k"].metadata().outcome == "success"


# -- a claim whose COMMIT acknowledgement was lost keeps what it claimed ----------------------
def test_a_claim_whose_commit_ack_was_lost_delivers_what_it_leased(queue, clock):
    for k in "abc":
        queue.submit(k, "t")
    with ack_lost_once(queue, "poll") as fired:
        got = queue.poll_multi(3, alive_time=10)
    assert fired["fired"] == 1  # the first attempt committed, and was run again
    assert sorted(t.key for t in got) == ["a", "b", "c"]
    for t in got:
        t.finish()  # each is held under the token its holder knows
    assert [(m.key, m.outcome, m.attempts) for m in queue.list()] == [(k, "success", 1) for k in "abc"]


def test_a_limited_task_whose_claim_lost_its_commit_ack_runs_once(queue, clock):
    queue.submit("a", "t", max_attempts=1)
    queue.submit("b", "t", max_attempts=1)
    with ack_lost_once(queue, "poll") as fired:
        got = queue.poll_multi(2, alive_time=10)  # a limited task is leased alone
    assert fired["fired"] == 1
    assert [t.key for t in got] == ["a"]
    assert [m.key for m in queue.list() if m.status == "running"] == ["a"]  # no lease under an unknown token
    clock.advance(11)  # had one been left behind, its only attempt would be spent by now
    got[0].finish()
    rest = queue.poll_multi(5, alive_time=10)
    assert [(t.key, t.attempts) for t in rest] == [("b", 1)]
    rest[0].finish()
    assert [(m.key, m.outcome, m.attempts) for m in queue.list()] == [("a", "success", 1), ("b", "success", 1)]


@pytest.mark.parametrize("settle", ["finish", "retry", "release"])
def test_a_holder_whose_commit_ack_was_lost_is_not_refused(queue, clock, settle):
    """Regression: the retried finish found its own finish applied and raised
    IdempotentAlreadyFinishedError (a retry or release: PreemptedError "already released or
    retried"), which the worker logged as a task it could not settle."""
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    with ack_lost_once(queue, settle) as fired:
        getattr(task, settle)(**({"retry_wait": 0} if settle == "retry" else {}))
    assert fired["fired"] == 1 and task.done
    m = queue["k"].metadata()
    if settle == "finish":
        assert (m.status, m.outcome) == ("finished", "success")
        with pytest.raises(queue_core.IdempotentAlreadyFinishedError):
            task.finish()  # finishing twice is still refused
    else:
        assert (m.status, m.attempts) == ("waiting", 1 if settle == "retry" else 0)  # a release spends none
        assert [t.key for t in queue.poll_multi(5, alive_time=10)] == ["k"]


def test_a_retried_claim_that_had_not_committed_claims_anew(queue, clock):
    for k in "ab":
        queue.submit(k, "t")
    with rolled_back_once(queue, "poll") as fired:
        got = queue.poll_multi(2, alive_time=10)
    assert fired["fired"] == 1
    assert sorted(t.key for t in got) == ["a", "b"]
    for t in got:
        t.finish()
    assert [(m.outcome, m.attempts) for m in queue.list()] == [("success", 1)] * 2


# -- a schedule lease or holder transition whose COMMIT acknowledgement was lost ----------------
M0 = 1_700_000_000 - 1_700_000_000 % 60  # a minute boundary


def test_a_schedule_lease_whose_commit_ack_was_lost_delivers_its_occurrence(sched):
    """A retried poll (reliability scenario lost_acks) must deliver the occurrence its first run
    leased: drawing a new token, it would find that schedule held and lease the next due one,
    leaving the first occurrence leased under a token nobody knew, fired a lease late."""
    sched.add("a", "t", cron="* * * * *", now=M0 - 1)
    sched.add("b", "t", cron="* * * * *", delay=5, now=M0 - 1)  # due after a: what a new poll leases next
    with ack_lost_once(sched, "poll schedules") as fired:
        got = sched.poll(alive_time=30, now=M0 + 10)
    assert fired["fired"] == 1  # the first attempt committed, and was run again
    assert (got.key, got.scheduled_time) == ("a", M0)
    got.finish(now=M0 + 11)  # held under the token its holder knows
    nxt = sched.poll(alive_time=30, now=M0 + 12)
    assert (nxt.key, nxt.scheduled_time) == ("b", M0)
    nxt.finish(now=M0 + 13)
    assert sched.poll(alive_time=30, now=M0 + 14) is None  # nothing held under an unknown token
    assert {m.key: m.next_time for m in sched.list()} == {"a": M0 + 60, "b": M0 + 60}


@pytest.mark.parametrize("settle", ["finish", "retry", "release"])
def test_a_schedule_holder_whose_commit_ack_was_lost_is_not_refused(sched, settle):
    """A retried finish (reliability scenario lost_acks) that finds its own finish applied must not
    raise IdempotentAlreadyFinishedError (a retry or release: PreemptedError "taken over"), which
    ``perfectsched run`` would log as an occurrence it could not settle."""
    sched.add("s", "t", cron="* * * * *", now=M0 - 1)
    task = sched.poll(alive_time=30, now=M0)
    with ack_lost_once(sched, settle) as fired:
        getattr(task, settle)(now=M0 + 1, **({"retry_wait": 0} if settle == "retry" else {}))
    assert fired["fired"] == 1 and task.done
    again = sched.poll(alive_time=30, now=M0 + 2)
    if settle == "finish":
        assert again is None and sched["s"].metadata().next_time == M0 + 60
        with pytest.raises(IdempotentAlreadyFinishedError):
            task.finish(now=M0 + 3)  # finishing twice is still refused
    else:
        assert again is not None and again.scheduled_time == M0  # handed out again, once


@pytest.mark.parametrize("meanwhile", ["finish applied", "next occurrence leased"])
def test_a_heartbeat_racing_its_occurrences_finish_is_no_lost_lease(sched, caplog, meanwhile):
    """Regressions (reliability scenario lost_acks): the monitor of ``perfectsched run`` took a
    heartbeat that lost the race with its occurrence's finish for a lost lease — a warning "lease
    lost" and the handler's kill — when the finish had applied (MariaDB: perfectsched's
    IdempotentAlreadyFinishedError was not queue_core's) or when the loop had leased the schedule's
    next occurrence already ("taken over", SQLite). A heartbeat or finish run again after a lost
    acknowledgement takes longer and widens that window."""
    sched.add("s", "t", cron="* * * * *", now=M0 - 1)
    task = sched.poll(alive_time=30, now=M0)
    monitor = TaskMonitor({"task_heartbeat_interval": 1, "child_heartbeat_interval": 1, "alive_time": 30})
    monitor.hold(task)
    heartbeat = task.heartbeat

    def racing(**kw):  # the monitor looked at the task; meanwhile its holder settles it
        task.finish(now=M0 + 1)
        if meanwhile == "finish applied":
            task.done = False  # ... and has not returned yet
        else:  # ... and its loop polls again
            assert sched.poll(alive_time=30, now=M0 + 61).scheduled_time == M0 + 60
        return heartbeat(**kw)

    task.heartbeat = racing
    with caplog.at_level(logging.WARNING):
        monitor._heartbeat_all()  # what the monitor thread does every task_heartbeat_interval
    assert not getattr(task, "lost", False) and not caplog.records


# -- a fair-share claim delivers the row as it locked it ----------------------------------------
SERVERS = pytest.mark.parametrize("backend", ["mysql", "postgres"])  # SQLite serialises writers


@contextmanager
def between_read_and_lock(q, meanwhile):
    """Run ``meanwhile()`` (another worker, to commit) right after this queue's fair-share claim
    read its candidates, before it locks them."""
    me, done = threading.get_ident(), []

    def after(conn, cursor, statement, *_):
        if threading.get_ident() == me and not done and "row_number" in statement.lower():
            done.append(statement)
            other = threading.Thread(target=meanwhile)
            other.start()
            other.join(timeout=30)

    sa.event.listen(q.db.engine, "after_cursor_execute", after)
    try:
        yield done
    finally:
        sa.event.remove(q.db.engine, "after_cursor_execute", after)


@SERVERS
def test_a_fair_claim_delivers_the_data_written_before_it_locked_the_row(queue, clock, db_url, table_name):
    queue.submit("k", "t", {"v": 1}, user="u")
    with queue_core.open(db_url, table_name, clock=clock) as other:
        write = lambda: other.transaction(lambda tx: tx.update_data("k", {"v": 2}))  # noqa: E731
        with between_read_and_lock(queue, write) as hooked:
            task = queue.poll(alive_time=10)
    assert hooked and task is not None
    assert task.data == {"v": 2}


@SERVERS
def test_a_fair_claim_never_runs_a_task_past_max_attempts(queue, clock, db_url, table_name):
    queue.submit("k", "t", user="u", max_attempts=2)
    with queue_core.open(db_url, table_name, clock=clock) as other:
        other.poll(alive_time=10).retry(retry_wait=0)  # attempt 1 ran and failed

        def run_attempt_2():
            other.poll(alive_time=10).retry(retry_wait=0)  # attempt 2 ran and failed: none left

        with between_read_and_lock(queue, run_attempt_2) as hooked:
            task = queue.poll(alive_time=10)  # read it at attempt 1; locked it at attempt 2
    assert hooked
    assert task is None  # its attempts are used up: the claim ends it instead of running it
    m = queue["k"].metadata()
    assert (m.status, m.outcome, m.attempts) == ("finished", "failure", 2)


@SERVERS
def test_a_fair_claim_never_runs_a_task_cancelled_before_it_locked_the_row(queue, clock, db_url, table_name):
    queue.submit("k", "t", user="u")
    with queue_core.open(db_url, table_name, clock=clock) as other:

        def claim_cancel_release():
            held = other.poll(alive_time=10)
            other["k"].cancel_request()
            held.release()

        with between_read_and_lock(queue, claim_cancel_release) as hooked:
            task = queue.poll(alive_time=10)
    assert hooked and task is None
    assert queue["k"].metadata().outcome == "cancelled"


def sql(db_url, statement):
    """``statement`` run by a SQL client of its own, as an operator would; the rows it reads."""
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement))
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


@SERVERS
def test_a_fair_claim_sets_aside_a_row_edited_by_hand_before_it_locked_it(queue, clock, db_url, table_name):
    """Read sound, locked corrupt (the locking re-read checks the row again): set aside, not delivered."""
    queue.submit("k", "t", {"v": 1}, user="u")
    queue.submit("fine", "t", {"v": 2}, user="v")
    hand_edit = lambda: sql(db_url, f"UPDATE {table_name} SET data = 'not json' WHERE resource = 'u'")  # noqa: E731
    with between_read_and_lock(queue, hand_edit) as hooked:
        tasks = queue.poll_multi(5, alive_time=10)
    assert hooked and [t.key for t in tasks] == ["fine"]
    (r,) = sql(db_url, f"SELECT * FROM {table_name} WHERE resource = 'u'")  # the queue's reads refuse it
    assert (r.state, r.leased, r.outcome, r.attempts) == (1, 0, "failure", 0)
    assert r.error.startswith("set aside by the claim: task 'k'") and "column data holds" in r.error


@SERVERS
def test_a_fair_claim_leaves_a_row_mended_before_it_locked_it_to_the_next_claim(queue, clock, db_url, table_name):
    """Read corrupt, locked mended: the fair share did not weigh it, so this claim does not deliver
    it (never more than asked for); the next claim does."""
    queue.submit("k", "t", {"v": 1}, user="u")
    queue.submit("fine", "t", {"v": 2}, user="v")
    sql(db_url, f"UPDATE {table_name} SET max_running = 0 WHERE resource = 'u'")
    mend = lambda: sql(db_url, f"UPDATE {table_name} SET max_running = NULL WHERE resource = 'u'")  # noqa: E731
    with between_read_and_lock(queue, mend) as hooked:
        assert [t.key for t in queue.poll_multi(1, alive_time=10)] == ["fine"]
    assert hooked and [t.key for t in queue.poll_multi(1, alive_time=10)] == ["k"]


# -- an uncapped claim of a user never lets a concurrent capped claim exceed the cap -------------
@contextmanager
def before_commit_of_the_claim(q, meanwhile):
    """Start ``meanwhile()`` (another worker's claim) right after this queue's claim leased its
    rows, before it commits; give it a second to finish (or block), then let this claim commit."""
    me, started = threading.get_ident(), []

    def after(conn, cursor, statement, *_):
        if threading.get_ident() == me and not started and "attempts + " in statement:
            started.append(threading.Thread(target=meanwhile))
            started[0].start()
            started[0].join(timeout=1.0)  # a claim that must wait for ours blocks here

    sa.event.listen(q.db.engine, "after_cursor_execute", after)
    try:
        yield started
    finally:
        sa.event.remove(q.db.engine, "after_cursor_execute", after)
        for t in started:
            t.join(timeout=30)


@SERVERS
def test_an_uncapped_claim_and_a_capped_claim_of_one_user_respect_the_cap(queue, clock, db_url, table_name):
    queue.submit("free", "free", user="u")  # no cap of its own, but it counts as one of u's running tasks
    queue.submit("capped", "capped", user="u", max_running=1)
    got = {}
    with queue_core.open(db_url, table_name, clock=clock) as other:
        claim_capped = lambda: got.setdefault("capped", other.poll(alive_time=10, types=["capped"]))  # noqa: E731
        with before_commit_of_the_claim(queue, claim_capped) as started:
            got["free"] = queue.poll(alive_time=10, types=["free"])
    assert started and got["free"] is not None
    assert got["capped"] is None  # u already runs one task: its capped task waits for the slot
    assert [m.key for m in queue.list() if m.status == "running"] == ["free"]


# -- one fair-share rule, whether or not users are due --------------------------------------------
@pytest.mark.parametrize("with_a_user", [False, True])
def test_a_task_without_a_user_weighs_one_whatever_its_max_running(queue, clock, with_a_user):
    """Regression: the policy weighed a userless row by its max_running, the claim's walk of
    userless rows did not: which task came first depended on whether some user had a due task."""
    now = clock.now()
    if with_a_user:
        queue.submit("u", "t", user="someone", priority=-1, run_at=now - 5)  # the fair path reads the candidates
    queue.submit("b", "t", run_at=now - 2)
    queue.submit("a", "t", max_running=5, run_at=now - 1)
    assert [t.key for t in queue.poll_multi(2, alive_time=10)] == ["b", "a"]  # due the longest first


def test_a_retried_claim_delivers_every_row_it_leased_its_limited_one_first(queue, clock):
    """A retried claim delivers every row it leased: re-sorting its rows by submission and cutting
    the batch again before the limited task would leave that task leased, undelivered, failed at
    expiry."""
    now = clock.now()
    queue.submit("y", "t")
    queue.poll(alive_time=50)  # y's lease ends at now + 50: y becomes due then
    queue.submit("x", "t", max_attempts=1, run_at=now + 20)
    clock.advance(60)  # due: x since now + 20, y since now + 50 — x first, and limited
    with ack_lost_once(queue, "poll") as fired:
        got = queue.poll_multi(5, alive_time=10)
    assert fired["fired"] == 1
    assert [t.key for t in got] == ["x", "y"]
    for t in got:
        t.finish()
    assert sorted((m.key, m.outcome) for m in queue.list()) == [("x", "success"), ("y", "success")]
