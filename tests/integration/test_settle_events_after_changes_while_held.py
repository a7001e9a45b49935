"""Whatever changes a held task's row while it is held (tracked, an attempt given back
by an earlier holder, a move once its lease expired, hand edits, a task listed twice), a batch's
settle (``store/settles.py``) writes for each task it finished exactly one ``finished`` event,
the row an INSERT ... SELECT of the task row as the settle left it writes (``reference_rows``),
on every backend, whichever way its settle writes them (from what the worker holds of the
claim, or read back)."""

from __future__ import annotations

import copy

import pytest
import sqlalchemy as sa
from event_checks import (
    assert_like_reference,
    assert_stream_and_statistics_see_each_finish_once,
    bits,
    event_rows,
    hand_edit,
    reference_rows,
)
from test_history import commit_ack_lost_once

import queue_core
from queue_core.store.settles import Settled

T0 = 1_700_000_000.0


@pytest.fixture
def held_path(queue):
    """The queue whose settles are checked: every backend's settle, whichever way it writes."""
    return queue


def _finished(q, at=None) -> list[dict]:
    rows = [r for r in event_rows(q, "finished") if at is None or r["at"] == at]
    return sorted(rows, key=lambda r: r["task_id"])


def _submit(q, n, prefix="k"):
    q.submit_many([{"key": f"{prefix}{i}", "type": "t"} for i in range(n)], now=T0)


def _claim(q, n, now, alive=10**6):
    held = q.poll_multi(n, alive_time=alive, now=now)
    assert len(held) == n
    return held


# -- what an API call may change on a held row before its holder settles it ----------------------


def test_a_task_moved_once_its_lease_expired_is_written_in_the_queue_it_is_in(held_path):
    """``move`` is allowed once a lease expired (NOT_RUNNING), not taken over: the holder still
    finishes it (the finish fence is the token alone), and the row's queue is the new one."""
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1, alive=10)
    q.move("k1", "other", now=T0 + 20)  # its lease expired at T0 + 11
    assert q.finish_many(held, now=T0 + 21) == []
    got = _finished(q, T0 + 21)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 21))
    assert [r["queue"] for r in got] == ["default", "other", "default"]


def test_a_task_listed_twice_gets_one_event(held_path):
    """Two AcquiredTask objects of one lease (``_split`` keeps each object once, not each task)."""
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1)
    assert q.finish_many([*held, copy.copy(held[1])], now=T0 + 2) == []
    assert [r["task_id"] for r in _finished(q)] == [h._id for h in held]


def test_a_task_listed_twice_beside_a_lost_one_gets_one_event(held_path):
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1, alive=10)
    hand_edit(q, [held[2]._id], timeout={held[2]._id: T0 + 2})  # its lease ends ...
    [taken] = q.poll_multi(1, alive_time=10, now=T0 + 3)  # ... and another claim takes it over
    assert taken.key == "k2"
    gone = q.finish_many([held[0], copy.copy(held[0]), held[1], held[2]], now=T0 + 4)
    assert sorted(t.key for t in gone) == ["k2"]
    assert [r["task_id"] for r in _finished(q)] == [held[0]._id, held[1]._id]


def test_the_store_settles_a_duplicated_entry_once(held_path):
    q = held_path
    _submit(q, 2)
    held = _claim(q, 2, T0 + 1)
    entries = q._settle_entries(held, T0 + 2)
    assert q.store.task_settle([*entries, entries[0]], T0 + 2) == []
    assert [r["task_id"] for r in _finished(q)] == [h._id for h in held]


def test_track_then_untrack_between_claim_and_settle(held_path):
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1)
    q["k1"].track()
    q["k1"].untrack()
    q["k2"].track()
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    assert [r["tracked"] for r in got] == [0, 0, 1]


def test_an_expired_lease_not_taken_over_is_finished_once(held_path):
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1, alive=5)
    assert q.finish_many(held, now=T0 + 100) == []
    got = _finished(q, T0 + 100)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 100))
    assert not event_rows(q, "expired")


def test_cancelled_and_force_finished_meanwhile_are_lost_without_an_event(held_path):
    q = held_path
    _submit(q, 4)
    held = _claim(q, 4, T0 + 1, alive=10)
    q["k1"].force_finish(now=T0 + 2)
    q["k2"].cancel(now=T0 + 20)  # expired lease: nobody runs it, cancelled at once
    gone = q.finish_many(held, now=T0 + 21)
    assert sorted(t.key for t in gone) == ["k1", "k2"]
    assert [r["task_id"] for r in _finished(q)] == [held[0]._id, held[3]._id]
    assert_like_reference(_finished(q), reference_rows(q, "finished", [held[0]._id, held[3]._id], T0 + 21))


