"""MySQL 8 and MariaDB 10.6+ (store layer): INSERT IGNORE, rows written as literals and batched
UPDATE ... CASE statements under the packet limit, the claim mark (``touched_at``), DROP INDEX ... ON,
text types by name, the transient error codes. Their claims lock with FOR UPDATE SKIP LOCKED, as
PostgreSQL's do: :meth:`Dialect.lock_candidates` of ``dialects.py``."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql as mysql_dialect

from ..rules.validate import cap_text
from .dialects import Dialect
from .schema import ErrorText


def error_code(exc: sa.exc.DBAPIError):
    """The driver's error number (PyMySQL: the first argument), or None."""
    orig = exc.orig
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


#: most bytes of values one UPDATE ... CASE statement carries: the whole statement is one packet,
#: and the server refuses (drops the connection on) a packet above max_allowed_packet (16 MB
#: by default on MariaDB, 4 MB on MySQL 5.7); a row larger than this goes alone
CASE_BYTES = 2 * 1024 * 1024
CASE_ROWS = 500


def _per_row(c, chunk, col):
    """``CASE id WHEN .. THEN ..``: each row's own value of ``col``."""
    return sa.case({r["id"]: sa.bindparam(None, r[col], type_=c[col].type) for r in chunk}, value=c.id)


