"""A batch's settle (``store/settles.py``): one ``finished`` event per task it finished, exactly
the row an INSERT ... SELECT of the task as the change left it writes, whatever changed since
the claim (tracked since, a lease taken over, a start edited by hand, a COMMIT whose
acknowledgement was lost); hostile keys and types; a real worker's batches."""

from __future__ import annotations

from event_checks import (
    SettleWays,
    assert_like_reference,
    bits,
    event_rows,
    hand_edit,
    marks_claims,
    reference_rows,
    take_over,
)
from test_history import commit_ack_lost_once
from test_rendered_event_inserts_match_insert_select import HOSTILE, TRICKY

import queue_core
from queue_core.store.events import COLUMNS

T0 = 1_700_000_000.0


def _claim(q, n, now):
    held = q.poll_multi(n, alive_time=10**6, now=now)
    assert len(held) == n
    return held


def _finished(q, at) -> list[dict]:
    return sorted((r for r in event_rows(q, "finished") if r["at"] == at), key=lambda r: r["task_id"])


def test_events_of_hostile_keys_and_types_are_those_an_insert_select_writes(queue, backend, monkeypatch):
    q, ways = queue, SettleWays(queue, monkeypatch)
    for i, (key, type_) in enumerate(zip(HOSTILE, reversed(HOSTILE), strict=True)):
        q.submit(key or "empty", type_ or "empty", now=T0 - TRICKY[i % len(TRICKY)] % 1e6)
    held = _claim(q, len(HOSTILE), T0 + 0.1)
    for at in (T0 + 9.000001, T0 + 1e13 / 3):
        some = [h for h in held if not h.done][: len(held) // 2 + 1]
        assert q.finish_many(some, now=at) == []
        got = _finished(q, at)
        assert_like_reference(got, reference_rows(q, "finished", [h._id for h in some], at))
        for r in got:
            h = next(x for x in some if x._id == r["task_id"])
            assert bits(r["waited"]) == bits(h.started_at - h.run_at) and bits(r["ran"]) == bits(at - h.started_at)
            assert (r["key"], r["type"], r["queue"], r["owner"], r["tracked"]) == (h.key, h.type, "default", q.owner, 0)
    everyone = sorted(h._id for h in held if h.done)  # on MySQL from what was held, elsewhere read back
    assert sorted(ways.held if marks_claims(backend) else ways.read_back) == everyone
    assert (ways.read_back if marks_claims(backend) else ways.held) == []


def test_a_task_tracked_since_its_claim_is_read_back_tracked(queue):
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
    held = _claim(q, 4, T0 + 1)
    q["k2"].track()
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    assert [r["tracked"] for r in got] == [0, 0, 1, 0]
    assert all(q[h.key].metadata().status == "finished" for h in held)


def test_a_lost_lease_and_a_start_edited_by_hand_in_one_batch(queue):
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(5)], now=T0)
    held = q.poll_multi(5, alive_time=10, now=T0 + 1)
    lost = held[1]
    take_over(q, lost, T0 + 2, T0 + 3)
    hand_edit(q, [held[3]._id], started_at={held[3]._id: T0 + 0.5})
    gone = q.finish_many(held, now=T0 + 4)
    assert [t.key for t in gone] == ["k1"]
    got = _finished(q, T0 + 4)
    ids = [h._id for h in held if h is not lost]
    assert_like_reference(got, reference_rows(q, "finished", ids, T0 + 4))
    assert [r["task_id"] for r in got] == ids
    assert got[2]["ran"] == 4 - 0.5  # the start as the row says it (edited by hand), as read back


def test_a_lost_commit_acknowledgement_writes_each_event_once(queue):
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(6)], now=T0)
    held = _claim(q, 6, T0 + 1)
    q["k4"].track()
    with commit_ack_lost_once(q) as state:
        assert q.finish_many(held, now=T0 + 2) == []
    assert state["fired"] == 1
    got = _finished(q, T0 + 2)
    assert [r["task_id"] for r in got] == sorted(h._id for h in held)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))


def test_the_batches_of_another_queue_object_write_one_event_per_task(queue, db_url, backend, tmp_path):
    """Batches of 32 claimed and finished by another Queue object: one finished event per task,
    each with its claim's owner and start."""
    queue.submit_many([{"key": f"w{i}", "type": "t"} for i in range(200)])
    w = queue_core.open(db_url, queue.table)
    try:
        while batch := w.poll_multi(32, alive_time=60):
            w.finish_many(batch)
    finally:
        w.close()
    rows = event_rows(queue, "finished")
    assert sorted(r["key"] for r in rows) == sorted(f"w{i}" for i in range(200))
    metas = {r["key"]: queue[r["key"]].metadata() for r in rows}
    for r in rows:
        assert r["owner"] == w.owner and r["attempt"] == 1 and r["tracked"] == 0
        assert bits(r["ran"]) == bits(r["at"] - metas[r["key"]].started_at)
    assert set(COLUMNS) <= set(rows[0])
