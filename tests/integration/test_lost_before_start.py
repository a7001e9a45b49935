"""A lease lost before its handler started spends no attempt (policy rule 3), and
gives it back once: the lease expired unnoticed and nobody took it (the holder releases it), a
later lease took it (that row gives one back, never twice after a lost COMMIT acknowledgement,
never to another task that took the row's id), on the databases each test's docstring names."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from workflow_faults.fault_support import ack_lost_once

from queue_core import PreemptedError, config
from queue_core.worker.main import Processor


def _processor(queue, target, **settings):
    s = config.build({"url": queue.config["url"], "table": queue.table, **settings})
    return Processor(target, s, burst=True, queue=queue)


def _lost_then_purged(queue, clock):
    """Worker A's lease of task k expires while k waits in A's batch; B takes it over and finishes
    it; cleanup purges it: A's processor and its lost task, whose turn has not come yet."""
    queue.submit("k", "t")
    proc = _processor(queue, lambda task: None)
    first = queue.poll(alive_time=10)
    clock.advance(11)
    second = queue.poll(alive_time=10)
    assert second is not None and second.key == "k"
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()
    assert first.lost
    second.finish(retention_time=0)
    clock.advance(1)
    queue.cleanup()
    assert not queue["k"].exists()
    return proc, first


def test_a_lease_that_expired_before_its_handler_started_unclaimed_still_runs_with_max_attempts_1(queue, clock):
    """A task whose lease was lost before its handler started spends no attempt; with
    max_attempts=1 it still runs later.

    Interleaving: a worker leases k (max_attempts=1); before its handler starts (prefetch of the
    batch, a paused process) the lease expires; nobody has taken it over yet. The worker's monitor
    heartbeats, gets PreemptedError ("lease expired") and marks the task lost; when its turn comes
    the processor does not run it and calls ``lost_before_start()`` to give the attempt back.
    That is the ``return_attempt`` transition of ``SqlStore.task_lost_before_start``, fenced by
    ``lease_token <> lost token`` (LATER_LEASE): the row still carries the worker's own token, so nothing is
    given back and the row is left
    leased-and-expired with attempts=1. The next claim finds attempts (1) >= max_attempts (1) and
    gives up: k finishes "failure ... gave up after 1 attempts" and its handler never ran anywhere.
    """
    queue.submit("k", "t", max_attempts=1)
    ran = []
    proc = _processor(queue, lambda task: ran.append(task.key))
    first = queue.poll(alive_time=10)
    assert first is not None
    proc.monitor.hold(first)
    clock.advance(11)  # the lease expired while the task waited to start; nobody took it yet
    proc.monitor._heartbeat_all()  # what the monitor thread does every task_heartbeat_interval
    assert first.lost
    proc.process(first)  # its turn: not run here (lost), its attempt is to be given back
    assert ran == []
    again = queue.poll(alive_time=10)
    m = queue["k"].metadata()
    assert again is not None, f"k was never run and is now {m.status}/{m.outcome}: {m.error!r} (attempts={m.attempts})"
    assert again.attempts == 1


def test_a_return_attempt_retried_after_its_applied_commit_gives_back_one_attempt(queue, clock):
    """A transition retried after its own
    applied COMMIT (acknowledgement lost) recognises it and does not apply twice.

    Interleaving: k has max_attempts=2. Worker A leases it (attempts 1); A's lease expires while k
    waits in A's batch; worker B takes it over (attempts 2) and starts its handler. A's turn
    comes: k was lost before start, A gives its attempt back (``return_attempt``: attempts - 1
    where lease_token <> A's token). That transaction commits but its acknowledgement is lost;
    Database.run runs it again and the decrement, which has no check of an earlier applied run
    (unlike ``_held``/``applied_before``), applies a second time: attempts 0 although B is
    running it. B dies mid-run (its lease expires: an expired lease spends its attempt); k is
    then run by two more workers that die too (attempts 1, 2) before the claim gives up: three
    runs of a task with max_attempts=2.
    """
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue, lambda task: None)
    first = queue.poll(alive_time=10)
    clock.advance(11)
    second = queue.poll(alive_time=10)
    assert second is not None and second.key == "k" and second.attempts == 2
    runs = 1  # B's handler starts
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()
    assert first.lost
    with pytest.raises(PreemptedError):
        first.heartbeat()
    with ack_lost_once(queue, "return attempt") as st:
        proc.process(first)  # A's turn: lost before start, its attempt given back
    assert st["fired"] == 1
    attempts = queue["k"].metadata().attempts
    clock.advance(11)  # B died while running k: its lease expires
    while queue.poll(alive_time=10) is not None:
        runs += 1  # each of these workers runs k and dies
        clock.advance(11)
    assert (attempts, runs) == (1, 2), f"attempts {attempts} while B held k; k (max_attempts=2) ran {runs} times"


