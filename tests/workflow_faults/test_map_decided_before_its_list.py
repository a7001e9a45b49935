"""A map step whose trigger fires before the step it maps over ended (one_success /
one_failed on another parent) is decided at once: mapped_list finds its source not finished
and the map is skipped ("did not succeed") although the source later succeeds with a list.
The outcome of a run then depends on the order (and batching) of completions: two parents
ending in one worker batch give a running map, one commit each a skipped map."""

from __future__ import annotations

from fault_support import calls, drive, run_one

import pqflow

wf = pqflow.Workflow("atk_early_map", retries=0, retry_wait=0)


@wf.step()
def other(ctx):
    return "ok"


@wf.step()
def src(ctx):
    return [1, 2, 3]


@wf.step(map=src, after=[other], trigger="one_success")
def each(ctx, item):
    calls[("each", item)] += 1
    return item * 10


class Decider(pqflow.Decider):
    workflows = [wf]


class OneCommitEach(Decider):
    batch_completions = False


def test_map_waits_for_the_list_it_maps_over(queue):
    wf.start("r", queue=queue)
    t = run_one(queue, OneCommitEach, "r#other")  # one_success holds: each is decided now
    assert t.deferred is None
    assert queue["r#each"].metadata().status == "pending", "map decided before its list exists"
    drive(queue, OneCommitEach)
    run = pqflow.get_run("r", queue=queue)
    assert run.steps["each"].status == "succeeded", run.statuses
    assert [i.result for i in run.items("each")] == [10, 20, 30]
    assert run.status == "succeeded"
