"""The event rows MariaDB/MySQL writes from SQL text it renders
itself (``store/mysql.py``: hex literals, numbers through CONCAT) must hold exactly what an
INSERT ... SELECT of the same SELECT writes — on every backend, compared here against a real
INSERT ... SELECT run in the same database (inserted, read back, deleted again)."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa
from conftest import drop_tables
from event_checks import assert_like_reference, bits, event_rows, hand_edit, reference_rows

import queue_core
from queue_core.store.events import COLUMNS, DETAIL_LENGTH, event_columns

N0 = 1_700_000_000.123456789

#: doubles a column can hold on every backend (MySQL stores no NaN/inf)
TRICKY = [
    5e-324,
    2.2250738585072014e-308,
    2.225073858507201e-308,
    1.0000000000000002e-300,
    1.2345678901234567e-300,
    1.7976931348623157e308,
    1e308,
    1e22,
    1e21,
    1.2345678901234568e20,
    0.1,
    1 / 3,
    2 / 3,
    9007199254740993.0,
    2.0**53 + 2,
    1e-7,
    1.2345678901234567e-5,
    123456.78901234567,
    1e16,
    1.5e15,
    4.35e-5,
    1e100 / 3,
    9999999999999.998,
    1e13,
    0.30000000000000004,
    1e-5,
    1e-4,
    123e-20,
    1.7976931348623157e308 / 3,
]


def _claimed(q, n, now):
    held = q.poll_multi(n, alive_time=10**6, now=now)
    assert len(held) == n
    return held


def test_doubles_computed_by_the_database_are_written_as_insert_select_writes_them(queue):
    """waited = started_at - run_at and ran = at - started_at, computed in the SELECT, for tricky
    doubles (subnormal, the largest, 17 significant digits, negative with a 3-digit exponent)."""
    pairs = [(0.0, v) for v in TRICKY] + [(v, 0.0) for v in TRICKY] + [(v, -v / 7) for v in TRICKY if v < 1e307]
    for i in range(len(pairs)):
        queue.submit(f"k{i}", "t", now=N0)
    held = _claimed(queue, len(pairs), N0 + 1)
    ids = [h._id for h in held]
    by_key = {h.key: h for h in held}
    started = {by_key[f"k{i}"]._id: s for i, (s, _) in enumerate(pairs)}
    run_at = {by_key[f"k{i}"]._id: r for i, (_, r) in enumerate(pairs)}
    hand_edit(queue, ids, started_at=started, run_at=run_at)
    for at in (N0 + 9.000001, 5e-324, 1e13):
        some = [h for h in held if not h.done][: len(held) // 3 + 1]
        queue.finish_many(some, now=at)
        got = [r for r in event_rows(queue, "finished") if r["at"] == at]
        assert_like_reference(got, reference_rows(queue, "finished", [h._id for h in some], at))
        for r in got:  # and the arithmetic itself, as IEEE does it
            assert bits(r["waited"]) == bits(started[r["task_id"]] - run_at[r["task_id"]]), r
            assert bits(r["ran"]) == bits(at - started[r["task_id"]]), r


def test_negative_zero_is_written_as_insert_select_writes_it(queue):
    """check_time accepts -0.0 (``0 <= -0.0``): an event at now=-0.0 and a wait of -0.0 - 0.0."""
    queue.submit("z", "t", now=0.0)
    [held] = _claimed(queue, 1, 0.0)
    hand_edit(queue, [held._id], started_at={held._id: -0.0}, run_at={held._id: 0.0})
    held.finish(now=-0.0)
    got = event_rows(queue, "finished")
    assert_like_reference(got, reference_rows(queue, "finished", [held._id], -0.0))


HOSTILE = [
    "",
    "'",
    "''",
    "\\",
    "\\'",
    "X'",
    "X''",
    "0x",
    "%",
    "%s",
    "%(event_at)s",
    "NULL",
    "'NULL'",
    "\x01\x02\x1f\x7f",
    "\U0001f600" * 3,
    "é\u0301",
    "\u2028\u2029",
    "a" * 255,
    "`",
    '"',
    "';DROP TABLE x;--",
    "\t\n\r",
]


def test_hostile_owner_error_and_type_are_written_byte_for_byte(queue):
    """Strings of every kind, empty ones included, through owner (a plain utf8mb4 column), the
    error cut to DETAIL_LENGTH (a TEXT column), key and type (VARBINARY on MySQL)."""
    for i, s in enumerate(HOSTILE):
        queue.submit(f"{s[:200]}#{i}", f"type{s[:200]}", now=N0)
    held = _claimed(queue, len(HOSTILE), N0 + 1)
    by_key = {h.key: h for h in held}
    owners, errors = {}, {}
    for i, s in enumerate(HOSTILE):
        h = by_key[f"{s[:200]}#{i}"]
        owners[h._id] = s[:255]
        # a 4-byte character straddling the DETAIL_LENGTH cut, and an empty error
        errors[h._id] = "" if i % 3 == 0 else ("x" * (DETAIL_LENGTH - 1)) + "\U0001f600" + s
    hand_edit(queue, list(owners), owner=owners, error=errors)
    ids = [h._id for h in held]
    # finished with outcome failure: detail = the error cut; owner copied
    queue.db.run(
        lambda c: c.execute(sa.update(queue.store.t).where(queue.store.t.c.id.in_(ids)).values(outcome="failure"))
    )
    queue.db.run(lambda c: queue.store.events.record_ids(c, "finished", ids, N0 + 2))
    got = event_rows(queue, "finished")
    assert_like_reference(got, reference_rows(queue, "finished", ids, N0 + 2))
    for r in got:
        assert r["owner"] == owners[r["task_id"]]
        assert r["detail"] == errors[r["task_id"]][:DETAIL_LENGTH]


def _mysql_url_with_mode(db_url: str, mode: str) -> str:
    url = sa.engine.make_url(db_url)
    return url.update_query_dict({"init_command": f"SET SESSION sql_mode='{mode}'"}).render_as_string(
        hide_password=False
    )


@pytest.mark.parametrize(
    "mode",
    [
        "NO_BACKSLASH_ESCAPES",
        "ANSI_QUOTES",
        "ANSI",
        "NO_BACKSLASH_ESCAPES,ANSI_QUOTES,PIPES_AS_CONCAT,STRICT_ALL_TABLES",
        "TRADITIONAL,NO_BACKSLASH_ESCAPES",
        "",
    ],
)
def test_any_sql_mode_writes_the_same_events(backend, db_url, table_name, clock, mode):
    if backend != "mysql":
        pytest.skip("sql_mode is MySQL's")
    q = queue_core.open(_mysql_url_with_mode(db_url, mode), table_name, clock=clock)
    try:
        q.init()
        session_mode = q.db.run(lambda c: c.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar())
        assert mode.split(",")[0] in session_mode.split(",") or mode in ("", "TRADITIONAL,NO_BACKSLASH_ESCAPES")
        for i, s in enumerate(HOSTILE):
            q.submit(f"{s[:200]}#{i}", f"type{s[:200]}", now=N0)
        held = _claimed(q, len(HOSTILE), N0 + 1)
        errors = {}
        for i, h in enumerate(held):
            errors[h._id] = f"E{HOSTILE[i]}" + HOSTILE[i] * 50
            h.retry(30, now=N0 + 2.5, error=errors[h._id])
        ids = [h._id for h in held]
        for r in event_rows(q, "retried"):
            assert r["detail"] == errors[r["task_id"]][:DETAIL_LENGTH] and r["owner"] == q.owner
        owners = {h._id: HOSTILE[i] for i, h in enumerate(held)}
        hand_edit(q, ids, owner=owners)
        q.db.run(lambda c: q.store.events.record_ids(c, "gave_up", ids, N0 + 3.5))
        assert_like_reference(event_rows(q, "gave_up"), reference_rows(q, "gave_up", ids, N0 + 3.5))
    finally:
        q.close()
        drop_tables(db_url, table_name)


def test_a_batch_of_500_long_multibyte_errors_is_inserted_once_and_tracked_lines_up(queue):
    """500 rows whose details are DETAIL_LENGTH 4-byte characters (8,000 hex digits each: the
    statement is cut in several), with the rows' ``tracked`` returned in their order."""
    n = 500
    queue.submit_many([{"key": f"b{i}", "type": "t"} for i in range(n)], now=N0)
    t, e = queue.store.t, queue.store.events_t
    ids = [r[0] for r in queue.db.run(lambda c: c.execute(sa.select(t.c.id).order_by(t.c.id)).all())]
    assert len(ids) == n
    errors = {i: ("\U0001f600é'\\%" * DETAIL_LENGTH)[: DETAIL_LENGTH + 7] for i in ids}
    tracked = {i: int(k % 3 == 0) for k, i in enumerate(ids)}
    hand_edit(queue, ids, error=errors, tracked=tracked)
    d = queue.db.dialect
    rows = sa.select(*event_columns(t, e, "gave_up")).where(t.c.id.in_(sa.bindparam("event_ids", expanding=True)))
    plan = d.insert_selected(e, COLUMNS, rows, "tracked")
    params = {"event_at": N0 + 3, "event_detail": None, "event_due": None, "event_owner": None, "event_ids": ids}
    returned = queue.db.run(lambda c: d.run_insert_selected(c, plan, params, "tracked"))
    got = event_rows(queue, "gave_up")
    assert sorted(r["task_id"] for r in got) == ids  # each once
    for r in got:
        assert r["detail"] == errors[r["task_id"]][:DETAIL_LENGTH]
    if backend_is_mysql(queue):
        assert list(returned) == [r["tracked"] for r in got]  # in the order the rows were inserted
    else:
        assert sorted(returned) == sorted(r["tracked"] for r in got)
    assert_like_reference(got, reference_rows(queue, "gave_up", ids, N0 + 3))


