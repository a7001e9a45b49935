"""A write that names its rows by id or key (a batch's lease and its finish, a release of what a
holder did not start, the purge, a submit taking over expired keys) reads those rows and no
others, however many rows are due or finished: the
conditions that fence it (the state, the due time, the lease token) are checked on each row the
ids find. SQLite's planner, given a due-time condition, would rather walk an index of every due
row (``Dialect.per_row``); MariaDB and PostgreSQL are held to reading a few times the batch."""

from __future__ import annotations

import pytest
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements, sqlite_indexes

T0 = 1_700_000_000
BACKLOG = 6000  # due rows none of the writes under test may read
BATCH = 64


@pytest.fixture(params=[False, True], ids=["unanalyzed", "analyzed"])
def due(request, queue, backend):
    """The queue with a backlog of due rows, before or after the planner has statistics
    (PostgreSQL plans a never-analyzed table as empty: only after)."""
    if backend == "postgres" and not request.param:
        pytest.skip("PostgreSQL plans a never-analyzed table as empty")
    queue.submit_many([{"key": f"b{i}", "type": "t", "run_at": T0 - 9000 + i} for i in range(BACKLOG)], now=T0)
    if request.param:
        analyze(queue)
    return queue


def check_writes(queue, backend, run, expected: int, verbs=("UPDATE", "DELETE"), through=("PRIMARY",)) -> None:
    """Run ``run``, then read the plan of each statement starting with ``verbs`` it sent on the
    task table (at least ``expected`` of them): SQLite through the primary key (or ``through``)
    alone; MariaDB and PostgreSQL reading a few times the batch at most."""
    sent = sent_statements(queue, run, verbs=verbs)
    assert len(sent) >= expected, sent
    with queue.db.engine.connect() as conn:
        for statement, parameters in sent:
            if backend == "sqlite":
                allowed = {i if i == "PRIMARY" else i.format(table=queue.table) for i in through}
                assert sqlite_indexes(conn, statement, parameters) <= allowed, statement
            else:
                measure = mysql_rows_read if backend == "mysql" else postgres_rows_read
                assert measure(conn, statement, parameters) <= 100 + 5 * BATCH, statement
        conn.rollback()  # what the statements run again changed


def test_a_claim_finishing_the_last_batch_leases_and_finishes_by_id(due, backend):
    held = due.poll_multi(BATCH, alive_time=300)
    assert len(held) == BATCH
    got: list = []
    check_writes(due, backend, lambda: got.extend(due.poll_multi(BATCH, alive_time=300, finish=held)), expected=2)
    assert len(got) == BATCH and all(due[t.key].metadata().finished for t in held)


def test_a_release_of_unstarted_tasks_writes_by_id(due, backend):
    held = due.poll_multi(BATCH, alive_time=300)
    released: list = []
    check_writes(due, backend, lambda: released.append(due.release_many(held)), expected=1)
    assert released == [BATCH] and not any(due[t.key].metadata().running for t in held)


def test_the_purge_deletes_by_id(due, backend, clock):
    held = due.poll_multi(BATCH, alive_time=300)
    for t in held:
        t.finish()
    clock.set(T0 + 10 * 86400)  # past every retention
    purged: list = []
    check_writes(due, backend, lambda: purged.append(due.cleanup()), expected=1)
    assert purged == [BATCH]


def test_a_submit_taking_over_expired_keys_finds_them_by_key(due, backend, clock):
    """Submitting keys whose finished rows' retention ended: their rows are found by key (and
    deleted by id), never by a walk of every finished row past retention."""
    held = due.poll_multi(BATCH, alive_time=300)
    for t in held:
        t.finish()
    for t in due.poll_multi(BATCH, alive_time=300):  # more finished rows past retention, not submitted again
        t.finish()
    clock.set(T0 + 10 * 86400)
    again = [{"key": t.key, "type": "t"} for t in held]
    made: list = []

    def submit():
        made.append(due.submit_many(again))

    through = ("PRIMARY", "sqlite_autoindex_{table}_1")
    check_writes(due, backend, submit, expected=2, verbs=("SELECT", "DELETE"), through=through)
    assert made == [BATCH]
