"""A row already holding the key of a step or item a run will create
(a plain task submitted with that key, or a row left by anything) silently replaces the run's
own row: lifecycle.create_rows and start_map (completions._Writes.flush) insert-if-absent and never
check how many rows went in. The run never ends, and get_run shows the foreign row's status as
the step's.
"""

from __future__ import annotations

from fault_support import drive, squares_map

import pqflow
import queue_core

wf = pqflow.Workflow("rv_host", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


@wf.step(after=a)
def b(ctx, a):
    return a + 1


mp = squares_map("rv_host_map")


class Decider(pqflow.Decider):
    workflows = [wf, mp]


def _ends(queue, run_id):
    for _ in range(5):
        drive(queue, Decider)
    return pqflow.get_run(run_id, queue=queue)


def test_foreign_row_with_a_future_step_key(queue):
    queue.submit("s#b", "email", {"to": "x"}, run_at=queue.now() + 10**6)  # unrelated task, due much later
    try:
        wf.start("s", queue=queue)
    except queue_core.errors.TaskError:
        return  # a typed refusal is fine
    run = _ends(queue, "s")
    assert run.status == "succeeded", f"run stuck: {run.status} {run.statuses}"


def test_foreign_row_with_a_future_item_key(queue):
    mp.start("m", queue=queue)
    queue.submit("m#sq#1", "email", {"to": "x"}, run_at=queue.now() + 10**6)  # before the map starts
    run = _ends(queue, "m")
    assert run.status in ("succeeded", "failed"), f"run stuck: {run.status} {run.statuses}"