def backend_is_mysql(q) -> bool:
    return q.db.dialect.name == "mysql"


def test_nan_like_and_signed_texts_in_number_columns_never_reach_the_insert_as_text(queue):
    """Numbers as the server prints them must read back as numbers: very small and very large
    magnitudes of both signs through the bound event time and a copied column (due_at)."""
    values = [v for x in TRICKY for v in (x, -x)]
    for i in range(len(values)):
        queue.submit(f"d{i}", "t", now=N0)
    held = _claimed(queue, len(values), N0 + 1)
    ids = [h._id for h in held]
    by_key = {h.key: h._id for h in held}
    timeout = {by_key[f"d{i}"]: v for i, v in enumerate(values)}
    hand_edit(queue, ids, timeout=timeout)
    # 'moved' and friends copy no timeout; 'requeued' copies it: record it over the edited rows
    queue.db.run(lambda c: queue.store.events.record_ids(c, "requeued", ids, N0 + 4))
    got = event_rows(queue, "requeued")
    assert_like_reference(got, reference_rows(queue, "requeued", ids, N0 + 4))
    for r in got:
        assert bits(r["due_at"]) == bits(timeout[r["task_id"]]) or (
            r["due_at"] == 0.0 and timeout[r["task_id"]] == 0.0
        ), r
    assert not any(isinstance(r["due_at"], str) or (r["due_at"] is not None and math.isnan(r["due_at"])) for r in got)