def test_an_attempt_given_back_by_an_earlier_holder_while_held(held_path):
    """``lost_before_start`` of an earlier holder gives back an attempt on the row a later lease
    holds (``return_attempt``: LATER_LEASE): the row's attempts change under the holder, through
    the API. Its finished event must carry the attempts the row has, as a read back does."""
    q = held_path
    _submit(q, 3)
    first = _claim(q, 3, T0 + 1, alive=10)
    second = _claim(q, 3, T0 + 20)  # took them all over
    assert [t.attempts for t in second] == [2, 2, 2]
    assert first[1].lost_before_start(now=T0 + 21) == "returned"
    assert q.finish_many(second, now=T0 + 22) == []
    got = _finished(q, T0 + 22)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in second], T0 + 22))
    assert [r["attempt"] for r in got] == [2, 1, 2]


# -- hand edits while held -------------------------------------------------------------------------


@pytest.mark.parametrize("column", ["key", "type", "queue"])
def test_a_name_edited_by_hand_while_held_is_written_as_the_row_says(held_path, column):
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1)
    hand_edit(q, [held[1]._id], **{column: {held[1]._id: "edited"}})
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    assert got[1][column] == "edited"


@pytest.mark.parametrize("column", ["run_at", "attempts"])
def test_a_due_time_or_attempt_edited_by_hand_while_held_is_written_as_the_row_says(held_path, column):
    """The change's known divergence (not fenced). A fence on ``run_at = due_at`` and
    ``attempts = attempt`` costs nothing on a row found by its primary key."""
    q = held_path
    _submit(q, 3)
    held = _claim(q, 3, T0 + 1)
    hand_edit(q, [held[1]._id], **{column: {held[1]._id: {"run_at": T0 - 50.0, "attempts": 7}[column]}})
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))


@pytest.mark.parametrize("edit", [str.upper, lambda s: s + " ", lambda s: s.replace("e", "\u00e9")])
def test_an_owner_edited_by_hand_while_held_is_written_as_the_row_says(held_path, edit):
    """MySQL compares the owner (a utf8mb4 VARCHAR in the table's default collation) case-, accent-
    and pad-insensitively: the fence ``owner = <claim owner>`` lets an edited owner through."""
    q = held_path
    q.owner = "worker-e:1"
    _submit(q, 2)
    held = _claim(q, 2, T0 + 1)
    edited = edit(held[0].owner)
    assert edited != held[0].owner
    hand_edit(q, [held[0]._id], owner={held[0]._id: edited})
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    assert got[0]["owner"] == edited


def test_a_claim_and_a_settle_at_negative_zero(held_path):
    """check_time accepts -0.0: a claim at now=-0.0 (its start -0.0), settled at 0.0 and -0.0.
    (MariaDB stores no -0.0.)"""
    q = held_path
    q.submit_many([{"key": f"z{i}", "type": "t"} for i in range(2)], now=0.0)
    held = _claim(q, 2, -0.0)
    assert q.finish_many(held[:1], now=-0.0) == []
    assert q.finish_many(held[1:], now=0.0) == []
    got = _finished(q)
    assert_like_reference(got[:1], reference_rows(q, "finished", [held[0]._id], -0.0))
    assert_like_reference(got[1:], reference_rows(q, "finished", [held[1]._id], 0.0))


# -- several claims, lost acknowledgements, older callers -----------------------------------------


def test_two_claims_of_two_owners_in_one_settle(held_path, db_url, clock):
    q = held_path
    other = queue_core.open(db_url, q.table, clock=clock)
    other.owner = "other-host:1"
    try:
        _submit(q, 6)
        mine = _claim(q, 2, T0 + 1)
        theirs = _claim(other, 2, T0 + 1)  # the same start, another owner
        mine2 = _claim(q, 2, T0 + 1.5)  # same owner, another start
        entries = q._settle_entries([*mine, *mine2], T0 + 2) + other._settle_entries(theirs, T0 + 2)
        hand_edit(q, [theirs[0]._id], owner={theirs[0]._id: "someone-else"})
        gone = q.store.task_settle(entries, T0 + 2)
        assert gone == []
        ids = sorted(h._id for h in [*mine, *mine2, *theirs])
        got = _finished(q, T0 + 2)
        assert [r["task_id"] for r in got] == ids
        assert_like_reference(got, reference_rows(q, "finished", ids, T0 + 2))
    finally:
        other.close()


