"""A step or map that started is never decided again, and a run never ends while a row of it is
open. A map step with more than one parent whose trigger fires on the first (one_success,
one_failed) has started when a later parent ends: that end is only counted. Driven in this
process, one completion per commit, in the orders that break it."""

from __future__ import annotations

import pytest
from fault_support import calls, drive, run_one

import pqflow
from pqflow.completions import _Writes, start_map
from pqflow.errors import FlowError

# src -> each (map over src) <- other; each fires on src's success (one_success)
early = pqflow.Workflow("dec_once_success", retries=0, retry_wait=0)


@early.step()
def src(ctx):
    return [1, 2, 3]


@early.step()
def other(ctx):
    calls[(ctx.run_id, "other")] += 1
    if (ctx.data or {}).get("fail_other_once") and calls[(ctx.run_id, "other")] == 1:
        raise RuntimeError("other fails once")
    return "ok"


@early.step(map=src, after=[other], trigger="one_success")
def each(ctx, item):
    calls[(ctx.run_id, "each", item)] += 1
    if item == (ctx.data or {}).get("fail_item_once") and calls[(ctx.run_id, "each", item)] == 1:
        raise RuntimeError(f"item {item} fails once")
    return item * 10


@early.step(after=each)
def fin(ctx, each):
    return each


# src, bad (fails), late -> on_bad (map over src) fires on bad's failure (one_failed)
handler = pqflow.Workflow("dec_once_failed", retries=0, retry_wait=0)


@handler.step()
def xs(ctx):
    return [4, 5]


@handler.step()
def bad(ctx):
    raise RuntimeError("bad fails")


@handler.step()
def late(ctx):
    return "late"


@handler.step(map=xs, after=[bad, late], trigger="one_failed")
def on_bad(ctx, item):
    return item + 1


@handler.step(after=on_bad)
def report(ctx, on_bad):
    return on_bad


class Decider(pqflow.Decider):
    workflows = [early, handler]
    batch_completions = False  # one commit per completion: the orders below are exact


def _status(queue, run_id: str) -> pqflow.Run:
    return pqflow.get_run(run_id, queue=queue)


def test_a_later_parent_of_a_started_one_success_map_is_only_counted(queue):
    early.start("r", queue=queue)
    run_one(queue, Decider, "r#src")  # one_success holds: each starts with 3 items
    assert _status(queue, "r").steps["each"].items.total == 3
    run_one(queue, Decider, "r#other")  # ends after each started
    run = _status(queue, "r")
    assert run.status == "running" and run.statuses["each"] == "waiting", (run.status, run.statuses)
    drive(queue, Decider)
    run = _status(queue, "r")
    assert run.status == "succeeded", (run.statuses, run.steps["each"].error)
    assert run.steps["fin"].result == [10, 20, 30]
    assert all(calls[("r", "each", i)] == 1 for i in (1, 2, 3))


def test_a_later_parent_of_a_started_one_failed_map_is_only_counted(queue):
    handler.start("h", queue=queue)
    run_one(queue, Decider, "h#xs")
    run_one(queue, Decider, "h#bad")  # one_failed holds: on_bad starts with 2 items
    run_one(queue, Decider, "h#late")  # ends after on_bad started
    run = _status(queue, "h")
    assert run.status == "running" and run.statuses["on_bad"] == "waiting", (run.status, run.statuses)
    drive(queue, Decider)
    run = _status(queue, "h")
    assert run.statuses["on_bad"] == "succeeded", run.steps["on_bad"].error
    assert run.steps["report"].result == [5, 6]
    assert run.status == "failed"  # bad failed; only once every row of the run ended


def test_a_parent_cancelled_while_a_map_item_runs_does_not_end_the_map(queue):
    early.start("c", queue=queue)
    run_one(queue, Decider, "c#src")  # each starts
    held = [queue.poll(alive_time=30), queue.poll(alive_time=30)]  # other and an item are running
    assert [t.key for t in held if t is not None] == ["c#other", "c#each#0"], held
    _status(queue, "c").cancel()  # both are told; the other items are cancelled
    Decider(held[0]).run()  # other returns cancelled: each (started) must not end with it
    run = _status(queue, "c")
    assert run.status == "running" and run.statuses["each"] == "running", (run.status, run.statuses)
    Decider(held[1]).run()  # the running item returns, cancelled: now the map and the run end
    run = _status(queue, "c")
    assert run.statuses["each"] == "cancelled" and run.status == "cancelled", (run.status, run.statuses)


