"""A batch's settle writes the ``finished`` events of successes untracked when claimed from what
their holder keeps of the claim (``store/settles.py``) where the claims mark their rows
(MySQL/MariaDB: ``mysql.CLAIM_MARK``, a column the server rewrites on any change of the row).

The rows it writes must be exactly those an INSERT ... SELECT of the rows writes; a row changed in
any way since its claim (tracked, a heartbeat, a move, an attempt given back, a hand edit) goes
the read-back way, and so does every row of a table whose mark is missing or not made by
``init`` (an older table, a column altered by hand). On SQLite and PostgreSQL every settle reads
back (their INSERT ... SELECT is one statement): the same tests hold there."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from event_checks import (
    SettleWays,
    assert_like_reference,
    event_rows,
    hand_edit,
    marks_claims,
    reference_rows,
    take_over,
)
from test_history import commit_ack_lost_once

import queue_core
from queue_core.store import mysql

T0 = 1_700_000_000.0


def _claim(q, n, now, alive=10**6):
    held = q.poll_multi(n, alive_time=alive, now=now)
    assert len(held) == n
    return held


def _finished(q, at) -> list[dict]:
    return sorted((r for r in event_rows(q, "finished") if r["at"] == at), key=lambda r: r["task_id"])


def test_mysql_settles_a_batch_without_reading_its_rows_back(queue, backend):
    if backend != "mysql":
        pytest.skip("the claim mark is MySQL's")
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(8)], now=T0)
    held = _claim(queue, 8, T0 + 1)
    sent: list[str] = []

    def listener(_c, _cur, statement, *_a):
        sent.append(statement.split()[0].upper())

    sa.event.listen(queue.db.engine, "before_cursor_execute", listener)
    try:
        assert queue.finish_many(held, now=T0 + 2) == []
    finally:
        sa.event.remove(queue.db.engine, "before_cursor_execute", listener)
    assert sent == ["UPDATE", "INSERT"]
    assert len(_finished(queue, T0 + 2)) == 8


def _heartbeat(q, held):
    held[2].heartbeat(alive_time=10**6, now=T0 + 1.5)


def _track(q, held):
    q[held[2].key].track()


def _move_after_expiry(q, held):
    hand_edit(q, [held[2]._id], timeout={held[2]._id: T0 + 1.2})
    q.move(held[2].key, "other", now=T0 + 1.5)


def _cancel_request(q, held):
    q[held[2].key].cancel_request()


def _edit(column, value):
    def edit(q, held):
        hand_edit(q, [held[2]._id], **{column: {held[2]._id: value}})

    edit.__name__ = f"hand_edit_{column}"
    return edit


CHANGES = [
    _heartbeat,
    _track,
    _move_after_expiry,
    _cancel_request,
    _edit("key", "renamed"),
    _edit("type", "retyped"),
    _edit("queue", "elsewhere"),
    _edit("attempts", 7),
    _edit("run_at", T0 - 50),
    _edit("started_at", T0 + 0.5),
    _edit("owner", "someone:1"),
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__)
def test_a_row_changed_since_its_claim_is_read_back_and_the_others_are_not(queue, backend, monkeypatch, change):
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(5)], now=T0)
    held = _claim(q, 5, T0 + 1)
    change(q, held)
    assert q.finish_many(held, now=T0 + 2) == []
    got = _finished(q, T0 + 2)
    assert [r["task_id"] for r in got] == sorted(h._id for h in held)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in held], T0 + 2))
    if marks_claims(backend):
        assert ways.read_back == [held[2]._id]
        assert sorted(ways.held) == sorted(h._id for h in held if h is not held[2])


def test_an_attempt_given_back_by_an_earlier_holder_is_read_back(queue, backend, monkeypatch):
    """An earlier holder whose lease was taken over before its handler started gives its attempt
    back on the row the later holder now runs: the later holder's event carries the row's."""
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
    first = _claim(q, 3, T0 + 1, alive=5)
    later = _claim(q, 3, T0 + 10)
    gave = q.store.task_lost_before_start(first[1]._id, first[1].key, first[1].created_at, first[1]._token, T0 + 11)
    assert gave == "returned", gave
    assert q.finish_many(later, now=T0 + 12) == []
    got = _finished(q, T0 + 12)
    assert_like_reference(got, reference_rows(q, "finished", [h._id for h in later], T0 + 12))
    if marks_claims(backend):
        assert ways.read_back == [later[1]._id]


def test_a_lost_lease_and_a_lost_commit_acknowledgement_write_each_event_once(queue, backend, monkeypatch):
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(6)], now=T0)
    held = q.poll_multi(6, alive_time=10, now=T0 + 1)
    lost = held[1]
    take_over(q, lost, T0 + 2, T0 + 3)
    q[held[4].key].track()
    with commit_ack_lost_once(q) as state:
        gone = q.finish_many(held, now=T0 + 4)
    assert state["fired"] == 1 and [t.key for t in gone] == [lost.key]
    got = _finished(q, T0 + 4)
    ours = sorted(h._id for h in held if h is not lost)
    assert [r["task_id"] for r in got] == ours
    assert_like_reference(got, reference_rows(q, "finished", ours, T0 + 4))
    if marks_claims(backend):  # the first run wrote these ways; the run after the lost ack wrote nothing
        assert sorted(ways.held) == sorted(h._id for h in held if h not in (lost, held[4]))
        assert ways.read_back == [held[4]._id]


def _mark_extra(q) -> str | None:
    stmt = sa.text(
        "SELECT extra FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = :t AND column_name = :c"
    )
    return q.db.run(lambda c: c.execute(stmt, {"t": q.table, "c": mysql.CLAIM_MARK}).scalar())


def _settle_ways(url, table, monkeypatch, keys, at):
    q = queue_core.open(url, table)
    try:
        ways = SettleWays(q, monkeypatch)
        q.submit_many([{"key": k, "type": "t"} for k in keys], now=at)
        held = _claim(q, len(keys), at + 1)
        assert q.finish_many(held, now=at + 2) == []
        assert_like_reference(_finished(q, at + 2), reference_rows(q, "finished", [h._id for h in held], at + 2))
        return ways
    finally:
        q.close()


def test_init_makes_the_mark_and_a_mark_without_its_on_update_is_not_trusted(queue, backend, db_url, monkeypatch):
    if backend != "mysql":
        pytest.skip("the claim mark is MySQL's")
    assert "on update current_timestamp" in _mark_extra(queue).lower()
    assert _settle_ways(db_url, queue.table, monkeypatch, ["a", "b"], T0).held != []
    alter = f"ALTER TABLE {queue.table} MODIFY {mysql.CLAIM_MARK} DATETIME(6) NULL"  # its ON UPDATE dropped
    queue.db.run(lambda c: c.exec_driver_sql(alter))
    ways = _settle_ways(db_url, queue.table, monkeypatch, ["c", "d"], T0 + 10)
    assert ways.held == [] and len(ways.read_back) == 2


def test_a_table_of_schema_8_reads_back_until_init_adds_the_mark(queue, backend, db_url, monkeypatch):
    if backend != "mysql":
        pytest.skip("the claim mark is MySQL's")
    meta = queue.store.meta

    def downgrade(c):
        c.exec_driver_sql(f"ALTER TABLE {queue.table} DROP COLUMN {mysql.CLAIM_MARK}")
        c.execute(sa.update(meta).where(meta.c.name == "schema_version").values(value="8"))

    queue.db.run(downgrade)
    ways = _settle_ways(db_url, queue.table, monkeypatch, ["a", "b"], T0)  # a worker of this release, before init
    assert ways.held == [] and len(ways.read_back) == 2
    queue.init()
    assert queue.store.tables_version() == 10 and "on update" in _mark_extra(queue).lower()
    assert len(_settle_ways(db_url, queue.table, monkeypatch, ["c", "d"], T0 + 10).held) == 2
