"""A run started by submitting a plain task (``perfectqueue submit KEY wf``)
is adopted by the decider without the run-id checks of Workflow.start (no '#', length). Its
groups then collide with other runs: adopting it empties those groups (create_rows ->
clear_group), deleting rows of real, running runs.

key '#runs' -> clear_group('#runs') deletes the run row of every run in the table (and its own):
get_run('x') then says "not found", x's waiting steps are dropped as foreign rows, and its pending
rows (timeout FOREVER) stay in the table for ever.
"""

from __future__ import annotations

import pytest
from fault_support import drive, squares_map

import pqflow

mp = squares_map("rv_adopt", result=sum)


class Decider(pqflow.Decider):
    workflows = [mp]


@pytest.mark.parametrize("hostile", ["#runs"])
def test_adopting_a_submitted_run_never_deletes_another_runs_rows(queue, hostile):
    mp.start("x", queue=queue)
    drive(queue, Decider, limit=1)  # x: xs ran, its three items wait
    before = {m.key for m in queue.list()}
    assert {"x", "x#sq#0", "x#sq#1", "x#sq#2"} <= before
    try:
        queue.submit(hostile, "rv_adopt", {}, priority=10)
    except queue_core_errors():
        return  # refused at submit: fine
    task = queue.poll(alive_time=30)
    assert task.key == hostile
    try:
        Decider(task).run()  # the decider takes the plain task up as a run (or refuses it)
    except Exception:  # noqa: BLE001 - a typed refusal is fine
        pass
    after = {m.key for m in queue.list()}
    assert before - after == set(), f"adopting {hostile!r} deleted rows of run 'x': {sorted(before - after)}"
    drive(queue, Decider)
    run = pqflow.get_run("x", queue=queue)
    assert run.status == "succeeded" and run.steps["total"].result == 14


def queue_core_errors():
    import queue_core

    return queue_core.errors.TaskError
