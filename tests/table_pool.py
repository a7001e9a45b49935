"""Queue tables kept between the tests of one process, on the server databases.

Making a queue's tables on MariaDB or PostgreSQL (ten tables, a dozen indexes) takes 0.3–0.5 s,
more than most tests that use them. So a test of the ``queue`` fixture gets tables an earlier test
of the same process made, emptied back to what ``init()`` left; the first test to use a name makes
them and notes that state (:meth:`TablePool.note`).

Tables come back to the pool only exactly as they were made: the same tables, columns, indexes,
constraints, triggers and grants (a test that altered, dropped or added any has them dropped), with
no thread or child process the test started still running (it could write into the next test's
rows), and emptied within a short lock wait: their rows deleted, their generated ids restarted, and
a table with planner statistics (ANALYZE, autovacuum) truncated, so that the next test plans on an
empty table as on a new one. Anything else drops them.
Tests of real worker processes (tests/acceptance, tests/reliability) always make their own: a
process that outlives its test must find its tables gone, not another test's.
"""

from __future__ import annotations

import glob
import re
import threading
from dataclasses import dataclass, field

import sqlalchemy as sa

#: test folders whose tests never get kept tables (their processes may outlive them)
OWN_TABLES = ("tests/acceptance/", "tests/reliability/")

#: the tables given planner statistics by a test (tests/integration/plans.py ``analyze``): emptied
#: by TRUNCATE, which drops them (MySQL keeps no other sign of them that this account may read)
ANALYZED: set[str] = set()


@dataclass
class Made:
    """What ``init()`` left in a name's tables: their shape and their rows."""

    shape: list[tuple]
    rows: dict[str, list[tuple]]
    #: PostgreSQL: the sequences of the tables' generated ids; MySQL: the tables with one
    counters: list[str] = field(default_factory=list)


@dataclass
class Lent:
    """A name lent to a test, the fixture that made its tables (``queue`` or ``sched``), and
    what was running when the test started. ``fresh``: its tables are not made yet."""

    name: str
    kind: str
    fresh: bool
    threads: set[int]
    children: set[str]


@dataclass
class TablePool:
    """The kept names of each server database URL, and what their tables hold when made."""

    free: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    made: dict[str, Made] = field(default_factory=dict)
    engines: dict[str, sa.Engine] = field(default_factory=dict)

    def lend(self, url: str, kind: str, fresh: str) -> Lent:
        """A kept name of ``kind`` for ``url`` if there is one, else ``fresh``."""
        free = self.free.setdefault((url, kind), [])
        name = free.pop() if free else fresh
        return Lent(name, kind, name == fresh, _threads(), _children())

    def note(self, url: str, lent: Lent) -> None:
        """Remember what ``init()`` made of a fresh name (again after each fixture's ``init()``)."""
        if lent.fresh:
            with self._engine(url).connect() as conn:
                rows = _rows(conn, lent.name)
                self.made[lent.name] = Made(_shape(conn, lent.name), rows, _counters(conn, list(rows)))

    def give_back(self, url: str, lent: Lent) -> bool:
        """Keep ``lent``'s tables for the next test if they are as made (then emptied); False:
        they must be dropped."""
        made = self.made.get(lent.name)
        if made is None or _threads() - lent.threads or _children() - lent.children:
            return False
        try:
            with self._engine(url).begin() as conn:
                if _shape(conn, lent.name) != made.shape:
                    return False
                _empty(conn, lent.name, made)
        except sa.exc.DBAPIError:  # a lock held by what the test left open, a revoked grant...
            return False
        ANALYZED.discard(lent.name)
        self.free[(url, lent.kind)].append(lent.name)
        return True

    def forget(self, name: str) -> None:
        self.made.pop(name, None)
        ANALYZED.discard(name)

    def _engine(self, url: str) -> sa.Engine:
        if url not in self.engines:
            self.engines[url] = sa.create_engine(url, pool_size=1)
        return self.engines[url]


