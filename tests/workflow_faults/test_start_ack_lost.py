"""Operator actions whose COMMIT acknowledgement is lost (start, retry): Database.run runs the start again, finds
the run row it just wrote and raises IdempotentAlreadyExistsError ("already exists", exit code 3
from the CLIs) for a run this very call created. Queue.submit handles the same case
(last_run_retried + same_submission); lifecycle.start does not. Likewise run.retry() raises
FlowError "run is running; only failed or cancelled runs can be retried" for its own retry.
"""

from __future__ import annotations

from fault_support import ack_lost_once

import pqflow

wf = pqflow.Workflow("rv_sack", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


def test_start_whose_commit_ack_is_lost_reports_success(queue):
    with ack_lost_once(queue, "start run") as st:
        wf.start("s", {"x": 1}, queue=queue)
    assert st["fired"] == 1
    assert pqflow.get_run("s", queue=queue).status == "running"


@wf.step(after=a)
def b(ctx, a):
    raise RuntimeError("fails")


def test_retry_whose_commit_ack_is_lost_reports_success(queue):
    from fault_support import drive

    class Decider(pqflow.Decider):
        workflows = [wf]

    wf.start("r", queue=queue)
    drive(queue, Decider)
    assert pqflow.get_run("r", queue=queue).status == "failed"
    with ack_lost_once(queue, "retry run") as st:
        pqflow.get_run("r", queue=queue).retry()  # FlowError: "r is running; only failed ... can be retried"
    assert st["fired"] == 1
