"""A row copied by hand from a step or map item under another key carries that step's bookkeeping
but is not the step: a cancel does not count it as the step, and it never holds its run open. The
run ends as its own rows do (pqflow's ``_own``: a row's key must be the one its bookkeeping names)."""

from __future__ import annotations

import sqlalchemy as sa
from fault_support import drive
from hand_edited_flows import Decider, run_task, w

import pqflow


def _copy(q, key: str, new_key: str, **values) -> None:
    t = q.store.t
    with q.db.engine.begin() as conn:
        row = dict(conn.execute(sa.select(t).where(t.c.key == key)).one()._mapping)
        row.pop("id")
        row.update(key=new_key, **values)
        conn.execute(sa.insert(t).values(**row))


def _serve_until(q, key):
    """Run the due tasks until ``key`` is claimed; returns it, its handler not run."""
    for _ in range(20):
        task = q.poll(alive_time=600)
        assert task is not None, f"{key} never claimed"
        if task.key == key:
            return task
        run_task(q, task)
    raise AssertionError(f"{key} never claimed")


def test_a_cancel_does_not_take_a_copy_of_a_running_item_for_it(queue):
    w.start("c1", queue=queue)
    real = _serve_until(queue, "c1#double#0")
    _copy(queue, "c1#double#0", "c1#double#copy", leased=0, lease_token=None, timeout=0, attempts=0, owner=None)
    pqflow.cancel_run(queue, "c1")
    run_task(queue, real)  # the real item returns after the cancel
    drive(queue, Decider)
    run = pqflow.get_run("c1", queue=queue)
    assert run.status == "cancelled", (run.status, run.statuses)
    assert run.steps["double"].items.total == 3


def test_a_copy_of_a_step_row_still_waiting_does_not_hold_its_run_open(queue, clock):
    w.start("c2", queue=queue)  # its first steps' rows are submitted with it
    assert queue["c2#load"].metadata().status == "waiting"
    _copy(queue, "c2#load", "c2#load-copy", timeout=clock.now() + 3600, run_at=clock.now() + 3600)
    drive(queue, Decider)
    assert pqflow.get_run("c2", queue=queue).status == "succeeded"
    clock.advance(3601)
    drive(queue, Decider)  # the copy is claimed and dropped as not a step of the run
    assert pqflow.get_run("c2", queue=queue).status == "succeeded"


def test_a_retry_does_not_take_a_copy_in_a_maps_group_for_an_item_to_run_again(queue):
    w.start("c3", queue=queue)
    real = _serve_until(queue, "c3#double#0")
    pqflow.cancel_run(queue, "c3")
    run_task(queue, real)
    drive(queue, Decider)
    assert pqflow.get_run("c3", queue=queue).status == "cancelled"
    _copy(queue, "c3#double#2", "c3#double#copy")  # finished as cancelled, in the map's group
    pqflow.retry_run(queue, "c3")
    drive(queue, Decider)
    run = pqflow.get_run("c3", queue=queue)
    assert run.status == "succeeded", (run.statuses, run.steps["double"].items)
    assert (run.steps["double"].items.total, run.steps["double"].items.succeeded) == (3, 3)
