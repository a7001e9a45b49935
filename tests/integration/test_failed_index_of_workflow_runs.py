"""Workflow steps and runs failing, retried by pqflow, started again (a cleared
group) and purged: the failure readers match the task rows on the three databases."""

from __future__ import annotations

from conftest import serve_decider
from test_failed_index_matches_the_task_rows import assert_exact

import pqflow

T0 = 1_700_000_000.0
STATE = {"fail": True}

flow = pqflow.Workflow("r16b_flow")


@flow.step()
def first(ctx):
    return 1


@flow.step(after="first")
def second(ctx):
    if STATE["fail"]:
        raise KeyError("second broke")
    return 2


class Decider(pqflow.Decider):
    workflows = [flow]


def serve(queue, now):
    serve_decider(queue, Decider, now)


def test_a_run_failed_retried_and_started_again(queue, clock):
    STATE["fail"] = True
    clock.set(T0) if hasattr(clock, "set") else None
    flow.start("r1", queue=queue, now=T0)
    serve(queue, T0)
    assert_exact(queue, T0)
    assert len(queue.failures()) >= 1
    STATE["fail"] = False
    pqflow.runs.retry_run(queue, "r1", now=T0 + 10)
    assert_exact(queue, T0 + 10)
    serve(queue, T0 + 10)
    assert_exact(queue, T0 + 10)
    assert sum(g.count for g in queue.failures()) == 0
    # fail again, then a new run of the same id after the old one's retention ends
    STATE["fail"] = True
    flow.start("r2", queue=queue, now=T0 + 20)
    serve(queue, T0 + 20)
    assert_exact(queue, T0 + 20)
    far = T0 + 10**8
    try:
        flow.start("r2", queue=queue, now=far)
    except Exception:  # noqa: BLE001 - kept until purged: purge first
        queue.cleanup(now=far)
        flow.start("r2", queue=queue, now=far)
    assert_exact(queue, far)
    serve(queue, far)
    assert_exact(queue, far)
    queue.cleanup(now=far * 2)
    assert_exact(queue, far * 2)
