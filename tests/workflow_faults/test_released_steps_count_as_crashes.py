"""Guarantee 4/8 ("worker crashes do not consume retries"; a step is failed only after its
worker died CRASH_ALLOWANCE+1 times): Decider._refusal counts crashes as
``attempts - 1 - failures``. But attempts also grow when a worker leases a step and gives it
back without running it: a worker stopping gracefully releases the not-yet-run tail of its
prefetched batch (Processor._release -> task.release()). After six stops (rolling deploys,
scale-downs) a step that never ran and never crashed anything is failed with "its worker died 6
times while running it (lease expired)", and its function never runs.
"""

from __future__ import annotations

import pqflow
from fault_support import calls, drive

wf = pqflow.Workflow("rv_released", retry_wait=0)


@wf.step()
def work(ctx):
    calls[(ctx.run_id, "work")] += 1
    return 1


class Decider(pqflow.Decider):
    workflows = [wf]


def test_released_step_is_not_failed_as_crashed(queue):
    wf.start("r", queue=queue)
    for _ in range(6):  # leased in a batch, then the worker stops before its turn: released
        task = queue.poll(alive_time=30)
        assert task.key == "r#work"
        task.release()
    drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert calls[("r", "work")] == 1 and run.status == "succeeded", (run.status, run.steps["work"].error)
