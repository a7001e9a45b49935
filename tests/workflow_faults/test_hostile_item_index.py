"""A hand-written item row with the run's iid (readable from any row of
the run) and an index outside the map (key 'RUN#step#99') is taken for an item of the map: its
key matches its bookkeeping and its step is in the snapshot, so the Decider runs it and
completions._close_maps counts it: the map ends while a real item is still open (its downstream gets
an incomplete list; the real item's completion is then ignored).
"""

from __future__ import annotations

import json

from fault_support import drive, row, squares_map

import pqflow

mp = squares_map("rv_hidx_map")


class Decider(pqflow.Decider):
    workflows = [mp]


def _ends(queue, run_id):
    for _ in range(5):
        drive(queue, Decider)
    return pqflow.get_run(run_id, queue=queue)


def test_hand_written_item_outside_the_map(queue):
    mp.start("h", queue=queue)
    drive(queue, Decider, limit=1)  # xs: items 0..2 submitted
    iid = json.loads(row(queue, "h")["workflow"])["run"]["iid"]
    node = {"node": {"run": "h", "iid": iid, "step": "sq", "index": 99, "wait": [0, 0, 0], "failures": 0}}
    queue.transaction(
        lambda tx: tx.submit_rows(
            [
                {
                    "key": "h#sq#99",
                    "type": "rv_hidx_map.sq",
                    "data": {"item": 7},
                    "group": "h#sq",
                    "workflow": json.dumps(node),
                    "priority": 5,
                }
            ]
        )
    )
    for _ in range(3):  # the hand-written row (priority 5) and two real items
        task = queue.poll(alive_time=30)
        Decider(task).run()
        if task.deferred is not None:
            queue.finish_many([task])
    assert queue["h#sq"].metadata().status == "pending", "a hand-written item ended the map early"
    run = _ends(queue, "h")
    assert run.status == "succeeded" and run.steps["total"].result == [1, 4, 9]
