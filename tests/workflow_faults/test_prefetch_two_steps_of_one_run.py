"""A worker's batch may hold two steps of one run whose parents differ (found by CI: a failed
`transform` skipped `load`, so `cleanup` became due while `audit` still was, and one poll leased
both). Decider.prefetch must read the parents of every step of the batch, not only of the last
step it saw of each run: `audit` was run with its parent's result missing (None) and failed.
"""

from __future__ import annotations

from fault_support import calls

import pqflow

wf = pqflow.Workflow("rv_prefetch_two", retries=0, retry_wait=0)


@wf.step()
def extract(ctx):
    return [1, 2, 3]


@wf.step(after=extract)
def transform(ctx, extract):
    raise RuntimeError("transform fails")


@wf.step(after=extract)
def audit(ctx, extract):
    calls[(ctx.run_id, "audit")] += 1
    return {"count": len(extract)}


@wf.step(after=[transform, audit])
def load(ctx, transform, audit):
    return "loaded"


@wf.step(after=load, trigger="all_done")
def cleanup(ctx, load):
    return {"load": load}


class Decider(pqflow.Decider):
    workflows = [wf]


def test_a_batch_with_two_steps_of_one_run_reads_each_steps_parents(queue):
    wf.start("r", queue=queue)
    first = queue.poll(alive_time=30)
    assert first.key == "r#extract"
    Decider(first).run()
    assert queue.finish_many([first]) == []
    both = queue.poll_multi(2, alive_time=30)
    assert sorted(t.key for t in both) == ["r#audit", "r#transform"]
    transform = next(t for t in both if t.key == "r#transform")
    audit = next(t for t in both if t.key == "r#audit")
    Decider(transform).run()  # fails at once: load is skipped, cleanup becomes due
    batch = queue.poll_multi(2, alive_time=30)
    assert [t.key for t in batch] == ["r#cleanup"]
    mixed = [audit, *batch]  # one batch, two steps of run r, parents {extract} and {load}
    Decider.prefetch(queue, mixed)
    Decider(audit).run()
    assert queue.finish_many([audit]) == []
    assert calls[("r", "audit")] == 1
    Decider(batch[0]).run()
    if batch[0].deferred is not None:
        assert queue.finish_many(batch) == []
    run = pqflow.get_run("r", queue=queue)
    steps = run.steps
    assert steps["audit"].status == "succeeded" and steps["audit"].result == {"count": 3}
    assert steps["load"].status == "skipped"
    assert steps["cleanup"].status == "succeeded" and steps["cleanup"].result == {"load": None}
    assert run.status == "failed"
