"""The failed tasks are read through an index of their own (the failure groups page at
1,000,000 finished rows): a partial index where the database has partial indexes (SQLite,
PostgreSQL), the failed ids noted in ``<table>_failed`` on MySQL/MariaDB, whose index on the
outcome would be rewritten by every finish. The failure groups, a bulk retry's pages and the
dashboard's failed filter never walk the finished successes; every change that ends a task as
failure is seen, a task retried and finished since is not, and ``init`` gives an older table its
index (MySQL: the ids of the tasks that failed before)."""

from __future__ import annotations

import sqlalchemy as sa
from conftest import downgrade
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements

SUCCESSES, FAILURES = 3000, 12


def fill(queue):
    """FAILURES tasks failed by a worker, then SUCCESSES finished rows (written in bulk)."""
    queue.submit_many({"key": f"f{i}", "type": "t"} for i in range(FAILURES))
    for task in queue.poll_multi(FAILURES, alive_time=600):
        task.fail("KeyError: gone", retention_time=10**6)
    queue.submit_many({"key": f"s{i}", "type": "t"} for i in range(SUCCESSES))
    t = queue.store.t
    done = {"state": 1, "outcome": "success", "finished_at": 1.0, "timeout": 2e9}
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key.like("s%")).values(**done)))
    analyze(queue)


def sqlite_reads_only_the_failed_index(queue, statement, params) -> bool:
    """Whether SQLite reads the table through its failed rows' partial index only (a scan of
    that index reads the failed rows, no other)."""
    plan = queue.db.run(lambda c: [r[3] for r in c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)])
    on_table = [line for line in plan if f" {queue.table} " in f"{line} "]
    return bool(on_table) and all(f"USING INDEX ix_{queue.table}_failed" in line for line in on_table)


def index_names(queue) -> set[str]:
    return queue.db.run(lambda c: {ix["name"] for ix in sa.inspect(c).get_indexes(queue.table)})


def test_failure_groups_read_only_the_failed_rows(queue, backend):
    fill(queue)
    groups = []
    sent = sent_statements(queue, lambda: groups.extend(queue.failures()))
    assert [(g.error_class, g.count) for g in groups] == [("KeyError", FAILURES)]
    [(statement, params)] = [s for s in sent if "count(" in s[0].lower()]
    if backend == "mysql":
        assert f"ix_{queue.table}_failed" not in index_names(queue)
        assert queue.db.run(lambda c: queue.store.tables_missing_indexes(c)) == set()
        assert queue.db.run(lambda c: mysql_rows_read(c, statement, params)) <= 3 * FAILURES
    elif backend == "sqlite":
        assert sqlite_reads_only_the_failed_index(queue, statement, params), statement
    else:
        assert queue.db.run(lambda c: postgres_rows_read(c, statement, params)) <= FAILURES


def test_the_failed_filter_and_a_bulk_retry_page_read_only_the_failed_rows(queue, backend):
    fill(queue)
    pages = []

    def read():
        pages.append(queue.browse(status="failed", limit=50))
        pages.append(queue.store.failure_page(limit=50))

    sent = sent_statements(queue, read)
    assert len(pages[0].tasks) == FAILURES and len(pages[1]) == FAILURES
    for statement, params in sent:
        if backend == "sqlite":
            assert sqlite_reads_only_the_failed_index(queue, statement, params), statement
        elif backend == "mysql":
            assert queue.db.run(lambda c, s=statement, p=params: mysql_rows_read(c, s, p)) <= 3 * FAILURES, statement
        else:
            assert queue.db.run(lambda c, s=statement, p=params: postgres_rows_read(c, s, p)) <= FAILURES, statement


def test_init_adds_the_failed_index_to_a_table_made_without_it(queue, backend):
    name = f"ix_{queue.table}_failed"
    if backend == "mysql":  # a table of version 6 with a failed task: init notes it
        fill(queue)
        downgrade(queue.store, [], 6)
        queue.init()
        assert name not in index_names(queue)
        assert [(g.error_class, g.count) for g in queue.failures()] == [("KeyError", FAILURES)]
        return
    queue.db.run(lambda c: c.exec_driver_sql(f"DROP INDEX {name}"))
    assert queue.db.run(lambda c: queue.store.tables_missing_indexes(c)) == {name}
    queue.init()
    assert name in index_names(queue)
