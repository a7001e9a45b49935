"""What a statement reads, asked of each database: the SELECTs a call sends, the indexes
SQLite reads through, the rows MariaDB and PostgreSQL read (shared by the claim-plan tests)."""

from __future__ import annotations

import re

import sqlalchemy as sa
from table_pool import ANALYZED


def sent_statements(queue, run, verbs: tuple[str, ...] = ("SELECT",)) -> list[tuple[str, object]]:
    """The statements starting with ``verbs`` (the SELECTs) on the task table that ``run()``
    sends, with their parameters (not those on its meta table or the catalog)."""
    sent = []

    def capture(_conn, _cursor, statement, parameters, _context, _many):
        on_table = re.search(rf"\b{queue.table}\b(?!_meta|_queues|_starts)", statement)
        if statement.lstrip().upper().startswith(verbs) and on_table:
            sent.append((statement, parameters))

    sa.event.listen(queue.db.engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        sa.event.remove(queue.db.engine, "before_cursor_execute", capture)
    return sent


def sqlite_indexes(conn, statement, parameters) -> set[str]:
    """The indexes SQLite reads the table through ("SCAN": the whole table)."""
    text = " | ".join(r[3] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
    used = set(re.findall(r"USING (?:COVERING )?INDEX (\w+)", text))
    return (
        used
        | ({"PRIMARY"} if "INTEGER PRIMARY KEY" in text else set())
        | ({"SCAN"} if re.search(r"\bSCAN (?!CONSTANT|\(|anon|served\b)", text) else set())
    )


def mysql_rows_read(conn, statement, parameters) -> int:
    """Rows (and index entries) the server read running the statement: its handler counters."""

    def reads():
        status = conn.execute(sa.text("SHOW SESSION STATUS LIKE :name"), {"name": "Handler_read%"}).all()
        return sum(int(v) for k, v in status if k != "Handler_read_key")  # lookups count as rows read

    before = reads()
    result = conn.exec_driver_sql(statement, parameters)
    if result.returns_rows:
        result.all()
    return reads() - before


def postgres_rows_read(conn, statement, parameters) -> int:
    """Rows the executor read from the table: returned plus removed by filters, every plan node."""
    [[doc]] = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters).all()
    nodes, total = [doc[0]["Plan"]], 0
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if node.get("Relation Name"):
            total += node["Actual Loops"] * node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    return total


def analyze(queue) -> None:
    """Statistics of the queue's tables, its task table and those beside it (tags, events ...): a
    plan that joins one left to autovacuum depends on when that last ran."""
    ANALYZED.add(queue.table)  # its tables are truncated, not just emptied, after the test
    with queue.db.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("ANALYZE")
            return
        names = [n for n in sa.inspect(conn).get_table_names() if n == queue.table or n.startswith(queue.table + "_")]
        statement = "ANALYZE {}" if conn.dialect.name == "postgresql" else "ANALYZE TABLE {}"
        conn.exec_driver_sql(statement.format(", ".join(conn.dialect.identifier_preparer.quote(n) for n in names)))
