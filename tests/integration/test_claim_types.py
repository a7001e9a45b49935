"""Claims limited to task types (``poll_multi(types=...)``): only those types are leased, rows
of other types are neither leased, nor screened, nor read."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements, sqlite_indexes  # noqa: E402

import queue_core

T0 = 1_700_000_000


def drain(queue, types, n=10, now=T0):
    """Lease (and finish) tasks of ``types`` until none is due; returns them in lease order."""
    got = []
    while batch := queue.poll_multi(n, types=types, now=now):
        got += batch
        queue.finish_many(batch, now=now)
    return got


def untouched(queue, key):
    m = queue[key].metadata(now=T0)
    return m.status == "waiting" and m.attempts == 0 and m.error is None


def test_a_claim_with_types_never_returns_another_type(queue):
    items = []
    for i in range(60):
        type_ = ("invoice", "email", "etl.load")[i % 3]
        items.append(
            {
                "key": f"k{i}",
                "type": type_,
                "priority": i % 4,
                "run_at": T0 - i,
                "user": f"u{i % 5}" if i % 2 else None,
                "max_running": 2 if i % 7 == 0 else None,
            }
        )
    queue.submit_many(items, now=T0)
    got = drain(queue, ["invoice", "etl.load"], n=7)
    assert {t.type for t in got} == {"invoice", "etl.load"}
    assert sorted(t.key for t in got) == sorted(x["key"] for x in items if x["type"] != "email")
    assert all(untouched(queue, x["key"]) for x in items if x["type"] == "email")
    assert [t.type for t in drain(queue, ["email"])] == ["email"] * 20


def test_the_filtered_claim_finds_its_row_behind_many_better_rows_of_other_types(queue):
    # Hundreds of other rows due earlier and at a better priority, userless and per user.
    queue.submit_many(
        [{"key": f"o{i}", "type": "other", "priority": 5, "run_at": T0 - 1000 + i} for i in range(300)], now=T0
    )
    queue.submit_many(
        [
            {"key": f"ou{i}", "type": "other", "priority": 5, "user": f"u{i % 3}", "run_at": T0 - 1000 + i}
            for i in range(300)
        ],
        now=T0,
    )
    queue.submit("mine", "invoice", priority=-3, now=T0)
    queue.submit("mine-u", "invoice", user="u1", priority=-3, now=T0)
    assert {queue.poll(types=["invoice"], now=T0).key for _ in range(2)} == {"mine", "mine-u"}
    assert queue.poll(types=["invoice"], now=T0) is None
    assert queue.poll(now=T0).type == "other"


def test_priority_then_due_time_order_holds_across_the_served_types(queue):
    queue.submit("a-low", "a", priority=0, run_at=T0 - 50, now=T0)
    queue.submit("b-high-late", "b", priority=2, run_at=T0 - 1, now=T0)
    queue.submit("a-high-early", "a", priority=2, run_at=T0 - 9, now=T0)
    queue.submit("c-mid", "c", priority=1, run_at=T0 - 5, now=T0)
    queue.submit("b-future", "b", priority=9, run_at=T0 + 60, now=T0)
    queue.submit("x-best", "x", priority=9, run_at=T0 - 99, now=T0)
    got = drain(queue, ["a", "b", "c"], n=1)
    assert [t.key for t in got] == ["a-high-early", "b-high-late", "c-mid", "a-low"]
    assert untouched(queue, "x-best") and untouched(queue, "b-future")


def test_fair_share_caps_hold_under_a_filter(queue):
    for i in range(4):
        queue.submit(f"a{i}", "invoice", user="alice", max_running=2, run_at=T0 - 10 + i, now=T0)
        queue.submit(f"b{i}", "invoice", user="bob", max_running=1, run_at=T0 - 10 + i, now=T0)
    got = queue.poll_multi(10, types=["invoice"], now=T0)
    assert sorted(t.key for t in got) == ["a0", "a1", "b0"]
    assert queue.poll(types=["invoice"], now=T0) is None
    got[0].finish(now=T0)
    assert queue.poll(types=["invoice"], now=T0).key == "a2"


def test_a_users_running_tasks_of_other_types_count_toward_its_cap(queue):
    # max_running caps the user, whatever the type: a running email of carol's fills her slot.
    queue.submit("mail", "email", user="carol", max_running=1, run_at=T0 - 5, now=T0)
    queue.submit("inv", "invoice", user="carol", max_running=1, now=T0)
    running = queue.poll(types=["email"], now=T0)
    assert running.key == "mail"
    assert queue.poll(types=["invoice"], now=T0) is None
    running.finish(now=T0)
    assert queue.poll(types=["invoice"], now=T0).key == "inv"


def test_the_filtered_claim_does_not_give_up_or_cancel_rows_of_other_types(queue):
    # Rows that a claim would finish instead of leasing (attempts spent, cancel requested).
    queue.submit("spent", "email", max_attempts=1, priority=5, now=T0)
    queue.submit("cancelled", "email", priority=5, now=T0)
    assert queue.poll(types=["email"], alive_time=10, now=T0).key == "spent"  # never finished
    assert queue.poll(types=["email"], alive_time=10, now=T0).key == "cancelled"
    queue["cancelled"].cancel_request(now=T0 + 1)
    queue.submit("inv", "invoice", now=T0)
    assert queue.poll(types=["invoice"], now=T0 + 20).key == "inv"
    for key in ("spent", "cancelled"):
        m = queue[key].metadata(now=T0 + 20)
        assert m.status == "waiting" and m.outcome is None and m.attempts == 1  # lease expired, left alone
    assert queue.poll(types=["email"], now=T0 + 20) is None  # the email claim finishes them both
    assert queue["spent"].metadata(now=T0 + 20).outcome == "failure"
    assert queue["cancelled"].metadata(now=T0 + 20).outcome == "cancelled"


def test_long_type_lists_are_chunked(queue):
    served = [f"type-{i:04}" for i in range(1300)]
    queue.submit_many(
        [
            {"key": f"k{i}", "type": served[i * 97 % 1300], "priority": i % 3, "user": "u" if i % 4 == 0 else None}
            for i in range(40)
        ],
        now=T0,
    )
    queue.submit("other", "type-x", priority=9, now=T0)
    got = drain(queue, [*served, "absent"], n=16)
    assert sorted(t.key for t in got) == sorted(f"k{i}" for i in range(40))
    assert [t.priority for t in got] == sorted((t.priority for t in got), reverse=True)
    assert untouched(queue, "other")


@pytest.mark.parametrize(
    "types, message",
    [
        ("invoice", "must be a collection of task types, not 'invoice'"),
        ([], "must name at least one task type"),
        (["ok", 7], "task type must be a string, not int"),
        ([""], "task type must not be empty"),
        (["x" * 256], "task type is 256 characters long"),
        (42, "must be a collection of task types"),
    ],
)
def test_types_are_validated(queue, types, message):
    with pytest.raises(queue_core.ValidationError, match=re.escape(message)):
        queue.poll_multi(1, types=types, now=T0)
    with pytest.raises(queue_core.ValidationError):
        queue.poll(types=types, now=T0)


def test_init_adds_the_type_indexes_to_a_table_created_before_them(queue, caplog):
    def indexes():
        with queue.db.engine.connect() as conn:
            return {ix["name"] for ix in sa.inspect(conn).get_indexes(queue.table)}

    added = {f"ix_{queue.table}_qtype", f"ix_{queue.table}_qtype_user"}
    assert added <= indexes()
    with queue.db.engine.begin() as conn:  # the table as an earlier release created it
        for index in queue.store.t.indexes:
            if index.name in added:
                conn.execute(sa.schema.DropIndex(index))
    assert not added & indexes()
    queue.submit("other", "email", priority=5, now=T0)
    queue.submit("mine", "invoice", now=T0)
    with queue_core.open(queue.config["url"], queue.table, clock=queue.clock) as older:  # claims stay right
        assert older.poll(types=["invoice"], now=T0).key == "mine"
        assert older.poll(types=["invoice"], now=T0) is None
    assert "predates the indexes of claims limited to task types" in caplog.text
    queue.init()
    assert added <= indexes()
    queue.init()  # idempotent


def test_a_store_that_found_no_type_indexes_uses_them_once_its_init_added_them(queue):
    added = {f"ix_{queue.table}_qtype", f"ix_{queue.table}_qtype_user"}
    with queue.db.engine.begin() as conn:  # the table as an earlier release created it
        for index in queue.store.t.indexes:
            if index.name in added:
                conn.execute(sa.schema.DropIndex(index))
    queue.submit("a", "invoice", now=T0)
    queue.submit("b", "invoice", now=T0)
    with queue_core.open(queue.config["url"], queue.table, clock=queue.clock) as older:
        assert older.poll(types=["invoice"], now=T0).key == "a"
        assert older.store.claims.type_indexes is False  # its typed claims avoid no index meanwhile
        older.init()
        assert older.poll(types=["invoice"], now=T0).key == "b"
        assert older.store.claims.type_indexes is True


# -- what a filtered claim reads ----------------------------------------------------------------
# a statement per type (up to per_type); past 100, live types found by a loose scan, then IN lists
@pytest.mark.parametrize("served", [2, 12, 150])
def test_a_filtered_claim_never_reads_the_rows_of_other_types(queue, backend, served):
    """6000 rows of other types (most of them due earlier, at the same or a better priority) against a few
    of the served ones: SQLite must read through the type indexes only; MariaDB and
    PostgreSQL, whose planners may pick another index where it costs nothing, must read no
    more than a few times the rows the served ones hold. Before the planner has statistics
    too, except on PostgreSQL, which plans a never-analyzed table as empty until autovacuum
    analyzes it. Past 100 live types at once the claim uses IN lists, where PostgreSQL's
    planner may prefer the claim index (documented): there it is not measured."""
    types = [f"mine{i}" for i in range(served)]
    queue.submit_many(
        [
            {
                "key": f"o{i}",
                "type": f"other{i % 3}",
                "priority": 5 * (i % 2),
                "run_at": T0 - 5000 + i,
                "user": f"u{i % 7}" if i % 3 == 0 else None,
                "max_running": 3 if i % 4 == 1 else None,
            }
            for i in range(4000)
        ],
        now=T0,
    )
    queue.submit_many([{"key": f"f{i}", "type": "other0", "run_at": T0 + 1 + i} for i in range(2000)], now=T0)
    for round_ in range(2):
        if round_:
            analyze(queue)
        elif backend == "postgres":
            continue
        queue.submit_many(
            [
                {"key": f"m{round_}-{x}-{u}", "type": x, "user": u, "max_running": 2}
                for x in types
                for u in (None, "u1")
            ],
            now=T0,
        )
        sent = sent_statements(queue, lambda: queue.poll_multi(3, types=types, now=T0))
        # Not checked: the count of a user's running tasks, which are counted whatever their type.
        reads = [(s, p) for s, p in sent if "count(" not in s]
        assert len(reads) >= 4
        with queue.db.engine.connect() as conn:
            for statement, parameters in reads:
                if backend == "sqlite":
                    used = sqlite_indexes(conn, statement, parameters)
                    assert used and used <= {f"ix_{queue.table}_qtype", f"ix_{queue.table}_qtype_user", "PRIMARY"}, (
                        round_,
                        used,
                        statement,
                    )
                elif not (backend == "postgres" and served > 100):
                    # a few times the served rows (MariaDB counts its temporary tables' rows
                    # too), below the other types' 6000
                    measure = mysql_rows_read if backend == "mysql" else postgres_rows_read
                    served_rows = 2 * served * (round_ + 1)
                    assert measure(conn, statement, parameters) <= 100 + 5 * served_rows, (round_, statement)
            conn.rollback()  # the row locks of the statements run again


def test_a_many_row_transition_needs_its_precondition_on_every_dialect(queue):
    """Dialect.update_each writes rows by id only under a precondition: without one it refuses
    (a row is never written by id alone), on SQLite and on MySQL's CASE statement alike."""
    queue.submit("k1", "t", {}, now=T0)
    store, t = queue.store, queue.store.t
    row_id = store.db.run(lambda c: c.execute(sa.select(t.c.id).where(t.c.key == "k1")).scalar_one())
    for where in ((), []):
        with pytest.raises(ValueError, match="precondition"):
            store.db.run(
                lambda c, where=where: store.db.dialect.update_each(
                    c, t, [{"id": row_id, "priority": 5}], each=["priority"], where=where
                )
            )
    assert queue["k1"].metadata(now=T0).priority == 0
    done = store.db.run(
        lambda c: store.db.dialect.update_each(
            c, t, [{"id": row_id, "priority": 5}], each=["priority"], where=[t.c.state == 1]
        )
    )
    assert done == 0 and queue["k1"].metadata(now=T0).priority == 0  # the precondition holds no row
    done = store.db.run(
        lambda c: store.db.dialect.update_each(
            c, t, [{"id": row_id, "priority": 5}], each=["priority"], where=[t.c.state == 0]
        )
    )
    assert done == 1 and queue["k1"].metadata(now=T0).priority == 5
