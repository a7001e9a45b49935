"""Whether a table of one of our names is one ``init`` made (store layer): what its reflection
must show beyond our column names, so that another program's table, a view, or a table pq could
never insert into is refused (``ForeignTableError``, ``VersionedTables.tables_exist``) before pq
reads, writes, indexes or drops it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def column_name(name: str, fold: bool) -> str:
    """A reflected column's name as our tables spell it (lower case where names fold case)."""
    return name.lower() if fold else name


def family(type_: sa.types.TypeEngine) -> str | None:
    """What a column holds, as every database reflects it back: an integer, a number, text
    (bytes too: MySQL keeps names as VARBINARY); None for another type."""
    if isinstance(type_, sa.TypeDecorator):
        type_ = type_.impl_instance
    if isinstance(type_, sa.Integer):
        return "integer"
    if isinstance(type_, (sa.Numeric, sa.Float)):  # Float and Double (no Numeric since SQLAlchemy 2.1)
        return "number"
    if isinstance(type_, (sa.String, sa.types._Binary)):
        return "text"
    return None


def difference(inspector, table: sa.Table, columns: dict[str, dict], dialect: Any) -> str | None:
    """How the table of ``table``'s name, whose reflected columns are ``columns`` (by our
    spelling), differs from one ``init`` made on ``dialect`` (``store/dialects.py``): a view, a
    column of another type, a key missing, a column pq cannot fill. None when it does not."""
    if dialect.is_view(inspector, table.name):
        return "it is a view"
    fold, rowid = dialect.column_names_fold_case, dialect.implicit_rowid
    primary, unique = dialect.unique_keys(inspector, table.name)
    return (
        _types(table, columns, inspector.dialect, dialect)
        or _missing_key(table, [primary, *unique], fold)
        or _extra_key(table, unique, fold)
        or _uninsertable(table, columns, rowid)
    )


def _types(table: sa.Table, columns: dict[str, dict], dialect, ours_on: Any) -> str | None:
    """The first column of ``table`` reflected (``columns``) as another type or narrower than pq
    makes it on the SQLAlchemy ``dialect`` (pq's: ``ours_on``)."""
    for c in table.c:
        if c.name in columns:
            reflected = columns[c.name]["type"]
            ours, theirs = family(c.type), family(reflected)
            if ours is not None and ours != theirs:
                return f"column {c.name} is {reflected}, not {ours}"
            by_name = ours_on.text_capacity_by_name
            made = _as_made(c.type, dialect)
            if ours == "text" and capacity(reflected, by_name) < capacity(made, by_name):
                return f"column {c.name} is {reflected}, narrower than pq makes it"
            generic = c.type.impl_instance if isinstance(c.type, sa.TypeDecorator) else c.type
            if ours in ("integer", "number") and ours_on.integer_width_reflected and _narrower(reflected, generic):
                return f"column {c.name} is {reflected}, narrower than pq makes it"
    return None


#: bytes of the integer types, by the names databases reflect them with and SQLAlchemy's own
_INT_BYTES = {"TINYINT": 1, "SMALLINT": 2, "SMALLINTEGER": 2, "MEDIUMINT": 3, "INT": 4, "INTEGER": 4}
_INT_BYTES |= {"BIGINT": 8, "BIGINTEGER": 8}


def _number_bytes(type_: sa.types.TypeEngine) -> int:
    """How many bytes of a number a column keeps (0: not a binary number of known width, such as
    DECIMAL); a signed integer or an IEEE float (MySQL's FLOAT and PostgreSQL's real: 4 bytes)."""
    if isinstance(type_, sa.Integer):
        return 0 if getattr(type_, "unsigned", False) else _INT_BYTES.get(type(type_).__name__.upper(), 0)
    if isinstance(type_, sa.Double):
        return 8
    if isinstance(type_, sa.Float):
        precision = getattr(type_, "precision", None)
        return 8 if precision is not None and precision > 24 else 4
    return 0


