"""Guarantee 8 (per-item/per-step retries): a transient error in the "retry step" transaction
must not use up a retry. engine.retry_step increments node.failures on the NodeState object
before writing it; Database.run then runs the function again with the already-incremented
object, so one failure is recorded as two."""

from __future__ import annotations

import json

import pqflow
from fault_support import calls, drive, rolled_back_once, row

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
