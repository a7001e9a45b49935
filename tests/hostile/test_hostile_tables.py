"""A table that is not ours, named where a pq table is expected, on SQLite, MariaDB and PostgreSQL:
another program's table given by ``--table`` or by a config file, a schedule table
given as the queue table and the other way round. Every command and the library refuse it with
``ForeignTableError`` at first use (the CLI: one line, exit 5) and never read past that, write,
alter, index or drop it: its rows, columns and indexes are checked unchanged, and no companion
``<table>_meta`` appears; a worker given such a table exits at start with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hostile_support import HERE, clean_environ, one_line_error

import perfectsched
import queue_core
from perfectsched.cli import cli as sched_cli
from queue_core import ForeignTableError
from queue_core.cli.main import cli as pq_cli
from queue_core.store.schema import task_table


def _invoke(cli, *args):
    return CliRunner().invoke(cli, list(args), env={k: None for k in os.environ if k.startswith("PQ_")})


class Tables:
    """Every table of the database whose name starts with ``prefix``: names, columns, indexes, rows."""

    def __init__(self, url: str, prefix: str):
        self.engine = sa.create_engine(url, pool_size=1)
        self.prefix = prefix

    def __call__(self) -> dict:
        out = {}
        with self.engine.connect() as conn:
            inspector = sa.inspect(conn)
            for name in sorted(n for n in inspector.get_table_names() if n.startswith(self.prefix)):
                rows = conn.execute(sa.text(f"SELECT * FROM {name}")).all()
                out[name] = (
                    [c["name"] for c in inspector.get_columns(name)],
                    sorted(i["name"] for i in inspector.get_indexes(name)),
                    sorted(map(repr, rows)),
                )
        return out

    def drop(self) -> None:
        with self.engine.begin() as conn:
            for name in self().keys():
                conn.execute(sa.text(f"DROP TABLE {name}"))
        self.engine.dispose()


@pytest.fixture
def tables(backend, db_url):
    """The tables of this test (names from ``tables.prefix``), dropped at its end."""
    t = Tables(db_url, f"ft{os.getpid() % 10000}_{uuid.uuid4().hex[:6]}")
    yield t
    t.drop()


def _users(db_url: str, name: str) -> None:
    """Another program's table, with the columns pq's purge looks at (id, state, timeout)."""
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, state INTEGER, timeout FLOAT, name VARCHAR(20))")
        )
        conn.execute(sa.text(f"INSERT INTO {name} VALUES (1, 1, 0, 'alice'), (2, 0, 0, 'bob')"))
    engine.dispose()


QUEUE_COMMANDS = [
    ["list"],
    ["stats"],
    ["show", "k"],
    ["submit", "k", "t"],
    ["cancel", "k"],
    ["force-finish", "k"],
    ["cleanup"],
    ["init"],
    ["init", "--force"],
]


def test_another_program_s_table_is_never_touched(db_url, tables, tmp_path):
    prefix = tables.prefix
    users = f"{prefix}_users"
    _users(db_url, users)
    before = tables()
    config = tmp_path / "pq.toml"
    config.write_text(f'[development]\nurl = "{db_url}"\ntable = "{users}"\n')
    for command in QUEUE_COMMANDS:
        for where in (["-D", db_url, "--table", users], ["-c", str(config)]):
            err = one_line_error("perfectqueue", _invoke(pq_cli, *command, *where), 5)
            assert f"table {users} " in err and "is not a pq queue table (it has no column " in err, (command, err)
    for command in (["list"], ["show", "k"], ["init"], ["init", "--force"]):
        err = one_line_error(
            "perfectsched",
            _invoke(sched_cli, *command, "-D", db_url, "--schedule-table", users, "--table", f"{prefix}_q"),
            5,
        )
        assert "is not a perfectsched schedule table" in err, err
    with queue_core.open(db_url, users) as q:
        for call in (lambda: list(q.list()), q.cleanup, lambda: q.submit("k", "t"), q.init, q.poll):
            with pytest.raises(ForeignTableError, match=f"table {users} "):
                call()
    worker = subprocess.run(
        [
            f"{os.path.dirname(sys.executable)}/perfectqueue",
            "run",
            f"{HERE / 'hostile_handlers.py'}:Worker",
            "--burst",
            "-c",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environ(),
    )
    errors = [line for line in worker.stderr.splitlines() if line.startswith("perfectqueue: error: ")]
    assert worker.returncode == 5 and len(errors) == 1 and f"table {users} " in errors[0], worker.stderr[-3000:]
    assert tables() == before  # rows, columns, indexes; no {users}_meta, no {prefix}_q


def test_a_schedule_table_is_not_a_queue_table_nor_the_other_way_round(db_url, tables):
    queue_table, schedule_table = f"{tables.prefix}_q", f"{tables.prefix}_s"
    with perfectsched.open(db_url, schedule_table, queue_table) as sc:
        sc.init()
        sc.add("every", "t", cron="* * * * *")
        sc.queue.submit("job", "t", {})
    before = tables()
    for command in QUEUE_COMMANDS:
        err = one_line_error("perfectqueue", _invoke(pq_cli, *command, "-D", db_url, "--table", schedule_table), 5)
        assert f"table {schedule_table} " in err and "not a pq queue table but a perfectsched schedule table" in err
    swapped = ["-D", db_url, "--schedule-table", queue_table, "--table", schedule_table]
    for command in (["list"], ["show", "every"], ["init"], ["init", "--force"], ["delete", "every"]):
        err = one_line_error("perfectsched", _invoke(sched_cli, *command, *swapped), 5)
        assert (
            "is not a pq queue table but a perfectsched schedule table" in err
            or "is not a perfectsched schedule table but a pq queue table" in err
        ), err
    # the queue's own meta table named as the schedule table
    err = one_line_error(
        "perfectsched",
        _invoke(sched_cli, "init", "-D", db_url, "--schedule-table", f"{queue_table}_meta", "--table", queue_table),
        5,
    )
    assert "is not a perfectsched schedule table but the meta table of a pq table" in err, err
    with perfectsched.open(db_url, queue_table, schedule_table) as sc:
        with pytest.raises(ForeignTableError):
            list(sc.list())
    assert tables() == before


def _look_alike(db_url: str, name: str, shape: str) -> None:
    """Another program's table with every column name of a queue table: all of them text, or
    of our types but without the unique key on ``key``; one row of its own."""
    ours = task_table(sa.MetaData(), "x")
    columns = [
        sa.Column(
            c.name, sa.Text() if shape == "all-text" else c.type, primary_key=shape != "all-text" and c.primary_key
        )
        for c in ours.c
    ]
    table = sa.Table(name, sa.MetaData(), *columns)
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(
            table.insert().values(
                key="theirs",
                type="t",
                data="payload",
                timeout=0,
                run_at=0,
                created_at=0,
                **({"id": 7} if shape == "all-text" else {}),
            )
        )
    engine.dispose()


@pytest.mark.parametrize("shape", ["all-text", "no-unique-key"])
def test_a_table_with_our_column_names_but_not_our_types_or_keys_is_not_ours(db_url, tables, shape):
    """Column names alone do not make a pq table: init neither indexes it nor makes its meta table."""
    name = f"{tables.prefix}_other"
    _look_alike(db_url, name, shape)
    before = tables()
    with queue_core.open(db_url, name) as q:
        for call in (q.init, lambda: q.submit("k", "t"), q.poll, lambda: list(q.list())):
            with pytest.raises(ForeignTableError, match=f"table {name} .*has our column names but is not a pq queue"):
                call()
    err = one_line_error("perfectqueue", _invoke(pq_cli, "init", "-D", db_url, "--table", name), 5)
    assert "has our column names" in err and ("column " in err or "no unique key on key" in err), err
    assert tables() == before


def test_a_view_of_a_queue_table_is_not_a_queue_table(db_url, tables):
    """A view (updatable on PostgreSQL and MySQL) over a real queue table: refused, its table unchanged."""
    real, view = f"{tables.prefix}_q", f"{tables.prefix}_v"
    with queue_core.open(db_url, real) as q:
        q.init()
        q.submit("job", "t", {})
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE VIEW {view} AS SELECT * FROM {real}"))
    try:
        before = tables()
        with queue_core.open(db_url, view) as q:
            for call in (q.init, lambda: q.init(force=True), q.cleanup, q.poll, lambda: q.submit("k", "t")):
                with pytest.raises(ForeignTableError, match=f"table {view} .*it is a view"):
                    call()
        assert tables() == before
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP VIEW {view}"))
        engine.dispose()


@pytest.mark.parametrize("unique", [True, False], ids=["unique", "plain"])
def test_a_unique_key_a_dba_added_makes_the_table_not_ours_a_plain_index_does_not(db_url, tables, unique):
    """A unique key pq does not make would refuse a task whose own key is free: the table is
    refused at first use (and ``init`` leaves it alone); a plain index a DBA added for a report is
    harmless: the table is still ours."""
    name = f"{tables.prefix}_q"
    with queue_core.open(db_url, name) as q:
        q.init()
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        kind = "UNIQUE INDEX" if unique else "INDEX"
        conn.execute(sa.text(f"CREATE {kind} {name}_by_type ON {name} (type, resource)"))
    engine.dispose()
    with queue_core.open(db_url, name) as q:
        if unique:
            with pytest.raises(ForeignTableError, match="a unique key on resource, type that pq does not make"):
                q.submit("k", "t")
        else:
            q.submit("k", "t")
            assert q["k"].exists()


def _pg_only(backend: str) -> None:
    if backend != "postgres":
        pytest.skip("PostgreSQL's search path and INCLUDE columns")


def test_pqs_tables_found_through_the_search_path_are_its_own(backend, db_url, tables):
    """Tables made in ``public``, opened by a session whose search path starts with an empty
    schema: pq's statements find them there, and so does the check that they are pq's."""
    _pg_only(backend)
    name, schema = f"{tables.prefix}_q", f"{tables.prefix}_empty"
    with queue_core.open(db_url, name) as q:
        q.init()
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        url = sa.engine.make_url(db_url).update_query_dict({"options": f"-csearch_path={schema},public"})
        with queue_core.open(url.render_as_string(hide_password=False), name) as q:
            q.submit("k", "t")
            assert q["k"].exists()
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema}")
        engine.dispose()


@pytest.mark.parametrize("index", ["tag", "primary"])
def test_the_columns_an_include_adds_are_not_part_of_a_key(backend, db_url, tables, index):
    """A unique index on ``tag`` alone that INCLUDEs ``task_id`` would refuse a second task's tag:
    refused as a key pq does not make; a primary key that INCLUDEs a column is still the key on id."""
    _pg_only(backend)
    name = f"{tables.prefix}_q"
    with queue_core.open(db_url, name) as q:
        q.init()
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        if index == "tag":
            conn.exec_driver_sql(f"CREATE UNIQUE INDEX {name}_tag_one ON {name}_tags (tag) INCLUDE (task_id)")
        else:
            conn.exec_driver_sql(f"ALTER TABLE {name} DROP CONSTRAINT {name}_pkey")
            conn.exec_driver_sql(f"ALTER TABLE {name} ADD PRIMARY KEY (id) INCLUDE (type)")
    engine.dispose()
    with queue_core.open(db_url, name) as q:
        if index == "tag":
            with pytest.raises(ForeignTableError, match="a unique key on tag that pq does not make"):
                q.init()
        else:
            q.submit("k", "t")
            assert q["k"].exists()
