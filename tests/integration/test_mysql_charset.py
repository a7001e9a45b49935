"""MySQL: every string pq writes is stored as written, whatever the database's default character
set. INSERT IGNORE (submit) turns any error of a row into a warning, so a column that cannot hold
a character would store '?' in its place: pq makes its tables in utf8mb4, and refuses a table one
of whose text columns is in another character set or narrower than pq makes it, before it writes.

Why: a queue table in a utf8mb3 column would store an emoji as '?' and the submit succeed; and a
table made in the database's default character set would be latin1 on older servers.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import ForeignTableError

pytestmark = pytest.mark.parametrize("backend", ["mysql"], indirect=True)

T0 = 1_700_000_000.0
EMOJI = {"emoji": "\U0001f600 ok", "greek": "αβγ"}


def test_tables_made_in_a_latin1_database_hold_every_character(latin1_url):
    q = queue_core.open(latin1_url, "charset_t")
    try:
        q.init()
        q.submit("k", "t", EMOJI, now=T0)
        q.submit_many([{"key": "m", "type": "t", "data": EMOJI}], now=T0)
        assert q["k"].metadata().data == EMOJI and q["m"].metadata().data == EMOJI
    finally:
        q.close()


@pytest.mark.parametrize(
    ("column", "definition"),
    [
        ("data", "LONGTEXT CHARACTER SET utf8mb3 NOT NULL"),
        ("data", "TEXT CHARACTER SET utf8mb4 NOT NULL"),
        ("type", "VARBINARY(40) NOT NULL"),
    ],
)
def test_a_table_whose_column_cannot_hold_what_pq_writes_is_refused(db_url, table_name, column, definition):
    setup = queue_core.open(db_url, table_name)
    setup.init()
    setup.db.run(lambda c: c.exec_driver_sql(f"ALTER TABLE `{table_name}` MODIFY `{column}` {definition}"))
    setup.close()
    q = queue_core.open(db_url, table_name)  # a new process: its first use checks the table
    try:
        with pytest.raises(ForeignTableError, match=column):
            q.submit("k", "t", EMOJI, now=T0)
        admin = sa.create_engine(db_url)
        with admin.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM `{table_name}`").scalar() == 0
        admin.dispose()
    finally:
        q.close()
        from conftest import drop_tables

        drop_tables(db_url, table_name)
