"""Receipts (``queue_core/store/receipts.py``) age by the queue's clock and need the upgrade.

1. Clocks. ``cleanup`` purges receipts by the queue's clock (``now``: the database server's clock
   on MySQL/PostgreSQL, or the injected ``now=``), so a receipt must be stamped by that clock, not
   this host's wall clock (``time.time()``): else a receipt a minute old by the queue's clock goes
   when this host's wall clock is over an hour behind the server's (and one two hours old stays
   when it is ahead), and a worker's cleanup (every ``cleanup_interval``) between a lost
   acknowledgement and the re-run makes the re-run change again (a second requeue / move, or
   AlreadyFinishedError for its own cancel).
2. A queue table of schema version 7 (not upgraded yet) beside another program's table named
   ``<table>_receipts``: cleanup must not DELETE that program's rows, nor an operator's change
   INSERT into it; the receipts table and the schema version are checked before use (a
   SchemaError tells to run init).

Faults: ``lost_commit`` (test_operator_change_rerun_after_an_unknown_commit.py).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from conftest import downgrade
from test_operator_change_rerun_after_an_unknown_commit import dropped, failed, first_write_faulted, kinds, lost_commit

import queue_core
from queue_core.clock import FakeClock
from queue_core.errors import SchemaError
from queue_core.store.receipts import RECEIPT_KEEP

T0 = 1_700_000_000.0


def _receipt_count(q) -> int:
    with q.db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(q.store.receipts.t)).scalar_one()


def _server_now() -> float:
    """The queue's clock (the database server's) two hours ahead of this host's wall clock."""
    return time.time() + 2 * 3600


# -- 1. clocks --------------------------------------------------------------------------------


def test_cleanup_keeps_a_receipt_a_minute_old_by_the_queues_clock(queue):
    t = _server_now()
    queue.submit("a", "t", now=t)
    queue.move("a", "q2", now=t)  # one receipt
    assert _receipt_count(queue) == 1
    queue.cleanup(now=t + 60)
    assert _receipt_count(queue) == 1, "a receipt one minute old (queue's clock) was purged"


def test_cleanup_purges_a_receipt_two_hours_old_by_the_queues_clock(queue):
    queue.submit("a", "t", now=T0)
    queue.move("a", "q2", now=T0)
    assert _receipt_count(queue) == 1
    queue.cleanup(now=T0 + RECEIPT_KEEP + 3600)
    assert _receipt_count(queue) == 0, "a receipt two hours old (queue's clock) was kept"


@pytest.mark.parametrize("op", ["retry_failed", "move", "cancel"])
def test_a_workers_cleanup_before_the_rerun_does_not_make_it_change_twice(queue, other, op):
    """The first run committed (acknowledgement lost); a worker on another host runs its cleanup
    a second later (queue's clock) before the re-run: the re-run must still find its receipt."""
    t = _server_now()
    if op == "retry_failed":
        failed(queue, "k", now=t)
    else:
        queue.submit("k", "t", now=t)

    def worker_fails_it_again_then_cleans_up():
        if op == "retry_failed":
            other.poll(now=t + 11).fail(ValueError("again"), now=t + 12)
        other.cleanup(now=t + 13)

    with lost_commit(queue, between=worker_fails_it_again_then_cleans_up) as state:
        if op == "retry_failed":
            assert queue.retry_failed(now=t + 10) == 1
        elif op == "move":
            queue.move("k", "q2", now=t + 10)
        else:
            assert queue["k"].cancel(now=t + 10) == "finished"  # raised AlreadyFinishedError
    assert state["fired"] == 1
    if op == "retry_failed":
        assert kinds(queue, "k").count("requeued") == 1, kinds(queue, "k")
        assert queue["k"].metadata().outcome == "failure"
    elif op == "move":
        assert kinds(queue, "k") == ["submitted", "moved"]


@pytest.fixture
def other(db_url, table_name, queue):
    o = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    yield o
    o.close()


# -- 2. a table not upgraded, beside another program's <table>_receipts ------------------------


