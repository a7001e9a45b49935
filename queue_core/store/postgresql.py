"""PostgreSQL: SKIP LOCKED claims, ON CONFLICT DO NOTHING, LISTEN/NOTIFY, SQLSTATE classes (store layer)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect

from .. import extras
from .dialects import Dialect


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    column_names_fold_case = False
    install_hint = "install pq[postgres] (" + extras.install_hint("psycopg") + ")"

    def recollate(self, conn, table, column):
        prep = conn.dialect.identifier_preparer  # (an index on the column is rebuilt with it)
        typ = table.c[column].type.compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {prep.quote(table.name)} ALTER COLUMN {prep.quote(column)} TYPE {typ}")

    def unique_keys(self, inspector, name):
        # every primary key and unique constraint has its unique index: one read of pg_index
        # (an expression's column is NULL, as the reflection reads it)
        rows = inspector.bind.exec_driver_sql(_UNIQUE_INDEXES, {"t": name}).all()
        primary = next((list(cols) for is_primary, cols in rows if is_primary), [])
        return primary, [list(cols) for is_primary, cols in rows if not is_primary]

    def is_view(self, inspector, name):
        return inspector.bind.exec_driver_sql(_RELKIND, {"t": name}).scalar() == "v"

    def as_bytes(self, text):
        return sa.func.convert_to(text, "UTF8")  # a cast to bytea would read backslash escapes

    def position_of(self, text, part):
        return sa.func.strpos(text, part)

    def is_nan(self, value):
        return value == sa.literal_column("'NaN'::float8")  # NaN equals NaN here, and sorts above all

    def connect_args(self, connect_timeout):
        return {"connect_timeout": int(max(1, connect_timeout))}

    def server_time(self):
        return sa.literal_column("EXTRACT(EPOCH FROM clock_timestamp())")  # now, not the transaction's start

    def insert_if_absent(self, table, conflict_column):
        return pg_dialect.insert(table).on_conflict_do_nothing(index_elements=_columns(conflict_column))

    def is_transient(self, exc):
        state = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if state and (
            state in ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300") or state.startswith("08")
        ):
            return True
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return state is None  # connection-level failure without a SQL state
        return False

    can_notify = True

    def insert_one(self, table, conflict_column, channel):
        # The NOTIFY rides on the INSERT (once per inserted row; PostgreSQL delivers one per
        # transaction and channel): no second statement, and none for a key that was taken.
        stmt = self.insert_if_absent(table, conflict_column)
        return stmt.returning(table.c.id, *([sa.func.pg_notify(channel, "")] if channel else []))

    def notify(self, conn, channel):
        conn.execute(sa.select(sa.func.pg_notify(channel, "")))

    def listen(self, engine, channel, on_notify, stop, timeout):
        from psycopg import sql

        raw = engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()  # a dedicated session: never handed back to the pool
        try:
            conn.rollback()
            conn.autocommit = True
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            while not stop.is_set():
                for _ in conn.notifies(timeout=timeout, stop_after=1):
                    on_notify()
        finally:
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass

    def is_missing_table(self, exc):
        state = getattr(exc.orig, "sqlstate", None)
        return state == "42P01"

    def is_missing_column(self, exc):
        return getattr(exc.orig, "sqlstate", None) == "42703"

    def is_denied(self, exc):
        # 42501 insufficient_privilege; 25006 read_only_sql_transaction (a hot standby, or
        # default_transaction_read_only set for the role or the database)
        return getattr(exc.orig, "sqlstate", None) in ("42501", "25006")


def _columns(conflict: str | tuple[str, ...]) -> list[str]:
    return [conflict] if isinstance(conflict, str) else list(conflict)


#: the table a name means here, as pg_class's oid: found through the search path (a temporary
#: table first), as every statement of pq's and the reflection of its columns find it
_OID = "to_regclass(quote_ident(%(t)s::text))"
#: the unique indexes of a table: whether each is its primary key, and its key columns in order
#: (not the columns an INCLUDE adds; an expression's column is NULL, as the reflection reads it)
_UNIQUE_INDEXES = f"""
SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord)
  FROM pg_index i
 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
  LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = {_OID} AND i.indisunique AND k.ord <= i.indnkeyatts
 GROUP BY i.indexrelid, i.indisprimary
"""
_RELKIND = f"SELECT relkind FROM pg_class WHERE oid = {_OID}"
