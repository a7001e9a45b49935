"""When a burst worker ends: once a claim begun after every success it wrote was committed finds
nothing due. A success its monitor thread writes on its own (``settler.delay`` after the handler,
while the loop runs a chore or starts its claim) can commit after the claim read the table: what
it set off (a workflow's next steps, a map's items) was invisible to that claim, and a worker that
ended then left the run stalled (CI, tests/acceptance/test_maps.py under load: every burst worker
ended with twelve map items waiting)."""

from __future__ import annotations

import pqflow
from queue_core import config
from queue_core.worker.main import Processor

chain = pqflow.Workflow("it_burst_chain", retry_wait=0)


@chain.step()
def first(ctx):
    return 1


@chain.step(after=first)
def second(ctx, first):
    return first + 1


class Decider(pqflow.Decider):
    workflows = [chain]


def _processor(wq) -> Processor:
    s = config.build({"url": wq.config["url"], "table": wq.table, "poll_interval": 0.05})
    return Processor(Decider, s, burst=True, queue=wq)


def _write_after_the_claim(proc: Processor) -> list[int]:
    """The interleaving, injected at the claim: the successes this claim would finish are written
    by the settler on its own, committed after the claim's read (as the monitor thread's write
    is). Returns how many tasks each claim delivered."""
    real = proc.queue.poll_multi
    delivered: list[int] = []

    def poll_multi(*args, finish=(), **kwargs):
        rows = real(*args, finish=[], **kwargs)
        if finish:
            proc.settler.put_back([(t, 0.0) for t in finish])
            proc.settler.flush()
        delivered.append(len(rows))
        return rows

    proc.queue.poll_multi = poll_multi
    return delivered


def test_a_burst_worker_claims_again_after_its_own_write_committed_behind_its_claim(wq):
    chain.start("r1", {}, queue=wq)
    proc = _processor(wq)
    delivered = _write_after_the_claim(proc)
    assert proc.run() == 0
    run = pqflow.get_run("r1", queue=wq)
    assert run.status == "succeeded", run.statuses
    assert run.steps["second"].result == 2
    assert 0 in delivered[:-1]  # a claim found nothing while a write was behind it, and the worker went on


def test_a_burst_worker_with_nothing_written_ends_at_its_first_empty_claim(wq):
    proc = _processor(wq)
    delivered = _write_after_the_claim(proc)
    assert proc.run() == 0
    assert delivered == [0]


# -- a burst worker claims again after the hooks of the successes it wrote -----------------------
after_hook = pqflow.Workflow("it_burst_after_hook", retry_wait=0)


@after_hook.step()
def only(ctx):
    return 2


class ChainingDecider(pqflow.Decider):
    """Its ``on_run_finished`` hook (run after the deciding transaction committed) starts the
    next run: a task this worker serves, made due by a success written with a claim that had read
    the table before the hook ran."""

    workflows = [chain, after_hook]

    def on_run_finished(self, run_id, status):
        if run_id == "r1":
            after_hook.start("r2", {}, queue=self.queue)


def test_a_burst_worker_claims_again_after_the_hooks_of_successes_written_with_its_claim(wq):
    chain.start("r1", {}, queue=wq)
    s = config.build({"url": wq.config["url"], "table": wq.table, "poll_interval": 0.05})
    assert Processor(ChainingDecider, s, burst=True, queue=wq).run() == 0
    assert pqflow.get_run("r1", queue=wq).status == "succeeded"
    r2 = pqflow.get_run("r2", queue=wq)
    assert r2 is not None and r2.status == "succeeded", r2 and r2.statuses


class Recorder:
    served_types = ["t"]
    ran: list[str] = []

    def __init__(self, task):
        self.task = task

    def run(self):
        Recorder.ran.append(self.task.key)


def test_a_burst_worker_goes_on_past_claims_that_only_ended_rows(wq):
    """More rows out of attempts (their leases expired) than four claims end ahead of a due task:
    the claim returns nothing, noting that it ended rows, and the burst worker claims again."""
    past = wq.now() - 1000
    for i in range(20):
        wq.submit(f"dead{i}", "t", {}, max_attempts=1, priority=5, now=past)
    held = 0
    while held < 20:  # held, then silent: expired (a batch ends at a row with max_attempts)
        got = wq.poll_multi(20, alive_time=1, now=past)
        assert got
        held += len(got)
    wq.submit("live", "t", {}, now=past)
    Recorder.ran = []
    s = config.build({"url": wq.config["url"], "table": wq.table, "poll_interval": 0.05})
    assert Processor(Recorder, s, burst=True, queue=wq).run() == 0
    assert Recorder.ran == ["live"]
    assert {t.status for t in wq.list()} == {"finished"}
