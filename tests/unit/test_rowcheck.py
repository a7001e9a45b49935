"""The checks of rows read back (queue_core/store/rowcheck.py): one per column, none forgotten,
and what pq writes passes them. The hand edits themselves run on the three databases in
tests/hostile/test_hostile_rows.py."""

from __future__ import annotations

import sqlalchemy as sa

import queue_core
from queue_core.clock import FakeClock
from queue_core.store import rowcheck
from queue_core.store.schema import SCHEDULE_CATCHUP, SCHEDULE_DST, SCHEDULE_MAX_DELAY, schedule_table, task_table

T0 = 1_700_000_000.0


def test_every_column_of_the_task_table_has_a_check():
    assert set(rowcheck.TASK_COLUMNS) == {c.name for c in task_table(sa.MetaData(), "x").c}


def test_every_column_of_the_schedule_table_has_a_check():
    assert set(rowcheck.SCHEDULE_COLUMNS) == {c.name for c in schedule_table(sa.MetaData(), "x").c}


def test_the_store_knows_perfectsched_s_ranges():
    from perfectsched import catchup, cron, scheduler

    assert (SCHEDULE_CATCHUP, SCHEDULE_DST, SCHEDULE_MAX_DELAY) == (
        catchup.POLICIES,
        cron.DST_POLICIES,
        scheduler.MAX_DELAY,
    )


def test_what_perfectsched_writes_passes_the_checks():
    import perfectsched

    sc = perfectsched.open("sqlite://", "s", "t", clock=FakeClock(T0))
    sc.init()
    sc.add(
        "a",
        "t",
        cron="*/5 9-17 * * mon-fri",
        data={"x": 1},
        delay=366 * 86400,
        timezone="Asia/Tokyo",
        catchup="skip",
        dst="exact",
        next_time=0,
    )
    sc.add("b", "t", cron="@daily", next_time=T0)
    sc.poll(now=T0 + 86400).heartbeat(now=T0 + 86400)
    rows = sc.store.schedule_list()
    assert len(rows) == 2 and [rowcheck.problem(r, rowcheck.SCHEDULE_COLUMNS) for r in rows] == [None, None]
    b = sc.store.schedule_get("b")  # set aside (as by a host lacking a zone), then resumed: still what it writes
    assert sc.db.run(lambda c: sc.store.schedule_set_aside(c, "b", b["next_time"], "why", T0 + 2 * 86400), what="test")
    aside = sc.store.schedule_get("b")
    assert aside["error"] == "why" and rowcheck.problem(aside, rowcheck.SCHEDULE_COLUMNS) is None
    assert sc["b"].resume(now=T0 + 2 * 86400) is True
    assert [rowcheck.problem(r, rowcheck.SCHEDULE_COLUMNS) for r in sc.store.schedule_list()] == [None, None]


def test_what_pq_writes_passes_the_checks():
    q = queue_core.open("sqlite://", "t", clock=FakeClock(T0))
    q.init()
    q.submit("plain", "t", {"a": [1, None]}, now=T0)
    q.submit("full", "t", {}, user="u", max_running=2, priority=-(2**31), max_attempts=3, run_at=0, now=T0)
    q.submit("late", "t", {}, run_at=253402300799, now=T0)
    task = q.poll(now=T0, alive_time=1e11)
    task.retry(retry_wait=1e11, error=RuntimeError("x" * 70000), now=T0)
    q.submit("done", "t", {}, now=T0)
    q.poll(now=T0).finish(now=T0)
    q.submit("cancelled", "t", {}, now=T0)
    q["cancelled"].cancel_request(now=T0)
    rows = q.store.task_list(now=T0)
    assert len(rows) == 5
    assert [rowcheck.problem(r, rowcheck.TASK_COLUMNS) for r in rows] == [None] * 5


def test_each_check_names_what_it_found():
    assert rowcheck.name("") == "0 characters (pq writes 1 to 255)"
    assert rowcheck.name("a\udcff") == "bytes that are not UTF-8"
    assert rowcheck.name(b"a") == "b'a', not text"
    assert rowcheck.json_value("{") == "'{', not JSON"
    assert rowcheck.json_value("[1, 2.5]") is None
    assert rowcheck.json_value('{"a": NaN}') == "'{\"a\": NaN}', not JSON"
    assert rowcheck.json_value("1e999") == "'1e999', not JSON"
    assert rowcheck.json_value("-Infinity") == "'-Infinity', not JSON"
    assert rowcheck.json_object('{"a": 1}') is None
    assert rowcheck.json_object("[1, 2]") == "'[1, 2]', not a JSON object"
    assert rowcheck.json_object("null") == "'null', not a JSON object"
    assert rowcheck.integer(0, 5)(True) == "True, not an integer"
    assert rowcheck.integer(0, 5)(6) == "6, outside 0..5"
    assert rowcheck.one_of(0, 1)(1.0) == "1.0, not one of (0, 1)"
    assert rowcheck.epoch()(float("nan")).startswith("nan, not a time pq writes")
    assert rowcheck.optional(rowcheck.name)(None) is None
    assert rowcheck.timezone("../../etc/passwd") == "'../../etc/passwd', not a known IANA timezone"
    assert rowcheck.cron("* * * * *\n") == "'* * * * *\\n', not a cron expression as perfectsched stores one"
    found = rowcheck.problem({"state": 1, "leased": 0, "outcome": None}, rowcheck.TASK_COLUMNS)
    assert found == ("outcome", "no outcome in state 1 (a row has one exactly when finished)")
    err = rowcheck.corrupt("task", "pq_tasks", "k", ("data", "'x', not JSON"))
    assert isinstance(err, queue_core.CorruptRowError) and isinstance(err, queue_core.DatabaseError)
    assert str(err).startswith("task 'k' in table pq_tasks: column data holds 'x', not JSON;")
