"""What every store has in common: its tables, their creation and their schema version."""

from __future__ import annotations

import sqlalchemy as sa

from ..errors import DatabaseError, SchemaError
from .database import Database


class VersionedTables:
    """Tables created by ``init`` with a ``<table>_meta`` row recording the schema version."""

    #: version this release writes and understands
    current_version: int = 1
    #: more (name, value) rows the meta table must hold
    meta_rows: tuple[tuple[str, str], ...] = ()
    #: the columns each schema version added to the main table ``t`` (nullable ones)
    added_columns: dict[int, tuple[str, ...]] = {}
    t: sa.Table

    def __init__(self, db: Database, name: str, metadata: sa.MetaData, meta: sa.Table):
        self.db, self.name, self.metadata, self.meta = db, name, metadata, meta

    def init(self, force: bool = False) -> None:
        """Create the tables (idempotent); ``force`` drops and recreates them."""

        def create(conn, drop: bool):
            if drop:
                self.metadata.drop_all(conn, checkfirst=True)
            self.metadata.create_all(conn, checkfirst=True)
            self._add_missing_indexes(conn)
            self._write_meta(conn)

        try:
            self.db.run(lambda c: create(c, force), what=f"init {self.name}")
        except SchemaError:
            raise
        except DatabaseError:
            if force:
                raise
            # Two processes racing on CREATE TABLE: the loser sees "already exists"; look again.
            self.db.run(lambda c: create(c, False), what=f"init {self.name}")

    def _add_missing_indexes(self, conn) -> None:
        """Indexes a later release added to tables created before it (create_all skips a
        table that exists, with its indexes)."""
        for table in self.metadata.sorted_tables:
            for index in table.indexes:
                index.create(conn, checkfirst=True)

    def missing_indexes(self, conn) -> set[str]:
        """Indexes of this release the tables lack (made by an earlier one, before ``init``)."""
        tables = self.metadata.sorted_tables
        have = {ix["name"] for t in tables for ix in sa.inspect(conn).get_indexes(t.name)}
        ours: set[str] = {ix.name for t in tables for ix in t.indexes if ix.name is not None}
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
        columns later versions brought (ALTER TABLE ADD COLUMN, NULL)."""
        prep = conn.dialect.identifier_preparer
        for version in range(from_version + 1, self.current_version + 1):
            for name in self.added_columns.get(version, ()):
                col = self.t.c[name]
                conn.exec_driver_sql(
                    f"ALTER TABLE {prep.quote(self.t.name)} ADD COLUMN {prep.quote(name)} "
                    f"{col.type.compile(dialect=conn.dialect)} NULL"
                )

    def require_current_version(self) -> None:
        """SchemaError when the tables were made by an older release and ``init`` has not upgraded
        them yet (or were never created)."""
        version = self.schema_version()
        if version is not None and version < self.current_version:
            raise SchemaError(
                f"table {self.name} has schema version {version}, older than this release's "
                f"({self.current_version}); run 'init' to upgrade it"
            )

    def schema_version(self) -> int | None:
        """The version recorded in the meta table (None before init)."""

        def read(conn):
            v = conn.execute(sa.select(self.meta.c.value).where(self.meta.c.name == "schema_version")).scalar()
            return int(v) if v is not None else None

        return self.db.run(read, write=False, what="schema version")
