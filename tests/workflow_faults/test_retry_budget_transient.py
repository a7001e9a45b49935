"""Per-item/per-step retries: a transient error in the "retry step" transaction
must not use up a retry, and a step retry whose COMMIT acknowledgement was lost is recognised as
its own. lifecycle.retry_step increments node.failures on the NodeState object
before writing it; Database.run then runs the function again with the already-incremented
object, so one failure is recorded as two."""

from __future__ import annotations

import json

from fault_support import ack_lost_once, calls, drive, rolled_back_once, row

import pqflow

wf = pqflow.Workflow("rv_budget", retry_wait=0)


@wf.step(retries=2, retry_wait=0)
def flaky(ctx):
    calls[(ctx.run_id, "flaky")] += 1
    raise RuntimeError("boom")


class Decider(pqflow.Decider):
    workflows = [wf]


def test_transient_error_while_retrying_does_not_consume_two_retries(queue, clock):
    wf.start("f", queue=queue)
    task = queue.poll(alive_time=30)
    with rolled_back_once(queue, "retry step") as st:
        Decider(task).run()
    assert st["fired"] == 1
    assert json.loads(row(queue, "f#flaky")["workflow"])["node"]["failures"] == 1
    for _ in range(5):
        clock.advance(10)
        drive(queue, Decider)
    assert calls[("f", "flaky")] == 3  # retries=2: three runs in all
    assert pqflow.get_run("f", queue=queue).status == "failed"


def test_a_step_retry_whose_commit_ack_was_lost_is_recognised(queue, clock):
    """finish/retry/release transitions retried after their own applied COMMIT
    recognise it (as TaskChanges._held does with applied_before) instead of reporting a lost lease.

    Interleaving: a worker runs step ``flaky`` (retries=2), it raises; the decider writes the step
    retry (transaction "retry step": SqlStore.run_retry_held, fenced by the lease token). The COMMIT is
    applied, its acknowledgement lost; Database.run runs the transaction again. The fenced update
    now matches nothing (the row is no longer leased) and SqlStore.run_retry_held has no
    applied-before check: it calls diagnose, which raises PreemptedError("... was already
    released or retried by this holder") out of the decider, as if the lease had been lost.

    The row itself ends right (failures 1, not leased: the retry was written once), but the decider
    reports its own committed retry as a lost lease; in a worker the processor then calls
    task.retry_or_fail, which is refused again (PreemptedError, logged "could not settle").
    Low severity (no wrong state), but the applied transition is not recognised.
    """
    calls.clear()  # one count per database the test runs on
    wf.start("r", queue=queue)
    task = queue.poll(alive_time=30)
    with ack_lost_once(queue, "retry step") as st:
        try:
            Decider(task).run()  # raises PreemptedError: its own retry, committed, taken for a lost lease
        except Exception as exc:  # noqa: BLE001
            raised = exc
        else:
            raised = None
    assert st["fired"] == 1
    state = (json.loads(row(queue, "r#flaky")["workflow"])["node"]["failures"], row(queue, "r#flaky")["leased"])
    assert state == (1, 0)  # the retry was written once
    assert raised is None, f"the decider's own committed step retry was reported as: {raised!r}"
    assert task.done
    assert json.loads(row(queue, "r#flaky")["workflow"])["node"]["failures"] == 1
    for _ in range(5):
        clock.advance(10)
        drive(queue, Decider)
    assert calls[("r", "flaky")] == 3
    assert pqflow.get_run("r", queue=queue).status == "failed"
