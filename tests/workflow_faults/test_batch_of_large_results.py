"""A worker batch of steps whose results are each within max_data_size (1 MB) must be
writable together. On MySQL/MariaDB, Dialect.update_each is overridden by one UPDATE with a
CASE per column for up to 500 rows: 20 results of 0.9 MB make one ~18 MB statement, above the
server's max_allowed_packet (16 MB by default): the batch's transaction fails every time."""

from __future__ import annotations

import pqflow

wf = pqflow.Workflow("atk_big", retries=0, retry_wait=0)
N = 20


def _make(i):
    def fn(ctx):
        return "x" * 900_000

    fn.__name__ = f"s{i}"
    return fn


for _i in range(N):
    wf.step(name=f"s{_i}")(_make(_i))


class Decider(pqflow.Decider):
    workflows = [wf]


def test_batch_of_large_step_results_is_written(queue):
    wf.start("big", queue=queue)
    batch = queue.poll_multi(N, alive_time=300)
    assert len(batch) == N
    Decider.prefetch(queue, batch)
    for t in batch:
        Decider(t).run()
        assert t.deferred is not None
    assert queue.finish_many(batch) == []
    run = pqflow.get_run("big", queue=queue)
    assert run.status == "succeeded"
    assert all(len(s.result) == 900_000 for s in run.steps.values())
