"""The harness's own SQL: bench_ table names, bulk loading, verification, clean-up.

Bulk loading never guesses how pq encodes a row: pq writes one template row through its
public API (a finished task, a future task, a schedule), and the harness copies that row
with new keys — so the million rows of scenario 5 are exactly what pq itself would store.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import sqlalchemy as sa

from pqflow.rows import RUNS_GROUP
from queue_core.store.schema import schedule_table, task_table

_engines: dict[str, sa.Engine] = {}


def engine(url: str) -> sa.Engine:
    """One engine per URL for the harness's own statements (not pq's)."""
    if url not in _engines:
        _engines[url] = sa.create_engine(url)
    return _engines[url]


def dispose_engines() -> None:
    for e in _engines.values():
        e.dispose()
    _engines.clear()


def backend(url: str) -> str:
    return sa.engine.make_url(url).get_backend_name()


class TableNames:
    """Names of the tables this invocation creates on one database (``bench_<pid>_<what>``)
    and their removal at the end."""

    def __init__(self, url: str):
        self.url = url
        self.prefix = f"bench_{os.getpid()}"
        self.names: set[str] = set()

    def __call__(self, what: str) -> str:
        name = f"{self.prefix}_{what}"[:40]
        self.names.add(name)
        return name

    def drop_all(self) -> None:
        if not self.names:
            return
        drop_tables(self.url, self.names)
        self.names.clear()


def drop_tables(url: str, names: Iterable[str]) -> None:
    """Drop the tables ``names`` and their companions (``<name>_meta``, ``_events``, ``_tags``,
    ``_stats``, a scheduler's ``<name>_s`` ...: every table named ``<name>_...``), if they exist."""
    names = set(names)
    with engine(url).begin() as conn:
        md = sa.MetaData()
        md.reflect(conn, only=lambda n, _m: n in names or any(n.startswith(x + "_") for x in names))
        md.drop_all(conn)


def tasks_table(name: str) -> sa.Table:
    return task_table(sa.MetaData(), name)


def schedules_table(name: str) -> sa.Table:
    return schedule_table(sa.MetaData(), name)


def read_row(url: str, table: sa.Table, key: str) -> dict:
    with engine(url).connect() as conn:
        row = conn.execute(sa.select(table).where(table.c.key == key)).first()
    if row is None:
        raise LookupError(f"template row {key!r} not found in {table.name}")
    return dict(row._mapping)


def clone(
    url: str, table: sa.Table, template: dict, count: int, vary: Callable[[int], dict], batch: int = 5000
) -> None:
    """Insert ``count`` copies of ``template`` (minus its ``id``), row i updated by ``vary(i)``."""
    base = {k: v for k, v in template.items() if k != "id"}
    with engine(url).connect() as conn:
        for start in range(0, count, batch):
            rows = [{**base, **vary(i)} for i in range(start, min(count, start + batch))]
            conn.execute(sa.insert(table), rows)
            conn.commit()


def analyze(url: str, name: str) -> None:
    """Refresh the planner statistics of a freshly bulk-loaded table."""
    kind = backend(url)
    with engine(url).connect() as conn:
        if kind == "sqlite":
            conn.exec_driver_sql("ANALYZE")
        elif kind in ("mysql", "mariadb"):
            conn.exec_driver_sql(f"ANALYZE TABLE {name}").fetchall()
        else:
            conn.exec_driver_sql(f"ANALYZE {name}")
        conn.commit()


def task_counts(url: str, name: str, key_like: str | None = None) -> dict[str, int]:
    """Rows of a queue table (those whose key is LIKE ``key_like``): total, finished
    successfully, acquired more than once (``attempts > 1``: for a no-op handler, a task
    executed twice), distinct keys."""
    t = tasks_table(name)
    stmt = sa.select(
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(sa.case((t.c.outcome == "success", 1), else_=0)), 0),
        sa.func.coalesce(sa.func.sum(sa.case((t.c.attempts > 1, 1), else_=0)), 0),
        sa.func.count(sa.distinct(t.c.key)),
    )
    if key_like is not None:
        stmt = stmt.where(t.c.key.like(key_like))
    with engine(url).connect() as conn:
        total, success, again, keys = conn.execute(stmt).one()
    return {"total": int(total), "success": int(success), "reexecuted": int(again), "distinct_keys": int(keys)}


def count_where(url: str, table: sa.Table, *where) -> int:
    with engine(url).connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar())


def runs_open(url: str, name: str) -> int:
    """Workflow runs of a queue table whose run row has not finished."""
    t = tasks_table(name)
    return count_where(url, t, t.c.grp == RUNS_GROUP, t.c.finished_at.is_(None))


def last_run_end(url: str, name: str) -> float | None:
    """The latest ``finished_at`` of the run rows of a queue table (the worker's clock)."""
    t = tasks_table(name)
    with engine(url).connect() as conn:
        return conn.execute(sa.select(sa.func.max(t.c.finished_at)).where(t.c.grp == RUNS_GROUP)).scalar()