def _threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def _children() -> set[str]:
    """The ids of this process's child processes (zombies included)."""
    kids: set[str] = set()
    for path in glob.glob("/proc/self/task/*/children"):
        try:
            with open(path) as fh:
                kids.update(fh.read().split())
        except OSError:  # a thread that ended meanwhile
            pass
    return kids


#: the tables named ``%s`` or like ``%s`` in the connection's schema, by dialect
_TABLES = {
    "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    " AND (tablename = %s OR tablename LIKE %s)",
    "mysql": "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
    " AND (table_name = %s OR table_name LIKE %s)",
}


def _tables(conn: sa.Connection, name: str) -> list[str]:
    """The tables of ``name``: itself and those named ``<name>_...``."""
    beside = re.sub(r"([_%\\])", r"\\\1", name) + r"\_%"
    ask = _TABLES["postgresql" if conn.dialect.name == "postgresql" else "mysql"]
    return sorted(r[0] for r in conn.exec_driver_sql(ask, (name, beside)))


def _shape(conn: sa.Connection, name: str) -> list[tuple]:
    """Everything a test could have altered about the tables of ``name``, as comparable rows."""
    tables = _tables(conn, name)
    if conn.dialect.name == "postgresql":
        return [tuple(r) for r in conn.exec_driver_sql(_PG_SHAPE, (tables,))]
    shape: list[tuple] = []
    for t in tables:
        create = conn.exec_driver_sql(f"SHOW CREATE TABLE `{t}`").one()[1]
        shape.append((t, re.sub(r" AUTO_INCREMENT=\d+", "", create)))
    for ask in _MYSQL_SHAPE:
        shape += [tuple(r) for r in conn.exec_driver_sql(ask, (tables,))] if tables else []
    return shape


#: PostgreSQL: columns, indexes, constraints, triggers, grants and options of the tables ``%s``
_PG_SHAPE = """
WITH t AS (SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = current_schema() AND c.relname = ANY(%s))
SELECT 'column', t.relname, a.attnum::text || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' ' || coalesce(co.collname, '')
  FROM t JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = t.oid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
UNION ALL SELECT 'index', t.relname, pg_get_indexdef(i.indexrelid) FROM t JOIN pg_index i ON i.indrelid = t.oid
UNION ALL SELECT 'constraint', t.relname, k.conname || ' ' || pg_get_constraintdef(k.oid)
  FROM t JOIN pg_constraint k ON k.conrelid = t.oid
UNION ALL SELECT 'trigger', t.relname, g.tgname FROM t JOIN pg_trigger g ON g.tgrelid = t.oid AND NOT g.tgisinternal
UNION ALL SELECT 'table', t.relname, coalesce(c.relacl::text, '') || ' ' || coalesce(c.reloptions::text, '')
       || ' ' || c.relrowsecurity::text FROM t JOIN pg_class c ON c.oid = t.oid
ORDER BY 1, 2, 3
"""

#: MySQL/MariaDB: what ``SHOW CREATE TABLE`` leaves out (triggers, grants) of the tables ``%s``
_MYSQL_SHAPE = (
    "SELECT trigger_name, event_object_table, action_statement FROM information_schema.triggers"
    " WHERE trigger_schema = DATABASE() AND event_object_table IN %s ORDER BY 1",
    "SELECT grantee, table_name, privilege_type FROM information_schema.table_privileges"
    " WHERE table_schema = DATABASE() AND table_name IN %s ORDER BY 1, 2, 3",
    "SELECT grantee, table_name, column_name, privilege_type FROM information_schema.column_privileges"
    " WHERE table_schema = DATABASE() AND table_name IN %s ORDER BY 1, 2, 3, 4",
)


def _rows(conn: sa.Connection, name: str) -> dict[str, list[tuple]]:
    return {t: _rows_of(conn, t) for t in _tables(conn, name)}