def test_a_parent_ending_after_retry_restarted_the_map_is_only_counted(queue):
    early.start("t", {"fail_other_once": True, "fail_item_once": 2}, queue=queue)
    drive(queue, Decider)
    run = _status(queue, "t")
    assert run.status == "failed" and run.statuses["other"] == "failed" and run.statuses["each"] == "failed"
    run = run.retry()  # each re-runs item 2 at once (src kept: one_success holds); other runs again
    assert run.statuses["each"] == "waiting" and run.statuses["other"] == "waiting", run.statuses
    drive(queue, Decider)
    run = _status(queue, "t")
    assert run.status == "succeeded", (run.statuses, run.steps["each"].error)
    assert run.steps["fin"].result == [10, 20, 30]
    assert calls[("t", "each", 2)] == 2 and calls[("t", "each", 1)] == 1


def test_a_map_starts_once_even_from_a_decision_that_read_it_before_its_start(queue):
    """Two deciders racing: the second read the map's row before the first started it. Its
    start is refused by the store (nothing of its decision is written)."""
    early.start("s", queue=queue)
    stale = queue.transaction(lambda tx: _read_each(tx, "s"))  # not started yet
    run_one(queue, Decider, "s#src")  # the map starts
    with pytest.raises(FlowError, match="started by another decision"):
        queue.transaction(lambda tx: _start_again(tx, stale))
    run = _status(queue, "s")
    assert run.statuses["each"] == "waiting" and run.steps["each"].items.total == 3, run.statuses


def _read_each(tx, run_id):
    from pqflow.lifecycle import load_ref
    from pqflow.rows import NodeState

    run = load_ref(tx, run_id)
    row = tx.store.run_read(tx.conn, [f"{run_id}#each"])[f"{run_id}#each"]
    return run, row, NodeState.load(row["workflow"])


def _start_again(tx, stale):
    run, row, node = stale
    writes = _Writes()
    start_map(tx, run, dict(row), node, [7, 8], "", writes)
    writes.flush(tx)


def test_a_run_whose_count_says_done_does_not_end_while_a_row_is_open(queue):
    """The run's open count (bookkeeping) disagrees with its rows: it is not ended (it ends with
    its last row), and the rest of the decision is written."""
    early.start("n", queue=queue)

    def undercount(tx):
        row = tx.store.run_read(tx.conn, ["n"])["n"]
        from pqflow.rows import RunState

        state = RunState.load(row["workflow"])
        state.open = 1
        tx.store.run_set_workflow(tx.conn, row["id"], state.dump())

    queue.transaction(undercount)
    run_one(queue, Decider, "n#src")  # src's success counts 1 step: the count says 0
    assert _status(queue, "n").status == "running"
    assert queue["n#src"].metadata().outcome == "success"  # the decision was written
    assert queue["n#each"].metadata().status != "finished"


def test_a_run_ended_while_a_row_of_it_is_open_is_not_retried(queue):
    """An end written by hand (or by a broken count) while an item runs: retry would count the
    running item as done and start the map's decision again; it is refused until the rows end."""
    early.start("x", queue=queue)
    run_one(queue, Decider, "x#src")  # each starts; its items are waiting

    def end_by_hand(tx):
        from pqflow.rows import RunState

        row = tx.store.run_read(tx.conn, ["x"])["x"]
        state = RunState.load(row["workflow"])
        state.status, state.open = "failed", 0
        tx.store.run_close(tx.conn, row["id"], "failure", tx.now, workflow=state.dump())

    queue.transaction(end_by_hand)
    with pytest.raises(FlowError, match=r"run 'x' has rows still open \(x#each, x#each#0, .*\); retry it once"):
        _status(queue, "x").retry()
    assert _status(queue, "x").status == "failed"
