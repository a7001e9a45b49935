"""Runs that cannot be lost, mixed up or doubled, and decisions that touch only
what a completion affects: each on SQLite, MariaDB and PostgreSQL, driven in-process with
an injected clock (the worker-process versions are in tests/acceptance)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import pqflow
import queue_core
from queue_core import IdempotentAlreadyExistsError, ValidationError

calls: Counter = Counter()

flow = pqflow.Workflow("it_flow", retry_wait=0, retention=60)


@flow.step()
def first(ctx):
    calls[(ctx.run_id, "first")] += 1
    if ctx.data.get("crash_first"):
        raise SystemExit("worker dies")  # stands for a process killed mid-step
    return ctx.data.get("n", 1)


@flow.step(after=first)
def second(ctx, first):
    calls[(ctx.run_id, "second")] += 1
    return first + 1


mapper = pqflow.Workflow("it_map", retry_wait=0)


@mapper.step()
def items(ctx):
    return list(range(ctx.data.get("n", 4)))


@mapper.step(map=items)
def square(ctx, item):
    calls[(ctx.run_id, f"square[{ctx.index}]")] += 1
    return item * item


@mapper.step(after=square)
def join(ctx, square):
    calls[(ctx.run_id, "join")] += 1
    return sum(square)


class Decider(pqflow.Decider):
    workflows = [flow, mapper]


retrying = pqflow.Workflow("it_retry", retries=2, retry_wait=10)


@retrying.step()
def always_fails(ctx):
    calls[(ctx.run_id, "always_fails")] += 1
    raise ValueError(f"attempt {ctx.attempt}")


class RetryDecider(pqflow.Decider):
    workflows = [retrying]


def drive(q, limit=10_000):
    """Serve every due task in this process, as a worker would, until none is due."""
    for _ in range(limit):
        task = q.poll(alive_time=30)
        if task is None:
            return
        try:
            Decider(task).run()
        except SystemExit:
            continue  # the "worker" died: the lease stays until it expires
        if task.deferred is not None:  # a success: written in the worker's next batch
            assert q.finish_many([task]) == []
        assert task.done, task


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()


# -- §3.1 the run row is never attempt-limited nor purged while its run is unfinished -----------
@pytest.mark.parametrize("how", ["start", "submit"])
def test_run_row_is_not_attempt_limited_or_purged(db_url, table_name, clock, backend, how):
    with queue_core.open(db_url, table_name, clock=clock, max_attempts=3, retention_time=10) as q:
        q.init()
        if how == "start":
            flow.start("r1", {"crash_first": True}, queue=q)
        else:
            q.submit("r1", "it_flow", {"crash_first": True})
            drive(q, limit=1)  # the decider takes the plain task up as a run
        run_row = q["r1"].metadata()
        assert run_row.status == "pending" and run_row.max_attempts is None
        for _ in range(6):  # its first step's worker dies again and again; time passes
            drive(q)
            clock.advance(3600)
            assert q.cleanup() == 0  # nothing of the unfinished run is purged
        assert q["r1"].metadata().status == "pending"
        run = pqflow.get_run("r1", queue=q)
        assert run.status == "running" and run.statuses == {"first": "waiting", "second": "pending"}
        clock.advance(3600)
        drive(q)  # past the crash allowance: the step fails through its run's decision
        run = pqflow.get_run("r1", queue=q)
        assert run.status == "failed" and run.statuses == {"first": "failed", "second": "skipped"}
        assert "worker died" in run.steps["first"].error
        assert calls[("r1", "first")] == 6 and calls[("r1", "second")] == 0
        clock.advance(61)  # the workflow's retention: now everything of the run goes, together
        assert q.cleanup() == 3 and list(q.list()) == []


# -- §3.2 a run id re-used after retention never adopts the old run's rows ------------------------
def test_reused_run_id_after_retention_starts_from_scratch(queue, clock):
    flow.start("again", {"n": 5}, queue=queue)
    drive(queue)
    assert pqflow.get_run("again", queue=queue).steps["second"].result == 6
    clock.advance(61)  # past the run's retention; cleanup has not run yet
    flow.start("again", {"n": 10}, queue=queue)
    run = pqflow.get_run("again", queue=queue)
    assert run.status == "running" and run.statuses == {"first": "waiting", "second": "pending"}
    drive(queue)
    run = pqflow.get_run("again", queue=queue)
    assert run.status == "succeeded" and run.steps["second"].result == 11
    assert calls[("again", "first")] == 2 and calls[("again", "second")] == 2
    assert Counter(m.key for m in queue.list()) == {"again": 1, "again#first": 1, "again#second": 1}


def test_duplicate_run_id_within_retention_is_refused(queue, clock):
    flow.start("dup", queue=queue)
    with pytest.raises(IdempotentAlreadyExistsError):
        flow.start("dup", queue=queue)
    drive(queue)
    clock.advance(30)
    with pytest.raises(IdempotentAlreadyExistsError):
        flow.start("dup", queue=queue)


def test_rows_of_an_older_instance_are_never_run_for_the_new_one(queue):
    """The run row deleted by hand while a worker holds its first step, then the id started
    again: the new run starts from an empty group, and the stale holder touches nothing of it."""
    flow.start("h", {"n": 1}, queue=queue)
    stale = queue.poll(alive_time=30)
    assert stale.key == "h#first"
    table = queue.store.t
    queue.db.run(lambda c: c.execute(table.delete().where(table.c.key == "h")))
    flow.start("h", {"n": 7}, queue=queue)
    with pytest.raises(queue_core.PreemptedError):
        Decider(stale).run()  # its run is another instance now: dropped, and its row is gone
    assert calls[("h", "first")] == 0
    drive(queue)
    run = pqflow.get_run("h", queue=queue)
    assert run.status == "succeeded" and run.steps["second"].result == 8


# -- §3.3 rows finished outside the run's decision are never purged nor lost -------------------
def test_step_cancelled_by_an_operator_goes_through_its_run(queue, clock):
    flow.start("op", queue=queue)
    assert queue["op#first"].cancel_request() == "running"  # requested: its decider settles it
    with pytest.raises(ValidationError, match="belongs to workflow run"):
        queue["op#second"].force_finish()
    clock.advance(10**6)
    assert queue.cleanup() == 0
    drive(queue)
    run = pqflow.get_run("op", queue=queue)
    assert run.status == "cancelled" and run.statuses == {"first": "cancelled", "second": "skipped"}
    assert calls[("op", "first")] == 0


def test_queue_give_up_never_finishes_a_step_behind_its_run(db_url, table_name, clock, backend):
    with queue_core.open(db_url, table_name, clock=clock, max_attempts=1) as q:
        q.init()
        flow.start("g", {"crash_first": True}, queue=q)
        drive(q)
        clock.advance(40)  # the lease expired: max_attempts=1 would give a plain task up here
        drive(q)
        assert q["g#first"].metadata().status in ("running", "waiting")
        assert pqflow.get_run("g", queue=q).status == "running"


# -- §3.4 every run is listable from the moment it is started -------------------------------------
def test_runs_are_listed_from_the_start_whichever_way(queue):
    flow.start("a1", queue=queue)
    queue.transaction(lambda tx: tx.store.run_name_register(tx.conn, "workflow", "it_flow"))
    queue.submit("a2", "it_flow", {"x": 1})  # a plain task of a workflow known here
    queue.submit("b1", "never_served", {})
    queue.submit("mail", "email", {})
    listed = [r["key"] for r in pqflow.list_runs(queue)]
    assert listed == ["a1", "a2"]
    assert [r["key"] for r in pqflow.list_runs(queue, workflow="never_served")] == ["b1"]
    pqflow.get_run("b1", queue=queue).cancel()  # cancelled before any decider took it up
    assert [r["key"] for r in pqflow.list_runs(queue)] == ["a1", "a2", "b1"]
    assert pqflow.get_run("b1", queue=queue).status == "cancelled"


# -- §3.5 the run's task data is the user's input, however it was started ------------------------
def test_run_data_is_the_users_input(queue):
    flow.start("d1", {"day": "2026-11-21"}, queue=queue)
    queue.submit("d2", "it_flow", {"day": "2026-11-21"})
    drive(queue)
    for key in ("d1", "d2"):
        assert queue[key].metadata().data == {"day": "2026-11-21"}
        assert pqflow.get_run(key, queue=queue).input == {"day": "2026-11-21"}


# -- §2 the last items of a map finishing at the same moment: the join exactly once --------------
def test_simultaneous_last_items_submit_the_join_once(db_url, table_name, clock, backend):
    """Two workers finish the last two items of a map at the same moment, 15 times over."""
    with (
        queue_core.open(db_url, table_name, clock=clock) as q,
        queue_core.open(db_url, table_name, clock=clock) as worker_a,  # a pool of its own each
        queue_core.open(db_url, table_name, clock=clock) as worker_b,
    ):
        q.init()
        for round_ in range(15):
            run_id = f"race{round_}"
            mapper.start(run_id, {"n": 2}, queue=q)
            drive(q, limit=1)  # items: submits square[0] and square[1]
            held = [q.poll(alive_time=30), q.poll(alive_time=30)]
            assert sorted(t.key for t in held) == [f"{run_id}#square#0", f"{run_id}#square#1"]
            barrier = threading.Barrier(2)
            errors = []

            def finish(task, other, barrier=barrier, errors=errors):
                try:
                    mine = other.poll(alive_time=30, now=clock.now() - 1) or None
                    assert mine is None  # nothing else is due
                    barrier.wait()
                    Decider(_rebind(task, other)).run()
                    assert other.finish_many([task]) == [] and task.done
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

            threads = [
                threading.Thread(target=finish, args=pair) for pair in zip(held, [worker_a, worker_b], strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            join_rows = [m for m in q.list() if m.key == f"{run_id}#join"]
            assert len(join_rows) == 1 and join_rows[0].status == "waiting", join_rows
            drive(q)
            run = pqflow.get_run(run_id, queue=q)
            assert run.status == "succeeded" and run.steps["join"].result == 1
            assert calls[(run_id, "join")] == 1


def _rebind(task, q):
    """The same lease, used through another connection pool (another worker)."""
    task.queue = q
    return task


class _Middle:
    """A random source whose draw puts the jitter factor at exactly 1."""

    def random(self) -> float:
        return 0.5


def test_a_failing_step_waits_retry_wait_doubled_per_failure_then_fails(queue, clock):
    queue.rng = _Middle()  # the decider's jitter comes from its queue (queue_core.rules.policy.backoff)
    retrying.start("r", queue=queue)
    waits = []
    for _ in range(3):
        task = queue.poll(alive_time=30)
        assert task is not None and task.key == "r#always_fails"
        RetryDecider(task).run()
        m = queue["r#always_fails"].metadata()
        if m.status == "finished":
            break
        waits.append(m.run_at - clock.now())
        assert queue.poll(alive_time=30) is None  # not due before its wait
        clock.advance(waits[-1])
    assert waits == [10, 20]
    run = pqflow.get_run("r", queue=queue)
    step = run.steps["always_fails"]
    assert run.status == "failed" and step.status == "failed" and "attempt 3" in step.error
    assert calls[("r", "always_fails")] == 3 and step.attempts == 3
