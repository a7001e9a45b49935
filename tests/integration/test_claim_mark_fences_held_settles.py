"""The claim mark (MySQL/MariaDB ``touched_at``, schema version 9) and the batch settle
that writes ``finished`` events from what the worker holds of each claim (``store/settles.py``).

Every test compares the events a settle wrote with what an INSERT ... SELECT of the task rows as
the settle left them writes (``event_checks.reference_rows``). The
tests that exercise the mark only are skipped on SQLite and PostgreSQL; the others run on every
backend (there every settle reads back: they must hold there too)."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa
from conftest import drop_tables
from event_checks import (
    SettleWays,
    assert_like_reference,
    assert_stream_and_statistics_see_each_finish_once,
    event_rows,
    hand_edit,
    marks_claims,
    reference_rows,
)
from test_history import commit_ack_lost_once
from test_rendered_event_inserts_match_insert_select import _mysql_url_with_mode

import queue_core
from queue_core.store import mysql as mysql_store
from queue_core.store.base import _made_here

T0 = 1_700_000_000.0
MARK = mysql_store.CLAIM_MARK


def _only_mysql(backend):
    if backend != "mysql":
        pytest.skip("the claim mark is MySQL's")


def _finished(q, at=None) -> list[dict]:
    rows = [r for r in event_rows(q, "finished") if at is None or r["at"] == at]
    return sorted(rows, key=lambda r: r["task_id"])


def _claim(q, n, now, alive=10**6, **kw):
    held = q.poll_multi(n, alive_time=alive, now=now, **kw)
    assert len(held) == n
    return held


def _sql(q, text, params=None):
    return q.db.run(lambda c: c.exec_driver_sql(text, params or ()).rowcount)


def _scalar(q, text):
    return q.db.run(lambda c: c.exec_driver_sql(text).scalar())


def _check(q, held, at):
    """Each of ``held`` has exactly one ``finished`` event at ``at``, as the reference writes it."""
    ids = sorted(h._id for h in held)
    got = _finished(q, at)
    assert [r["task_id"] for r in got] == ids
    assert_like_reference(got, reference_rows(q, "finished", ids, at))


def _downgrade_to_8(q) -> None:
    meta = q.store.meta

    def work(c):
        c.exec_driver_sql(f"ALTER TABLE {q.table} DROP COLUMN {MARK}")
        c.execute(sa.update(meta).where(meta.c.name == "schema_version").values(value="8"))

    q.db.run(work)


# -- 5: a fresh init makes what it made before -----------------------------------------------------


def test_a_fresh_init_makes_the_indexes_of_its_release_and_no_other(queue, backend):
    """``init`` now creates the task table from a copy (``as_made`` -> ``with_claim_mark`` ->
    ``Table.to_metadata``) on MySQL. The copy must keep the partial failed index's ``ddl_if``:
    MySQL has no partial index, and an ``ix_<table>_failed`` there is an index on ``id`` that
    every insert writes for nothing (``test_failed_index.py`` asserts it is absent)."""
    names = queue.db.run(lambda c: {ix["name"] for ix in sa.inspect(c).get_indexes(queue.table)})
    dialect = queue.db.run(lambda c: c.dialect.name)
    want = {ix.name for ix in _made_here(queue.store.t, dialect)}
    assert {n for n in names if n.startswith("ix_")} == want
    assert (f"ix_{queue.table}_failed" in names) == (backend != "mysql")


# -- 4: a touched_at column of another type, or another program's ----------------------------------


@pytest.mark.parametrize(
    "column",
    [
        "TIMESTAMP(6) NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP(6)",  # the mark, made as TIMESTAMP
        "TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP",  # another program's
    ],
    ids=["timestamp6", "other_programs_timestamp"],
)
@pytest.mark.parametrize("mode", ["STRICT_TRANS_TABLES", "TRADITIONAL", ""], ids=["strict", "traditional", "lax"])
def test_a_touched_at_of_another_type_never_crashes_the_claim(queue, backend, db_url, clock, monkeypatch, column, mode):
    """A table of schema 8 that already has a column named ``touched_at`` with an ON UPDATE (a
    common ``updated_at``-like TIMESTAMP of another program, or one made by hand as TIMESTAMP):
    ``init`` leaves it, ``claim_mark_usable`` trusts it (it checks the ON UPDATE only, not the type),
    and every claim then writes '1000-01-01 00:00:00' into a TIMESTAMP, which cannot hold it."""
    _only_mysql(backend)
    _downgrade_to_8(queue)
    _sql(queue, f"ALTER TABLE {queue.table} ADD COLUMN {MARK} {column}")
    queue.init()
    worker = queue_core.open(_mysql_url_with_mode(db_url, mode), queue.table, clock=clock)
    try:
        worker.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
        held = _claim(worker, 3, T0 + 1)  # a strict sql_mode: "Incorrect datetime value"
        hand_edit(worker, [held[1]._id], owner={held[1]._id: "someone-else"})
        assert worker.finish_many(held, now=T0 + 2) == []
        _check(worker, held, T0 + 2)
    finally:
        worker.close()


@pytest.mark.parametrize(
    "column",
    [
        "DATETIME NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP",  # no fraction
        "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)",  # another program's
        "DATETIME(3) NULL ON UPDATE CURRENT_TIMESTAMP(3)",
    ],
    ids=["datetime0", "datetime6_not_null", "datetime3"],
)
def test_a_datetime_touched_at_of_another_shape_still_fences(queue, backend, db_url, clock, monkeypatch, column):
    _only_mysql(backend)
    _downgrade_to_8(queue)
    _sql(queue, f"ALTER TABLE {queue.table} ADD COLUMN {MARK} {column}")
    queue.init()
    q = queue_core.open(db_url, queue.table, clock=clock)
    try:
        ways = SettleWays(q, monkeypatch)
        q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
        held = _claim(q, 4, T0 + 1)
        hand_edit(q, [held[2]._id], queue={held[2]._id: "elsewhere"})
        assert q.finish_many(held, now=T0 + 2) == []
        _check(q, held, T0 + 2)
        assert held[2]._id in ways.read_back
    finally:
        q.close()


# -- 4: the mark loses its ON UPDATE while workers run ------------------------------------------------


@pytest.mark.parametrize(
    "alter",
    [
        "MODIFY {mark} DATETIME(6) NULL",  # its ON UPDATE dropped by hand
        "MODIFY {mark} DATETIME(6) NULL DEFAULT NULL",
    ],
    ids=["no_on_update", "no_on_update_default_null"],
)
def test_a_mark_that_loses_its_on_update_while_a_worker_runs(queue, backend, monkeypatch, alter):
    """A column altered by hand after a store decided to trust it (the case the check exists
    for: 'a column made by hand without ON UPDATE') was trusted for good: a row changed since its
    claim was written from what the worker holds. Since, a claim looks again every
    MARK_CHECK_INTERVAL seconds (the documented window, docs/reliability.md): past it, the
    changed row is read back."""
    from queue_core.store.claim import tables

    _only_mysql(backend)
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
    first = _claim(q, 1, T0 + 1)
    assert q.finish_many(first, now=T0 + 2) == []  # this store now claims with the mark
    _sql(q, f"ALTER TABLE {q.table} " + alter.format(mark=MARK))
    real = tables.time.monotonic
    monkeypatch.setattr(tables.time, "monotonic", lambda: real() + tables.MARK_CHECK_INTERVAL)
    held = _claim(q, 3, T0 + 3)
    hand_edit(q, [held[1]._id], queue={held[1]._id: "elsewhere"}, owner={held[1]._id: "someone-else"})
    assert q.finish_many(held, now=T0 + 4) == []
    _check(q, held, T0 + 4)


# -- 1: what the reference reads besides the row -----------------------------------------------------


@pytest.mark.parametrize("instant", [T0 + 1, 1_700_000_001], ids=["float", "whole_seconds"])
def test_a_claim_at_the_instant_of_an_earlier_tracked_claim(queue, backend, monkeypatch, instant):
    """The reference's wait is NULL when a ``claimed`` event of the task exists at the row's
    ``started_at`` (``_carried_claim``: it reads the events table, not only the row). A task
    tracked when first claimed, untracked and given back, claimed again at the same instant (a
    caller passing ``now`` in whole seconds): the row is untouched since the second claim, so
    the settle writes from what it holds a wait of 0.0 where the reference writes NULL."""
    q = queue
    q.submit("k", "t", now=T0)
    q["k"].track()
    [a] = q.poll_multi(1, alive_time=100, now=instant)
    q["k"].untrack()
    a.release(now=instant)
    [b] = q.poll_multi(1, alive_time=100, now=instant)
    assert b.key == "k" and b._token != a._token
    assert q.finish_many([b], now=instant + 1) == []
    _check(q, [b], instant + 1)


# -- 2: changes the server may not see as changes ----------------------------------------------------


def _multi_table_update(q, h):
    _sql(
        q,
        f"UPDATE {q.table} t JOIN {q.table}_meta m ON m.name = 'schema_version' "
        f"SET t.queue = 'multi' WHERE t.id = {h._id}",
    )


def _on_duplicate_key(q, h):
    _sql(
        q,
        f"INSERT INTO {q.table} (`key`, type, data, timeout, run_at, created_at) "
        f"VALUES (%s, 't', '{{}}', 0, 0, 0) ON DUPLICATE KEY UPDATE owner = 'odku'",
        (h.key,),
    )


def _owner_case_only(q, h):
    hand_edit(q, [h._id], owner={h._id: h.owner.upper()})


def _owner_trailing_space(q, h):
    hand_edit(q, [h._id], owner={h._id: h.owner + " "})


def _key_case_only(q, h):
    hand_edit(q, [h._id], key={h._id: h.key.upper()})


def _run_at_by_one_ulp(q, h):
    import math

    hand_edit(q, [h._id], run_at={h._id: math.nextafter(h.run_at, math.inf)})


def _session_timestamp_edit(q, h):
    """A change from a session whose clock (``SET timestamp``) and zone are odd."""

    def work(c):
        c.exec_driver_sql("SET SESSION time_zone = '-12:00', timestamp = 1")
        c.exec_driver_sql(f"UPDATE {q.table} SET owner = 'epoch' WHERE id = {h._id}")
        c.exec_driver_sql("SET SESSION time_zone = DEFAULT, timestamp = DEFAULT")

    q.db.run(work)


def _replace_row(q, h):
    """REPLACE: the row deleted and inserted again under its id, every column copied except the
    mark (its default: NULL), the owner changed."""
    cols = ", ".join(f"`{c.name}`" for c in q.store.t.c)

    def work(c):
        c.exec_driver_sql(f"CREATE TEMPORARY TABLE tmp_{q.table} AS SELECT * FROM {q.table} WHERE id = {h._id}")
        c.exec_driver_sql(f"UPDATE tmp_{q.table} SET owner = 'replaced'")
        c.exec_driver_sql(f"REPLACE INTO {q.table} ({cols}) SELECT {cols} FROM tmp_{q.table}")
        c.exec_driver_sql(f"DROP TEMPORARY TABLE tmp_{q.table}")

    q.db.run(work)


SERVER_CHANGES = [
    _multi_table_update,
    _on_duplicate_key,
    _owner_case_only,
    _owner_trailing_space,
    _key_case_only,
    _run_at_by_one_ulp,
    _session_timestamp_edit,
    _replace_row,
]


@pytest.mark.parametrize("change", SERVER_CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_changes_the_server_might_not_count_as_changes(queue, backend, monkeypatch, change):
    _only_mysql(backend)
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.owner = "worker:1"
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
    held = _claim(q, 3, T0 + 1)
    change(q, held[1])
    assert q.finish_many(held, now=T0 + 2) == []
    _check(q, held, T0 + 2)
    assert ways.read_back == [held[1]._id]


def test_an_update_to_the_same_values_keeps_the_held_way_and_the_same_events(queue, backend, monkeypatch):
    _only_mysql(backend)
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
    held = _claim(q, 3, T0 + 1)
    h = held[1]
    hand_edit(q, [h._id], owner={h._id: h.owner}, queue={h._id: "default"}, attempts={h._id: 1})
    assert q.finish_many(held, now=T0 + 2) == []
    _check(q, held, T0 + 2)
    assert sorted(ways.held) == sorted(x._id for x in held)


# -- keys with odd bytes, sql_mode and time zones on the held way -------------------------------------


HOSTILE = ["'", "\\", "%s", "X''", " trailing ", "\U0001f600" * 255, "\u2028", "é\u0301", "\ufeff"]


def test_hostile_names_and_owner_on_the_held_way(queue, backend, monkeypatch):
    """Keys, types, queues and an owner that are hard to render, written from what the worker
    holds (``sql_literal``): byte for byte what the reference writes."""
    _only_mysql(backend)
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.owner = "o'\\%s\x00 " + "\U0001f600" * 300
    for i, n in enumerate(HOSTILE):
        q.submit(n, n[:200] + str(i), queue=f"q{i}", now=T0)
    held = []
    for i in range(len(HOSTILE)):
        held += _claim(q, 1, T0 + 1, queues=[f"q{i}"])
    assert q.finish_many(held, now=T0 + 2) == []
    _check(q, held, T0 + 2)
    assert sorted(ways.held) == sorted(h._id for h in held) and ways.read_back == []


@pytest.mark.parametrize(
    "session",
    [
        "sql_mode = 'NO_ZERO_DATE,NO_ZERO_IN_DATE,STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO'",
        "sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'",
        "sql_mode = 'ANSI'",
        "sql_mode = 'ALLOW_INVALID_DATES'",
        "sql_mode = '', time_zone = '+13:00'",
        "sql_mode = 'TRADITIONAL', time_zone = '-12:00'",
    ],
)
def test_the_held_way_under_session_settings(backend, db_url, table_name, clock, monkeypatch, session):
    """The worker's session (sql_mode, time zone) differs from the editor's: the mark still
    fences a hand edit made from another session, and an untouched row is written held."""
    _only_mysql(backend)
    url = sa.engine.make_url(db_url).update_query_dict({"init_command": f"SET SESSION {session}"})
    q = queue_core.open(url.render_as_string(hide_password=False), table_name, clock=clock)
    editor = queue_core.open(db_url, table_name, clock=clock)
    try:
        q.init()
        ways = SettleWays(q, monkeypatch)
        q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
        held = _claim(q, 4, T0 + 1)
        hand_edit(editor, [held[2]._id], type={held[2]._id: "retyped"})
        assert q.finish_many(held, now=T0 + 2) == []
        _check(q, held, T0 + 2)
        assert ways.read_back == [held[2]._id]
        assert sorted(ways.held) == sorted(h._id for h in held if h is not held[2])
    finally:
        q.close()
        editor.close()
        drop_tables(db_url, table_name)


# -- 4: table names, upgrade while workers run, init racing ---------------------------------------------


def test_another_table_whose_name_differs_only_in_case(backend, db_url, clock, monkeypatch):
    """``claim_mark_usable`` looks the mark up in information_schema by table name; MariaDB compares
    that name case-insensitively there. A table of schema 8 (no mark) beside a table of schema 9
    whose name differs in case only (pq table names may hold capitals)."""
    _only_mysql(backend)
    probe = sa.create_engine(db_url)
    try:
        with probe.connect() as c:
            if c.exec_driver_sql("SELECT @@lower_case_table_names").scalar() != 0:
                pytest.skip("the server folds table names")
    finally:
        probe.dispose()
    suffix = uuid.uuid4().hex[:8]
    upper_name, lower_name = f"CASE_{suffix}", f"case_{suffix}"
    upper = queue_core.open(db_url, upper_name, clock=clock)
    lower = queue_core.open(db_url, lower_name, clock=clock)
    worker = None
    try:
        upper.init()
        lower.init()
        _downgrade_to_8(lower)  # not upgraded yet: no mark
        worker = queue_core.open(db_url, lower_name, clock=clock)
        worker.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
        held = _claim(worker, 3, T0 + 1)  # unknown column touched_at, if the upper table's mark is taken
        assert worker.finish_many(held, now=T0 + 2) == []
        _check(worker, held, T0 + 2)
    finally:
        for q in (worker, upper, lower):
            if q is not None:
                q.close()
        drop_tables(db_url, upper_name)
        drop_tables(db_url, lower_name)


def test_a_worker_started_before_the_upgrade_keeps_reading_back(queue, backend, db_url, clock, monkeypatch):
    _only_mysql(backend)
    _downgrade_to_8(queue)
    old = queue_core.open(db_url, queue.table, clock=clock)
    try:
        old_ways = SettleWays(old, monkeypatch)
        old.submit_many([{"key": f"k{i}", "type": "t"} for i in range(8)], now=T0)
        before = _claim(old, 2, T0 + 1)  # decided: no mark
        queue.init()  # the upgrade adds the mark while the worker holds tasks
        after = _claim(old, 3, T0 + 2, finish=before)
        hand_edit(old, [after[0]._id], queue={after[0]._id: "elsewhere"})
        assert old.finish_many(after, now=T0 + 3) == []
        _check(old, before, T0 + 2)
        _check(old, after, T0 + 3)
        assert old_ways.held == []
        new = queue_core.open(db_url, queue.table, clock=clock)
        try:
            new_ways = SettleWays(new, monkeypatch)
            mine = _claim(new, 3, T0 + 4)
            hand_edit(new, [mine[1]._id], owner={mine[1]._id: "someone-else"})
            assert new.finish_many(mine, now=T0 + 5) == []
            _check(new, mine, T0 + 5)
            assert new_ways.read_back == [mine[1]._id] and len(new_ways.held) == 2
        finally:
            new.close()
    finally:
        old.close()


def test_init_racing_with_running_workers(queue, backend, db_url, clock):
    """Workers claim and finish while ``init`` upgrades the table under them (schema 8 -> 9) and
    runs again; afterwards every task has one finished event, as the reference writes it."""
    if backend == "sqlite":
        pytest.skip("one writer at a time")
    if backend == "mysql":
        _downgrade_to_8(queue)
    n = 120
    queue.submit_many([{"key": f"k{i:03d}", "type": "t"} for i in range(n)], now=T0)
    errors: list[BaseException] = []
    done_at: dict[int, float] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def work(i):
        q = queue_core.open(db_url, queue.table, clock=clock)
        q.owner = f"w{i}"
        held: list = []
        step = 0
        try:
            while not stop.is_set():
                step += 1
                at = T0 + 10 + i * 0.001 + step * 0.01
                got = q.poll_multi(3, alive_time=10**6, now=at, finish=held)
                with lock:
                    for h in held:
                        done_at[h._id] = at
                held = got
                if not got:
                    break
            if held:
                at = T0 + 1000 + i
                assert q.finish_many(held, now=at) == []
                with lock:
                    for h in held:
                        done_at[h._id] = at
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            q.close()

    def initialise():
        try:
            for _ in range(3):
                other = queue_core.open(db_url, queue.table, clock=clock)
                try:
                    other.init()
                finally:
                    other.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)] + [threading.Thread(target=initialise)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    assert errors == []
    assert len(done_at) == n
    finished = event_rows(queue, "finished")
    assert sorted(r["task_id"] for r in finished) == sorted(done_at)
    for at in sorted(set(done_at.values())):
        ids = sorted(i for i, a in done_at.items() if a == at)
        got = sorted((r for r in finished if r["task_id"] in ids), key=lambda r: r["task_id"])
        assert_like_reference(got, reference_rows(queue, "finished", ids, at))


# -- 3: lost acknowledgements, lost leases, a holder paused past its lease ------------------------------


def test_a_holder_paused_past_its_lease_and_a_second_claim_then_a_lost_ack(queue, backend, monkeypatch):
    """A holds k1 and k2; both leases expire; B claims k1 (the mark set again, by B's claim);
    A's settle of k1 and k2 in one batch, its commit acknowledgement lost: k1 lost, k2 finished
    once; then B finishes k1 once, written from what B holds."""
    q, ways = queue, SettleWays(queue, monkeypatch)
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
    a = _claim(q, 4, T0 + 1, alive=10)
    hand_edit(q, [a[2]._id, a[3]._id], timeout={a[2]._id: 2e9, a[3]._id: 2e9})  # still A's (k2, k3)
    [b] = q.poll_multi(1, alive_time=10**6, now=T0 + 20)  # k0 taken over; k1 expired, not taken
    assert b.key == "k0"
    with commit_ack_lost_once(q) as state:
        lost = q.finish_many(a, now=T0 + 21)
    assert state["fired"] == 1
    assert sorted(t.key for t in lost) == ["k0"]
    _check(q, [x for x in a if x.key != "k0"], T0 + 21)
    with commit_ack_lost_once(q) as state:
        assert q.finish_many([b], now=T0 + 22) == []
    _check(q, [b], T0 + 22)
    assert len(event_rows(q, "finished")) == 4
    if marks_claims(backend):
        assert b._id in ways.held


def test_a_partial_held_settle_with_an_attempt_given_back_and_a_lost_ack(queue, backend, monkeypatch):
    """In one batch: a row untouched (held way), a row whose attempt an earlier holder gave back
    (changed since), a row taken over (lost), a row heartbeaten (changed since): the held UPDATE
    falls short (the partial branch), and its commit acknowledgement is lost."""
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(6)], now=T0)
    early = _claim(q, 6, T0 + 1, alive=5)
    later = _claim(q, 6, T0 + 10, alive=100)  # every lease of the early claim expired: taken over
    gave = q.store.task_lost_before_start(early[1]._id, early[1].key, early[1].created_at, early[1]._token, T0 + 11)
    assert gave == "returned"
    later[3].heartbeat(alive_time=100, now=T0 + 12)
    hand_edit(q, [later[4]._id], timeout={later[4]._id: T0 + 13})
    [third] = q.poll_multi(1, alive_time=100, now=T0 + 14)
    assert third.key == later[4].key
    ways = SettleWays(q, monkeypatch)
    with commit_ack_lost_once(q) as state:
        nxt = q.poll_multi(0, now=T0 + 15, finish=later)
    assert state["fired"] == 1 and nxt == []
    assert [t.key for t in later if t.lost] == [later[4].key]
    mine = [t for t in later if t is not later[4]]
    _check(q, mine, T0 + 15)
    if marks_claims(backend):
        assert sorted(ways.read_back) == sorted([later[1]._id, later[3]._id])
    for t in mine:
        assert [e.kind for e in q.history(t.key)].count("finished") == 1


def test_the_event_stream_history_and_statistics_after_held_settles(queue, backend):
    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(6)], now=T0)
    held = _claim(q, 6, T0 + 1)
    q["k2"].track()
    more = q.poll_multi(0, now=T0 + 3, finish=held)
    assert more == []
    _check(q, held, T0 + 3)
    assert_stream_and_statistics_see_each_finish_once(q, held, T0)


def _two_leases_of_one_task(q, order):
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(2)], now=T0)
    old = _claim(q, 2, T0 + 1, alive=10)
    again = _claim(q, 2, T0 + 20)
    batch = [*old, *again] if order == "old_first" else [*again, *old]
    return old, again, q.finish_many(batch, now=T0 + 21)


@pytest.mark.parametrize("order", ["old_first", "new_first"])
def test_one_worker_holding_two_leases_of_one_task_writes_each_finish_once(queue, backend, monkeypatch, order):
    """The same worker holds a task's expired lease (token a) and, claimed again, its new one
    (token b): both in one batch. The row is as the second claim left it (the mark set again by
    that claim): the new lease is finished once, from what it holds; the old one writes nothing."""
    q, ways = queue, SettleWays(queue, monkeypatch)
    old, again, _lost = _two_leases_of_one_task(q, order)
    _check(q, again, T0 + 21)
    if marks_claims(backend):
        assert sorted(ways.held) == sorted(t._id for t in again)


@pytest.mark.parametrize("order", ["old_first", "new_first"])
def test_one_worker_holding_two_leases_of_one_task_reports_only_the_old_lost(queue, backend, order):
    """(Not of this change: ``Queue._mark_settled`` marks lost by task id, so the lease that was
    finished is reported lost too, ``lost = True``, and never marked finished.)"""
    old, again, lost = _two_leases_of_one_task(queue, order)
    assert sorted(t._token for t in lost) == sorted(t._token for t in old)
    assert all(t.done and not t.lost for t in again)


def test_an_upgrade_refused_for_want_of_alter_leaves_the_table_at_its_version(backend, db_url, table_name, clock):
    """docs/security.md: upgrading needs ALTER. An ``init`` by an account without it fails; the
    table must still say it is of schema 8 (``tables_require_current`` then tells operators to
    run ``init``), as for every earlier upgrade, whose ALTERs ran before the version was written.
    Version 9's ALTER runs in ``after_init``, after ``_write_meta`` wrote 9, and MariaDB commits
    the transaction before a DDL statement: the version is 9, the column missing."""
    _only_mysql(backend)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))
    import db_admin

    db_admin.skip_unless_admin(backend)
    admin = queue_core.open(db_url, table_name, clock=clock)
    try:
        admin.init()
        _downgrade_to_8(admin)
        tables = db_admin.queue_tables(table_name, backend)
        grants = "CREATE, DROP, INDEX, SELECT, INSERT, UPDATE, DELETE"  # docs/security.md's admin, no ALTER
        with db_admin.account(backend, db_url, tables, grants) as (url, _):
            with queue_core.open(url, table_name, clock=clock) as q:
                with pytest.raises(queue_core.errors.TaskError):
                    q.init()
        has_mark = _scalar(
            admin,
            f"SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
            f"AND table_name = '{table_name}' AND column_name = '{MARK}'",
        )
        assert has_mark == 0
        assert admin.store.tables_version() == 8
    finally:
        admin.close()
        drop_tables(db_url, table_name)


def test_a_copy_of_a_task_finished_on_its_own_beside_an_untouched_one(queue, backend):
    """A task finished on its own (``Task.finish``), then a copy of it made before (a handler
    framework that copies the task it hands out) settled in a batch with another task: the batch's
    UPDATE writes the other row only, and the rows finished under the token are taken as this
    statement's (``_settle_held`` / ``_settled_short``: 'no earlier run committed'): its second
    ``finished`` event."""
    import copy

    q = queue
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(2)], now=T0)
    held = _claim(q, 2, T0 + 1)
    twin = copy.copy(held[0])
    held[0].finish(now=T0 + 2)
    q.finish_many([twin, held[1]], now=T0 + 3)
    assert [e.kind for e in q.history("k0")].count("finished") == 1
    assert len(event_rows(q, "finished")) == 2
