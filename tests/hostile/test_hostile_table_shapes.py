"""A table that looks like ours is refused (ForeignTableError) before use when pq could never
insert into it, and taken when it can: columns a DBA added that the database fills
(identity, generated, defaulted) leave it ours; an added NOT NULL column without a default, one of
our nullable columns made NOT NULL (pq writes NULL there), or SQLite's NOT NULL DEFAULT NULL make
it foreign. Outcome checked: either refused, or a submit and a claim work."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import ForeignTableError

# (backend, name, DDL on table {t}); None: any backend
CASES = [
    ("postgres", "extra_identity_always", 'ALTER TABLE "{t}" ADD COLUMN extra bigint GENERATED ALWAYS AS IDENTITY'),
    (
        "postgres",
        "extra_generated_stored_notnull",
        'ALTER TABLE "{t}" ADD COLUMN extra int GENERATED ALWAYS AS (id * 2) STORED NOT NULL',
    ),
    ("postgres", "extra_notnull_nodefault", 'ALTER TABLE "{t}" ADD COLUMN extra int NOT NULL'),
    ("mysql", "extra_notnull_nodefault", "ALTER TABLE `{t}` ADD COLUMN extra INT NOT NULL"),
    ("mysql", "extra_virtual", "ALTER TABLE `{t}` ADD COLUMN extra INT AS (id * 2) VIRTUAL"),
    ("mysql", "extra_default", "ALTER TABLE `{t}` ADD COLUMN extra INT NOT NULL DEFAULT 3"),
    ("sqlite", "extra_notnull_default_null", 'ALTER TABLE "{t}" ADD COLUMN extra INTEGER NOT NULL DEFAULT NULL'),
    (
        "sqlite",
        "extra_generated_notnull",
        'ALTER TABLE "{t}" ADD COLUMN extra INTEGER GENERATED ALWAYS AS (id * 2) VIRTUAL NOT NULL',
    ),
    # one of OUR nullable columns (pq inserts an explicit NULL into it) turned NOT NULL with a default
    (
        "postgres",
        "our_resource_notnull_default",
        """ALTER TABLE "{t}" ALTER COLUMN resource SET DEFAULT '', ALTER COLUMN resource SET NOT NULL""",
    ),
    ("mysql", "our_resource_notnull_default", "ALTER TABLE `{t}` MODIFY resource VARBINARY(255) NOT NULL DEFAULT ''"),
    (
        "postgres",
        "our_max_running_identity",
        'ALTER TABLE "{t}" ALTER COLUMN max_running SET NOT NULL, '
        "ALTER COLUMN max_running ADD GENERATED ALWAYS AS IDENTITY",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{b}-{n}" for b, n, _ in CASES])
def test_table_is_refused_or_usable(case, db_url, table_name, clock, backend):
    want, name, ddl = case
    if want != backend:
        pytest.skip(f"{want} only")
    q = queue_core.open(db_url, table_name, clock=clock)
    q.init()
    q.close()
    eng = sa.create_engine(db_url)
    try:
        with eng.begin() as c:
            for stmt in ddl.format(t=table_name).split(";"):
                c.exec_driver_sql(stmt)
    finally:
        eng.dispose()
    q = queue_core.open(db_url, table_name, clock=clock)
    try:
        try:
            q.check_writable()
        except ForeignTableError:
            return  # refused: fine
        q.submit("k", "t")  # taken as ours: pq must be able to insert
        task = q.poll(alive_time=10)
        assert task is not None
        task.finish()
    finally:
        q.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)
