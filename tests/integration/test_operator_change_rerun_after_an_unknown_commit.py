"""Operator changes run again by the store after their COMMIT's outcome was unknown
(the connection dropped at COMMIT) must report what their own first run did, write nothing twice
and never take another actor's change, or a change of another row under the same key, for theirs.

Faults injected (``lost_commit``): the next write transaction's COMMIT is applied (``applied=True``:
only its acknowledgement is lost) or not (``applied=False``: the connection dropped before the
server applied it; the client cannot tell the two apart), then ``between()`` runs (another actor,
on a queue object of its own), then the client sees the connection drop and the store re-runs the
transaction.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.clock import FakeClock
from queue_core.errors import AlreadyFinishedError, NotFoundError, TaskRunningError, ValidationError

T0 = 1_700_000_000.0


class _Dropped(Exception):
    pass


def dropped() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True)


@contextmanager
def first_write_faulted(q, fault):
    """The store's connections as they are, but for the next write transaction (not a statement in
    autocommit): ``fault(original, write, autocommit)``, a generator yielding its connection.
    Yields the state (``fired``: whether it came)."""
    db, state = q.db, {"fired": 0}
    original = db._connection

    @contextmanager
    def conn(write, autocommit=False):
        if not write or autocommit or state["fired"]:
            with original(write, autocommit) as c:
                yield c
            return
        state["fired"] = 1
        yield from fault(original, write, autocommit)

    db._connection = conn
    try:
        yield state
    finally:
        db._connection = original


def lost_commit(q, *, applied=True, between=None):
    def fault(original, write, autocommit):
        try:
            with original(write, autocommit) as c:
                yield c
                if not applied:
                    raise _Dropped  # the COMMIT never reached the server: rolled back
        except _Dropped:
            pass
        if between is not None:
            between()
        raise dropped()

    return first_write_faulted(q, fault)


@pytest.fixture
def other(db_url, table_name, queue):
    """Another actor (an operator, a worker) on a queue object and a connection pool of its own."""
    o = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    yield o
    o.close()


def kinds(q, key):
    return [e.kind for e in q[key].history()]


def failed(q, key, now=T0, attempts_before=0):
    q.submit(key, "t", now=now)
    for i in range(attempts_before):
        q.poll(now=now).retry(0, now=now, error=f"flaky {i}")
    q.poll(now=now).fail(ValueError("boom"), now=now + 1)


# -- the re-run must not do again what its first run did --------------------------


def test_bulk_retry_rerun_does_not_requeue_again_a_task_that_failed_again_meanwhile(queue, other):
    """Its first run requeued x (committed); x ran and failed again before the re-run (a worker);
    the re-run must count x once and leave its new failure alone: one 'requeued' event."""
    failed(queue, "x")

    def worker_fails_it_again():
        other.poll(now=T0 + 11).fail(ValueError("again"), now=T0 + 12)

    with lost_commit(queue, between=worker_fails_it_again) as state:
        assert queue.retry_failed(now=T0 + 10) == 1
    assert state["fired"] == 1
    assert kinds(queue, "x").count("requeued") == 1, kinds(queue, "x")
    assert queue["x"].metadata().outcome == "failure"


def test_dashboard_retry_rerun_does_not_requeue_again_a_task_that_failed_again_meanwhile(queue, other):
    failed(queue, "x")

    def worker_fails_it_again():
        other.poll(now=T0 + 11).fail(ValueError("again"), now=T0 + 12)

    with lost_commit(queue, between=worker_fails_it_again) as state:
        queue.retry_task("x", now=T0 + 10)
    assert state["fired"] == 1
    assert kinds(queue, "x").count("requeued") == 1, kinds(queue, "x")
    assert queue["x"].metadata().outcome == "failure"


def test_bulk_retry_rerun_counts_its_requeue_whose_event_was_trimmed_meanwhile(queue, other):
    """x has a long history; its requeue (committed) is followed, before the re-run, by enough
    retries of a worker to trim its history past the requeue event: the count must stay 1."""
    failed(queue, "x", attempts_before=6)

    def worker_retries_it_over_and_over():
        for i in range(30):
            other.poll(now=T0 + 11).retry(0, now=T0 + 11, error=f"again {i}")

    with lost_commit(queue, between=worker_retries_it_over_and_over) as state:
        n = queue.retry_failed(now=T0 + 10)
    assert state["fired"] == 1
    assert "requeued" not in kinds(queue, "x")  # (the setup: its event is trimmed)
    assert n == 1


@pytest.mark.parametrize("op", ["cancel", "force_finish", "move"])
def test_rerun_does_not_change_a_new_task_under_the_key_of_the_one_its_first_run_changed(queue, other, op):
    """The first run changed task k (committed). Before the re-run, k ended and was purged and a new
    task was submitted under its key. The re-run must not change the new task."""
    queue.submit("k", "t", now=T0)
    later = T0 + queue.config["retention_time"] + 100

    def purge_and_resubmit():
        if op == "move":
            other["k"].cancel(now=T0 + 2)
        assert other.cleanup(now=later) == 1
        other.submit("k", "t", {"new": True}, now=later)

    with lost_commit(queue, between=purge_and_resubmit) as state:
        if op == "cancel":
            assert queue["k"].cancel(now=T0 + 1) == "finished"
        elif op == "force_finish":
            queue["k"].force_finish(now=T0 + 1)
        else:
            queue.move("k", "elsewhere", now=T0 + 1)
    assert state["fired"] == 1
    new = queue["k"].metadata()
    assert (new.status, new.queue_name, kinds(queue, "k")) == ("waiting", "default", ["submitted"])


# -- never take another actor's change for its own ---------------------------------


def test_bulk_retry_rerun_does_not_count_a_row_another_operator_requeued_at_the_same_instant(queue, other):
    """Pages [x, y]; another operator retries x (dashboard) at the same instant before this batch
    runs; this batch's first run requeues y only (committed, acknowledgement lost): 1, not 2."""
    failed(queue, "x")
    failed(queue, "y")
    read_page = queue.store.failure_page

    def page_then_other_operator(**kw):
        page = read_page(**kw)
        if page:
            other.retry_task("x", now=T0 + 10)
        return page

    queue.store.failure_page = page_then_other_operator
    with lost_commit(queue) as state:
        assert queue.retry_failed(now=T0 + 10) == 1
    assert state["fired"] == 1


