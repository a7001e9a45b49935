"""What a claim reads when it serves named queues: the queues it serves, through their indexes,
never the rows of other queues, nor (serving one queue) every due row looking for a user.

The plan is checked on each database: SQLite's indexes named, MariaDB's and PostgreSQL's rows
read counted (their planners may pick another index where that costs nothing), before and
after the planner has statistics (PostgreSQL plans a never-analyzed table as empty: only after)."""

from __future__ import annotations

import pytest
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements, sqlite_indexes

T0 = 1_700_000_000
BACKLOG = 6000  # due rows the claims under test must not read


def backlog(queue, queues: tuple[str, ...]) -> None:
    """Due rows, most without a user, spread over ``queues``; due before the served ones."""
    queue.submit_many(
        [
            {
                "key": f"o{i}",
                "type": "t",
                "queue": queues[i % len(queues)],
                "run_at": T0 - 9000 + i,
                "user": f"u{i % 7}" if i % 10 == 0 else None,
            }
            for i in range(BACKLOG)
        ],
        now=T0,
    )


def check_reads(queue, backend, run, served_rows: int, allowed: set[str]) -> int:
    """Run ``run`` (a claim), then read each of its SELECTs' plans: SQLite through ``allowed``
    indexes only; MariaDB and PostgreSQL reading a few times ``served_rows`` at most. Returns
    how many SELECTs the claim sent."""
    sent = sent_statements(queue, run)
    reads = [(s, p) for s, p in sent if "count(" not in s]  # a queue's running count: not a walk
    with queue.db.engine.connect() as conn:
        for statement, parameters in reads:
            if backend == "sqlite":
                used = sqlite_indexes(conn, statement, parameters)
                assert used and used <= allowed | {"PRIMARY"}, (used, statement)
            else:
                measure = mysql_rows_read if backend == "mysql" else postgres_rows_read
                assert measure(conn, statement, parameters) <= 100 + 5 * served_rows, statement
        conn.rollback()  # the row locks of the statements run again
    return len(reads)


def indexes(queue, *names: str) -> set[str]:
    return {f"ix_{queue.table}_{n}" for n in names}


@pytest.mark.parametrize("analyzed", [False, True])
def test_a_claim_over_several_queues_reads_only_theirs(queue, backend, analyzed):
    """A worker serving q1,q2,q3 (q1 empty, q2 holding a user's row and a userless one): the
    claim reads the served queues' entries and walks q2, never the backlog of other queues."""
    if backend == "postgres" and not analyzed:
        pytest.skip("PostgreSQL plans a never-analyzed table as empty")
    backlog(queue, ("default", "other"))
    queue.submit_many(
        [{"key": "mine-1", "type": "t", "queue": "q2"}, {"key": "mine-2", "type": "t", "queue": "q2", "user": "u1"}],
        now=T0,
    )
    queue.submit("later", "t", {}, queue="q3", run_at=T0 + 60, now=T0)
    if analyzed:
        analyze(queue)
    got = []
    sent = check_reads(
        queue,
        backend,
        lambda: got.extend(queue.poll_multi(5, queues="q1,q2,q3", now=T0)),
        served_rows=3,
        allowed=indexes(queue, "queue", "quser"),
    )
    assert sorted(t.key for t in got) == ["mine-1", "mine-2"]
    assert sent >= 2  # the served queues' entries, then the walk of q2


@pytest.mark.parametrize("analyzed", [False, True])
def test_a_claim_of_one_queue_finds_its_users_without_reading_every_due_row(queue, backend, analyzed):
    """A backlog of due rows without a user in the served queue: asking whether any due row
    has a user reads the user index, not every due row (SQLite read them all on the purge
    index: 3 ms a claim on 18,000 due rows)."""
    if backend == "postgres" and not analyzed:
        pytest.skip("PostgreSQL plans a never-analyzed table as empty")
    queue.submit_many([{"key": f"o{i}", "type": "t", "run_at": T0 - 9000 + i} for i in range(BACKLOG)], now=T0)
    if analyzed:
        analyze(queue)
    got = []
    check_reads(
        queue,
        backend,
        lambda: got.extend(queue.poll_multi(3, now=T0)),
        served_rows=3,
        allowed=indexes(queue, "queue", "quser"),
    )
    assert [t.key for t in got] == ["o0", "o1", "o2"]


def test_entries_skip_empty_queues_and_keep_strict_order(queue):
    """Serving a,b,c strictly: a claim takes a's rows first, then b's, never reads c while
    b fills the batch; a queue whose rows are all in the future is passed over."""
    queue.submit_many([{"key": f"a{i}", "type": "t", "queue": "a", "run_at": T0 + 100} for i in range(3)], now=T0)
    queue.submit_many([{"key": f"b{i}", "type": "t", "queue": "b", "user": "u"} for i in range(2)], now=T0)
    queue.submit_many([{"key": f"c{i}", "type": "t", "queue": "c"} for i in range(3)], now=T0)
    first = queue.poll_multi(4, queues="a,b,c", now=T0)
    assert [t.key for t in first] == ["b0", "b1", "c0", "c1"]
    queue.submit("a-now", "t", {}, queue="a", now=T0)
    assert [t.key for t in queue.poll_multi(2, queues="a,b,c", now=T0)] == ["a-now", "c2"]
    assert [t.key for t in queue.poll_multi(5, queues="a,b,c", now=T0 + 100)] == ["a0", "a1", "a2"]
