"""A map whose list holds a value that passes the step-result check but not
the task-data check (dict with int keys: json.dumps turns 1 into "1" for the result, but
encode_data/_check_structure refuses it for the item row; likewise an element within a few
bytes of max_data_size, or nested 200 deep).

start_map is decided with the in-memory result (Ended.result, not the stored JSON), so
tx.submit_rows raises ValidationError inside the deferred writer: the savepoint rolls back the
completion *and every other completion of the batch*; their leases expire and they run again
(the other run's step ran twice here), and the mapped-over step is re-run until the crash
allowance fails it with a false error: "its worker died 6 times while running it (lease
expired)". Expected: the map gets the JSON of the result, or fails with a clear error, and the
other completions of the batch are written.
"""

from __future__ import annotations

from fault_support import calls, drive

import pqflow

mp = pqflow.Workflow("rv_unstorable", retry_wait=0)


@mp.step()
def rows(ctx):
    calls[(ctx.run_id, "rows")] += 1
    return [{1: "a"}, {2: "b"}]


@mp.step(map=rows)
def each(ctx, item):
    return item


other = pqflow.Workflow("rv_unstorable_other", retry_wait=0)


@other.step()
def plain(ctx):
    calls[(ctx.run_id, "plain")] += 1
    return 1


class Decider(pqflow.Decider):
    workflows = [mp, other]


def test_map_over_int_keyed_dicts_ends(queue, clock):
    mp.start("u", queue=queue)
    other.start("v", queue=queue)
    batch = queue.poll_multi(2, alive_time=30)
    assert sorted(t.key for t in batch) == ["u#rows", "v#plain"]
    for t in batch:
        Decider(t).run()
    queue.finish_many(batch)  # the worker writes both successes with its next claim
    assert all(t.done for t in batch), "a completion of another run was dropped with the bad one"
    for _ in range(5):
        clock.advance(31)  # leases expire; the worker takes them again
        drive(queue, Decider)
    run = pqflow.get_run("u", queue=queue)
    assert run.status in ("succeeded", "failed"), (run.status, run.statuses, calls[("u", "rows")])
    assert calls[("u", "rows")] == 1 and calls[("v", "plain")] == 1
