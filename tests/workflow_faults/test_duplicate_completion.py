"""One completion handed twice to one finish_many (the same held task listed twice) must be
written and decided once: the second is not a second end of the step."""

from __future__ import annotations

from fault_support import drive, run_one, squares_map

import pqflow

mp = squares_map("atk_dup_map", retries=0)


jn = pqflow.Workflow("atk_dup_join", retries=0, retry_wait=0)


@jn.step()
def a(ctx):
    return 1


@jn.step()
def b(ctx):
    return 2


@jn.step(after=[a, b])
def c(ctx, a, b):
    return a + b


class Decider(pqflow.Decider):
    workflows = [mp, jn]


def test_same_item_twice_in_one_finish_many(queue):
    mp.start("m", queue=queue)
    drive(queue, Decider, limit=1)  # xs: three items
    t0 = run_one(queue, Decider, "m#sq#0")
    assert queue.finish_many([t0, t0]) == []
    run = pqflow.get_run("m", queue=queue)
    assert run.steps["sq"].status == "waiting", run.statuses  # the map: items still open
    t1 = run_one(queue, Decider, "m#sq#1")
    assert queue.finish_many([t1]) == []
    # item 2 has not run: the map must not have ended
    assert pqflow.get_run("m", queue=queue).steps["sq"].status == "waiting", "map ended with an item open"
    drive(queue, Decider)
    run = pqflow.get_run("m", queue=queue)
    assert run.status == "succeeded" and run.steps["total"].result == [1, 4, 9]


def test_same_step_twice_in_one_finish_many(queue):
    jn.start("j", queue=queue)
    ta = run_one(queue, Decider, "j#a")
    assert queue.finish_many([ta, ta]) == []
    assert queue["j#c"].metadata().status == "pending", "join submitted with one parent missing"
    drive(queue, Decider)
    run = pqflow.get_run("j", queue=queue)
    assert run.status == "succeeded" and run.steps["c"].result == 3
