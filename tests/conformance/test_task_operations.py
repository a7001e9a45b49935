"""The Store protocol's operations on tasks, on SQLite, MariaDB and PostgreSQL alike: each called on
a queue's store directly (``queue.store``), its effect read back through the store."""

from __future__ import annotations

import pytest
from store_support import T0, claimed, column, in_tx, new, submitted

from queue_core import IdempotentAlreadyFinishedError, PreemptedError
from queue_core.store.protocol import BrowseFilter, Settled


def test_submitted_tasks_are_read_back_by_key_and_a_taken_key_is_refused(queue):
    s = queue.store
    assert s.task_submit([new("a"), new("b", type="u", data='{"x": 1}')], T0) == 2
    assert s.task_submit([new("a"), new("c")], T0) == 1  # a's key is taken
    assert s.task_submit_one(new("d", queue="other"), T0) is True
    assert s.task_submit_one(new("d"), T0) is False
    assert in_tx(queue, lambda c: s.task_insert(c, [new("e"), new("a")], T0)) == 1
    b = s.task_get("b")
    assert (b["key"], b["type"], b["data"], b["queue"]) == ("b", "u", '{"x": 1}', "default")
    assert (b["attempts"], b["leased"]) == (0, 0)
    assert s.task_get("absent") is None
    rows = in_tx(queue, lambda c: s.task_rows_by_keys(c, ["e", "absent", "a"]))
    assert sorted(r["key"] for r in rows) == ["a", "e"]  # in no promised order
    assert in_tx(queue, lambda c: s.task_lock(c, "d"))["queue"] == "other"
    assert in_tx(queue, lambda c: s.task_lock(c, "absent")) is None


def test_lists_and_counts_show_each_task_once_by_status(queue):
    s = queue.store
    submitted(s, "a", "b", "c")
    submitted(s, "later", run_at=T0 + 3600)
    claimed(s, 1)
    assert [r["key"] for r in s.task_list(now=T0 + 2)] == ["a", "b", "c", "later"]
    assert [r["key"] for r in s.task_list(status="running", now=T0 + 2)] == ["a"]
    assert [r["key"] for r in s.task_list(now=T0 + 2, after_id=s.task_get("b")["id"], limit=1)] == ["c"]
    assert sorted(s.task_counts(T0 + 2)) == [("t", "running", None, 1), ("t", "waiting", None, 3)]
    by_queue = s.queue_counts(T0 + 2)["default"]
    assert (by_queue["running"], by_queue["waiting"], by_queue["finished"], by_queue["oldest_due"]) == (1, 3, 0, T0)
    assert s.queue_live_counts(T0 + 2)["default"]["running"] == 1
    live = s.stats_live_counts(T0 + 2)[("default", "t")]
    assert (live["running"], live["waiting"], live["scheduled"]) == (1, 2, 1)


def test_a_claim_leases_due_tasks_by_priority_and_the_holder_heartbeats_and_finishes(queue):
    s = queue.store
    submitted(s, "low")
    submitted(s, "high", priority=5)
    submitted(s, "later", run_at=T0 + 3600)
    first, second = claimed(s, 2)
    assert [first["key"], second["key"]] == ["high", "low"]
    assert (first["leased"], first["attempts"], first["owner"], first["timeout"]) == (1, 1, "host:1", T0 + 31)
    assert s.task_claim(5, 30.0, T0 + 2, "host:2") == []  # "later" is not due
    assert s.task_heartbeat(first["id"], first["lease_token"], 60.0, lambda: T0 + 3) == (T0 + 63, False)
    with pytest.raises(PreemptedError):
        s.task_heartbeat(first["id"], first["lease_token"] + 1, 60.0, lambda: T0 + 3)
    s.task_finish(first["id"], first["lease_token"], "success", None, T0 + 100, T0 + 4)
    done = s.task_get("high")
    assert (done["state"], done["leased"], done["outcome"]) == (1, 0, "success")
    assert (done["finished_at"], done["timeout"]) == (T0 + 4, T0 + 100)  # kept until its purge time
    with pytest.raises(IdempotentAlreadyFinishedError):
        s.task_finish(first["id"], first["lease_token"], "success", None, T0 + 100, T0 + 5)
    row, events = s.task_history("high")
    assert row["key"] == "high" and "finished" in [e["kind"] for e in events]
    assert s.task_history("absent") is None


