"""What every store has in common: its tables, their creation, their schema version, and the
check that a table of that name is one of ours before anything reads, writes or alters it."""

from __future__ import annotations

import time

import sqlalchemy as sa

from ..errors import DatabaseError, ForeignTableError, SchemaError
from . import ownership
from .database import Database
from .schema import ADDED_COLUMNS, SCHEDULE_ADDED_COLUMNS, schedule_table, task_table

#: how often ``init`` looks again after losing a race on CREATE TABLE
INIT_TRIES = 5


def _columns(make) -> frozenset[str]:
    return frozenset(c.name for c in make(sa.MetaData(), "x").c)


def _later_columns(added: dict[int, tuple[str, ...]]) -> frozenset[str]:
    """The columns of ``added`` (columns by the schema version that added them)."""
    return frozenset(name for names in added.values() for name in names)


#: what a table of each kind has at the least (its first schema version), to name the kind of
#: a table given where another kind was expected
KINDS = {
    "a pq queue table": _columns(task_table) - _later_columns(ADDED_COLUMNS),
    "a perfectsched schedule table": _columns(schedule_table) - _later_columns(SCHEDULE_ADDED_COLUMNS),
    "the meta table of a pq table": frozenset({"name", "value"}),
}


def _made_here(table: sa.Table, dialect: str) -> list[sa.Index]:
    """The indexes of ``table`` made on a database of ``dialect``."""
    return [index for index in table.indexes if _made_on(index, dialect)]


def _made_on(index: sa.Index, dialect: str) -> bool:
    """Whether ``index`` is made on a database of ``dialect`` (some are made only where the
    database has partial indexes: ``Index.ddl_if``)."""
    only = getattr(index, "_ddl_if", None)
    if only is None or only.dialect is None:
        return True
    return dialect in (only.dialect if isinstance(only.dialect, tuple) else (only.dialect,))


