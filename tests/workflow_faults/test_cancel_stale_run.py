"""A cancelled run submits nothing new and no step starts after the cancel
committed. Two paths use a RunRef read before the cancel:

* Decider.prefetch reads the run for the whole claimed batch; a step of that batch processed
  after the cancel committed still sees run.state.cancel == False (and its claim-time
  cancel_requested) and runs its function.
* A step's completion decides its successors with the RunRef its handler read before running
  the function (completions._verdict uses run.state.cancel): a cancel that committed while the
  function ran is not seen, so the successor is submitted — and a map successor inserts all its
  item rows — after the cancel.
"""

from __future__ import annotations

from fault_support import calls, drive

import pqflow

mp = pqflow.Workflow("rv_cancel_map", retry_wait=0)


@mp.step()
def xs(ctx):
    return list(range(ctx.data.get("n", 2)))


@mp.step(map=xs)
def work(ctx, item):
    calls[(ctx.run_id, f"work{item}")] += 1
    return item


fl = pqflow.Workflow("rv_cancel_flow", retry_wait=0)


@fl.step()
def first(ctx):
    return ctx.data.get("n", 3)


@fl.step(after=first)
def fan(ctx, first):
    return list(range(first))


@fl.step(map=fan)
def each(ctx, item):
    calls[(ctx.run_id, "each")] += 1
    return item


class Decider(pqflow.Decider):
    workflows = [mp, fl]


def test_prefetched_step_is_told_of_the_cancel_and_adds_nothing(queue):
    """A step leased before the cancel is running as far as the cancel knows (docs/workflows.md:
    running steps are told through their heartbeat): it may start, its heartbeat reports the
    cancel, and nothing it completes submits anything; the run ends cancelled."""
    mp.start("p", {"n": 2}, queue=queue)
    drive(queue, Decider, limit=1)  # xs: two items
    batch = queue.poll_multi(2, alive_time=30)
    assert sorted(t.key for t in batch) == ["p#work#0", "p#work#1"]
    Decider.prefetch(queue, batch)  # the worker reads the whole batch's runs at once
    Decider(batch[0]).run()  # the first item of the batch runs ...
    pqflow.get_run("p", queue=queue).cancel()  # ... and the run is cancelled meanwhile
    rows_at_cancel = sorted(m.key for m in queue.list())
    import queue_core

    try:
        batch[1].heartbeat()
        told = False
    except queue_core.CancelRequestedError:
        told = True
    assert told, "a leased step of a cancelled run is told at its heartbeat"
    Decider(batch[1]).run()
    assert queue.finish_many([t for t in batch if t.deferred is not None]) == []
    assert sorted(m.key for m in queue.list()) == rows_at_cancel  # nothing new was submitted
    assert pqflow.get_run("p", queue=queue).status == "cancelled"
    assert calls[("p", "work1")] == 0  # told before its function ran: it did not run


def test_completion_after_cancel_submits_nothing_new(queue):
    fl.start("c", {"n": 3}, queue=queue)
    drive(queue, Decider, limit=1)  # first
    task = queue.poll(alive_time=30)
    assert task.key == "c#fan"
    # the handler reads its run, runs the function; meanwhile the run is cancelled
    run = pqflow.get_run("c", queue=queue)

    def cancel_during(ctx, first):
        run.cancel()
        return list(range(first))

    step = Decider.workflow(Decider, "rv_cancel_flow").steps["fan"]
    saved = step.fn
    step.fn = cancel_during
    try:
        Decider(task).run()
    finally:
        step.fn = saved
    queue.finish_many([task])  # the worker writes the success with its next batch
    items = [m.key for m in queue.list() if m.key.startswith("c#each#")]
    assert items == [], f"the cancelled run submitted {len(items)} map items after the cancel"
    assert pqflow.get_run("c", queue=queue).statuses["each"] == "skipped"
    drive(queue, Decider)
    assert pqflow.get_run("c", queue=queue).status == "cancelled" and calls[("c", "each")] == 0
