"""Rows ended alone vs retention: a row that is not a step of a current run
(hand-written, or a step of a run that is gone) is ended by Decider._drop_foreign through
SqlStore.run_finish_held, which always sets timeout=FOREVER ("kept until its run ends") — but no run
will ever end for it. Such rows are never purged: the table grows with every one of them.
"""

from __future__ import annotations

import json

from fault_support import drive

import pqflow

wf = pqflow.Workflow("rv_drop", retry_wait=0)


@wf.step()
def a(ctx):
    return 1


class Decider(pqflow.Decider):
    workflows = [wf]


def test_a_dropped_foreign_row_is_purged_eventually(queue, clock):
    node = {"node": {"run": "ghost", "iid": 7, "step": "a"}}
    queue.transaction(
        lambda tx: tx.submit_rows(
            [{"key": "ghost#a", "type": "rv_drop.a", "data": {}, "group": "ghost", "workflow": json.dumps(node)}]
        )
    )
    drive(queue, Decider)
    assert queue["ghost#a"].metadata().status == "finished"  # ended alone: good
    clock.advance(365 * 86400)
    assert queue.cleanup() == 1, "the dropped row is kept for ever"
