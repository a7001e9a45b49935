"""A batched completion whose COMMIT acknowledgement is lost.

Database.run runs a transaction again after a transient error (a dropped connection while
the COMMIT was in flight). When the first attempt had in fact committed, the second attempt
finds its own finish already written: finish_held_many treats it as "ours" (same token, same
finished_at) and what_follows_many counts the completion into the join / map / run a second time.
"""

from __future__ import annotations

from fault_support import ack_lost_once, calls, drive, row, run_one, squares_map

import pqflow

wf = pqflow.Workflow("rv_ack", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


@wf.step()
def b(ctx):
    return 2


@wf.step(after=[a, b])
def c(ctx, a, b):
    calls[(ctx.run_id, "c")] += 1
    return a + b


mp = squares_map("rv_ack_map")


class Decider(pqflow.Decider):
    workflows = [wf, mp]


def test_join_counted_twice_when_commit_ack_is_lost(queue):
    wf.start("j", queue=queue)
    ta = run_one(queue, Decider, "j#a")
    with ack_lost_once(queue, "finish") as st:
        assert queue.finish_many([ta]) == []
    assert st["fired"] == 1  # the first attempt committed; the whole transaction ran again
    # b has not run: the join must still be pending, the run must count 2 open steps
    assert queue["j#c"].metadata().status == "pending", "join submitted with one parent missing"
    run = pqflow.get_run("j", queue=queue)
    assert run.statuses == {"a": "succeeded", "b": "waiting", "c": "pending"}
    drive(queue, Decider)
    run = pqflow.get_run("j", queue=queue)
    assert run.status == "succeeded" and run.steps["c"].result == 3


def test_map_item_counted_twice_when_commit_ack_is_lost(queue):
    mp.start("m", queue=queue)
    drive(queue, Decider, limit=1)  # xs: three items submitted
    t0 = run_one(queue, Decider, "m#sq#0")
    with ack_lost_once(queue, "finish") as st:
        assert queue.finish_many([t0]) == []
    assert st["fired"] == 1
    t1 = run_one(queue, Decider, "m#sq#1")
    queue.finish_many([t1])
    # item 2 has not run: the map must not have ended
    assert queue["m#sq"].metadata().status == "pending", "map ended with an item still open"
    drive(queue, Decider)
    run = pqflow.get_run("m", queue=queue)
    assert run.status == "succeeded" and run.steps["total"].result == [1, 4, 9]
    assert calls[("m", "total")] == 1


def test_run_open_count_after_lost_ack(queue):
    """The run row's counts: open decremented twice ends the run with a step still waiting."""
    wf.start("r", queue=queue)
    ta = run_one(queue, Decider, "r#a")
    with ack_lost_once(queue, "finish"):
        queue.finish_many([ta])
    state = row(queue, "r")
    import json

    counts = json.loads(state["workflow"])["run"]
    assert counts["open"] == 2 and counts["succeeded"] == 1, counts
