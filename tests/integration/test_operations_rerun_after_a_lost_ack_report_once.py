"""Queue controls, tags and tracking, a holder's changes, finish_many, schedule changes and
pqflow's cancel and retry, under a lost acknowledgement (a write transaction's COMMIT applied,
its acknowledgement lost, the transaction run again by the store): each must report what its
first run did, and write it once."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conftest import serve_decider
from test_operator_change_rerun_after_an_unknown_commit import T0, kinds, lost_commit, other  # noqa: F401 (a fixture)

import pqflow

flow = pqflow.Workflow("r18_flow")
STATE = {"fail": True}


@flow.step()
def first(ctx):
    if STATE["fail"]:
        raise KeyError("first broke")
    return 1


@flow.step(after="first")
def second(ctx, first):
    return 2


class Decider(pqflow.Decider):
    workflows = [flow]


def serve(queue, now):
    serve_decider(queue, Decider, now)


# -- queue controls, tags, tracking --------------------------------------------------------------


def test_queue_controls_tags_and_tracking_after_a_lost_acknowledgement(queue):
    queue.submit("k", "t", now=T0)
    with lost_commit(queue) as state:
        assert queue.pause("default", now=T0 + 1).paused is True
    assert state["fired"] == 1
    with lost_commit(queue) as state:
        assert queue.resume("default", now=T0 + 2).paused is False
    assert state["fired"] == 1
    with lost_commit(queue) as state:
        s = queue.limit("default", concurrency=2, rate="5/60s", now=T0 + 3)
    assert state["fired"] == 1 and (s.concurrency, s.rate_limit) == (2, 5)
    with lost_commit(queue) as state:
        assert queue["k"].tag("a", "b") == ["a", "b"]
    assert state["fired"] == 1
    with lost_commit(queue) as state:
        assert queue["k"].untag("a") == ["b"]
    assert state["fired"] == 1
    with lost_commit(queue) as state:
        queue["k"].track()
    assert state["fired"] == 1
    assert [m.key for m in queue.list(tracked=True)] == ["k"]
    with lost_commit(queue) as state:
        queue["k"].untrack()
    assert state["fired"] == 1
    assert kinds(queue, "k") == ["submitted"]


# -- a holder's own changes -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["release", "retry", "fail", "finish"])
def test_a_holders_change_after_a_lost_acknowledgement_is_reported_once(queue, op):
    queue.submit("k", "t", now=T0)
    t = queue.poll(alive_time=60, now=T0 + 1)
    with lost_commit(queue) as state:
        if op == "release":
            t.release(now=T0 + 2)
        elif op == "retry":
            t.retry(5, now=T0 + 2, error="again")
        elif op == "fail":
            t.fail(ValueError("boom"), now=T0 + 2)
        else:
            t.finish(now=T0 + 2)
    assert state["fired"] == 1
    want = {"release": "released", "retry": "retried", "fail": "finished", "finish": "finished"}[op]
    assert kinds(queue, "k") == ["submitted", "claimed", want]


def test_finish_many_after_a_lost_acknowledgement(queue):
    for k in ("a", "b"):
        queue.submit(k, "t", now=T0)
    held = queue.poll_multi(2, now=T0 + 1)
    with lost_commit(queue) as state:
        assert queue.finish_many(held, now=T0 + 2) == []
    assert state["fired"] == 1
    assert kinds(queue, "a") == kinds(queue, "b") == ["submitted", "claimed", "finished"]


# -- perfectsched ---------------------------------------------------------------------------------


def test_schedule_add_after_a_lost_acknowledgement_succeeds(sched):
    with lost_commit(sched) as state:
        sched.add("s", "t", cron="*/5 * * * *", now=T0)
    assert state["fired"] == 1
    assert sched["s"].exists()


def test_schedule_delete_after_a_lost_acknowledgement_succeeds(sched):
    sched.add("s", "t", cron="*/5 * * * *", now=T0)
    with lost_commit(sched) as state:
        sched["s"].delete()
    assert state["fired"] == 1
    assert not sched["s"].exists()


def test_schedule_modify_after_a_lost_acknowledgement(sched):
    sched.add("s", "t", cron="*/5 * * * *", now=T0)
    with lost_commit(sched) as state:
        meta = sched.modify("s", cron="*/10 * * * *", data={"v": 2}, now=T0 + 1)
    assert state["fired"] == 1
    assert meta.cron == "*/10 * * * *" and meta.to_dict() == sched["s"].metadata().to_dict()


def test_schedule_resume_after_a_lost_acknowledgement_reports_it_resumed(sched):
    sched.add("s", "t", cron="*/5 * * * *", now=T0)
    t = sched.store.t
    good = sched.store.schedule_get("s")["timezone"]
    sched.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "s").values(timezone="Mars/Olympus_Mons")))
    sched.tick(now=T0 + 3600)
    assert sched["s"].metadata(check=False).error
    sched.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "s").values(timezone=good)))
    with lost_commit(sched) as state:
        resumed = sched["s"].resume(now=T0 + 3601)
    assert state["fired"] == 1
    assert sched["s"].metadata().error is None
    assert resumed is True


# -- pqflow -----------------------------------------------------------------------------------------


def test_pqflow_cancel_whose_first_transaction_lost_its_acknowledgement(queue):
    STATE["fail"] = False
    flow.start("c1", queue=queue, now=T0)  # 'first' is submitted, waiting
    run = pqflow.get_run("c1", queue=queue)
    with lost_commit(queue) as state:
        run = run.cancel(now=T0 + 1)
    assert state["fired"] == 1
    serve(queue, T0 + 2)
    run = pqflow.get_run("c1", queue=queue)
    assert run.status == "cancelled"
    assert kinds(queue, "c1#first") == ["submitted", "cancelled"]


def test_pqflow_cancel_whose_second_transaction_lost_its_acknowledgement(queue):
    STATE["fail"] = False
    flow.start("c2", queue=queue, now=T0)
    run = pqflow.get_run("c2", queue=queue)
    fired = {"n": 0}
    original = queue.db._connection
    from contextlib import contextmanager

    @contextmanager
    def conn(write, autocommit=False):  # the second write transaction: commits, then drops
        with original(write, autocommit) as c:
            yield c
        if write and not autocommit:
            fired["n"] += 1
            if fired["n"] == 2:
                raise sa.exc.OperationalError("COMMIT", {}, ConnectionError("lost"), connection_invalidated=True)

    queue.db._connection = conn
    try:
        run = run.cancel(now=T0 + 1)
    finally:
        queue.db._connection = original
    assert fired["n"] >= 3
    serve(queue, T0 + 2)
    run = pqflow.get_run("c2", queue=queue)
    assert run.status == "cancelled"
    assert kinds(queue, "c2#first") == ["submitted", "cancelled"]


def test_pqflow_retry_after_a_lost_acknowledgement_reopens_once(queue, other):  # noqa: F811
    """The retry's COMMIT applied; before the re-run, the run failed again (its step failed at
    once): the re-run must not reopen it a second time (the operator retried once)."""
    STATE["fail"] = True
    flow.start("r1", queue=queue, now=T0)
    serve(queue, T0)
    assert pqflow.get_run("r1", queue=queue).status == "failed"
    requeues_before = kinds(queue, "r1#first").count("claimed")

    with lost_commit(queue, between=lambda: serve(other, T0 + 11)) as state:
        pqflow.runs.retry_run(queue, "r1", now=T0 + 10)
    assert state["fired"] == 1
    serve(queue, T0 + 12)
    assert pqflow.get_run("r1", queue=queue).status == "failed"
    # one retry by the operator: 'first' ran once more, not twice
    assert kinds(queue, "r1#first").count("reopened") == 1, kinds(queue, "r1#first")
    assert kinds(queue, "r1#first").count("claimed") - requeues_before == 1, kinds(queue, "r1#first")


def test_pqflow_retry_after_a_lost_acknowledgement_reports_the_run_running(queue):
    STATE["fail"] = True
    flow.start("r2", queue=queue, now=T0)
    serve(queue, T0)
    with lost_commit(queue) as state:
        run = pqflow.runs.retry_run(queue, "r2", now=T0 + 10)
    assert state["fired"] == 1 and run.status == "running"
    assert kinds(queue, "r2#first").count("reopened") == 1
