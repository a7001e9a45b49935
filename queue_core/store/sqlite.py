"""SQLite: one writer at a time; BEGIN IMMEDIATE serialises claims (store layer).

An insert here returns no rows (its count is the statement's row count). SQLite commits a
statement run in autocommit when its last row has been read: a RETURNING row read back in Python
needs the GIL while the database's write lock is held, and a handler holding the GIL in a C call
(another thread of the process) then stalled every worker's claims and heartbeats for as long as
it ran. Without rows, the statement commits inside its one step, the GIL released.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.visitors import InternalTraversal

from ..errors import ConfigError
from .dialects import Dialect


class PerRow(sa.sql.expression.ColumnElement):
    """A condition SQLite checks on each row without reading an index for it: ``+(condition)``."""

    inherit_cache = True
    _traverse_internals = [("clause", InternalTraversal.dp_clauseelement)]

    def __init__(self, clause):
        self.clause = clause


@compiles(PerRow)
def _per_row(element: PerRow, compiler, **kw) -> str:
    return f"+({compiler.process(element.clause, **kw)})"


class SQLiteDialect(Dialect):
    name = "sqlite"
    per_type = 1 << 30  # in-process statements cost no round trip, and IN lists plan badly here
    implicit_rowid = True
    like_folds_case = True
    integer_width_reflected = False

    def engine_options(self, url, pool_size, connect_timeout):
        options: dict = {"connect_args": {"timeout": 30, "check_same_thread": False}}
        if self.in_one_connection(url):
            options["poolclass"] = StaticPool
        else:
            options["pool_size"] = pool_size
        return options

    def in_one_connection(self, url):
        database = url.database or ""
        return database in ("", ":memory:") or "mode=memory" in str(url)

    def setup_engine(self, engine, options):
        """WAL, the ``sqlite_synchronous`` level, a busy timeout; BEGIN IMMEDIATE for a write
        transaction (pq issues BEGIN itself), BEGIN for a read, none for a statement in autocommit."""
        sync = str(options.get("sqlite_synchronous", "NORMAL")).upper()
        if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(
                f"sqlite_synchronous must be OFF, NORMAL, FULL or EXTRA, not {options['sqlite_synchronous']!r}"
            )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            try:
                cur.execute("PRAGMA journal_mode=WAL")
            except Exception:  # read-only media or memory: keep the default journal
                pass
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn):
            write = conn.get_execution_options().get("pq_write", True)
            if write is not None:  # None: a statement in autocommit, its own transaction
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    def run_options(self, write, autocommit):
        return {"pq_write": None if autocommit else write}

    def probe_connection(self, conn):
        return conn.execution_options(pq_write=False)

    def probe_read(self, conn, stmt):
        with conn.begin():  # a read transaction (BEGIN): SQLite has no autocommit of its own here
            return conn.execute(stmt).scalar()

    def insert_if_absent(self, table, conflict_column):
        return sqlite_dialect.insert(table).on_conflict_do_nothing(index_elements=_columns(conflict_column))

    def execute_insert(self, conn, stmt, rows, id_column):
        return conn.execute(stmt, rows).rowcount

    def insert_one(self, table, conflict_column, channel):
        return self.insert_if_absent(table, conflict_column)

    def inserted_one(self, conn, stmt, row):
        return conn.execute(stmt, row).rowcount == 1

    def lock_candidates(self, stmt):
        return stmt  # the write transaction (BEGIN IMMEDIATE) holds the database lock

    def snapshot_read(self, conn):
        pass  # a read transaction of SQLite reads one snapshot (WAL) or keeps writers out

    def lock_rows(self, stmt):
        return stmt

    def share_rows(self, stmt):
        return stmt

    def floor_small(self, value):
        # floor() is there only when SQLite was built with its math functions; CAST truncates
        whole = sa.cast(value, sa.Integer)
        return whole - sa.case((value < whole, 1), else_=0)

    def per_row(self, conditions):
        # Else a fence on the state and the due time draws the planner to an index of those
        # columns, a walk of every due row, rather than to the ids, keys or group: no index serves
        # ``+(...)``.
        return [PerRow(sa.and_(*conditions))] if conditions else []

    def likely(self, clause):
        # Else a due-time condition draws the planner to the purge index, a scan of all due rows.
        return sa.func.likely(clause, type_=sa.Boolean)

    def is_transient(self, exc):
        text = str(exc.orig).lower() if exc.orig is not None else ""
        return "locked" in text or "busy" in text or "disk i/o error" in text

    def is_missing_table(self, exc):
        return "no such table" in str(exc.orig).lower()

    def is_missing_column(self, exc):
        text = str(exc.orig).lower()
        return "no such column" in text or "has no column named" in text

    def is_denied(self, exc):
        return "readonly database" in str(exc.orig).lower()  # a read-only file (or mode=ro)


def _columns(conflict: str | tuple[str, ...]) -> list[str]:
    return [conflict] if isinstance(conflict, str) else list(conflict)
