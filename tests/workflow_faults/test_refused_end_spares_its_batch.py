"""A completion whose decision is refused (FlowError: completions._open_runs, "run cannot end: its
rows ... are still open", or "run changed under a decision") rolls back the whole batch of
completions a worker writes together (one writer group, decider._write_completions ->
settle.finish_many, one savepoint in queue_core/deferred.write): the
successes of steps of other, healthy runs in that batch are not written. The settler then drops
them all ("their leases will expire and they run again"), so every neighbour re-runs and is
charged a crash, again on each try while the refused run stays as it is: one run that can never
end fails the steps of the runs that share its batches ("its worker died 6 times")."""

from __future__ import annotations

import pqflow
from pqflow.rows import RunState

wf = pqflow.Workflow("refused_batch", retries=0, retry_wait=0)


@wf.step()
def a(ctx):
    return "a"


@wf.step(after=a)
def b(ctx, a):
    return "b"


class Decider(pqflow.Decider):
    workflows = [wf]  # batch_completions: successes written together by the worker


def _undercount(queue, run_id):
    """The run's open count disagrees with its rows (the state the refusal exists for)."""

    def edit(tx):
        row = tx.store.run_read(tx.conn, [run_id])[run_id]
        state = RunState.load(row["workflow"])
        state.open = 1
        tx.store.run_set_workflow(tx.conn, row["id"], state.dump())

    queue.transaction(edit)


def test_a_refused_run_end_does_not_roll_back_the_other_runs_of_its_batch(queue):
    wf.start("bad", queue=queue)
    wf.start("good", queue=queue)
    _undercount(queue, "bad")
    held = [queue.poll(alive_time=30), queue.poll(alive_time=30)]
    assert sorted(t.key for t in held) == ["bad#a", "good#a"], held
    for t in held:
        Decider(t).run()
        assert t.deferred is not None  # written with the next batch, together
    queue.finish_many(held)  # as the worker's settler writes them (its writer group isolated in a savepoint)
    good = pqflow.get_run("good", queue=queue)
    # good#a ran to success; its write must not depend on another run's refused decision
    assert good.statuses["a"] == "succeeded", good.statuses


def test_a_run_that_can_never_end_fails_the_steps_of_the_runs_sharing_its_batches(queue):
    """Each try re-runs both: the healthy run's step is charged a crash each time (its lease
    expired) until it fails "its worker died 6 times" although it succeeded every time."""
    wf.start("bad2", queue=queue)
    wf.start("good2", queue=queue)
    _undercount(queue, "bad2")
    now = queue.now()
    for _ in range(8):
        held = [t for t in (queue.poll(alive_time=30, now=now), queue.poll(alive_time=30, now=now)) if t]
        for t in held:
            Decider(t).run()
        deferred = [t for t in held if t.deferred is not None]
        if deferred:
            queue.finish_many(deferred, now=now)
        now += 31  # the dropped leases expire
    good = pqflow.get_run("good2", queue=queue)
    assert good.statuses["a"] == "succeeded", (good.statuses, good.steps["a"].error, good.steps["a"].attempts)