def _empty(conn: sa.Connection, name: str, made: Made) -> None:
    """The tables of ``name`` back to the rows ``init()`` left, their generated ids restarted. Rows
    are deleted from the tables that have any (TRUNCATE remakes a table: 2–20 ms each on
    MariaDB, for each of a dozen tables); a table with planner statistics is truncated."""
    quote = conn.dialect.identifier_preparer.quote
    pg = conn.dialect.name == "postgresql"
    if pg:
        conn.exec_driver_sql("SET LOCAL lock_timeout = '2s'")
    else:
        conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 2, lock_wait_timeout = 2")
    tables = list(made.rows)
    planned = set(tables) if name in ANALYZED else _planned(conn, tables)
    held = dict(zip(tables, conn.exec_driver_sql(_holds(tables, quote)).one(), strict=True))
    for table, rows in made.rows.items():
        if table in planned:
            conn.exec_driver_sql(f"TRUNCATE TABLE {quote(table)}")
        elif held[table] and (not rows or _rows_of(conn, table) != rows):
            conn.exec_driver_sql(f"DELETE FROM {quote(table)}")
        else:
            continue
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            conn.exec_driver_sql(f"INSERT INTO {quote(table)} VALUES ({marks})", rows)
    _restart_ids(conn, made.counters, quote)


def _holds(tables: list[str], quote) -> str:
    """One statement telling, for each of ``tables``, whether it holds a row (1 or NULL)."""
    return "SELECT " + ", ".join(f"(SELECT 1 FROM {quote(t)} LIMIT 1)" for t in tables)


def _rows_of(conn: sa.Connection, table: str) -> list[tuple]:
    quote = conn.dialect.identifier_preparer.quote
    return [tuple(r) for r in conn.exec_driver_sql(f"SELECT * FROM {quote(table)}")]


def _planned(conn: sa.Connection, tables: list[str]) -> set[str]:
    """PostgreSQL: those of ``tables`` with planner statistics (an ANALYZE or VACUUM, autovacuum's
    too, set ``reltuples``, -1 on a table never analyzed)."""
    if conn.dialect.name != "postgresql":
        return set()
    ask = (
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relname = ANY(%s) AND c.reltuples >= 0"
    )
    return {r[0] for r in conn.exec_driver_sql(ask, (tables,))}


def _counters(conn: sa.Connection, tables: list[str]) -> list[str]:
    """What generates ids in ``tables``: PostgreSQL's sequences owned by their columns, MySQL's
    tables with an AUTO_INCREMENT column."""
    if conn.dialect.name == "postgresql":
        ask = (
            "SELECT s.relname FROM pg_class s JOIN pg_depend d ON d.objid = s.oid AND d.deptype IN ('a', 'i')"
            " JOIN pg_class t ON t.oid = d.refobjid JOIN pg_namespace n ON n.oid = t.relnamespace"
            " WHERE s.relkind = 'S' AND n.nspname = current_schema() AND t.relname = ANY(%s) ORDER BY 1"
        )
        return [r[0] for r in conn.exec_driver_sql(ask, (tables,))]
    ask = (
        "SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE()"
        " AND table_name IN %s AND extra LIKE '%%auto_increment%%' ORDER BY 1"
    )
    return [r[0] for r in conn.exec_driver_sql(ask, (tables,))] if tables else []


def _restart_ids(conn: sa.Connection, counters: list[str], quote) -> None:
    """The next generated id of each of ``counters`` (``_counters``) back to 1 (tables emptied)."""
    if not counters:
        return
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT " + ", ".join(f"setval('{quote(s)}', 1, false)" for s in counters))
        return
    ask = (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
        " AND table_name IN %s AND auto_increment > 1"
    )
    for (table,) in conn.exec_driver_sql(ask, (counters,)).all():
        conn.exec_driver_sql(f"ALTER TABLE {quote(table)} AUTO_INCREMENT = 1")
