"""A hand-written run row whose ``definition`` is not a valid snapshot (not JSON,
NULL, missing keys, wrong types) must give a typed error or be ended alone. lifecycle._dag parses
it unchecked: the Decider raises KeyError/TypeError/JSONDecodeError for its step rows (the worker
then retries that row for ever), and pqflow.get_run / cancel raise the same raw errors (the CLI
prints a traceback instead of an error message).
"""

from __future__ import annotations

import json

import pytest
from fault_support import row

import pqflow
from queue_core.errors import TaskError

wf = pqflow.Workflow("rv_hdef", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


class Decider(pqflow.Decider):
    workflows = [wf]


BAD = {
    "empty_object": "{}",
    "not_json": "not json",
    "null": None,
    "step_without_after": json.dumps({"steps": {"a": {}}, "order": ["a"], "workflow": "rv_hdef"}),
    "wrong_types": json.dumps({"steps": [], "order": 5}),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_malformed_definition_is_a_typed_error_or_ended_alone(queue, what):
    key = f"evil_{what}"
    state = {"run": {"iid": 1, "status": "running"}}
    node = {"node": {"run": key, "iid": 1, "step": "a"}}
    queue.transaction(
        lambda tx: tx.submit_rows(
            [
                {
                    "key": key,
                    "type": "rv_hdef",
                    "data": {},
                    "group": "#runs",
                    "pending": True,
                    "workflow": json.dumps(state),
                    "definition": BAD[what],
                },
                {"key": key + "#a", "type": "rv_hdef.a", "data": {}, "group": key, "workflow": json.dumps(node)},
            ]
        )
    )
    task = queue.poll(alive_time=30)
    try:
        Decider(task).run()
    except TaskError:
        pass
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"the Decider raised {type(exc).__name__}: {exc}")
    else:
        assert task.done and row(queue, key + "#a")["state"] == 1
    with pytest.raises(TaskError):
        pqflow.get_run(key, queue=queue)