def test_a_late_return_attempt_never_lands_on_a_new_task_that_reused_the_row_id(queue, clock, backend):
    """No run past max_attempts, and writes fenced by lease token, never by id alone:
    ``return_attempt`` is written by id with the negative fence ``lease_token <> lost
    token`` (LATER_LEASE), which any other row with that id also passes.

    Interleaving (SQLite): task k, the newest row, is leased by worker A; its lease expires while
    it waits in A's batch; worker B takes it over and finishes it; cleanup purges it (retention
    over). SQLite reuses the largest rowid (the id column is INTEGER PRIMARY KEY without
    AUTOINCREMENT), so the next submission, k2 (max_attempts=1), gets k's id. Worker C leases k2
    and dies mid-run (its expired lease spends k2's only attempt). A's turn finally comes: k was
    lost before start, A gives its attempt back with ``return_attempt(id, A's token)``: the row
    with that id is k2, whose token differs, so k2's attempts go 1 -> 0 and k2 runs a second
    time although max_attempts=1.
    """
    proc, first = _lost_then_purged(queue, clock)
    queue.submit("k2", "t", max_attempts=1)
    new_id = queue.store.task_get("k2")["id"]
    c = queue.poll(alive_time=10)
    assert c is not None and c.key == "k2"
    runs = 1  # C runs k2 and dies: its lease expires
    clock.advance(11)
    proc.process(first)  # A's turn: k was lost before start; its attempt "given back"
    while queue.poll(alive_time=10) is not None:
        runs += 1
        clock.advance(11)
    assert runs == 1, f"k2 (max_attempts=1, id {new_id} = k's old id {first.row_id}) ran {runs} times"


def _expire_before_start(queue, clock, proc):
    """A leased task whose lease expires before its handler starts (a long prefetch, a database
    outage longer than alive_time) and that NO other worker took over: the monitor finds the
    lease lost (PreemptedError 'expired') and marks the task lost."""
    first = queue.poll(alive_time=10)
    clock.advance(11)
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()
    assert first.lost
    with pytest.raises(PreemptedError):
        first.heartbeat()
    return first


def test_a_lease_that_expired_before_its_handler_started_gives_its_attempt_back(queue, clock):
    """Claim 1 (policy rule 3): 'a lease lost before the handler started' does not spend an
    attempt. Processor.process sends a lost, unstarted task to lost_before_start ->
    the ``return_attempt`` transition of ``SqlStore.task_lost_before_start``, whose fence is
    LATER_LEASE (lease_token <> :token): when the lease merely expired and nobody claimed it yet, the token is
    still ours, the statement matches
    nothing, and the attempt stays spent although the handler never ran."""
    queue.submit("k", "t")
    ran = []
    proc = _processor(queue, lambda task: ran.append(task.key))
    first = _expire_before_start(queue, clock, proc)
    proc.process(first)  # its turn comes: not run here
    assert ran == []
    assert queue["k"].metadata().attempts == 0  # never ran: no attempt spent


def test_max_attempts_two_gives_two_runs_when_the_first_lease_expired_before_start(queue, clock):
    """The behaviour consequence: a task with max_attempts=2 whose first lease expired unrun
    (nobody took it over before the worker noticed) failed after its first run."""
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue, lambda task: None)
    first = _expire_before_start(queue, clock, proc)
    proc.process(first)  # never ran
    second = queue.poll(alive_time=10)
    assert second is not None
    assert second.retry_or_fail(RuntimeError("first run")) == "retry"  # 1 run of 2 allowed


def test_a_stopping_worker_gives_back_a_lost_task_s_attempt_once(queue, clock):
    """A worker stopping with a task in its batch whose lease expired unnoticed by anyone else:
    it is released once, by ``lost_before_start`` alone. Before, the stopping release
    (``release_many``) released it under the worker's token and then ``lost_before_start`` gave
    back one more attempt to whichever worker had claimed it in between (attempts 0 under a
    live lease: a task could run once more than ``max_attempts``)."""
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue, lambda task: None)
    first = _expire_before_start(queue, clock, proc)
    real_release_many = queue.release_many
    taken = []

    def release_many_then_another_claims(tasks, **kw):
        n = real_release_many(tasks, **kw)
        taken.append(queue.poll(alive_time=10))  # another worker, between the two statements
        return n

    queue.release_many = release_many_then_another_claims
    try:
        proc._release([first])
    finally:
        queue.release_many = real_release_many
    if not taken:  # the lost task was not part of the batch release: another worker claims it now
        taken.append(queue.poll(alive_time=10))
    assert taken[0] is not None and taken[0].key == "k"
    assert queue["k"].metadata().attempts == 1  # the new holder's one attempt, nothing given back twice


def test_lost_before_start_gives_no_attempt_to_a_resubmission_of_the_same_key(queue, clock, backend):
    """SQLite: a key fence alone did not tell a new task from the old one when the new one has
    the same key (a resubmission once the old one was purged) and took its id; the fence is the
    key and the submission time.

    Interleaving: k (the newest row) is leased by worker A; its lease expires while it waits in
    A's batch; B takes it over and finishes it; cleanup purges it. k is submitted again
    (max_attempts=1) and SQLite gives it the old id. C leases the new k and dies mid-run (its
    expired lease spends the only attempt). A's turn comes: ``lost_before_start`` -> the
    ``return_attempt`` update matches (same id, same key, another token): attempts 1 -> 0, and
    the new k runs a second time although max_attempts=1."""
    if backend != "sqlite":
        pytest.skip("SQLite reuses the id of a purged newest row")
    proc, first = _lost_then_purged(queue, clock)
    queue.submit("k", "t", max_attempts=1)
    # Tables pq makes now are AUTOINCREMENT (ids never reused); one made by an earlier release
    # gives the purged newest row's id to the next row: as here.
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "k").values(id=first.row_id)))
    assert queue.store.task_get("k")["id"] == first.row_id
    c = queue.poll(alive_time=10)
    assert c is not None and c.key == "k"
    runs = 1  # C runs the new k and dies: its lease expires
    clock.advance(11)
    proc.process(first)  # A's turn: the old k was lost before start
    while queue.poll(alive_time=10) is not None:
        runs += 1
        clock.advance(11)
    assert runs == 1, f"the new k (max_attempts=1) ran {runs} times"
