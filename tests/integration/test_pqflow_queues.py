"""Workflow runs in named queues: a workflow names the queue of its run row and steps, a step may
name its own (its map items follow it); a worker serving other queues never runs them."""

from __future__ import annotations

import pytest

import pqflow

routed = pqflow.Workflow("it_routed", retry_wait=0, queue="etl")


@routed.step()
def extract(ctx):
    return [1, 2, 3]


@routed.step(map=extract, queue="heavy")
def crunch(ctx, item):
    return item * 10


@routed.step(after=crunch)
def load(ctx, crunch):
    return sum(crunch)


class Decider(pqflow.Decider):
    workflows = [routed]


def drive(q, queues):
    for _ in range(1000):
        task = q.poll(alive_time=30, queues=queues)
        if task is None:
            return
        Decider(task).run()
        if task.deferred is not None:
            assert q.finish_many([task]) == []


def queue_of(q, key):
    return q[key].metadata().queue_name


def test_a_run_lives_in_its_workflows_queue_and_a_step_in_its_own(queue):
    routed.start("r1", {}, queue=queue)
    assert queue_of(queue, "r1") == "etl" and queue_of(queue, "r1#extract") == "etl"
    assert queue_of(queue, "r1#crunch") == "heavy" and queue_of(queue, "r1#load") == "etl"
    drive(queue, "default")  # a worker of the default queue: nothing of the run
    assert pqflow.get_run("r1", queue=queue).statuses["extract"] == "waiting"
    drive(queue, "etl")  # extract runs; crunch's items wait in "heavy"
    run = pqflow.get_run("r1", queue=queue)
    assert run.statuses["extract"] == "succeeded" and run.status == "running"
    items = [m for m in queue.list() if m.key.startswith("r1#crunch#")]
    assert len(items) == 3 and {m.queue_name for m in items} == {"heavy"}
    drive(queue, "etl,heavy")
    run = pqflow.get_run("r1", queue=queue)
    assert run.status == "succeeded" and run.steps["load"].result == 60


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, 5])
def test_a_bad_queue_is_a_definition_error(bad):
    with pytest.raises(pqflow.WorkflowDefinitionError, match="queue"):
        pqflow.Workflow(f"it_bad_{abs(hash(str(bad)))}", queue=bad)
    wf = pqflow.Workflow(f"it_bad_step_{abs(hash(str(bad)))}")
    with pytest.raises(pqflow.WorkflowDefinitionError, match="queue"):
        wf.step(queue=bad)
