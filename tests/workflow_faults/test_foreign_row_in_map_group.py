"""Rows of a map's group that are not its items. lifecycle.results_of reads
*every* row of the group RUN#step (no iid / ownership check) and parses each key's suffix as
an index. Queue.submit(group=...) is public, so any task can sit in a map's group:

* a foreign row with an int suffix is taken for an item: the map's downstream receives a list
  with an extra None ([1, None, 4, 9]): here the map over it fails and the run fails;
* a foreign row whose key has no '#<int>' suffix makes item_index raise IndexError/ValueError. When that happens
  inside the worker's batched completion (a map over the map is decided in the deferred writer),
  the error is neither a TaskError nor a database error: it escapes deferred.write,
  Database.run and poll_multi, and ends the worker's processor loop.
"""

from __future__ import annotations

from fault_support import drive

import pqflow
from queue_core import config
from queue_core.worker.main import Processor

mp = pqflow.Workflow("rv_fgrp", retry_wait=0)


@mp.step()
def xs(ctx):
    return [1, 2, 3]


@mp.step(map=xs)
def sq(ctx, item):
    return item * item


@mp.step(map=sq)
def plus(ctx, item):
    return item + 1


@mp.step(after=[sq, plus])
def total(ctx, sq, plus):
    return {"sq": sq, "plus": plus, "failed": ctx.failed_items}


class Decider(pqflow.Decider):
    workflows = [mp]


def test_foreign_row_with_an_index_is_not_an_item(queue):
    mp.start("r", queue=queue)
    queue.submit("note#1", "email", {}, group="r#sq", run_at=queue.now() + 10**6)
    for _ in range(3):
        drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert run.status == "succeeded", run.statuses
    assert run.steps["total"].result == {"sq": [1, 4, 9], "plus": [2, 5, 10], "failed": {}}


def test_foreign_row_without_an_index_does_not_kill_the_worker(wq):
    mp.start("w", queue=wq)
    wq.submit("junk", "email", {}, group="w#sq", run_at=wq.now() + 10**6)
    s = config.build({"url": wq.config["url"], "table": wq.table, "poll_interval": 0.05})
    proc = Processor(Decider, s, burst=True, queue=wq)
    try:
        code = proc.run()
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"the worker's processor loop died: {type(exc).__name__}: {exc}") from None
    assert code == 0
