"""A workflow step whose function raises an error with a NUL in its text (binary input quoted in a
message) fails with that error on every database. On PostgreSQL the step's final error (and its
traceback) are refused by the text columns (cannot contain NUL): the failure's transaction raises,
the step's lease is left to expire and it runs again until the crash allowance fails it with a
false "its worker died ... times" (the same story the MariaDB 1406 fix told for long errors)."""

from __future__ import annotations

from fault_support import calls, drive

import pqflow

wf = pqflow.Workflow("rv_nul_error", retry_wait=0)


@wf.step(retries=0)
def parse(ctx):
    calls[(ctx.run_id, "parse")] += 1
    raise ValueError("unexpected byte in record: a\x00b")


class Decider(pqflow.Decider):
    workflows = [wf]


def test_a_step_error_with_a_nul_fails_the_step_with_it(queue, clock):
    wf.start("r", queue=queue)
    for _ in range(10):
        try:
            drive(queue, Decider, limit=20)
        except Exception as exc:  # noqa: BLE001 - what a worker's settle would log
            calls["raised"] += 1
            last = exc
        clock.advance(31)  # leases of a failed write expire
        if pqflow.get_run("r", queue=queue).status != "running":
            break
    run = pqflow.get_run("r", queue=queue)
    step = run.steps["parse"]
    assert (run.status, step.status) == ("failed", "failed"), (calls, locals().get("last"))
    assert step.error.startswith("ValueError: unexpected byte in record"), step.error
    assert calls[("r", "parse")] == 1, calls
