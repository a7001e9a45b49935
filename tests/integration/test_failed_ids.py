"""Every way a task ends as failure is seen by the failure groups on the three databases (on
MySQL/MariaDB through the ids noted in ``<table>_failed`` by the change that ends it): a worker's
``fail``, a batch settled as failure with the next claim, a task given up at its last attempt, an
operator's force-finish as failure, a workflow step and run that failed. A failed task retried and
finished since is not a failure any more, and one purged takes its noted id with it."""

from __future__ import annotations

import sqlalchemy as sa

import pqflow
from queue_core.store.tasks import Settled

T0 = 1_700_000_000.0

flow = pqflow.Workflow("failing_flow")


@flow.step()
def breaks(ctx):
    raise KeyError("step broke")


def failed_in_table(queue) -> int:
    t = queue.store.t
    return queue.db.run(
        lambda c: c.execute(sa.select(sa.func.count()).where(t.c.state == 1, t.c.outcome == "failure")).scalar()
    )


def counted(queue) -> int:
    return sum(g.count for g in queue.failures())


def noted(queue) -> int | None:
    if not queue.store.failures.keeps_failed_ids:
        return None
    f = queue.store.failed_t
    return queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(f)).scalar())


def test_every_change_that_ends_a_task_as_failure_is_in_the_failure_groups(queue, clock):
    queue.submit("fail", "t", now=T0)
    queue.poll(now=T0).fail("ValueError: one", now=T0 + 1)
    queue.submit_many([{"key": f"batch{i}", "type": "t"} for i in range(3)], now=T0)
    held = queue.poll_multi(3, now=T0 + 2)
    purge_at = T0 + 10**6
    settled = [Settled(t._id, t._token, purge_at, "failure" if i else "success") for i, t in enumerate(held)]
    assert queue.store.task_settle(settled, T0 + 3) == []
    queue.submit("last", "t", max_attempts=1, now=T0)
    queue.poll(now=T0 + 4, alive_time=1)  # its lease expires: the next claim gives it up
    assert queue.poll(now=T0 + 10) is None
    queue.submit("forced", "t", now=T0)
    queue.store.task_force_finish("forced", T0 + 11, purge_at, outcome="failure")
    assert failed_in_table(queue) == 1 + 2 + 1 + 1
    assert counted(queue) == failed_in_table(queue)
    assert noted(queue) in (None, failed_in_table(queue))


class FailingDecider(pqflow.Decider):
    workflows = [flow]


def test_a_failed_workflow_step_and_its_run_are_in_the_failure_groups(queue, clock):
    flow.start("r1", queue=queue)
    for _ in range(20):  # every due task served in this process, as a worker would
        task = queue.poll(alive_time=30)
        if task is None:
            break
        FailingDecider(task).run()
        if task.deferred is not None:
            assert queue.finish_many([task]) == []
    assert failed_in_table(queue) == 2  # the step and its run
    assert counted(queue) == 2
    assert noted(queue) in (None, 2)


def test_a_retried_failure_that_succeeds_is_no_failure_and_a_purge_forgets_it(queue, clock):
    queue.submit("a", "t", now=T0)
    queue.submit("b", "t", now=T0)
    for task in queue.poll_multi(2, now=T0):
        task.fail("KeyError: x", now=T0 + 1, retention_time=100)
    assert counted(queue) == 2
    assert queue.retry_failed(now=T0 + 2) == 2
    for task in queue.poll_multi(2, now=T0 + 3):
        if task.key == "a":
            task.finish(now=T0 + 4, retention_time=100)
        else:
            task.fail("KeyError: y", now=T0 + 4, retention_time=100)
    assert [(g.count, g.sample_key) for g in queue.failures()] == [(1, "b")]
    queue.cleanup(now=T0 + 1000)  # both past their retention
    assert queue.failures() == [] and noted(queue) in (None, 0)
