"""The lease heartbeat and the registry renewal as autocommit statements: a held lease is extended
by one statement, an expired one never revived, a cancel reported, a lost acknowledgement
harmless; a renewal recreates a swept row, concurrent ones do not raise."""

from __future__ import annotations

import functools
import json
import threading

import pytest
import sqlalchemy as sa
from conftest import run_together
from sqlalchemy import event
from workflow_faults.fault_support import ack_lost_once

from queue_core import CancelRequestedError, PreemptedError
from queue_core.store.workers import WorkerIdentity


def _row(q, key):
    t = q.store.t
    return q.db.run(lambda c: dict(c.execute(sa.select(t).where(t.c.key == key)).one()._mapping), write=False)


def _statements(q):
    seen = []
    engines = [q.db.engine] + ([q.db._statement_engine()] if q.db.dialect.autocommit_pool else [])

    def spy(conn, cursor, statement, params, context, executemany):
        seen.append(statement.split()[0].upper())

    for e in engines:
        event.listen(e, "before_cursor_execute", spy)
    return seen, lambda: [event.remove(e, "before_cursor_execute", spy) for e in engines]


def test_a_held_lease_is_extended_by_one_statement(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=30)
    clock.advance(10)
    seen, stop = _statements(queue)
    try:
        task.heartbeat(alive_time=30)
    finally:
        stop()
    assert seen == ["UPDATE"], seen
    assert _row(queue, "k")["timeout"] == pytest.approx(clock.now() + 30)


def test_twice_at_the_same_instant_still_held(queue, clock):
    """Two heartbeats at the same clock reading write the same values (MySQL: 0 rows *changed*)."""
    queue.submit("k", "t")
    task = queue.poll(alive_time=30)
    task.heartbeat(alive_time=30)
    task.heartbeat(alive_time=30)
    task.update_data({"a": 1}, alive_time=30)
    task.update_data({"a": 1}, alive_time=30)
    assert json.loads(_row(queue, "k")["data"]) == {"a": 1}


def test_an_expired_lease_is_never_revived(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=30)
    clock.advance(30)  # exactly at the lease's end
    with pytest.raises(PreemptedError):
        task.update_data({"x": 1}, alive_time=30)
    row = _row(queue, "k")
    assert row["timeout"] == pytest.approx(clock.now()) and json.loads(row["data"] or "{}") == {}


def test_a_cancel_is_reported_after_extending_with_data(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=30)
    assert queue["k"].cancel_request() == "running"
    clock.advance(5)
    with pytest.raises(CancelRequestedError):
        task.update_data({"x": 2}, alive_time=30)
    row = _row(queue, "k")
    assert row["timeout"] == pytest.approx(clock.now() + 30) and json.loads(row["data"]) == {"x": 2}
    assert row["leased"] == 1


@pytest.mark.parametrize("cancel", [False, True])
def test_a_heartbeat_whose_ack_is_lost_behaves(queue, clock, cancel):
    queue.submit("k", "t")
    task = queue.poll(alive_time=30)
    if cancel:
        queue["k"].cancel_request()
    clock.advance(29)
    with ack_lost_once(queue, "heartbeat") as fired:
        if cancel:
            with pytest.raises(CancelRequestedError):
                task.update_data({"n": 1}, alive_time=30)
        else:
            task.update_data({"n": 1}, alive_time=30)
    assert fired["fired"] == 1
    row = _row(queue, "k")
    assert row["timeout"] == pytest.approx(clock.now() + 30) and json.loads(row["data"]) == {"n": 1}


def test_a_renewal_recreates_a_swept_row(queue, clock):
    w = WorkerIdentity("h:1", "h", 1, '["default"]', None, "v")
    queue.store.worker_register(w, clock.now())
    clock.advance(120)
    queue.store.worker_sweep(clock.now() - 60)
    assert queue.workers() == []
    queue.store.worker_renew(w, clock.now() - 120, clock.now())
    [info] = queue.workers()
    assert info.owner == "h:1" and info.started_at == clock.now() - 120


def test_concurrent_renewals_of_a_swept_row_do_not_raise(queue, clock, db_url, table_name):
    """Two renewals of one swept row at once (a registry thread's renewal and a restart's
    register): UPDATE matches nothing in both, both DELETE, both INSERT."""
    import queue_core

    w = WorkerIdentity("h:2", "h", 2, '["default"]', None, "v")
    others = [queue_core.open(db_url, table_name, clock=clock) for _ in range(2)]
    errors: list[BaseException] = []
    try:
        for q in others:
            q.workers()  # first-use checks done
        for _round in range(15):
            queue.store.worker_remove("h:2")
            barrier = threading.Barrier(2)

            def renew(q, barrier=barrier):
                barrier.wait()
                q.store.worker_renew(w, clock.now(), clock.now())

            errors += run_together(*(functools.partial(renew, q) for q in others))
    finally:
        for q in others:
            q.close()
    assert errors == [], errors[:1]
    assert [i.owner for i in queue.workers()] == ["h:2"]


def test_a_registration_whose_insert_ack_is_lost(queue, clock):
    """The INSERT of a (re-)registration commits, its acknowledgement is lost, Database.run runs
    it again: the row is there already."""
    w = WorkerIdentity("h:3", "h", 3, '["default"]', None, "v")
    assert queue.workers() == []  # the first-use checks of the tables run now, not inside the fault
    real = queue.db.run
    calls = {"n": 0, "fired": 0}

    def run(fn, **kw):
        if kw.get("what") == "register worker":
            calls["n"] += 1
            if calls["n"] == 2:  # the INSERT
                queue.db.run = real
                try:
                    with ack_lost_once(queue, "register worker") as fired:
                        return queue.db.run(fn, **kw)
                finally:
                    calls["fired"] = fired["fired"]
                    queue.db.run = run
        return real(fn, **kw)

    queue.db.run = run
    try:
        queue.store.worker_register(w, clock.now())
    finally:
        queue.db.run = real
    assert calls["fired"] == 1
    assert [i.owner for i in queue.workers()] == ["h:3"]
