"""``pqflow why`` of a waiting step says what it waits for: a step in a one-hour backoff says
"retrying at ... (attempt k of n, backoff)". A map step whose every item waits out such a
backoff is told "in the queue for a free worker" / "no live worker serves type ..." instead:
its wait is built with a due time of 0 (``pqflow/runs.py:_step_info``), so the items' backoff
is never seen."""

from __future__ import annotations

from fault_support import drive

import pqflow

wf = pqflow.Workflow("why_map_wait", retries=3, retry_wait=3600)


@wf.step()
def src(ctx):
    return [1, 2]


@wf.step(map=src)
def each(ctx, item):
    raise RuntimeError(f"item {item} not ready")


@wf.step()
def single(ctx):
    raise RuntimeError("not ready")


class Decider(pqflow.Decider):
    workflows = [wf]
    batch_completions = False


def test_a_map_whose_items_are_in_backoff_says_so(queue):
    wf.start("wb", queue=queue)
    drive(queue, Decider)  # src succeeds; both items and single fail once: one hour of backoff
    run = pqflow.get_run("wb", queue=queue)
    assert run.statuses["single"] == "waiting" and run.statuses["each"] == "waiting", run.statuses
    single = run.why("single")
    assert "retrying at" in single and "attempt 2 of 4, backoff" in single, single  # holds
    each = run.why("each")
    assert "retrying at" in each and "attempt 2 of 4, backoff" in each, each
