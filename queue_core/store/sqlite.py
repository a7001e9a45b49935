"""SQLite: one writer at a time; BEGIN IMMEDIATE serialises claims (store layer).

An insert here returns no rows (its count is the statement's row count). SQLite commits a
statement run in autocommit when its last row has been read: a RETURNING row read back in Python
needs the GIL while the database's write lock is held, and a handler holding the GIL in a C call
(another thread of the process) then stalled every worker's claims and heartbeats for as long as
it ran. Without rows, the statement commits inside its one step, the GIL released.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from .dialects import Dialect


class SQLiteDialect(Dialect):
    name = "sqlite"
    per_type = 1 << 30  # in-process statements cost no round trip, and IN lists plan badly here

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