class VersionedTables:
    """Tables created by ``init`` with a ``<table>_meta`` row recording the schema version."""

    #: version this release writes and understands
    current_version: int = 1
    #: more (name, value) rows the meta table must hold
    meta_rows: tuple[tuple[str, str], ...] = ()
    #: the columns each schema version added to the main table ``t`` (nullable ones; a table of
    #: an earlier version lacks them until ``init`` upgrades it)
    added_columns: dict[int, tuple[str, ...]] = {}
    #: the indexes (by suffix: ``ix_<table>_<suffix>``) each schema version replaced
    dropped_indexes: dict[int, tuple[str, ...]] = {}
    #: the columns each schema version put in a byte-order collation (PostgreSQL only)
    recollated_columns: dict[int, tuple[str, ...]] = {}
    #: what the main table is, for messages
    kind = "a pq table"

    t: sa.Table  # the main table (set by each store)

    def __init__(self, db: Database, name: str, metadata: sa.MetaData, meta: sa.Table):
        self.db, self.name, self.metadata, self.meta = db, name, metadata, meta
        db.check_before_use(self.tables_exist)

    def tables_exist(self, conn, tables: tuple[sa.Table, ...] = ()) -> bool:
        """Whether the main table (and ``tables``) exist (False: not yet, ``init`` makes them);
        ForeignTableError when one of that name lacks columns this kind of table has: another
        program's table, or a pq table of another kind. Run before the database's first
        statement (``Database.run``), so such a table is never read, written, altered or dropped
        (``init --force``). The meta table is checked by ``init`` only: other accounts need no
        grant on it (perfectsched's)."""
        inspector = sa.inspect(conn)
        found = True
        for table in (self.t, *tables):
            if not inspector.has_table(table.name):
                found = False
                continue
            fold = self.db.dialect.column_names_fold_case
            columns = {ownership.column_name(c["name"], fold): c for c in inspector.get_columns(table.name)}
            missing = {c.name for c in table.c} - self.later_columns(table) - set(columns)
            if missing:
                raise ForeignTableError(self._foreign(table, set(columns), missing))
            wrong = ownership.difference(inspector, table, columns, self.db.dialect)
            wrong = wrong or self.db.dialect.text_columns_problem(conn, table)
            if wrong:
                raise ForeignTableError(self._not_ours(table, wrong))
        return found

    def later_columns(self, table: sa.Table) -> frozenset[str]:
        """The columns of ``table`` a later schema version added (an older table lacks them
        until ``init`` upgrades it): here, those of the main table."""
        return _later_columns(self.added_columns) if table is self.t else frozenset()

    def _not_ours(self, table: sa.Table, wrong: str) -> str:
        what = self.kind if table is not self.meta else f"the meta table of {self.kind} {self.name}"
        return (
            f"table {table.name} in {self.db.masked_url} has our column names but is not {what} "
            f"({wrong}): pq leaves it alone; name another table (--table, --schedule-table, config table)"
        )

    def _foreign(self, table: sa.Table, have: set[str], missing: set[str]) -> str:
        what = self.kind if table is not self.meta else f"the meta table of {self.kind} {self.name}"
        looks = next((k for k, cols in KINDS.items() if cols <= have), None)
        shown = ", ".join(sorted(missing)[:4]) + (", ..." if len(missing) > 4 else "")
        return (
            f"table {table.name} in {self.db.masked_url} is not {what}"
            + (f" but {looks}" if looks else f" (it has no column {shown})")
            + ": pq leaves it alone; name another table (--table, --schedule-table, config table)"
        )

    def tables_init(self, force: bool = False) -> None:
        """Create the tables (idempotent); ``force`` drops and recreates them."""

        def create(conn, drop: bool):
            # the main table again (it may have appeared since), and every table beside it: one of
            # another program's named like ours is never written, nor dropped by ``force``
            tables = self.tables_made_here()
            self.tables_exist(conn, tuple(t for t in tables if t is not self.t))
            if drop:
                self.metadata.drop_all(conn, tables=tables, checkfirst=True)
            existing = set(sa.inspect(conn).get_table_names())  # one look, not one per table and index
            for table in tables:  # (in dependency order)
                if table.name not in existing:
                    self.as_made(table).create(conn, checkfirst=False)
            self._write_meta(conn)  # upgrades first: new indexes may need its columns
            self._add_missing_indexes(conn, [t for t in tables if t.name in existing])
            self.after_init(conn)

        try:
            self.db.run(lambda c: create(c, force), what=f"init {self.name}")
        except SchemaError:
            raise
        except DatabaseError:
            if force:
                raise
            # Processes racing on CREATE TABLE: a loser sees "already exists" (MariaDB commits each
            # table's DDL on its own, so a second look may meet the next table): look again.
            for attempt in range(INIT_TRIES):
                try:
                    self.db.run(lambda c: create(c, False), what=f"init {self.name}")
                    return
                except SchemaError:
                    raise
                except DatabaseError:
                    if attempt == INIT_TRIES - 1:
                        raise
                    time.sleep(0.05 * (attempt + 1))

    def tables_made_here(self) -> list[sa.Table]:
        """The tables of this store made on its database (some are made on one kind only:
        ``Table.info["dialects"]``), in the order they are created."""
        name = self.db.dialect.name
        return [t for t in self.metadata.sorted_tables if name in t.info.get("dialects", (name,))]

    def _add_missing_indexes(self, conn, tables: list[sa.Table]) -> None:
        """Indexes a later release added to ``tables``, made by an earlier one (create_all made
        the others with all their indexes)."""
        inspector = sa.inspect(conn)
        for table in tables:
            have = {ix["name"] for ix in inspector.get_indexes(table.name)}
            for index in _made_here(table, conn.dialect.name):
                if index.name not in have:
                    index.create(conn)

    def tables_missing_indexes(self, conn) -> set[str]:
        """Indexes of this release the tables lack (made by an earlier one, before ``init``)."""
        tables = self.tables_made_here()
        have = {ix["name"] for t in tables for ix in sa.inspect(conn).get_indexes(t.name)}
        ours: set[str] = {ix.name for t in tables for ix in _made_here(t, conn.dialect.name) if ix.name is not None}
        return ours - have

    def _write_meta(self, conn) -> None:
        m = self.meta
        rows = {r.name: r.value for r in conn.execute(sa.select(m.c.name, m.c.value))}
        version = int(rows.get("schema_version", self.current_version))
        if version > self.current_version:
            raise SchemaError(
                f"table {self.name} has schema version {version}, newer than this release "
                f"understands ({self.current_version}); upgrade pq"
            )
        if "schema_version" in rows and version < self.current_version:
            self.upgrade(conn, version)
            conn.execute(sa.update(m).where(m.c.name == "schema_version").values(value=str(self.current_version)))
        for name, value in (("schema_version", str(self.current_version)), *self.meta_rows):
            if name not in rows:
                conn.execute(self.db.dialect.insert_if_absent(m, "name").values(name=name, value=value))

    def upgrade(self, conn, from_version: int) -> None:
        """Bring tables of ``from_version`` up to :attr:`current_version` (inside ``init``): add the
        columns later versions brought (ALTER TABLE ADD COLUMN: NULL, or NOT NULL with the
        column's default, which existing rows take), drop the indexes they replaced, and put the
        columns they made byte-ordered in PostgreSQL's ``C`` collation."""
        have = {ix["name"] for ix in sa.inspect(conn).get_indexes(self.t.name)}
        for version in range(from_version + 1, self.current_version + 1):
            self._upgrade_to(conn, version, have)

    def _upgrade_to(self, conn, version: int, indexes: set[str]) -> None:
        """The changes of the main table that schema ``version`` brought (its ``indexes`` before)."""
        for name in self.added_columns.get(version, ()):
            self.add_column(conn, self.t, name)
        for suffix in self.dropped_indexes.get(version, ()):
            if (index := f"ix_{self.t.name}_{suffix}") in indexes:
                self._drop_index(conn, index)
        for name in self.recollated_columns.get(version, ()):
            self.db.dialect.recollate(conn, self.t, name)
        self.upgraded_to(conn, version)

    def upgraded_to(self, conn, version: int) -> None:
        """What else schema ``version`` brought to a table made before it (run by the upgrade,
        before the version is recorded): nothing here."""

    def as_made(self, table: sa.Table) -> sa.Table:
        """``table`` as ``init`` creates it (a store may add what a dialect keeps outside the
        ``Table``): here, itself."""
        return table

    def after_init(self, conn) -> None:
        """What a store writes at the end of every ``init``, its tables made and upgraded:
        nothing here."""

    def add_column(self, conn, table: sa.Table, name: str) -> None:
        """ALTER TABLE ``table`` ADD COLUMN ``name`` as the release defines it."""
        prep = conn.dialect.identifier_preparer
        typ = self._added_type(conn, name, table)
        conn.exec_driver_sql(f"ALTER TABLE {prep.quote(table.name)} ADD COLUMN {prep.quote(name)} {typ}")

    def _added_type(self, conn, name: str, table: sa.Table | None = None) -> str:
        col = (self.t if table is None else table).c[name]
        typ = col.type.compile(dialect=conn.dialect)
        default = col.server_default
        if default is None:
            return f"{typ} NULL"
        arg = default.arg  # type: ignore[attr-defined]  # a DefaultClause: server_default=<text>
        literal = sa.literal(arg).compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        return f"{typ} NOT NULL DEFAULT {literal}"

    def _drop_index(self, conn, index: str) -> None:
        self.db.dialect.drop_index(conn, index, self.t.name)

    def tables_require_current(self) -> None:
        """SchemaError when the tables were made by an older release and ``init`` has not upgraded
        them yet (or were never created)."""
        version = self.tables_version()
        if version is not None and version < self.current_version:
            raise self._older(f"has schema version {version}")

    def _older(self, made: str) -> SchemaError:
        return SchemaError(
            f"table {self.name} {made}, older than this release's ({self.current_version}); run 'init' to upgrade it"
        )

    def require_ready(self, conn, tables: tuple[sa.Table, ...]) -> None:
        """SchemaError unless ``tables`` (made beside the main table by a later schema version)
        may be used in ``conn``: the schema version ``init`` recorded is this release's (it
        made them) and they are ours (ForeignTableError for another program's)."""
        stored = conn.execute(sa.select(self.meta.c.value).where(self.meta.c.name == "schema_version")).scalar()
        if stored is None or int(stored) < self.current_version:
            raise self._older("was never initialised" if stored is None else f"has schema version {stored}")
        if not self.tables_exist(conn, tables):
            raise SchemaError(f"{', '.join(t.name for t in tables)} not found beside {self.name}; run 'init'")

    def tables_check_writable(self) -> None:
        """AccessDeniedError when this account or database refuses writes to the main table (a
        read-only replica, transaction or file; no UPDATE grant). An UPDATE of no row: nothing
        is written."""
        t = self.t
        stmt = sa.update(t).where(sa.false()).values(key=t.c.key)
        self.db.run(lambda c: c.execute(stmt), what=f"check write access to {self.name}")

    def tables_version(self) -> int | None:
        """The version recorded in the meta table (None before init)."""

        def read(conn):
            v = conn.execute(sa.select(self.meta.c.value).where(self.meta.c.name == "schema_version")).scalar()
            return int(v) if v is not None else None

        return self.db.run(read, write=False, what="schema version")
