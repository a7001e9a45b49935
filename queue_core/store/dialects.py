"""Where SQLite, MySQL/MariaDB and PostgreSQL differ (store layer).

:class:`Dialect` holds what most databases share; ``sqlite.py``, ``mysql.py`` and
``postgresql.py`` override the rest, and :func:`queue_core.store.database.dialect_for` picks one.
Each dialect answers the same few questions: how to insert-if-absent, how to lock candidate
rows without blocking (``FOR UPDATE SKIP LOCKED``, or nothing on SQLite whose
``BEGIN IMMEDIATE`` already serialises writers), how to serialise capped fair-share claims,
and which driver errors are transient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

#: where doubles are all whole numbers (2**52): their floor is themselves
WHOLE_FROM = float(2**52)


class Dialect:
    name = "generic"
    install_hint = ""
    #: whether column names match whatever their case (MySQL, SQLite; PostgreSQL's quoted ones do not)
    column_names_fold_case = True
    #: whether statements in autocommit need connections of their own (``Database._statement_engine``)
    autocommit_pool = False
    #: whether per-queue index probes may be subqueries correlated to a list of queue names
    #: (planned once, whatever the number of queues; ``store/claim/queues.py``)
    correlated_probes = True
    #: whether every table has a hidden rowid a row is inserted without naming (SQLite)
    implicit_rowid = False
    #: whether LIKE folds the case of ASCII letters (SQLite): a prefix match compares the bytes too
    like_folds_case = False
    #: whether the text types are told apart by name, having no length (MySQL's TEXT, LONGTEXT ...)
    text_capacity_by_name = False
    #: whether an integer column's reflected type tells its width (not SQLite: any INTEGER holds 8 bytes)
    integer_width_reflected = True

    def engine_options(self, url: sa.URL, pool_size: int, connect_timeout: float) -> dict:
        """The options of ``create_engine`` for ``url`` (a server: a pool of connections in READ
        COMMITTED, recycled hourly)."""
        return {
            "pool_size": pool_size,
            "max_overflow": max(pool_size, 10),
            "pool_recycle": 3600,
            "connect_args": self.connect_args(connect_timeout),
            "isolation_level": "READ COMMITTED",
        }

    def in_one_connection(self, url: sa.URL) -> bool:
        """Whether every user of ``url`` shares one connection (an in-memory SQLite database)."""
        return False

    def setup_engine(self, engine: sa.Engine, options: dict) -> None:
        """What each engine of ``Database`` needs besides its options (``options``: the
        ``Database``'s own, such as ``sqlite_synchronous``): nothing, unless a dialect says."""

    def run_options(self, write: bool, autocommit: bool) -> dict | None:
        """The execution options of a connection ``Database.run`` opens (None: none): a statement
        in autocommit runs with AUTOCOMMIT, unless its pool's connections already are."""
        return {"isolation_level": "AUTOCOMMIT"} if autocommit and not self.autocommit_pool else None

    def probe_connection(self, conn: sa.Connection) -> sa.Connection:
        """``conn`` set up for the wake-up probe's reads (``store/watch.py``): in autocommit."""
        return conn.execution_options(isolation_level="AUTOCOMMIT")

    def probe_read(self, conn: sa.Connection, stmt: sa.Select) -> Any:
        """The one value ``stmt`` reads on the probe's connection (autocommit: no BEGIN, no COMMIT sent)."""
        return conn.execute(stmt).scalar()

    def drop_index(self, conn: sa.Connection, index: str, table: str) -> None:
        """DROP INDEX ``index`` (of ``table``)."""
        conn.exec_driver_sql(f"DROP INDEX {conn.dialect.identifier_preparer.quote(index)}")

    def recollate(self, conn: sa.Connection, table: sa.Table, column: str) -> None:
        """Give ``column`` of ``table`` the collation the release defines (an upgrade): nothing
        where collations are not kept per column (only PostgreSQL's are changed by an upgrade)."""

    def prepare_engine(self, engine: sa.Engine) -> None:
        """Set up each engine of this database once it is created (nothing, unless a dialect says)."""

    def load(self, url: sa.URL) -> None:
        """Build, without connecting, what every connection to ``url`` would build again (in a
        process that forks: its children inherit it). Nothing, unless a dialect says."""

    def connect_args(self, connect_timeout: float) -> dict:
        return {}

    def insert_if_absent(self, table: sa.Table, conflict_column: str | tuple[str, ...]):
        """An INSERT that skips rows whose ``conflict_column`` (or columns: a composite key) is taken."""
        raise NotImplementedError

    def text_columns_problem(self, conn: sa.Connection, table: sa.Table) -> str | None:
        """Why the text columns of ``table`` as it is cannot hold every string pq writes; None."""
        return None

    def unique_keys(self, inspector: Any, name: str) -> tuple[list[str], list[list[str]]]:
        """The table ``name``'s primary key columns, and the columns of each of its other unique
        keys (constraints and unique indexes; a key may be listed twice): what the ownership
        check compares with the keys ``init`` makes (``store/ownership.py``)."""
        others = [u["column_names"] for u in inspector.get_unique_constraints(name)]
        others += [i["column_names"] for i in inspector.get_indexes(name) if i["unique"]]
        return inspector.get_pk_constraint(name)["constrained_columns"], others

    def is_view(self, inspector: Any, name: str) -> bool:
        """Whether ``name`` is a view, not a table."""
        return name in inspector.get_view_names()

    def lock_candidates(self, stmt: sa.Select) -> sa.Select:
        return stmt.with_for_update(skip_locked=True)

    def server_time(self) -> sa.ColumnElement | None:
        """The server's current time in epoch seconds, as an SQL expression; None: no server
        (SQLite: the host's clock is the clock)."""
        return None

    def execute_insert(self, conn: sa.Connection, stmt, rows: list[dict], id_column) -> int:
        """Run an insert-if-absent of ``rows``; return how many rows were inserted.

        Rows go as parameters of one cached statement (SQLAlchemy batches them into
        multi-row VALUES), never as a statement compiled per call.
        """
        return len(conn.execute(stmt.returning(id_column), rows).all())

    def inserted_keys(self, conn: sa.Connection, stmt, rows: list[dict], table: sa.Table) -> list[tuple[int, str]]:
        """Run an insert-if-absent of ``rows`` (of ``table``, keyed ``key``); the (id, key) of each
        row it inserted: RETURNING where the database has it, else one row per statement (MySQL)."""
        if conn.dialect.insert_executemany_returning:
            return [(r[0], r[1]) for r in conn.execute(stmt.returning(table.c.id, table.c.key), rows)]
        made = []
        for row in rows:
            res = conn.execute(stmt, row)
            if res.rowcount:
                made.append((res.lastrowid, row["key"]))
        return made

    def insert_selected(self, table: sa.Table, columns: Sequence[str], rows: sa.Select, returning: str = "") -> Any:
        """How to insert into ``table`` (its ``columns``) the rows ``rows`` selects, run by
        :meth:`run_insert_selected`: here one INSERT ... SELECT (returning the column
        ``returning`` of the rows inserted, if named). Built once, run often."""
        stmt = sa.insert(table).from_select(list(columns), rows)
        return stmt.returning(table.c[returning]) if returning else stmt

    def claim_mark_usable(self, conn: sa.Connection, table: sa.Table) -> bool:
        """Whether the task ``table`` has the dialect's claim mark as ``init`` makes it (MySQL:
        ``mysql.CLAIM_MARK``); False: no mark (a settle reads its rows back to write their
        events, in one INSERT ... SELECT where the database has it)."""
        return False

    def with_claim_mark(self, table: sa.Table) -> sa.Table:
        """The task ``table`` with the dialect's claim mark, as ``init`` creates it (a copy): here,
        itself (no mark)."""
        return table

    def add_claim_mark(self, conn: sa.Connection, table: sa.Table) -> None:
        """Give the task ``table`` the dialect's claim mark, if it keeps one and the table lacks it
        (a table made by an earlier release: ``init`` upgrades it)."""

    def claim_marks(self, table: sa.Table) -> list[tuple]:
        """The (column, value) pairs a claim's UPDATE of ``table`` (from :meth:`with_claim_mark`)
        writes to mark its rows as claimed; [] without a mark."""
        return []

    def as_claimed(self, table: sa.Table) -> list:
        """The condition that a row of ``table`` (from :meth:`with_claim_mark`) is as its claim left
        it: no change of it since, by anyone; [] without a mark."""
        return []

    def insert_rows(self, conn: sa.Connection, table: sa.Table, columns: Sequence[str], rows: Sequence[dict]) -> None:
        """Insert ``rows`` (dicts of the values of every one of ``columns``) into ``table``."""
        if rows:
            conn.execute(sa.insert(table), list(rows))

    def run_insert_selected(self, conn: sa.Connection, plan: Any, params: dict, returning: str = "") -> list:
        """Run ``plan`` of :meth:`insert_selected` with ``params``: the values of its
        ``returning`` column of the rows inserted ([] without)."""
        result = conn.execute(plan, params)
        return list(result.scalars()) if returning else []

    def insert_one(self, table: sa.Table, conflict_column: str, channel: str | None):
        """The statement of :meth:`inserted_one`: insert one row unless its ``conflict_column``
        is taken, and (``channel``) tell the listeners as it commits. Built once, run often."""
        return self.insert_if_absent(table, conflict_column).returning(table.c.id)

    def inserted_one(self, conn: sa.Connection, stmt, row: dict) -> bool:
        """Run ``stmt`` of :meth:`insert_one` for ``row``: whether it was inserted."""
        return conn.execute(stmt, row).first() is not None

    def update_each(
        self,
        conn: sa.Connection,
        table: sa.Table,
        rows: Sequence[dict],
        *,
        each: Sequence[str],
        where: Sequence,
        match: Sequence[str] = (),
        values: dict | None = None,
    ) -> int:
        """One transition of many rows by id, each with its own values: ``rows`` are dicts of
        ``id``, the columns ``each`` (set per row) and ``match`` (per-row conditions, e.g. a lease
        token); ``where`` is the transition's precondition (its expected state, never empty: a
        row is never written by id alone) and ``values`` apply to all. Returns how many rows matched."""
        if not where:
            raise ValueError("update_each needs the precondition of its transition (where=)")
        if not rows:
            return 0
        return self._update_each(conn, table, rows, each=each, match=match, where=where, values=values)

    def _update_each(self, conn, table, rows, *, each, match, where, values) -> int:
        """Here: one statement run with many parameter sets (psycopg pipelines them; SQLite runs
        them in-process), faster than one statement that carries every row's values."""
        c = table.c
        stmt = (
            sa.update(table)
            .where(c.id == sa.bindparam("_id"), *[c[m] == sa.bindparam(f"_m_{m}") for m in match], *where)
            .values(**(values or {}), **{col: sa.bindparam(f"_v_{col}") for col in each})
        )
        params = [
            {"_id": r["id"], **{f"_m_{m}": r[m] for m in match}, **{f"_v_{col}": r[col] for col in each}} for r in rows
        ]
        return conn.execute(stmt, params).rowcount

    def as_bytes(self, text: Any) -> Any:
        """SQL: the UTF-8 bytes of ``text`` (grouped and compared byte for byte, whatever the
        column's collation; bytes a hand edit left that are not UTF-8 come back as they are)."""
        return sa.cast(text, sa.LargeBinary)

    def position_of(self, text: Any, part: str) -> Any:
        """SQL: where ``part`` first starts in ``text`` (1-based; 0: nowhere)."""
        return sa.func.instr(text, part)

    def floor(self, value: Any) -> Any:
        """The greatest integer at or below ``value`` (a DOUBLE expression), in SQL: ``value``
        itself from 2**52 on either side, where every double is whole (MariaDB's grouped FLOOR
        keeps 17 digits, SQLite's integers end at 2**63)."""
        whole = sa.or_(value >= WHOLE_FROM, value <= -WHOLE_FROM)
        return sa.case((whole, value), else_=self.floor_small(value))

    def floor_small(self, value: Any) -> Any:
        """:meth:`floor` of a ``value`` within 2**52 either side of 0."""
        return sa.func.floor(value)

    def is_nan(self, value: Any) -> Any:
        """SQL: whether the DOUBLE ``value`` is NaN (only PostgreSQL stores one)."""
        return sa.false()

    def snapshot_read(self, conn: sa.Connection) -> None:
        """Make the transaction just begun on ``conn`` read one snapshot in all its statements
        (before its first statement): REPEATABLE READ, which needs no privilege beyond SELECT."""
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def lock_rows(self, stmt: sa.Select) -> sa.Select:
        """A blocking row lock (for serialising decisions about one row)."""
        return stmt.with_for_update()

    def share_rows(self, stmt: sa.Select) -> sa.Select:
        """A blocking shared row lock: many holders at once, none while one holds ``lock_rows``."""
        return stmt.with_for_update(read=True)

    def is_transient(self, exc: sa.exc.DBAPIError) -> bool:
        return False

    def likely(self, clause):
        """``clause``, hinted as true for most rows where the dialect's planner needs that."""
        return clause

    def per_row(self, conditions: list) -> list:
        """The fence ``conditions`` of a statement that finds its rows by id, key or group: checked
        on each row those find, never used to find rows where the dialect's planner would."""
        return conditions

    def index_order(self, fixed: list, then: list) -> list:
        """The ORDER BY that reads an index on ``fixed + then`` in its order, when the WHERE
        fixes the ``fixed`` columns (one of them with IS NULL): PostgreSQL takes the index's
        order only when the whole of it is named."""
        return [*fixed, *then]

    def avoid_indexes(self, stmt: sa.Select, table: sa.Table, names: list[str]) -> sa.Select:
        """``stmt``, told not to read ``table`` through the indexes ``names`` where the
        dialect's planner must be told (they must exist)."""
        return stmt

    #: whether idle workers can be woken by the database (PostgreSQL LISTEN/NOTIFY)
    can_notify = False

    #: a claim limited to task types queries up to this many types one by one (an exact index
    #: range each), more with IN lists: a round trip per type against planners' guesses
    per_type = 100

    def notify(self, conn: sa.Connection, channel: str) -> None:
        """Tell listeners of ``channel`` that tasks arrived (delivered at commit)."""

    def listen(self, engine: sa.Engine, channel: str, on_notify, stop, timeout: float) -> None:
        """Call ``on_notify()`` for notifications on ``channel`` until ``stop`` is set.

        Returns when the connection fails; the caller reconnects.
        """
        raise NotImplementedError

    def is_missing_table(self, exc: sa.exc.DBAPIError) -> bool:
        return False

    def is_missing_column(self, exc: sa.exc.DBAPIError) -> bool:
        """Whether the statement named a column the table lacks (made by an earlier release)."""
        return False

    def is_denied(self, exc: sa.exc.DBAPIError) -> bool:
        """Whether the database refused the statement to this account for good: a privilege it
        lacks, or a read-only replica, transaction or file."""
        return False
