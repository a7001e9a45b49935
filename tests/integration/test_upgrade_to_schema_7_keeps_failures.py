"""Upgrades to schema version 7 (failures intact, PostgreSQL key in "C" with its
unique constraint, keys of any characters kept), two inits at once, and a foreign
<table>_failed_ids on MySQL."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import downgrade, run_together

import queue_core
from queue_core.errors import ForeignTableError

T0 = 1_700_000_000.0
ODD = ["a%b", "a_b", "a\\b", "A", "a", "é", "😀", "\U0010ffff", "\ud7ff", "x y ", "中文", "a'b\"c"]


def failed_keys(q) -> set[str]:
    keys, cursor = set(), None
    while True:
        page = q.browse(status="failed", cursor=cursor, limit=500, now=T0 + 50)
        keys |= {t.key for t in page.tasks}
        if (cursor := page.next_cursor) is None:
            return keys


def _prepare_v6(queue, n=3000):
    queue.submit_many([{"key": f"bulk{i:05d}", "type": "t"} for i in range(n)], now=T0)
    queue.submit_many([{"key": k, "type": "t"} for k in ODD], now=T0)
    failed = set()
    for task in queue.poll_multi(200, now=T0 + 1):
        if task.key.startswith("bulk") and int(task.key[4:]) % 3 == 0 or not task.key.startswith("bulk"):
            task.fail("ValueError: old", now=T0 + 2, retention_time=10**6)
            failed.add(task.key)
        else:
            task.finish(now=T0 + 2, retention_time=10**6)
    downgrade(queue.store, [], 6)
    return failed


def test_upgrade_from_6_keeps_failures_keys_and_uniqueness(queue, backend):
    failed = _prepare_v6(queue)
    queue.init()
    assert queue.store.tables_version() == 10
    assert failed_keys(queue) == failed
    assert sum(g.count for g in queue.failures()) == len(failed)
    assert queue.retry_failed(dry_run=True, now=T0 + 50) == len(failed)
    for k in ODD:
        assert queue.store.task_get(k)["key"] == k
    with pytest.raises(queue_core.errors.IdempotentAlreadyExistsError):
        queue.submit("a%b", "t", now=T0 + 60)
    t = queue.store.t
    with pytest.raises(sa.exc.IntegrityError):
        with queue.db.engine.begin() as c:
            c.execute(sa.insert(t).values(key="a", type="t", data="{}", timeout=0, run_at=0, created_at=0))
    if backend == "postgres":
        coll = queue.db.run(
            lambda c: c.execute(
                sa.text(
                    "SELECT collation_name FROM information_schema.columns WHERE table_name = :t "
                    "AND column_name = 'key'"
                ),
                {"t": queue.table},
            ).scalar()
        )
        assert coll == "C"
        uniq = queue.db.run(
            lambda c: c.execute(
                sa.text("SELECT count(*) FROM pg_indexes WHERE tablename = :t AND indexdef LIKE 'CREATE UNIQUE%key%'"),
                {"t": queue.table},
            ).scalar()
        )
        assert uniq >= 1


def test_two_inits_at_once_upgrade_once(queue, backend):
    if backend == "sqlite":
        pytest.skip("one file")
    failed = _prepare_v6(queue, n=500)
    url = queue.db.engine.url.render_as_string(hide_password=False)
    barrier = threading.Barrier(2)

    def run():
        with queue_core.open(url, queue.table) as q:
            barrier.wait()
            q.init()

    assert run_together(run, run) == []
    assert queue.store.tables_version() == 10
    assert failed_keys(queue) == failed


@pytest.mark.parametrize("force", [False, True])
def test_a_foreign_failed_table_is_refused_and_left_alone(db_url, table_name, backend, force):
    eng = sa.create_engine(db_url)
    name = f"{table_name}_failed_ids"
    try:
        with eng.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {name} (task_id BIGINT PRIMARY KEY, note VARCHAR(20))")
            c.exec_driver_sql(f"INSERT INTO {name} VALUES (1, 'theirs')")
        q = queue_core.open(db_url, table_name)
        try:
            if backend == "mysql":
                with pytest.raises(ForeignTableError):
                    q.init(force=force)
            else:
                q.init(force=force)  # no <table>_failed_ids of ours there
        finally:
            q.close()
        with eng.begin() as c:
            assert c.exec_driver_sql(f"SELECT task_id, note FROM {name}").all() == [(1, "theirs")]
    finally:
        eng.dispose()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


def test_a_foreign_failed_table_of_our_shape_on_mysql(db_url, table_name, backend):
    """Another program's table that is exactly (task_id BIGINT PK): same shape as ours."""
    if backend != "mysql":
        pytest.skip("mysql only")
    eng = sa.create_engine(db_url)
    name = f"{table_name}_failed_ids"
    try:
        with eng.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {name} (task_id BIGINT NOT NULL PRIMARY KEY) DEFAULT CHARSET=utf8mb4")
            c.exec_driver_sql(f"INSERT INTO {name} VALUES (1)")
        q = queue_core.open(db_url, table_name)
        try:
            q.init(force=True)
        except ForeignTableError:
            return
        finally:
            q.close()
        with eng.begin() as c:
            left = c.exec_driver_sql(f"SELECT task_id FROM {name}").all()
        assert left == [(1,)], "init --force dropped another program's table"
    finally:
        eng.dispose()
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def test_upgrade_from_a_real_6_without_the_partial_index(queue, backend):
    """A version-6 table has no ix_<table>_failed_ids (downgrade leaves it): init makes it, and the
    failed filter reads through it and finds exactly the failed rows."""
    failed = _prepare_v6(queue, n=300)
    if backend != "mysql":
        name = f"ix_{queue.table}_failed"
        queue.db.run(lambda c: c.exec_driver_sql(f'DROP INDEX "{name}"'))
    queue.init()
    if backend != "mysql":
        have = queue.db.run(lambda c: {ix["name"] for ix in sa.inspect(c).get_indexes(queue.table)})
        assert f"ix_{queue.table}_failed" in have
    assert failed_keys(queue) == failed
