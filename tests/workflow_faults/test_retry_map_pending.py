"""Retry of a failed run whose failed map step has a second parent that failed too
(trigger all_done, so the map ran although that parent failed). retry._redo counts only kept
parents, finds the map PENDING, sets node.map = None and leaves the map's item rows as they are
(finished). When the other parent then succeeds, start_map inserts the item rows again with
insert-if-absent: every key exists, nothing is inserted (the count is not checked), and the map
row waits for items that will never run. The run is stuck 'running' for ever and get_run shows
the map as 'waiting'.
"""

from __future__ import annotations

from fault_support import calls, drive

import pqflow

wf = pqflow.Workflow("rv_rmp", retry_wait=0)


def fail_once(ctx, tag):
    calls[(ctx.run_id, tag)] += 1
    if calls[(ctx.run_id, tag)] == 1:
        raise RuntimeError(f"{tag} fails once")


@wf.step()
def ys(ctx):
    return [1, 2, 3]


@wf.step()
def other(ctx):
    fail_once(ctx, "other")
    return 0


@wf.step(after=["ys", "other"], trigger="all_done", map=ys)
def each(ctx, item):
    if item == 3:
        fail_once(ctx, "each3")
    return item * 10


@wf.step(after=each)
def fin(ctx, each):
    return each


class Decider(pqflow.Decider):
    workflows = [wf]


def _settled(queue, run_id):
    for _ in range(3):
        drive(queue, Decider)
    return pqflow.get_run(run_id, queue=queue)


def test_retry_of_a_map_that_waits_for_a_retried_parent(queue):
    wf.start("b", queue=queue)
    run = _settled(queue, "b")
    assert run.status == "failed" and run.statuses["other"] == "failed" and run.statuses["each"] == "failed"
    run.retry()
    run = _settled(queue, "b")
    assert run.status == "succeeded", (run.status, run.statuses)
    assert run.steps["fin"].result == [10, 20, 30]