def _chunks(rows: Iterable[dict], cols: Sequence[str]) -> Iterator[list[dict]]:
    """``rows`` in runs of at most CASE_ROWS rows and about CASE_BYTES bytes of values."""
    chunk: list[dict] = []
    size = 0
    for r in rows:
        n = 64 + sum(len(v) * 4 if isinstance(v, str) else 32 for v in (r[col] for col in cols))
        if chunk and (len(chunk) >= CASE_ROWS or size + n > CASE_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(r)
        size += n
    if chunk:
        yield chunk


#: most bytes of rendered rows one INSERT of :meth:`MySQLDialect.run_insert_selected` carries
INSERT_BYTES = 2 * 1024 * 1024
#: the SQL string literals that open and close a hexadecimal literal: X' and '
HEX_OPEN, HEX_CLOSE = "'X'''", "''''"


@functools.lru_cache(maxsize=256)
def insert_head(table: sa.Table, columns: tuple[str, ...]) -> str:
    """``INSERT INTO <table> (<columns>) VALUES `` with MySQL's quoting."""
    quote = mysql_dialect.dialect().identifier_preparer
    names = ", ".join(quote.quote(c) for c in columns)
    return f"INSERT INTO {quote.format_table(table)} ({names}) VALUES "


def as_sql_text(value: Any, into: sa.types.TypeEngine) -> Any:
    """The SQL text MySQL reads back as ``value`` (an expression of a SELECT) in a column of type
    ``into``: NULL, a number as MySQL prints it (a DOUBLE in the shortest digits that read back
    the same), or a string as a hexadecimal literal ``X'..'`` of its bytes: no escaping to get
    wrong under any ``sql_mode`` or character set, no ``%`` for a driver to read as a parameter."""
    kind = into.impl if isinstance(into, sa.types.TypeDecorator) else into
    if isinstance(kind, sa.Integer | sa.Float | sa.Numeric):
        text = sa.func.concat(value)
    else:
        text = sa.func.concat(sa.literal_column(HEX_OPEN), sa.func.hex(value), sa.literal_column(HEX_CLOSE))
    return sa.func.ifnull(text, sa.literal_column("'NULL'"))


def rendered_rows(rows: sa.Select, into: Sequence[sa.Column], returned: int | None) -> sa.Select:
    """``rows`` read as one column of SQL text per row, ``(v1, v2, ...)``: a VALUES tuple of
    an INSERT into the columns ``into`` (and the column at position ``returned``, as it is,
    when given)."""
    parts: list[Any] = [sa.literal_column("'('")]
    for i, (col, dest) in enumerate(zip(rows.selected_columns, into, strict=True)):
        parts += [sa.literal_column("','")] if i else []
        parts.append(as_sql_text(col, dest.type))
    parts.append(sa.literal_column("')'"))
    cols: list[Any] = [sa.func.concat(*parts, type_=sa.String())]
    if returned is not None:
        cols.append(rows.selected_columns[returned])
    return rows.with_only_columns(*cols, maintain_column_froms=True)


def sql_literal(value: Any) -> str:
    """``value`` (None, a number or a string) as the SQL text MySQL reads back as it: a double in
    the shortest digits that read back the same, written with an exponent (an approximate-value
    literal, parsed as a double, never rounded through DECIMAL), a string as ``X'..'`` of its
    UTF-8 bytes (as :func:`as_sql_text` renders them in the database)."""
    kind = type(value)
    if kind is float:
        if value != value or value in (math.inf, -math.inf):
            raise ValueError(f"MySQL has no literal for {value!r}")
        text = repr(value)
        return text if "e" in text else text + "e0"
    if kind is str:  # (a key's bytes that are not UTF-8 come back as lone surrogates: the same bytes)
        return f"X'{value.encode('utf-8', 'surrogateescape').hex()}'"
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(int(value))
    raise TypeError(f"no SQL literal for a {kind.__name__}")


def rendered_values(rows: Iterable[Sequence]) -> list[str]:
    """Each of ``rows`` (value tuples of one length) as a VALUES tuple ``(v1, v2, ...)``
    (:func:`sql_literal`), rendered a column at a time (:func:`column_literals`)."""
    rows = list(map(tuple, rows))
    if not any(rows):  # rows of no column (zip would find no column, and no row)
        return ["()"] * len(rows)
    columns = [column_literals(values) for values in zip(*rows, strict=True)]
    return list(map("({})".format, map(",".join, zip(*columns, strict=True))))


def _in_order(rows: Iterable[dict], columns: tuple[str, ...]) -> list[tuple]:
    """The values of each of ``rows`` (dicts), in the order of ``columns``."""
    if len(columns) < 2:  # (itemgetter of one column gives its value, of none is refused)
        return [tuple(r[c] for c in columns) for r in rows]
    get = operator.itemgetter(*columns)
    return [get(r) for r in rows]


def _capped(table: sa.Table, columns: tuple[str, ...], rows: list[tuple]) -> list[tuple]:
    """``rows`` (value tuples in the order of ``columns``) with the texts of ``table``'s error
    columns capped as their type caps what is bound to them (values rendered here bypass it)."""
    at = [i for i, c in enumerate(columns) if isinstance(table.c[c].type, ErrorText)]
    if not at:
        return rows
    return [r if all(r[i] is None for i in at) else _cap_row(r, at) for r in rows]


def _cap_row(row: tuple, at: list[int]) -> tuple:
    return tuple(cap_text(v) if i in at and isinstance(v, str) else v for i, v in enumerate(row))


def column_literals(values: Sequence) -> list[str]:
    """:func:`sql_literal` of each of ``values`` (one column of a batch of rows): where all are of
    one type, rendered by that type's rule over the whole column, each distinct string (a batch's
    queue, type and owner repeat) or oft-repeated number (its time) once; else one by one."""
    kinds = set(map(type, values))
    if kinds == {str}:
        return _each_once(values, set(values))
    if kinds == {float}:
        distinct = set(values)
        # once each only without a zero: 0.0 and -0.0 are equal, their literals are not
        if len(distinct) * 2 <= len(values) and 0.0 not in distinct:
            return _each_once(values, distinct)
        if all(map(math.isfinite, distinct)):
            return [text if "e" in text else text + "e0" for text in map(repr, values)]
    if kinds == {int}:
        return list(map(str, values))
    if kinds == {type(None)}:
        return ["NULL"] * len(values)
    return list(map(sql_literal, values))


def _each_once(values: Sequence, distinct: set) -> list[str]:
    """:func:`sql_literal` of each of ``values``, each of their ``distinct`` values rendered once
    (raises for a NaN or an infinity, as one by one)."""
    literals = {v: sql_literal(v) for v in distinct}
    return list(map(literals.__getitem__, values))


#: MySQL/MariaDB's claim mark (schema version 9): a column of the task table, not in its ``Table``,
#: NULL until a claim sets it to :data:`AS_CLAIMED`; the server sets it to the time of every later
#: change of the row, whoever makes it (``ON UPDATE CURRENT_TIMESTAMP``: a move, a track, an
#: attempt given back, a heartbeat, a hand edit), unless the change writes it itself. A row
#: still :data:`AS_CLAIMED` is as its claim left it: a batch's settle writes its ``finished``
#: event from what the worker holds of the claim instead of reading it back (``store/settles.py``).
CLAIM_MARK = "touched_at"
#: its default: NULL, rewritten by the server on any change of the row
CLAIM_MARK_DEFAULT = "NULL ON UPDATE CURRENT_TIMESTAMP(6)"
AS_CLAIMED = "1000-01-01 00:00:00"


def _index_named(table: sa.Table, name: str | None) -> sa.Index:
    return next(index for index in table.indexes if index.name == name)


def _text_chunks(texts: Sequence[str], most: int) -> Iterator[list[str]]:
    """``texts`` in runs of at most ``most`` characters (one text longer goes alone)."""
    chunk: list[str] = []
    size = 0
    for text in texts:
        if chunk and size + len(text) > most:
            yield chunk
            chunk, size = [], 0
        chunk.append(text)
        size += len(text) + 1
    if chunk:
        yield chunk


class MySQLDialect(Dialect):
    name = "mysql"
    install_hint = "pip install PyMySQL"
    autocommit_pool = True  # PyMySQL sends SET AUTOCOMMIT both ways and a COMMIT even in autocommit

    # 1205 lock wait timeout, 1213 deadlock, 2003 can't connect, 2006 gone away,
    # 2013 lost connection, 1040 too many connections, 1053 server shutdown,
    # 1927 connection killed, 4031 idle disconnect, 2014 commands out of sync
    #: 1305: "SAVEPOINT ... does not exist" — a deadlock inside a savepoint rolled the whole
    #: transaction back (savepoint included); the transaction is retried whole like the deadlock
    TRANSIENT = {1205, 1213, 2003, 2006, 2013, 1040, 1053, 1927, 4031, 2014, 2055, 1317, 1305}

    #: MariaDB reads a subquery correlated to a derived table's column by a scan (18,000 rows
    #: for a claim over 3 queues of a small table): a queue's probes name it
    correlated_probes = False
    text_capacity_by_name = True

    def drop_index(self, conn, index, table):
        prep = conn.dialect.identifier_preparer
        conn.exec_driver_sql(f"DROP INDEX {prep.quote(index)} ON {prep.quote(table)}")

    def prepare_engine(self, engine):
        if engine.dialect.driver == "pymysql":
            from .pymysql_tls import share_preferred_tls

            share_preferred_tls(engine)

    def load(self, url):
        if url.get_driver_name() == "pymysql":
            from .pymysql_tls import build_preferred

            build_preferred()

    def connect_args(self, connect_timeout):
        # PyMySQL refuses a timeout over a year (ValueError): longer ones wait a year
        return {"connect_timeout": int(min(max(1, connect_timeout), 31_536_000)), "charset": "utf8mb4"}

    def insert_if_absent(self, table, conflict_column):
        # IGNORE would turn any error of the row into a warning, not only a duplicate key: every
        # value is validated before insert, and a table whose columns could not hold one (another
        # character set than utf8mb4, a column narrowed or made NOT NULL by hand) is refused by
        # the table check (text_columns_problem, store/ownership.py), so only the key can clash.
        return mysql_dialect.insert(table).prefix_with("IGNORE")

    def server_time(self):
        # UTC arithmetic: UNIX_TIMESTAMP(SYSDATE(6)) went through the session's time zone, and in
        # the hour a daylight-saving zone repeats each autumn its two readings were one epoch (an
        # hour off). UTC_TIMESTAMP is the statement's start: now, for a read of its own. Divided
        # by a DOUBLE: a DECIMAL division keeps only @@div_precision_increment digits (0: seconds).
        return sa.literal_column("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6")

    def unique_keys(self, inspector, name):
        # a primary key and every unique constraint are unique indexes here: one read
        rows = inspector.bind.exec_driver_sql(
            "SELECT index_name, column_name FROM information_schema.statistics WHERE table_schema = DATABASE()"
            " AND table_name = %s AND non_unique = 0 ORDER BY index_name, seq_in_index",
            (name,),
        ).all()
        keys: dict[str, list] = {}
        for index, column in rows:
            keys.setdefault(index, []).append(column)
        return keys.pop("PRIMARY", []), list(keys.values())

    def is_view(self, inspector, name):
        ask = "SELECT table_type FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = %s"
        return inspector.bind.exec_driver_sql(ask, (name,)).scalar() == "VIEW"

    def text_columns_problem(self, conn, table):
        # A column in another character set (a table made in a latin1 or utf8mb3 database by an
        # older release, or altered by hand) would store '?' for what it cannot hold: INSERT
        # IGNORE turns that error into a warning.
        rows = conn.execute(
            sa.text(
                "SELECT column_name, character_set_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = :t AND character_set_name IS NOT NULL"
            ),
            {"t": table.name},
        ).all()
        ours = {c.name.lower() for c in table.c}
        wrong = sorted(f"{name} ({charset})" for name, charset in rows if name.lower() in ours and charset != "utf8mb4")
        if not wrong:
            return None
        return (
            f"text columns not in utf8mb4: {', '.join(wrong)}; convert it with ALTER TABLE {table.name} "
            "CONVERT TO CHARACTER SET utf8mb4"
        )

    def insert_one(self, table, conflict_column, channel):
        return self.insert_if_absent(table, conflict_column)

    def inserted_one(self, conn, stmt, row):
        return conn.execute(stmt, row).rowcount == 1

    def insert_selected(self, table, columns, rows, returning=""):
        # Read, then insert the values: an INSERT ... SELECT takes InnoDB's table-wide AUTO-INC
        # lock for its statement and may reserve more ids than it uses (gaps that readers of the
        # ids, the event stream, must wait out); an INSERT of known rows reserves exactly them.
        # The rows are read already written as SQL (rendered_rows): escaping each value in
        # PyMySQL's Python cost more than the rest of a drain's events together.
        returned = list(columns).index(returning) if returning else None
        return insert_head(table, tuple(columns)), rendered_rows(rows, [table.c[c] for c in columns], returned)

    def run_insert_selected(self, conn, plan, params, returning=""):
        head, select = plan
        found = conn.execute(select, params).all()
        for chunk in _text_chunks([r[0] for r in found], INSERT_BYTES):
            conn.exec_driver_sql(head + ",".join(chunk), execution_options={"no_parameters": True})
        return [r[1] for r in found] if returning else []

    def claim_mark_usable(self, conn, table):
        # Only a column made as add_claim_mark makes it: without its ON UPDATE a change since the
        # claim would leave it as claimed, and a TIMESTAMP cannot hold the mark (a column of
        # another program's, or altered by hand).
        found = conn.execute(
            sa.text(
                "SELECT data_type, extra FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = :t AND column_name = :c"
            ),
            {"t": table.name, "c": CLAIM_MARK},
        ).first()
        if found is None:
            return False
        return found[0].lower() == "datetime" and "on update current_timestamp" in found[1].lower()

    def with_claim_mark(self, table):
        marked = table.to_metadata(sa.MetaData())
        for index in marked.indexes:  # (the copy forgets where an index is made: Index.ddl_if)
            only = getattr(_index_named(table, index.name), "_ddl_if", None)
            if only is not None:
                index.ddl_if(dialect=only.dialect, callable_=only.callable_, state=only.state)
        mark_type, default = mysql_dialect.DATETIME(fsp=6), sa.text(CLAIM_MARK_DEFAULT)
        marked.append_column(sa.Column(CLAIM_MARK, mark_type, nullable=True, server_default=default))
        return marked

    def add_claim_mark(self, conn, table):
        have = {c["name"].lower() for c in sa.inspect(conn).get_columns(table.name)}
        if CLAIM_MARK not in have:
            mark = f"{CLAIM_MARK} DATETIME(6) DEFAULT {CLAIM_MARK_DEFAULT}"
            conn.exec_driver_sql(f"ALTER TABLE {conn.dialect.identifier_preparer.quote(table.name)} ADD COLUMN {mark}")

    def claim_marks(self, table):
        return [(table.c[CLAIM_MARK], sa.literal(AS_CLAIMED))] if CLAIM_MARK in table.c else []

    def as_claimed(self, table):
        return [table.c[CLAIM_MARK] == sa.literal(AS_CLAIMED)] if CLAIM_MARK in table.c else []

    def insert_rows(self, conn, table, columns, rows):
        # rendered here: PyMySQL escapes each value of each row in Python, several times slower
        head = insert_head(table, tuple(columns))
        values = rendered_values(_capped(table, tuple(columns), _in_order(rows, tuple(columns))))
        for chunk in _text_chunks(values, INSERT_BYTES):
            conn.exec_driver_sql(head + ",".join(chunk), execution_options={"no_parameters": True})

    def execute_insert(self, conn, stmt, rows, id_column):
        return conn.execute(stmt, rows).rowcount  # no INSERT ... RETURNING; PyMySQL sums batches

    def _update_each(self, conn, table, rows, *, each, match, where, values):
        # PyMySQL runs an executemany of UPDATEs one statement (one round trip) per row: one
        # statement with a CASE per column is ~6x faster for a batch of 64.
        c, n = table.c, 0
        for chunk in _chunks(rows, [*each, *match]):
            stmt = (
                sa.update(table)
                .where(c.id.in_([r["id"] for r in chunk]), *[c[m] == _per_row(c, chunk, m) for m in match], *where)
                .values(**(values or {}), **{col: _per_row(c, chunk, col) for col in each})
            )
            n += conn.execute(stmt).rowcount
        return n

    def index_order(self, fixed, then):
        # MariaDB sorts the rows instead (a filesort) when the columns its WHERE fixes are named.
        return list(then)

    def avoid_indexes(self, stmt, table, names):
        # Else a claim limited to types may walk the claim index through other types' rows
        # (seen on MariaDB with IN lists, before its statistics caught up with an insert).
        return stmt.with_hint(table, f"IGNORE INDEX ({', '.join(names)})")

    def is_transient(self, exc):
        code = error_code(exc)
        if code in self.TRANSIENT:
            return True
        text = str(exc.orig).lower() if exc.orig is not None else ""
        return "try restarting transaction" in text or "connection" in text and "lost" in text

    #: 1142/1143 command denied on a table/column, 1044 access denied to a database, 1227 a
    #: privilege missing, 1290 server --read-only, 1792 a READ ONLY transaction, 1036 a read-only table
    DENIED = {1142, 1143, 1044, 1227, 1290, 1792, 1036}

    def is_missing_table(self, exc):
        return error_code(exc) == 1146

    def is_missing_column(self, exc):
        return error_code(exc) == 1054

    def is_denied(self, exc):
        return error_code(exc) in self.DENIED