@pytest.mark.parametrize("bulk", ["retry_failed", "cancel_waiting"])
def test_bulk_rerun_after_an_unapplied_commit_counts_no_change_of_another_operator(queue, other, bulk):
    """The first run's COMMIT was not applied; meanwhile another operator changed x at the same
    instant (a dashboard retry / a cancel). The re-run changes y only: 1, not 2."""
    if bulk == "retry_failed":
        failed(queue, "x")
        failed(queue, "y")
    else:
        queue.submit("x", "t", now=T0)
        queue.submit("y", "t", now=T0)

    def other_operator():
        if bulk == "retry_failed":
            other.retry_task("x", now=T0 + 10)
        else:
            assert other["x"].cancel(now=T0 + 10) == "finished"

    with lost_commit(queue, applied=False, between=other_operator) as state:
        assert getattr(queue, bulk)(now=T0 + 10) == 1
    assert state["fired"] == 1


def test_move_rerun_after_an_unapplied_commit_does_not_take_another_move_for_its_own(queue, other):
    """Our move of k to 'q3' did not commit; meanwhile another operator moved k to 'q2' at the same
    instant. The re-run must move k to 'q3' (not report success and leave it in 'q2')."""
    queue.submit("k", "t", now=T0)
    with lost_commit(queue, applied=False, between=lambda: other.move("k", "q2", now=T0 + 5)) as state:
        queue.move("k", "q3", now=T0 + 5)
    assert state["fired"] == 1
    assert queue["k"].metadata().queue_name == "q3"