def _as_version_7_beside_a_foreign_receipts_table(queue, columns, rows=None) -> sa.Table:
    """The queue's tables as the previous release left them (schema 7: no receipts table) and
    another program's table ``<table>_receipts`` holding two old rows."""
    name = queue.store.receipts.t.name
    with queue.db.engine.begin() as conn:
        queue.store.receipts.t.drop(conn)
    downgrade(queue.store, [], 7)
    foreign = sa.Table(name, sa.MetaData(), *columns)
    with queue.db.engine.begin() as conn:
        foreign.create(conn)
        conn.execute(
            sa.insert(foreign), rows or [{"at": 1000.0, "note": "theirs 1"}, {"at": 2000.0, "note": "theirs 2"}]
        )
    return foreign


def _rows(queue, foreign) -> list:
    with queue.db.engine.connect() as conn:
        return sorted(str(r.note) for r in conn.execute(sa.select(foreign.c.note)))


def test_cleanup_on_a_table_not_upgraded_leaves_another_programs_receipts_table_alone(queue, db_url, table_name):
    foreign = _as_version_7_beside_a_foreign_receipts_table(
        queue,
        [
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("at", sa.Double, nullable=False),
            sa.Column("note", sa.String(50)),
        ],
    )
    worker = queue_core.open(db_url, table_name, clock=FakeClock(T0))  # the new release's worker
    try:
        with pytest.raises(SchemaError, match="init"):
            worker.cleanup(now=T0)
    finally:
        worker.close()
        assert _rows(queue, foreign) == ["theirs 1", "theirs 2"], "cleanup deleted another program's rows"


def test_an_operator_on_a_table_not_upgraded_writes_nothing_in_another_programs_receipts_table(
    queue, db_url, table_name
):
    foreign = _as_version_7_beside_a_foreign_receipts_table(
        queue,
        [
            sa.Column("token", sa.String(64), primary_key=True),
            sa.Column("at", sa.Double, nullable=False),
            sa.Column("note", sa.String(50)),
        ],
        rows=[{"token": "a", "at": 1000.0, "note": "theirs"}],
    )
    queue.submit("k", "t", now=T0)
    operator = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    try:
        with pytest.raises(SchemaError, match="init"):
            operator.move("k", "q2", now=T0 + 1)
    finally:
        operator.close()
        assert _rows(queue, foreign) == ["theirs"], "the move wrote into another program's table"


# -- 3. a COMMIT that completes on the server after the client gave up on it ------------------------


@contextmanager
def commit_completes_late(q, backend):
    """The next write transaction's COMMIT is under way when the client sees the connection drop;
    the server completes it only after the re-run looked for its receipt (a slow fsync, a
    synchronous replica's acknowledgement: the transaction is not visible yet, its locks held).
    The client cannot tell this from any other lost acknowledgement."""
    if backend == "sqlite":
        pytest.skip("one writer at a time: the re-run's BEGIN IMMEDIATE waits for the COMMIT")
    checked, threads, fired = threading.Event(), [], []
    real_claim = q.store.receipts.claim

    def claim(conn, token, at):
        if fired:  # the re-run is about to look: now the server completes the first COMMIT
            checked.set()
        return real_claim(conn, token, at)

    def fault(original, write, autocommit):
        fired.append(1)
        cm = original(write, autocommit)
        yield cm.__enter__()

        def server_completes_the_commit():
            checked.wait(60)
            cm.__exit__(None, None, None)

        th = threading.Thread(target=server_completes_the_commit)
        th.start()
        threads.append(th)
        raise dropped()

    q.store.receipts.claim = claim
    try:
        with first_write_faulted(q, fault) as state:
            yield state
    finally:
        checked.set()
        for th in threads:
            th.join(60)
        del q.store.receipts.claim


@pytest.mark.parametrize("op", ["retry_failed", "move", "cancel"])
def test_a_commit_completing_after_the_client_gave_up_is_reported_done(queue, backend, op):
    if op == "retry_failed":
        failed(queue, "k")
    else:
        queue.submit("k", "t", now=T0)
    with commit_completes_late(queue, backend) as state:
        if op == "retry_failed":
            assert queue.retry_failed(now=T0 + 10) == 1
        elif op == "move":
            queue.move("k", "q2", now=T0 + 10)  # raised DatabaseError (duplicate receipt token)
        else:
            assert queue["k"].cancel(now=T0 + 10) == "finished"  # raised AlreadyFinishedError
    assert state["fired"] == 1
    assert kinds(queue, "k").count({"retry_failed": "requeued", "move": "moved", "cancel": "cancelled"}[op]) == 1
