"""A step row the claim ends instead of leasing (a value pq never writes, edited by hand: set
aside; attempts used up) is a step that failed: its run decides what follows in the claim's
commit (trigger rules, a map's count, the run's end), as a worker's claim does it, and the run
does not stay running for ever."""

from __future__ import annotations

import re

import sqlalchemy as sa
from hand_edited_flows import Decider, one, run_task, w

import pqflow
from queue_core import Dispatch, config
from queue_core.store.schema import FOREVER
from queue_core.worker.main import Processor


def _serve(q) -> None:
    s = config.build({"url": q.config["url"], "table": q.table, "poll_interval": 0.05})
    assert Processor(Decider, s, burst=True, queue=q).run() == 0


def _edit(q, key: str, **values) -> None:
    t = q.store.t
    with q.db.engine.begin() as conn:
        assert conn.execute(sa.update(t).where(t.c.key == key).values(**values)).rowcount == 1


def _until_due(q, key: str):
    """Serve the run until the row ``key`` waits (submitted, not yet run): the worker stops first."""
    for _ in range(20):
        rows = {m.key: m for m in q.list()}
        if key in rows and rows[key].status == "waiting":
            return
        task = q.poll(alive_time=30)
        assert task is not None, f"{key} never submitted"
        run_task(q, task)
    raise AssertionError(f"{key} never waited")


def test_a_step_row_set_aside_by_the_claim_fails_its_step_and_its_run_goes_on(queue):
    w.start("r1", queue=queue)
    _until_due(queue, "r1#load")
    _edit(queue, "r1#load", resource="")  # an empty user: pq never writes one
    _serve(queue)
    run = pqflow.get_run("r1", queue=queue)
    assert run.steps["load"].status == "failed" and "set aside by the claim" in run.steps["load"].error
    assert "column resource holds" in run.steps["load"].error
    assert (run.steps["report"].status, run.steps["cleanup"].status) == ("skipped", "succeeded")
    assert run.status == "failed"


def test_a_map_item_out_of_attempts_at_the_claim_fails_alone_and_the_join_runs(queue):
    w.start("r2", queue=queue)
    _until_due(queue, "r2#double#1")
    _edit(queue, "r2#double#1", max_attempts=1, attempts=1)  # as if it had spent its only attempt
    _serve(queue)
    run = pqflow.get_run("r2", queue=queue)
    assert run.steps["total"].status == "succeeded"
    assert run.steps["total"].result == {"double": [2, None, 6], "failed": {"double": [1]}}
    assert run.status == "failed" and run.steps["double"].error == "1 of 3 items failed"


def test_a_set_aside_step_of_a_run_whose_row_is_unreadable_stays_ended(queue):
    """Nothing to decide for (the run's own row edited too): the step row still ends, the claim
    goes on, and the worker with it."""
    w.start("r3", queue=queue)
    _until_due(queue, "r3#load")
    _edit(queue, "r3#load", resource="")
    _edit(queue, "r3", workflow='{"not": "a run"}')
    _serve(queue)
    t = queue.store.t
    with queue.db.engine.connect() as conn:  # read raw: the row still holds the hand-edited user
        r = conn.execute(sa.select(t.c.outcome, t.c.error).where(t.c.key == "r3#load")).one()
    assert r.outcome == "failure" and "set aside by the claim" in r.error


def test_an_engine_that_raises_on_the_rows_a_claim_ended_is_rolled_back_alone_and_logged(queue, caplog):
    queue.submit("bad", "t")
    queue.submit("good", "t")
    _edit(queue, "bad", workflow="{}", resource="")  # a run's row (its workflow set), edited by hand
    seen = []

    def engine_down(tx, rows):
        seen.extend((r["key"], r["outcome"]) for r in rows)
        tx.submit("side-effect", "t")
        raise RuntimeError("engine down")

    batch = queue.poll_multi(2, alive_time=10, ended_by_claim=engine_down)
    assert [t.key for t in batch] == ["good"] and seen == [("bad", "failure")]
    with queue.db.engine.connect() as conn:  # read raw: "bad" still holds the hand-edited user
        keys = set(conn.execute(sa.select(queue.store.t.c.key)).scalars())
    assert keys == {"bad", "good"}  # the engine's submit rolled back with it
    assert "could not decide what follows: engine down" in caplog.text and "'bad'" in caplog.text


def test_a_copy_of_a_step_row_under_another_key_set_aside_decides_nothing(queue, caplog):
    """A row copied by hand from a running step (its bookkeeping names that step) and then set
    aside is not the step: the real step runs on and decides its successors alone."""
    w.start("r4", queue=queue)
    _until_due(queue, "r4#load")
    (real,) = queue.poll_multi(1, alive_time=600)
    t = queue.store.t
    with queue.db.engine.begin() as conn:
        copy = dict(conn.execute(sa.select(t).where(t.c.key == "r4#load")).one()._mapping)
        copy.pop("id")
        copy.update(key="copy-of-load", leased=0, lease_token=None, timeout=0, attempts=0, resource="", owner=None)
        conn.execute(sa.insert(t).values(**copy))
    also = queue.poll_multi(1, alive_time=600, ended_by_claim=Decider.ended_by_claim)
    assert [t.key for t in also] == ["r4#items"]  # the claim set the copy aside, then went on
    assert "'copy-of-load', not a step of a readable run: run 'r4' is not told" in caplog.text
    assert pqflow.get_run("r4", queue=queue).statuses["report"] == "pending"
    for task in (real, *also):
        run_task(queue, task)
    _serve(queue)
    run = pqflow.get_run("r4", queue=queue)
    assert (run.status, run.statuses) == (
        "succeeded",
        dict.fromkeys(["load", "report", "cleanup", "items", "double", "total"], "succeeded"),
    )