def test_a_holder_gives_tasks_back_by_retry_release_and_release_of_its_batch(queue):
    s = queue.store
    submitted(s, "a", "b", "c", "d")
    a, b, c, d = claimed(s, 4)
    s.task_retry(a["id"], a["lease_token"], T0 + 50, T0 + 2, error="boom")
    assert (column(s, "a", "leased"), column(s, "a", "run_at"), column(s, "a", "error")) == (0, T0 + 50, "boom")
    s.task_release(b["id"], b["lease_token"], T0 + 2)
    assert (column(s, "b", "leased"), column(s, "b", "attempts")) == (0, 0)  # the attempt goes back
    assert s.task_release_batch([c["id"], d["id"]], c["lease_token"], T0 + 2) == [c["id"], d["id"]]
    assert s.task_release_batch([c["id"]], c["lease_token"], T0 + 3) == []  # given back already
    with pytest.raises(PreemptedError):
        s.task_release(b["id"], b["lease_token"], T0 + 3)


def test_a_settle_finishes_a_batch_and_returns_the_leases_it_had_lost(queue):
    s = queue.store
    submitted(s, "a", "b")
    a, b = claimed(s, 2)
    lost = s.task_settle([Settled(a["id"], a["lease_token"], T0 + 99, "failure"), Settled(b["id"], 7, T0 + 99)], T0 + 3)
    assert [(x.id, x.token) for x in lost] == [(b["id"], 7)]
    assert (column(s, "a", "outcome"), column(s, "b", "outcome"), column(s, "b", "leased")) == ("failure", None, 1)


def test_a_lease_lost_before_its_handler_started_gives_its_attempt_back(queue):
    s = queue.store
    submitted(s, "a", "b")
    a, b = claimed(s, 2)
    assert s.task_lost_before_start(a["id"], "a", a["created_at"], a["lease_token"], T0 + 2) == "released"
    assert (column(s, "a", "leased"), column(s, "a", "attempts")) == (0, 0)
    assert s.task_lost_before_start(a["id"], "a", a["created_at"], a["lease_token"], T0 + 3) in ("released", "")
    s.task_give_back_unstarted(b["id"], b["lease_token"], T0 + 1, T0 + 2)
    assert (column(s, "b", "leased"), column(s, "b", "attempts"), column(s, "b", "timeout")) == (0, 0, T0 + 2)


def test_operator_changes_cancel_move_force_finish_and_replace_data(queue):
    s = queue.store
    submitted(s, "a", "b", "c", "d")
    (held,) = claimed(s, 1)  # "a"
    assert s.task_cancel("b", T0 + 2, T0 + 100) == "cancelled"
    assert s.task_cancel("a", T0 + 2, T0 + 100) == "running"  # flagged: its holder winds down
    assert s.task_heartbeat(held["id"], held["lease_token"], 30.0, lambda: T0 + 3)[1] is True
    assert s.task_cancel_many([s.task_get("c")["id"], held["id"]], T0 + 2, T0 + 100) == [s.task_get("c")["id"]]
    s.task_move("d", "other", T0 + 2)
    assert column(s, "d", "queue") == "other"
    s.task_force_finish("d", T0 + 3, T0 + 100, "success")
    assert (column(s, "d", "state"), column(s, "d", "outcome")) == (1, "success")
    assert in_tx(queue, lambda c: s.task_set_data(c, "a", '{"n": 2}')) is True
    assert in_tx(queue, lambda c: s.task_set_data(c, "absent", "{}")) is False
    assert column(s, "a", "data") == '{"n": 2}'


def test_tags_and_tracking_select_what_lists_and_pages_read(queue):
    s = queue.store
    submitted(s, "a", "b", tags=("red",))
    submitted(s, "c")
    assert s.tag_change("c", add=["blue"]) == ["blue"]
    assert s.tag_change("a", add=["blue"], remove=["red"]) == ["blue"]
    assert s.task_get("a", tags=True)["tags"] == ["blue"]
    assert [r["key"] for r in s.task_list(tag="blue", now=T0)] == ["a", "c"]
    s.task_set_tracked("b", True)
    assert [r["key"] for r in s.task_list(tracked=True, now=T0)] == ["b"]
    page = s.task_browse_page(BrowseFilter(tag="red"), before_id=None, limit=10, now=T0)
    assert [r["key"] for r in page] == ["b"]
    newest_first = s.task_browse_page(BrowseFilter(), before_id=None, limit=2, now=T0)
    assert [r["key"] for r in newest_first] == ["c", "b"]
    assert [r["key"] for r in s.task_waiting_page(T0, tag="blue")] == ["a", "c"]


def test_a_purge_deletes_finished_rows_past_their_retention_only(queue):
    s = queue.store
    submitted(s, "old", "young", "live")
    old, young = claimed(s, 2)
    s.task_finish(old["id"], old["lease_token"], "success", None, T0 + 10, T0 + 2)
    s.task_finish(young["id"], young["lease_token"], "success", None, T0 + 1000, T0 + 2)
    assert s.task_purge(T0 + 500) == 1
    assert (s.task_get("old"), column(s, "young", "outcome"), column(s, "live", "state")) == (None, "success", 0)
    submitted(s, "old", now=T0 + 501)  # its key is free again
