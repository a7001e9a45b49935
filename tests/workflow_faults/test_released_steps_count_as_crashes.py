"""Worker crashes do not consume retries (a step is failed only after its worker died
CRASH_ALLOWANCE+1 times): queue_core.rules.policy.crashes counts them as
``attempts - 1 - failures``. But attempts also grow when a worker leases a step and gives it
back without running it: a worker stopping gracefully releases the not-yet-run tail of its
prefetched batch (Processor._release -> task.release()). After six stops (rolling deploys,
scale-downs) a step that never ran and never crashed anything is failed with "its worker died 6
times while running it (lease expired)", and its function never runs.

The same held for a step whose lease was taken over before it started: leased in a worker's
batch, its lease expired while it waited its turn (a handler ahead of it held the GIL, or the
database was unreachable for the heartbeats), another worker took it, and the first one never ran
it. Both ends give their attempt back now (queue_core.rules.policy.spends_attempt).
"""

from __future__ import annotations

from fault_support import calls, drive

import pqflow
from queue_core import config
from queue_core.worker.main import Processor

wf = pqflow.Workflow("rv_released", retry_wait=0)


@wf.step()
def work(ctx):
    calls[(ctx.run_id, "work")] += 1
    return 1


class Decider(pqflow.Decider):
    workflows = [wf]


def test_released_step_is_not_failed_as_crashed(queue):
    wf.start("r", queue=queue)
    for _ in range(6):  # leased in a batch, then the worker stops before its turn: released
        task = queue.poll(alive_time=30)
        assert task.key == "r#work"
        task.release()
    drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert calls[("r", "work")] == 1 and run.status == "succeeded", (run.status, run.steps["work"].error)


def test_a_step_whose_lease_was_lost_before_it_started_is_not_failed_as_crashed(queue, clock):
    wf.start("r", queue=queue)
    proc = Processor(Decider, config.build({"url": queue.config["url"], "table": queue.table}), burst=True, queue=queue)
    held = queue.poll(alive_time=30)
    for _ in range(6):  # its lease expires before its turn; another worker's claim takes it over
        clock.advance(31)
        taker = queue.poll(alive_time=30)
        assert taker is not None and taker.key == "r#work"
        proc.monitor.hold(held)
        proc.monitor._heartbeat_all()  # what the monitor thread does: the lease is found lost
        assert held.lost
        proc.process(held)  # its turn: not run here
        held = taker
    Decider(held).run()
    queue.finish_many([held])
    run = pqflow.get_run("r", queue=queue)
    assert calls[("r", "work")] == 1 and run.status == "succeeded", (run.status, run.steps["work"].error)
    assert run.steps["work"].attempts == 1
