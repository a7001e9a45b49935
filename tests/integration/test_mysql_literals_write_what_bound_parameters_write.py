"""MySQL's ``insert_rows`` renders each value as a SQL literal in the client
(``store/mysql.py``: ``sql_literal``, ``rendered_values``). What it writes must be, byte for byte
and bit for bit, what a bound-parameter INSERT of the same values writes, whatever a value
holds; and every caller of ``event_record()`` (claims, cancels, bulk changes, all through
``insert_rows``) must write what a bound-parameter INSERT writes."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from event_checks import bits, event_rows, hand_edit, same
from test_rendered_event_inserts_match_insert_select import TRICKY

from queue_core.rules.validate import cap_text
from queue_core.store import mysql as mysql_store
from queue_core.store.events import COLUMNS
from queue_core.store.schema import ErrorText

T0 = 1_700_000_000.0

NAMES = [
    "'",
    "''",
    "\\",
    "\\'",
    "%",
    "%s",
    "%(x)s",
    "?",
    ":x",
    "X'00'",
    "0x41",
    "NULL",
    "`",
    '"',
    "\t\n\r\x1a",
    "');DROP TABLE x;--",
    "\x01\x7f",
    "é\u0301",
    "\u2028\u2029",
    "\ufeff",
    "\U0001f600" * 255,
    "a" * 255,
    "\uffff",
    "\x00",
    "a\x00b",
    " trailing ",
    "\u00df",
]
BIG_INTS = [0, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**62 + 12345, 2**63 - 1, -1, -(2**63)]


def _only_mysql(backend):
    if backend != "mysql":
        pytest.skip("MySQL's client-rendered insert")


def _rows(n0: int) -> list[tuple]:
    doubles = [v for x in TRICKY for v in (x, -x)] + [0.0, -0.0, 1 / 3 * 1e-310, 1e-320, 2.0**-1074, 123456789.0]
    rows = []
    for i in range(max(len(NAMES), len(doubles), len(BIG_INTS))):
        name = NAMES[i % len(NAMES)]
        d = doubles[i % len(doubles)]
        rows.append(
            (
                n0 + i,  # task_id
                name,  # key (VARBINARY)
                "q" + str(i),  # queue
                name[::-1] or "t",  # type
                "finished",
                d,  # at
                BIG_INTS[i % len(BIG_INTS)] % 2**31,  # attempt (INT)
                name if i % 5 else None,  # owner (utf8mb4 VARCHAR)
                "success",
                (name * 40)[:1000] if i % 3 else None,  # detail
                d / 3 if i % 2 else None,
                -d,
                None if i % 4 or abs(d) > 1e300 else d * 7,
                i % 2,
                (name * 60)[:3000] if i % 7 else None,  # traceback
            )
        )
    return rows


def _written(q, since: int) -> list[dict]:
    e = q.store.events_t
    return q.db.run(
        lambda c: [dict(r._mapping) for r in c.execute(sa.select(e).where(e.c.id > since).order_by(e.c.id))]
    )


def _max_id(q) -> int:
    e = q.store.events_t
    return q.db.run(lambda c: c.execute(sa.select(sa.func.max(e.c.id))).scalar()) or 0


def test_rendered_rows_are_what_bound_parameters_write(queue, backend):
    _only_mysql(backend)
    rows = _rows(1000)
    e = queue.store.events_t
    before = _max_id(queue)
    queue.db.run(
        lambda c: queue.db.dialect.insert_rows(c, e, COLUMNS, [dict(zip(COLUMNS, r, strict=True)) for r in rows])
    )
    mid = _max_id(queue)
    queue.db.run(lambda c: c.execute(sa.insert(e), [dict(zip(COLUMNS, r, strict=True)) for r in rows]))
    rendered, bound = _written(queue, before)[: len(rows)], _written(queue, mid)
    assert len(rendered) == len(bound) == len(rows)
    for r, b, want in zip(rendered, bound, rows, strict=True):
        for col in COLUMNS:
            assert same(r[col], b[col]), (col, r[col], b[col])
        for col, v in zip(COLUMNS, want, strict=True):
            if isinstance(v, float):
                assert bits(r[col]) == bits(v) or (v == 0.0 and r[col] == 0.0), (col, v, r[col])
            # an error text is stored as the one cap writes it
            elif isinstance(v, str) and isinstance(e.c[col].type, ErrorText):
                assert r[col] == cap_text(v), (col, v, r[col])
            else:
                assert r[col] == v, (col, v, r[col])


def test_large_task_ids_round_trip(queue, backend):
    _only_mysql(backend)
    e = queue.store.events_t
    ids = [2**63 - 1, 2**62 + 1, 2**53 + 1, 1]
    rows = [(i, "k", "default", "t", "finished", T0, 1, "o", "success", None, 0.1, 0.2, None, 0, None) for i in ids]
    before = _max_id(queue)
    queue.db.run(
        lambda c: queue.db.dialect.insert_rows(c, e, COLUMNS, [dict(zip(COLUMNS, r, strict=True)) for r in rows])
    )
    assert [r["task_id"] for r in _written(queue, before)] == ids


def test_a_batch_far_beyond_the_chunk_is_written_whole(queue, backend):
    """Rows of 255 four-byte characters in key and type (2,040 hex digits each): many chunks."""
    _only_mysql(backend)
    e = queue.store.events_t
    n = 2500
    rows = [
        (
            i,
            ("\U0001f600" * 250) + f"{i:05d}",
            "default",
            "\U0001f4a9" * 255,
            "finished",
            T0 + i / 7,
            1,
            "\U0001f600" * 255,
            "success",
            None,
            i / 3,
            -i / 3,
            None,
            0,
            None,
        )
        for i in range(1, n + 1)
    ]
    size = sum(len(s) for s in mysql_store.rendered_values(rows))
    assert size > 5 * mysql_store.INSERT_BYTES
    before = _max_id(queue)
    queue.db.run(
        lambda c: queue.db.dialect.insert_rows(c, e, COLUMNS, [dict(zip(COLUMNS, r, strict=True)) for r in rows])
    )
    got = _written(queue, before)
    assert len(got) == n
    for r, want in zip(got, rows, strict=True):
        assert (r["task_id"], r["key"], r["type"], r["owner"]) == want[:2] + (want[3], want[7])
        assert bits(r["at"]) == bits(want[5]) and bits(r["waited"]) == bits(want[10])


def test_sql_literal_refuses_what_it_cannot_write():
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError):
            mysql_store.sql_literal(bad)
    for bad in (b"x", object(), [1]):
        with pytest.raises(TypeError):
            mysql_store.sql_literal(bad)
    assert mysql_store.sql_literal(True) == "1" and mysql_store.sql_literal(None) == "NULL"


# -- event_record() callers: the values rows hold ------------------------------------------------------


def test_cancelling_an_expired_lease_whose_key_holds_bytes_that_are_not_utf8(queue, backend):
    """MySQL's VARBINARY keeps any bytes (a hand edit): such a key reads back as lone surrogates
    (``ExactString``: surrogateescape) and was written back as the same bytes by a bound INSERT.
    ``cancel_waiting`` ends the expired lease with an ``expired`` event through ``event_record()``."""
    _only_mysql(backend)
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(3)], now=T0)
    held = queue.poll_multi(3, alive_time=10, now=T0 + 1)
    bad = "k\udcff\udcfe"  # the bytes b"k\xff\xfe"
    hand_edit(queue, [held[1]._id], key={held[1]._id: bad}, type={held[1]._id: "t\udcc0"})
    assert queue.cancel_waiting(now=T0 + 100) == 3
    expired = sorted(event_rows(queue, "expired"), key=lambda r: r["task_id"])
    assert [r["key"] for r in expired] == ["k0", bad, "k2"]
    assert expired[1]["type"] == "t\udcc0"
    assert len(event_rows(queue, "cancelled")) == 3


def test_a_claim_of_expired_and_tracked_rows_writes_its_events(queue):
    """The claim's own events (``claimed`` of tracked rows, ``expired`` of taken-over leases),
    now client-rendered on MySQL, with hostile names."""
    names = [n for n in NAMES if "\x00" not in n and n.strip() == n or n == " trailing "]
    for i, n in enumerate(names):
        queue.submit(n, f"{n[:200]}#{i}", now=T0 - TRICKY[i % len(TRICKY)] % 1e6)
        if i % 2:
            queue[n].track()
    first = queue.poll_multi(len(names), alive_time=10, now=T0 + 1)
    assert len(first) == len(names)
    second = queue.poll_multi(len(names), alive_time=10, now=T0 + 1e6 / 3)
    assert sorted(t.key for t in second) == sorted(names)
    expired = event_rows(queue, "expired")
    claimed = event_rows(queue, "claimed")
    assert sorted(r["key"] for r in expired) == sorted(names)
    tracked = [n for i, n in enumerate(names) if i % 2]
    assert sorted(r["key"] for r in claimed) == sorted(tracked * 2)
    by_id = {t._id: t for t in first}
    for r in expired:
        t = by_id[r["task_id"]]
        assert (r["owner"], r["attempt"]) == (queue.owner, 1)
        assert bits(r["ran"]) == bits(max(0.0, T0 + 1e6 / 3 - t.started_at))
        if r["tracked"]:
            assert r["waited"] is None
        else:
            assert bits(r["waited"]) == bits(max(0.0, t.started_at - t.run_at))


def test_a_settle_of_a_batch_bigger_than_a_chunk_writes_every_event(queue):
    """1,100 tasks whose key and type are 255 four-byte characters: the events of one settle
    take more than INSERT_BYTES."""
    n = 1100
    keys = [("\U0001f600" * 250) + f"{i:05d}" for i in range(n)]
    queue.submit_many([{"key": k, "type": "\U0001f4a9" * 255} for k in keys], now=T0)
    held = queue.poll_multi(n, alive_time=10**6, now=T0 + 1)
    assert len(held) == n
    rows = mysql_store.rendered_values(
        [
            (h._id, h.key, "default", h.type, "finished", T0 + 2, 1, h.owner, "success", None, 1.0, 1.0, None, 0)
            for h in held
        ]
    )
    assert sum(map(len, rows)) > mysql_store.INSERT_BYTES
    assert queue.finish_many(held, now=T0 + 2) == []
    got = event_rows(queue, "finished")
    assert sorted(r["key"] for r in got) == keys
    assert all(r["type"] == "\U0001f4a9" * 255 and r["at"] == T0 + 2 for r in got)


@pytest.mark.parametrize("owner", ["o" * 300, "\U0001f600" * 300, "'\\%s\x00 x ", "O'Brien\\\\:1"])
def test_a_hostile_or_long_owner_on_the_real_path(queue, backend, owner):
    if "\x00" in owner and backend == "postgres":
        pytest.skip("PostgreSQL text holds no NUL")
    queue.owner = owner
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(4)], now=T0)
    held = queue.poll_multi(4, alive_time=10**6, now=T0 + 1)
    assert queue.finish_many(held, now=T0 + 2) == []
    got = event_rows(queue, "finished")
    assert len(got) == 4 and all(r["owner"] == owner[:255] for r in got)


@pytest.mark.parametrize(
    "mode", ["ANSI", "TRADITIONAL,NO_BACKSLASH_ESCAPES,ANSI_QUOTES", "REAL_AS_FLOAT,PIPES_AS_CONCAT"]
)
def test_a_settle_under_any_sql_mode(backend, db_url, table_name, clock, mode):
    _only_mysql(backend)
    from conftest import drop_tables
    from test_rendered_event_inserts_match_insert_select import _mysql_url_with_mode

    import queue_core

    q = queue_core.open(_mysql_url_with_mode(db_url, mode), table_name, clock=clock)
    try:
        q.init()
        q.owner = "o'\\%s"
        names = [n for n in NAMES if "\x00" not in n]
        for i, n in enumerate(names):
            q.submit(n, f"t{i}", now=T0 - TRICKY[i % len(TRICKY)] % 1e6)
        held = q.poll_multi(len(names), alive_time=10**6, now=T0 + 1)
        assert q.finish_many(held, now=T0 + 2.1) == []
        got = event_rows(q, "finished")
        assert sorted(r["key"] for r in got) == sorted(names)
        for r in got:
            h = next(x for x in held if x._id == r["task_id"])
            assert r["owner"] == "o'\\%s" and bits(r["waited"]) == bits(h.started_at - h.run_at)
            assert bits(r["ran"]) == bits(T0 + 2.1 - h.started_at)
    finally:
        q.close()
        drop_tables(db_url, table_name)
