"""Where SQLite, MySQL/MariaDB and PostgreSQL differ (store layer).

Each dialect answers the same few questions: how to insert-if-absent, how to lock candidate
rows without blocking (``FOR UPDATE SKIP LOCKED``, or nothing on SQLite whose
``BEGIN IMMEDIATE`` already serialises writers), how to serialise capped fair-share claims,
and which driver errors are transient.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from ..errors import ConfigError


class Dialect:
    name = "generic"
    skip_locked = True
    install_hint = ""

    def connect_args(self, connect_timeout: float) -> dict:
        return {}

    def insert_if_absent(self, table: sa.Table, conflict_column: str):
        raise NotImplementedError

    def lock_candidates(self, stmt: sa.Select) -> sa.Select:
        return stmt.with_for_update(skip_locked=True)

    def execute_insert(self, conn: sa.Connection, stmt, rows: list[dict], id_column) -> int:
        """Run an insert-if-absent of ``rows``; return how many rows were inserted."""
        return len(conn.execute(stmt.values(rows).returning(id_column)).all())

    def lock_rows(self, stmt: sa.Select) -> sa.Select:
        """A blocking row lock (for serialising decisions about one row)."""
        return stmt.with_for_update()

    def is_transient(self, exc: sa.exc.DBAPIError) -> bool:
        return False

    def is_missing_table(self, exc: sa.exc.DBAPIError) -> bool:
        return False


def _code(exc: sa.exc.DBAPIError):
    orig = exc.orig
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class SQLiteDialect(Dialect):
    name = "sqlite"
    skip_locked = False

    def insert_if_absent(self, table, conflict_column):
        return sqlite_dialect.insert(table).on_conflict_do_nothing(index_elements=[conflict_column])

    def lock_candidates(self, stmt):
        return stmt  # the write transaction (BEGIN IMMEDIATE) holds the database lock

    def lock_rows(self, stmt):
        return stmt

    def is_transient(self, exc):
        text = str(exc.orig).lower() if exc.orig is not None else ""
        return "locked" in text or "busy" in text or "disk i/o error" in text

    def is_missing_table(self, exc):
        return "no such table" in str(exc.orig).lower()


class MySQLDialect(Dialect):
    name = "mysql"
    install_hint = "pip install PyMySQL"
    # 1205 lock wait timeout, 1213 deadlock, 2003 can't connect, 2006 gone away,
    # 2013 lost connection, 1040 too many connections, 1053 server shutdown,
    # 1927 connection killed, 4031 idle disconnect, 2014 commands out of sync
    TRANSIENT = {1205, 1213, 2003, 2006, 2013, 1040, 1053, 1927, 4031, 2014, 2055, 1317}

    def connect_args(self, connect_timeout):
        return {"connect_timeout": int(max(1, connect_timeout)), "charset": "utf8mb4"}

    def insert_if_absent(self, table, conflict_column):
        # IGNORE turns only duplicate-key errors into no-ops here: every other column is
        # validated before insert, so nothing is silently truncated.
        return mysql_dialect.insert(table).prefix_with("IGNORE")

    def execute_insert(self, conn, stmt, rows, id_column):
        return conn.execute(stmt.values(rows)).rowcount  # MySQL has no INSERT ... RETURNING

    def is_transient(self, exc):
        code = _code(exc)
        if code in self.TRANSIENT:
            return True
        text = str(exc.orig).lower() if exc.orig is not None else ""
        return "try restarting transaction" in text or "connection" in text and "lost" in text

    def is_missing_table(self, exc):
        return _code(exc) == 1146


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    install_hint = "pip install 'psycopg[binary]' (or the project's [postgres] extra)"

    def connect_args(self, connect_timeout):
        return {"connect_timeout": int(max(1, connect_timeout))}

    def insert_if_absent(self, table, conflict_column):
        return pg_dialect.insert(table).on_conflict_do_nothing(index_elements=[conflict_column])

    def is_transient(self, exc):
        state = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if state and (state in ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300")
                      or state.startswith("08")):
            return True
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return state is None  # connection-level failure without a SQL state
        return False

    def is_missing_table(self, exc):
        state = getattr(exc.orig, "sqlstate", None)
        return state == "42P01"


def for_backend(backend: str, masked_url: str) -> Dialect:
    if backend == "sqlite":
        return SQLiteDialect()
    if backend in ("mysql", "mariadb"):
        return MySQLDialect()
    if backend in ("postgresql", "postgres"):
        return PostgreSQLDialect()
    raise ConfigError(
        f"unsupported database {masked_url!r}: use sqlite://, mysql+pymysql:// or postgresql+psycopg://"
    )