def test_move_twice_at_one_explicit_instant_after_an_unapplied_commit_moves_it(queue):
    """The same caller moves k twice with the same explicit now=; the second's first COMMIT is not
    applied: the re-run finds the first call's event and skips the move."""
    queue.submit("k", "t", now=T0)
    queue.move("k", "q2", now=T0 + 5)
    with lost_commit(queue, applied=False) as state:
        queue.move("k", "q3", now=T0 + 5)
    assert state["fired"] == 1
    assert queue["k"].metadata().queue_name == "q3"


@pytest.mark.parametrize("op", ["cancel", "force_finish"])
def test_rerun_after_an_unapplied_commit_reports_another_operators_end_as_already_finished(queue, other, op):
    """Without the fault, a cancel / force-finish of a task another operator just finished raises
    AlreadyFinishedError; with it (the COMMIT not applied, the other operator's change at the same
    instant), the re-run takes the other's event for its own and reports success."""
    queue.submit("k", "t", now=T0)

    def other_operator():
        if op == "cancel":
            other["k"].cancel(now=T0 + 5)
        else:
            other["k"].force_finish(now=T0 + 5)

    with lost_commit(queue, applied=False, between=other_operator) as state:
        with pytest.raises(AlreadyFinishedError):
            if op == "cancel":
                queue["k"].cancel(now=T0 + 5)
            else:
                queue["k"].force_finish(now=T0 + 5)
    assert state["fired"] == 1


# -- nothing changes without the fault ---------------------------------------------


def test_without_a_fault_refusals_stay(queue):
    queue.submit("k", "t", now=T0)
    queue.submit("r", "t", now=T0 + 1)
    assert queue["k"].cancel(now=T0 + 2) == "finished"
    with pytest.raises(AlreadyFinishedError):
        queue["k"].cancel(now=T0 + 2)  # the same instant: its own earlier event must not count
    with pytest.raises(AlreadyFinishedError):
        queue["k"].force_finish(now=T0 + 2)
    with pytest.raises(AlreadyFinishedError):
        queue.move("k", "q2", now=T0 + 2)
    held = queue.poll(alive_time=60, now=T0 + 3)
    assert held.key == "r"
    with pytest.raises(TaskRunningError):
        queue.move("r", "q2", now=T0 + 3)
    assert queue["r"].cancel(now=T0 + 3) == "running"
    assert queue["r"].cancel(now=T0 + 3) == "running"  # (each request is recorded: as before the change)
    with pytest.raises(NotFoundError):
        queue["missing"].cancel(now=T0 + 3)
    with pytest.raises(ValidationError):
        queue.retry_task("k", now=T0 + 3)  # cancelled, not failed
    failed(queue, "f", now=T0 + 4)
    queue.retry_task("f", now=T0 + 6)
    with pytest.raises(ValidationError):
        queue.retry_task("f", now=T0 + 6)
    assert queue.retry_failed(now=T0 + 6) == 0


def test_lost_acknowledgements_with_fractional_instants_are_recognised(queue):
    """A real clock's instants have sub-microsecond bits: the event's 'at' must compare equal."""
    now = T0 + 0.123456789
    failed(queue, "x", now=T0)
    queue.submit("m", "t", now=T0)
    queue.submit("c", "t", now=T0)
    with lost_commit(queue) as state:
        assert queue.retry_failed(now=now) == 1
    with lost_commit(queue) as state:
        queue.move("m", "q2", now=now + 1e-6)
    with lost_commit(queue) as state:
        assert queue["c"].cancel(now=now + 2e-6) == "finished"
    assert state["fired"] == 1
    assert kinds(queue, "m") == ["submitted", "moved"]
    assert kinds(queue, "c") == ["submitted", "cancelled"]
    assert kinds(queue, "x").count("requeued") == 1