def _narrower(reflected: sa.types.TypeEngine, made: sa.types.TypeEngine) -> bool:
    # ``made``: SQLAlchemy's generic type (a driver's own float type may not say its precision)
    """Whether a number column holds less than the one pq makes (a narrower integer, an unsigned
    one, a single-precision float, a DECIMAL where pq makes a float): pq's values would be cut."""
    if isinstance(made, sa.Integer) != isinstance(reflected, sa.Integer):
        return True
    return _number_bytes(reflected) < _number_bytes(made)


#: MySQL's text types without a length, by the characters they hold
_TEXT_CAPACITY = {"TINYTEXT": 255, "TEXT": 65_535, "MEDIUMTEXT": 16_777_215, "LONGTEXT": 4_294_967_295}


def capacity(type_: sa.types.TypeEngine, by_name: bool) -> float:
    """How long a value a text or bytes column holds (infinite: no limit known); ``by_name``: of a
    type without a length, by its name (MySQL's TEXT types)."""
    length = getattr(type_, "length", None)
    if length:
        return float(length)
    if by_name:
        return float(_TEXT_CAPACITY.get(type(type_).__name__.upper(), float("inf")))
    return float("inf")


def _as_made(type_: sa.types.TypeEngine, dialect) -> sa.types.TypeEngine:
    """The type ``init`` gives a column on ``dialect`` (a TypeDecorator's type there)."""
    made = type_.dialect_impl(dialect)
    return made.impl_instance if isinstance(made, sa.TypeDecorator) else made


def _missing_key(table: sa.Table, sets: list[list[str]], fold: bool) -> str | None:
    """The first key ``init`` makes that none of the table's unique keys (``sets``) is."""
    found = {frozenset(column_name(c, fold) for c in names if c) for names in sets}
    for key in keys(table):
        if key not in found:
            return f"no unique key on {', '.join(sorted(key))}"
    return None


def _extra_key(table: sa.Table, sets: list[list[str]], fold: bool) -> str | None:
    """A unique key (of ``sets``: those beside the primary key) pq does not make: it would refuse
    a row whose own key is free."""
    ours = set(keys(table))
    for names in sets:
        found = frozenset(column_name(c, fold) for c in names if c)
        if found and found not in ours:
            return f"a unique key on {', '.join(sorted(found))} that pq does not make"
    return None


def keys(table: sa.Table) -> list[frozenset[str]]:
    """The primary key and unique constraints ``init`` gives ``table``, as column sets."""
    found = [frozenset(c.name for c in table.primary_key.columns)]
    found += [frozenset(c.name for c in u.columns) for u in table.constraints if isinstance(u, sa.UniqueConstraint)]
    return [k for k in found if k]


def _uninsertable(table: sa.Table, columns: dict[str, dict], rowid: bool) -> str | None:
    """A column an insert of pq's cannot fill: one of ours that pq leaves NULL (it inserts an
    explicit NULL there) but the table refuses NULL in, whatever its default; one not ours that is
    NOT NULL and that the database does not fill; or an id the database does not number."""
    auto = table.autoincrement_column
    for name, c in columns.items():
        if auto is not None and name == auto.name:
            if not _numbered(c, rowid):
                return f"column {name} is not numbered by the database"
        elif name in table.c:
            if table.c[name].nullable and not c.get("nullable", True):
                return f"column {name} is NOT NULL, but pq writes NULL there"
        elif not (c.get("nullable", True) or _filled(c)):
            return f"column {name} is NOT NULL without a default"
    return None


def _filled(column: dict[str, Any]) -> bool:
    """Whether the database fills the column of a row inserted without it: a default (not
    ``NULL``), an identity or AUTO_INCREMENT, a computed (generated) column."""
    default = column.get("default")
    has_default = default is not None and str(default).strip().upper() != "NULL"
    return bool(has_default or column.get("identity") or column.get("computed") or column.get("autoincrement") is True)


def _numbered(column: dict[str, Any], rowid: bool) -> bool:
    """Whether the database gives a new row's id: AUTO_INCREMENT, a sequence or an identity, or
    (SQLite) a primary key declared ``INTEGER``, which is the rowid."""
    if rowid:
        return str(column["type"]).upper() == "INTEGER"
    return bool(column.get("autoincrement") is True or column.get("default") or column.get("identity"))
