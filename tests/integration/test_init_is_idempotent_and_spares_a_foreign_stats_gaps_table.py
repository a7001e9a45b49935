"""``init`` and another program's table named ``<table>_stats_gaps`` (refused or left alone, never
dropped, even with force), init twice and the v5 upgrade twice (idempotent), and inits racing from
two connections (both succeed)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import downgrade, drop_tables

import queue_core
from queue_core import ForeignTableError


def _foreign_gaps(db_url: str, name: str) -> None:
    """Another program's table that happens to be named like pq's new gap table: it has an id and
    a missed_at column (names anyone might use) and one more column pq never has."""
    eng = sa.create_engine(db_url)
    with eng.begin() as c:
        c.execute(sa.text(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, missed_at FLOAT NOT NULL, note VARCHAR(20))"))
        c.execute(sa.text(f"INSERT INTO {name} VALUES (1, 0, 'alice'), (2, 0, 'bob')"))
    eng.dispose()


def _rows(db_url: str, name: str) -> list:
    eng = sa.create_engine(db_url)
    try:
        with eng.connect() as c:
            if not sa.inspect(c).has_table(name):
                return ["<dropped>"]
            columns = [col["name"] for col in sa.inspect(c).get_columns(name)]
            return [columns, *sorted(tuple(r) for r in c.execute(sa.text(f"SELECT * FROM {name}")))]
    finally:
        eng.dispose()


@pytest.fixture
def foreign(db_url, table_name, backend):
    name = f"{table_name}_stats_gaps"
    _foreign_gaps(db_url, name)
    yield name
    if backend != "sqlite":
        drop_tables(db_url, table_name)


def test_another_programs_stats_gaps_table_is_refused_or_left_alone(foreign, db_url, table_name, clock):
    """pq must raise ForeignTableError or leave the table alone. It does neither: init takes it as
    its own gap table (only the main and meta tables are checked), and the first roll-up reads its
    ids as passed-over event ids (counting events 1 and 2 a second time) and deletes its rows
    (their missed_at is older than event_gap_timeout)."""
    before = _rows(db_url, foreign)
    q = queue_core.open(db_url, table_name, clock=clock)
    try:
        try:
            q.init()
        except ForeignTableError:
            return
        q.submit("a", "t")
        clock.advance(1)
        q.poll(alive_time=60).finish()  # events 1 (claimed) and 2 (finished)
        clock.advance(1)
        st = q.statistics(since=clock.now() - 3600, until=clock.now() + 60).totals()[("default", "t")]
        after = _rows(db_url, foreign)
    finally:
        q.close()
    counted = (st.started, st.succeeded)
    assert (after, counted) == (before, (1, 1)), f"another program's table: {before} -> {after}; counted {counted}"


def test_init_force_never_drops_another_programs_stats_gaps_table(foreign, db_url, table_name, clock):
    before = _rows(db_url, foreign)
    q = queue_core.open(db_url, table_name, clock=clock)
    try:
        for force in (False, True):
            with pytest.raises(ForeignTableError, match="stats_gaps"):
                q.init(force=force)
    finally:
        q.close()
    assert _rows(db_url, foreign) == before, "init --force dropped another program's table"


def test_init_twice_and_the_v5_upgrade_twice_are_idempotent(queue, clock):
    queue.submit("a", "t")
    queue.poll(alive_time=60).finish()
    queue.init()
    queue.init()
    downgrade(queue.store, (), 5)
    queue.init()
    queue.init()
    assert queue.db.run(lambda c: queue.store.tables_missing_indexes(c), write=False) == set()
    tally = queue.statistics(since=clock.now() - 3600, until=clock.now() + 60).totals()[("default", "t")]
    assert (tally.started, tally.succeeded) == (1, 1)
    assert queue.store.task_get("a")["trace"] is None


@pytest.mark.parametrize("start", ["fresh", "v5"])
def test_inits_racing_from_two_connections_both_succeed(db_url, table_name, backend, clock, start):
    first = queue_core.open(db_url, table_name, clock=clock)
    if start == "v5":
        first.init()
        first.submit("a", "t")
        downgrade(first.store, (), 5)
    qs = [queue_core.open(db_url, table_name, clock=clock) for _ in range(3)]
    errors = []
    barrier = threading.Barrier(len(qs))

    def init(q):
        try:
            barrier.wait(10)
            q.init()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=init, args=(q,)) for q in qs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert qs[0].store.tables_version() == qs[0].store.current_version
        assert qs[0].db.run(lambda c: qs[0].store.tables_missing_indexes(c), write=False) == set()
        qs[0].submit("b", "t")
    finally:
        for q in (first, *qs):
            q.close()
        if backend != "sqlite":
            drop_tables(db_url, table_name)