def test_a_step_the_claim_gave_up_on_of_a_run_that_cannot_be_read_is_logged(queue, clock, caplog):
    one.start("r5", queue=queue)
    _until_due(queue, "r5#only")
    assert [t.key for t in queue.poll_multi(1, alive_time=10)] == ["r5#only"]
    _edit(queue, "r5#only", max_attempts=1)
    _edit(queue, "r5", workflow='{"not": "a run"}')
    clock.advance(11)  # its lease expired: due again, out of attempts
    assert queue.poll_multi(1, alive_time=10, ended_by_claim=Decider.ended_by_claim) == []
    assert queue["r5#only"].metadata().outcome == "failure"
    assert "the claim ended row 'r5#only', not a step of a readable run: run 'r5' is not told" in caplog.text


class _Routed(Dispatch):
    routes = [(re.compile(r"^hand_edited"), Decider)]


def test_a_set_aside_step_is_decided_when_a_dispatch_routes_its_type_to_a_decider(queue):
    w.start("r6", queue=queue)
    _until_due(queue, "r6#load")
    _edit(queue, "r6#load", resource="")
    s = config.build({"url": queue.config["url"], "table": queue.table, "poll_interval": 0.05})
    assert Processor(_Routed, s, burst=True, queue=queue).run() == 0
    run = pqflow.get_run("r6", queue=queue)
    assert (run.status, run.statuses["report"], run.statuses["cleanup"]) == ("failed", "skipped", "succeeded")


def test_a_step_the_claim_ended_is_kept_until_its_run_ends(queue, clock):
    """Kept as a step's own end keeps its row (a workflow row's purge time is its run's): the purge
    of finished rows never takes it from a run that goes on (its retry, its map's results need it)."""
    w.start("r7", queue=queue)
    _until_due(queue, "r7#double#1")
    _edit(queue, "r7#double#1", max_attempts=1, attempts=1)
    queue.poll_multi(10, alive_time=60, ended_by_claim=Decider.ended_by_claim)  # every due row: it is ended
    t = queue.store.t
    with queue.db.engine.connect() as conn:
        purge_at = conn.execute(sa.select(t.c.timeout).where(t.c.key == "r7#double#1")).scalar_one()
    assert purge_at == FOREVER and pqflow.get_run("r7", queue=queue).status == "running"


def test_a_run_whose_decision_raises_does_not_keep_another_run_of_the_claim_from_deciding(queue, caplog, monkeypatch):
    """Each run decides in a savepoint of its own: a decision that raises (a fault injected into
    r8's) is rolled back and logged, and r9, whose row the same claim ended, is decided."""
    w.start("r8", queue=queue)
    one.start("r9", queue=queue)
    _until_due(queue, "r8#load")
    _until_due(queue, "r9#only")
    _edit(queue, "r8#load", resource="")
    _edit(queue, "r9#only", resource="")
    real = pqflow.completions.what_follows

    def what_follows(tx, run, ended):
        if run.run_id == "r8":
            raise pqflow.FlowError("a decision that cannot be made")
        return real(tx, run, ended)

    monkeypatch.setattr(pqflow.completions, "what_follows", what_follows)
    queue.poll_multi(10, alive_time=60, ended_by_claim=Decider.ended_by_claim)
    assert "run 'r8' could not decide what follows the rows the claim ended: a decision that cannot be made" in (
        caplog.text
    )
    assert pqflow.get_run("r9", queue=queue).status == "failed"
    assert pqflow.get_run("r8", queue=queue).statuses["report"] == "pending"  # r8's decision rolled back


class _Broken:
    """A route whose hook raises: it must not keep the other routes' runs from deciding."""

    @classmethod
    def ended_by_claim(cls, tx, rows):
        raise RuntimeError("this engine is broken")


class _RoutedWithABrokenEngine(Dispatch):
    routes = [("broken", _Broken), (re.compile(r"^hand_edited"), Decider)]


def test_a_routed_engine_that_raises_leaves_the_other_routes_runs_decided(queue, caplog):
    one.start("r10", queue=queue)
    _until_due(queue, "r10#only")
    queue.submit("b1", "broken")
    _edit(queue, "b1", workflow="{}", resource="")
    _edit(queue, "r10#only", resource="")
    queue.poll_multi(10, alive_time=60, ended_by_claim=_RoutedWithABrokenEngine.ended_by_claim)
    assert "could not decide what follows 1 rows a claim ended: this engine is broken" in caplog.text
    assert pqflow.get_run("r10", queue=queue).status == "failed"
