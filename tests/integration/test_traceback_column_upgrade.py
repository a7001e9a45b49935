"""``init`` upgrades a queue table of schema version 9, whose event table has no traceback
column: a worker is refused until then, and afterwards each failed attempt keeps its traceback.
On SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import pytest

import queue_core
from queue_core.errors import SchemaError


def _as_version_9(q) -> None:
    """The tables of ``q`` as schema version 9 made them: no traceback column in the events."""
    events, meta = q.store.events_t, q.store.meta

    def work(conn):
        prep = conn.dialect.identifier_preparer
        conn.exec_driver_sql(f"ALTER TABLE {prep.quote(events.name)} DROP COLUMN {prep.quote('traceback')}")
        conn.execute(meta.update().where(meta.c.name == "schema_version").values(value="9"))

    q.store.db.run(work, what="downgrade")


def _raised(text: str) -> ValueError:
    try:
        raise ValueError(text)
    except ValueError as exc:
        return exc


def test_init_adds_the_traceback_column_to_the_events_of_a_version_9_table(db_url, table_name, queue):
    queue.submit("k", "t", {}, max_attempts=1)
    _as_version_9(queue)
    old = queue_core.open(db_url, table_name, clock=queue.clock)
    try:
        task = old.poll(now=queue.now())
        with pytest.raises(SchemaError, match="run 'init' to upgrade it"):  # its failure's event names the column
            task.retry_or_fail(_raised("upgraded"))
        old.init()
        assert old.store.tables_version() == 10
        task.retry_or_fail(_raised("upgraded"))  # the lease still held: the failure written now
        (end,) = [e for e in old["k"].history() if e.kind == "finished"]
        assert end.traceback.startswith("Traceback (most recent call last):")
        assert end.traceback.endswith("ValueError: upgraded")
        old.init()  # again: nothing more to add
        assert old.store.tables_version() == 10
    finally:
        old.close()
