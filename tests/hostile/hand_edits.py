"""Editing rows of pq's tables by hand, as an operator would with a SQL client: one raw UPDATE
per case, on SQLite, MariaDB and PostgreSQL (tests/hostile/test_hostile_rows.py,
test_hostile_schedule_rows.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

#: with a backend's clause added (``{**ONLY, "sqlite": ...}``): only that backend can store the value
ONLY: dict[str, str | None] = {"*": None}


def key_set(value: str) -> dict[str, str]:
    """``SET key = value`` (a reserved word on MySQL)."""
    return {"mysql": f"`key` = {value}", "*": f'"key" = {value}'}


@dataclass(frozen=True)
class Edit:
    """``SET`` clause ``sets`` written into one row (``{backend: clause}`` where they differ,
    ``None``: the backend cannot store it), and what pq then does with the row."""

    name: str
    sets: str | dict[str, str | None]
    #: the column the error names (None: a value of pq's own ranges, read and handled as usual)
    column: str | None
    #: the claim sets the row aside (finished as failure) instead of leasing it; False: the
    #: row is not claimable as it stands (a state it cannot be claimed in, a due time never reached)
    set_aside: bool = True
    #: whole-table counts (``stats``) refuse it
    in_stats: bool = False
    extra: dict = field(default_factory=dict)

    def clause(self, backend: str) -> str | None:
        return self.sets if isinstance(self.sets, str) else self.sets.get(backend, self.sets.get("*"))


class RawTable:
    """A pq table as a SQL client sees it: raw statements through an engine of the test's own."""

    def __init__(self, url: str, table: str):
        self.engine = sa.create_engine(url, pool_size=1)
        self.table = table
        self.quote = self.engine.dialect.identifier_preparer.quote

    def edit(self, sets: str, where: str, **params) -> int:
        with self.engine.begin() as conn:
            return conn.execute(sa.text(f"UPDATE {self.table} SET {sets} WHERE {where}"), params).rowcount

    def rows(self, where: str = "1 = 1", **params) -> list[dict]:
        with self.engine.connect() as conn:
            result = conn.execute(sa.text(f"SELECT * FROM {self.table} WHERE {where}"), params)
            return [dict(r._mapping) for r in result]

    def wipe(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {self.table}"))

    def close(self) -> None:
        self.engine.dispose()
