"""A hand-written run row must never corrupt a real run. lifecycle._dag caches a
parsed snapshot under the dag_id the row *claims* (its ``workflow`` JSON), without checking
that it is the digest of the row's ``definition``. A hand-written run row claiming a real
workflow version's dag_id with another definition poisons the cache of every worker process
that reads it (e.g. when it claims a hand-written step row of that run); real runs of that
workflow version decided in that process then follow the forged DAG.
"""

from __future__ import annotations

import json

from fault_support import drive

import pqflow
from pqflow import lifecycle

wf = pqflow.Workflow("rv_dag", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


@wf.step(after=a)
def b(ctx, a):
    return a + 1


class Decider(pqflow.Decider):
    workflows = [wf]


def test_forged_run_row_does_not_poison_the_snapshot_cache(queue):
    lifecycle._DAGS.clear()
    real = wf.snapshot()
    _, text = lifecycle.new_state(real)
    dag_id = lifecycle.digest(text)
    forged = json.loads(text)
    forged["steps"]["b"]["after"] = []  # in the forged DAG nothing follows a
    forged["order"] = ["a", "b"]
    state = {"run": {"iid": 1, "status": "running", "dag_id": dag_id, "total": 2, "open": 2}}
    node = {"node": {"run": "evil", "iid": 1, "step": "a"}}
    queue.transaction(
        lambda tx: tx.submit_rows(
            [
                {
                    "key": "evil",
                    "type": "rv_dag",
                    "data": {},
                    "group": "#runs",
                    "pending": True,
                    "workflow": json.dumps(state),
                    "definition": json.dumps(forged),
                },
                {
                    "key": "evil#a",
                    "type": "rv_dag.a",
                    "data": {},
                    "group": "evil",
                    "priority": 9,
                    "workflow": json.dumps(node),
                },
            ]
        )
    )
    drive(queue, Decider, limit=1)  # this worker process claims the hand-written step first
    wf.start("real", queue=queue)
    drive(queue, Decider)
    run = pqflow.get_run("real", queue=queue)
    assert run.status == "succeeded" and run.steps["b"].result == 2, run.statuses
