"""One-by-one submit: a free key costs one statement that commits itself (one round trip, one
commit, no BEGIN); a taken key, an expired key and a lost acknowledgement keep their meaning.

Guarantees and the interleavings that could break them:
- idempotency: a key that is waiting, running or finished within retention is refused, and the
  refused submit changes nothing; a key whose retention ended is freed and taken atomically;
- a submit whose INSERT committed but whose acknowledgement was lost (the connection dropped
  after the statement) returns success, once, and leaves one row; a retried submit that finds
  another submission's row under its key is refused;
- PostgreSQL: the INSERT itself notifies the listeners, for a due task only, and never for a
  refused key (test_probe_bounds.py);
- a pooled connection handed back after a failed transaction is rolled back; one handed back
  after a committed one costs no ROLLBACK (MySQL sent one per transaction before).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conftest import in_transaction, own_queue
from workflow_faults.fault_support import ack_lost_once, connection_drops_once  # the store's fault injection

from queue_core.errors import IdempotentAlreadyExistsError
from queue_core.store.submits import task_row

T0 = 1_700_000_000.0


class _Statements:
    """Every statement any engine runs, with whether a transaction was open after it."""

    def __init__(self):
        self.seen: list[tuple[str, bool]] = []

    def __enter__(self):
        sa.event.listen(sa.engine.Engine, "after_cursor_execute", self._after)
        return self

    def __exit__(self, *exc):
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", self._after)

    def _after(self, conn, cursor, statement, params, context, executemany):
        self.seen.append((statement.split()[0].upper(), in_transaction(conn.connection.dbapi_connection)))


def test_a_free_key_is_one_statement_that_commits_itself(queue, mysql_commands):
    queue.submit("warm-up", "t", now=T0)  # connections opened, tables checked
    if mysql_commands is not None:
        mysql_commands.clear()
    with _Statements() as statements:
        queue.submit("k", "t", {"n": 1}, now=T0)
    assert statements.seen == [("INSERT", False)]
    if mysql_commands is not None:
        assert mysql_commands == ["INSERT"]  # no COMMIT, no ROLLBACK: one round trip
    assert queue["k"].metadata().data == {"n": 1}


@pytest.mark.parametrize("state", ["waiting", "running", "finished"])
def test_a_taken_key_is_refused_and_changes_nothing(queue, state):
    queue.submit("k", "t", {"v": "first"}, now=T0)
    if state != "waiting":
        task = queue.poll(now=T0 + 1)
        if state == "finished":
            task.finish(now=T0 + 2)
    before = queue.db.run(
        lambda c: dict(c.execute(sa.select(queue.store.t).where(queue.store.t.c.key == "k")).one()._mapping)
    )
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", {"v": "second"}, now=T0 + 3)
    after = queue.db.run(
        lambda c: dict(c.execute(sa.select(queue.store.t).where(queue.store.t.c.key == "k")).one()._mapping)
    )
    assert after == before


def test_a_key_whose_retention_ended_is_taken_again(queue):
    queue.submit("k", "t", {"v": "first"}, now=T0)
    queue.poll(now=T0 + 1).finish(now=T0 + 2)
    later = T0 + 2 + queue.config["retention_time"] + 1
    queue.submit("k", "t", {"v": "second"}, now=later)
    meta = queue["k"].metadata()
    assert meta.status == "waiting" and meta.data == {"v": "second"}
    assert queue.stats(now=later)["total"] == 1


def test_a_submit_whose_acknowledgement_was_lost_succeeds_once(queue):
    with ack_lost_once(queue, "submit") as state:
        queue.submit("k", "t", {"n": 1}, now=T0)  # applied, then the connection dropped: retried
    assert state["fired"] == 1
    assert queue.stats(now=T0)["total"] == 1
    assert queue["k"].metadata().data == {"n": 1}


def test_a_retried_submit_that_finds_another_submissions_row_is_refused(queue):
    def other_submitter():
        queue.store.task_submit(
            [
                queue._new_task(
                    "k",
                    "t",
                    {"by": "other"},
                    now=T0,
                    user=None,
                    max_running=None,
                    run_at=None,
                    priority=0,
                    max_attempts=None,
                    group=None,
                )
            ],
            T0,
        )

    with connection_drops_once(queue, "submit", other_submitter), pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", {"by": "me"}, now=T0)
    assert queue["k"].metadata().data == {"by": "other"}


def test_a_failed_transaction_hands_its_connection_back_rolled_back(db_url, table_name, backend):
    with own_queue(db_url, table_name, backend, pool_size=1) as q:

        def write_then_fail(conn):
            conn.execute(
                sa.insert(q.store.t).values(
                    task_row(
                        q._new_task(
                            "ghost",
                            "t",
                            {},
                            now=T0,
                            user=None,
                            max_running=None,
                            run_at=None,
                            priority=0,
                            max_attempts=None,
                            group=None,
                        ),
                        T0,
                    )
                )
            )
            raise ValueError("the caller's own error")

        with pytest.raises(ValueError):
            q.db.run(write_then_fail)
        with q.db.engine.connect() as conn:  # the pool's one connection
            assert not in_transaction(conn.connection.dbapi_connection)
        assert not q["ghost"].exists()
        q.submit("real", "t", now=T0)
        assert q.stats(now=T0)["total"] == 1


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_committed_transaction_costs_no_rollback(queue, mysql_commands):
    queue.submit("k", "t", now=T0)
    mysql_commands.clear()
    task = queue.poll(now=T0 + 1)
    task.finish(now=T0 + 2)
    assert "COMMIT" in mysql_commands and "ROLLBACK" not in mysql_commands