def test_rows_of_a_claim_retried_after_a_lost_acknowledgement(held_path):
    q = held_path
    _submit(q, 5)
    with commit_ack_lost_once(q) as state:
        held = q.poll_multi(5, alive_time=10**6, now=T0 + 1)
    assert state["fired"] == 1 and len(held) == 5
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    assert [e.kind for e in q.history("k0")] == ["submitted", "claimed", "finished"]


def test_a_settle_in_a_claim_whose_acknowledgement_is_lost(held_path):
    q = held_path
    _submit(q, 8)
    first = _claim(q, 4, T0 + 1)
    q["k2"].track()
    with commit_ack_lost_once(q) as state:
        second = q.poll_multi(4, alive_time=10**6, now=T0 + 2, finish=first)
    assert state["fired"] == 1 and len(second) == 4
    assert all(t.done and not t.lost for t in first)
    got = _finished(q, T0 + 2)
    assert [r["task_id"] for r in got] == sorted(h._id for h in first)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in first], T0 + 2))
    with commit_ack_lost_once(q) as state:
        assert q.finish_many(second, now=T0 + 3) == []
    assert [r["task_id"] for r in _finished(q, T0 + 3)] == sorted(h._id for h in second)


def test_a_partial_settle_whose_acknowledgement_is_lost(held_path):
    """One row tracked since, one taken over: the held UPDATE falls short, then the retry."""
    q = held_path
    _submit(q, 5)
    held = _claim(q, 5, T0 + 1, alive=10)
    q["k1"].track()
    hand_edit(q, [held[3]._id], timeout={held[3]._id: T0 + 2})
    [taken] = q.poll_multi(1, alive_time=10, now=T0 + 3)
    assert taken.key == "k3"
    with commit_ack_lost_once(q) as state:
        gone = q.finish_many(held, now=T0 + 4)
    assert state["fired"] == 1
    assert [t.key for t in gone] == ["k3"]
    ids = [h._id for h in held if h.key != "k3"]
    got = _finished(q, T0 + 4)
    assert [r["task_id"] for r in got] == ids
    assert_like_reference(got, reference_rows(q, "finished", ids, T0 + 4))


def test_entries_without_held_and_failure_outcomes_go_the_read_back_way(held_path):
    q = held_path
    _submit(q, 4)
    held = _claim(q, 4, T0 + 1)
    purge = T0 + 1000
    entries = [
        Settled(held[0]._id, held[0]._token, purge),
        Settled(held[1]._id, held[1]._token, purge),
        Settled(held[2]._id, held[2]._token, purge, outcome="failure"),
        Settled(held[3]._id, held[3]._token, purge, outcome="cancelled"),
    ]
    assert q.store.task_settle(entries, T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert [r["outcome"] for r in got] == ["success", "success", "failure", "cancelled"]
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))


def test_the_event_stream_history_and_statistics_see_each_finish_once(held_path):
    q = held_path
    _submit(q, 6)
    held = _claim(q, 6, T0 + 1)
    assert q.finish_many(held[:3], now=T0 + 2) == []
    more = q.poll_multi(0, now=T0 + 3, finish=held[3:])
    assert more == []
    got = _finished(q)
    assert len(got) == 6
    for h in held:
        kinds = [e.kind for e in q.history(h.key)]
        assert kinds == ["submitted", "claimed", "finished"], (h.key, kinds)
        last = q.history(h.key)[-1]
        assert bits(last.at) in (bits(T0 + 2), bits(T0 + 3))
    assert_stream_and_statistics_see_each_finish_once(q, held, T0)


def test_a_settle_on_the_real_database_path_matches_with_hostile_names(queue):
    """Hostile names on each backend."""
    names = ["'", "\\", "%s", "\U0001f600" * 255, "é" * 255, "a" * 255, "X''", "\u2028"]
    for i, n in enumerate(names):
        queue.submit(n, n[:200] + str(i), queue="default", now=T0)
    held = _claim(queue, len(names), T0 + 1)
    assert queue.finish_many(held, now=T0 + 2) == []
    got = _finished(queue, T0 + 2)
    assert sorted(r["key"] for r in got) == sorted(names)
    assert_like_reference(got, reference_rows(queue, "finished", [h._id for h in held], T0 + 2))
    # nothing a name held touched anything else
    assert len(event_rows(queue)) == len(names)  # a submission's event is its row; untracked: no claim row
    t = queue.store.t
    assert queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(t)).scalar()) == len(names)
