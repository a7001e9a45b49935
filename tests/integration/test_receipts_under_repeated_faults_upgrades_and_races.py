"""Receipts (``queue_core/store/receipts.py``) hold under several faults in a row, retries
exhausted, a failure between the receipt and the COMMIT, the upgrade from schema 7, another
program's ``<table>_receipts`` at ``init``, table names of 40 characters, two operators at once."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from conftest import downgrade, own_queue, run_together
from test_operator_change_rerun_after_an_unknown_commit import failed, kinds, lost_commit

import queue_core
from queue_core.clock import FakeClock
from queue_core.errors import AlreadyFinishedError, ForeignTableError, OutcomeUnknownError, SchemaError

T0 = 1_700_000_000.0


def _dropped():
    return sa.exc.OperationalError("COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True)


@contextmanager
def commits(q, plan):
    """Write transactions in turn: ``plan[i]`` for the i-th: "applied" (COMMIT applied, then the
    connection drops), "rolled back" (dropped before the COMMIT applied), None (untouched)."""
    db, original, seen = q.db, q.db._connection, []

    @contextmanager
    def conn(write, autocommit=False):
        if not write or autocommit or len(seen) >= len(plan):
            with original(write, autocommit) as c:
                yield c
            return
        what = plan[len(seen)]
        seen.append(what)
        if what is None:
            with original(write, autocommit) as c:
                yield c
            return
        try:
            with original(write, autocommit) as c:
                yield c
                if what == "rolled back":
                    raise KeyError("rolled back")
        except KeyError:
            pass
        raise _dropped()

    db._connection = conn
    q.db.retry_max_wait = 0.0
    try:
        yield seen
    finally:
        db._connection = original


def _flaky(monkeypatch, obj, name, failures: int, skip: int = 0):
    """``obj.name`` raising a dropped connection (after its statement) in the ``failures`` calls
    after its first ``skip``."""
    real, calls = getattr(obj, name), {"n": 0}

    def flaky(*a, **kw):
        result = real(*a, **kw)
        calls["n"] += 1
        if skip < calls["n"] <= skip + failures:
            raise _dropped()
        return result

    monkeypatch.setattr(obj, name, flaky)
    return calls


def test_rerun_whose_receipt_check_fails_and_whose_own_commit_is_lost_returns_the_first_result(queue, monkeypatch):
    failed(queue, "x")
    calls = _flaky(monkeypatch, queue.store.receipts, "claim", 1, skip=1)  # the re-run's claim fails
    with commits(queue, ["applied", None, "applied", None]) as seen:
        assert queue.retry_failed(now=T0 + 10) == 1
    assert len(seen) == 4 and calls["n"] == 4
    assert kinds(queue, "x").count("requeued") == 1


def test_deadlock_before_commit_then_lost_ack(queue, monkeypatch):
    queue.submit("k", "t", now=T0)
    _flaky(monkeypatch, queue.store.events, "record_key", 1)  # the first run fails before its COMMIT
    with commits(queue, [None, "applied"]):
        queue.move("k", "q2", now=T0 + 1)
    assert kinds(queue, "k") == ["submitted", "moved"]


def test_failure_between_the_receipt_and_the_commit_runs_anew(queue, monkeypatch, other):
    queue.submit("k", "t", now=T0)
    _flaky(monkeypatch, queue.store.receipts, "claim", 1)  # dropped once the receipt is claimed
    queue.move("k", "q3", now=T0 + 5)
    assert queue["k"].metadata().queue_name == "q3" and kinds(queue, "k") == ["submitted", "moved"]


def test_retries_exhausted_after_an_applied_commit_is_outcome_unknown(queue, monkeypatch):
    queue.submit("k", "t", now=T0)
    queue.db.max_retry_count = 3
    _flaky(monkeypatch, queue.store.receipts, "claim", 100, skip=1)
    with commits(queue, ["applied"]):
        with pytest.raises(OutcomeUnknownError):
            queue["k"].cancel(now=T0 + 1)
    assert kinds(queue, "k") == ["submitted", "cancelled"]


def test_rolled_back_twice_then_refused_when_due(queue, other):
    queue.submit("k", "t", now=T0)
    with commits(queue, ["rolled back", "rolled back"]):
        assert queue["k"].cancel(now=T0 + 1) == "finished"
    queue.submit("j", "t", now=T0)
    with lost_commit(queue, applied=False, between=lambda: other["j"].force_finish(now=T0 + 2)):
        with pytest.raises(AlreadyFinishedError):
            queue.move("j", "q2", now=T0 + 3)


@pytest.fixture
def other(db_url, table_name, queue):
    o = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    yield o
    o.close()


# -- upgrade ---------------------------------------------------------------------------------------


def test_upgrade_from_7(queue, db_url, table_name):
    queue.submit("k", "t", now=T0)
    with queue.db.engine.begin() as conn:
        queue.store.receipts.t.drop(conn)
    downgrade(queue.store, [], 7)
    old = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    try:
        with pytest.raises(SchemaError, match="init"):
            old.move("k", "q2", now=T0 + 1)
        assert old["k"].metadata().queue_name == "default"
        old.init()
        assert old.store.tables_version() == 10
        with lost_commit(old):
            old.move("k", "q2", now=T0 + 1)
        assert kinds(old, "k") == ["submitted", "moved"]
    finally:
        old.close()


@pytest.mark.parametrize("force", [False, True])
def test_init_refuses_and_keeps_another_programs_receipts_table(queue, force):
    name = queue.store.receipts.t.name
    with queue.db.engine.begin() as conn:
        queue.store.receipts.t.drop(conn)
    downgrade(queue.store, [], 7)
    foreign = sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("at", sa.Double))
    with queue.db.engine.begin() as conn:
        foreign.create(conn)
        conn.execute(sa.insert(foreign).values(at=1.0))
    with pytest.raises(ForeignTableError):
        queue.init(force=force)
    with queue.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(foreign)).scalar_one() == 1


# -- names, concurrency ----------------------------------------------------------------------------


def test_a_table_name_of_40_characters(db_url, backend):
    name = ("r" + uuid.uuid4().hex + "x" * 40)[:40]
    with own_queue(db_url, name, backend, clock=FakeClock(T0)) as q:
        q.submit("k", "t", now=T0)
        with lost_commit(q):
            q.move("k", "q2", now=T0 + 1)
        assert kinds(q, "k") == ["submitted", "moved"]
        with q.db.engine.connect() as conn:
            indexes = {ix["name"] for ix in sa.inspect(conn).get_indexes(f"{name}_receipts")}
        assert f"ix_{name}_receipts_at" in indexes
        q.cleanup(now=T0)


@pytest.mark.parametrize("op", ["retry_failed", "cancel"])
def test_two_operators_at_once(queue, db_url, table_name, op):
    keys = [f"k{i}" for i in range(20)]
    for k in keys:
        if op == "retry_failed":
            failed(queue, k)
        else:
            queue.submit(k, "t", now=T0)
    results: list = []
    barrier = threading.Barrier(2)

    def operator():
        with queue_core.open(db_url, table_name, clock=FakeClock(T0)) as q:
            barrier.wait()
            if op == "retry_failed":
                results.append(q.retry_failed(now=T0 + 10, batch=5))
                return
            for k in keys:
                try:
                    results.append(q[k].cancel(now=T0 + 10))
                except AlreadyFinishedError:
                    results.append("refused")

    assert run_together(operator, operator) == []
    if op == "retry_failed":
        assert sum(results) == len(keys)
        assert all(kinds(queue, k).count("requeued") == 1 for k in keys)
    else:
        assert sorted(results) == ["finished"] * len(keys) + ["refused"] * len(keys)
        assert all(kinds(queue, k) == ["submitted", "cancelled"] for k in keys)
