"""After run.retry(), rows kept from the failed attempt (succeeded steps,
succeeded map items) keep the purge time their run's first end gave them (_keep_groups), while
the run is running again. Cleanup then deletes rows of an unfinished run and the re-run steps
lose their inputs."""

from __future__ import annotations

from fault_support import calls, drive

import pqflow

wf = pqflow.Workflow("rv_rpurge", retry_wait=0, retention=100)


@wf.step()
def a(ctx):
    return 41


@wf.step(after=a)
def b(ctx, a):
    calls[(ctx.run_id, "b")] += 1
    if calls[(ctx.run_id, "b")] == 1:
        raise RuntimeError("first time fails")
    return a + 1


mp = pqflow.Workflow("rv_rpurge_map", retry_wait=0, retention=100)


@mp.step()
def xs(ctx):
    return [1, 2, 3]


@mp.step(map=xs)
def sq(ctx, item):
    calls[(ctx.run_id, f"sq{item}")] += 1
    if item == 2 and calls[(ctx.run_id, "sq2")] == 1:
        raise RuntimeError("item 2 fails once")
    return item * item


@mp.step(after=sq)
def total(ctx, sq):
    return sq


class Decider(pqflow.Decider):
    workflows = [wf, mp]


def test_kept_step_of_a_retried_run_is_not_purged(queue, clock):
    wf.start("r", queue=queue)
    drive(queue, Decider)
    assert pqflow.get_run("r", queue=queue).status == "failed"
    clock.advance(90)
    pqflow.get_run("r", queue=queue).retry()
    clock.advance(20)  # past the first end's retention; the run is running again
    assert queue.cleanup() == 0, "rows of a running (retried) run were purged"
    drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert run.status == "succeeded" and run.steps["b"].result == 42


def test_kept_items_of_a_retried_map_are_not_purged(queue, clock):
    mp.start("m", queue=queue)
    drive(queue, Decider)
    assert pqflow.get_run("m", queue=queue).status == "failed"
    clock.advance(90)
    pqflow.get_run("m", queue=queue).retry()
    clock.advance(20)
    assert queue.cleanup() == 0, "succeeded items of a running (retried) run were purged"
    drive(queue, Decider)
    run = pqflow.get_run("m", queue=queue)
    assert run.status == "succeeded" and run.steps["total"].result == [1, 4, 9]
