"""Metrics, the CLI and upgrades against hostile tables and input: another program's schedule
table or a crashing added collector never breaks a scrape, counters never go back over cleanup and
prune, a table of an older version is a SchemaError, an upgrade counts retained events once, a
hostile ``--listen`` or ``--since`` is one line, and no error shows a password."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from test_perfectqueue_cli import assert_error, invoke, pq, ready  # noqa: F401 - pq, ready: the fixtures

import queue_core
from queue_core import SchemaError
from queue_core.ops import metrics
from queue_core.ops.metrics import QueueCollector

GAP = 60.0


def scrape_with(queue, added=None, **options) -> dict:
    from prometheus_client import core, generate_latest

    registry = core.CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(queue, options, added=added))
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def L(**labels) -> tuple:  # noqa: N802
    return tuple(sorted(labels.items()))


@contextmanager
def foreign_schedule_table(db_url: str, name: str, backend: str):
    """Another program's table named as a schedule table: key, a NULL next_run_time, error."""
    eng = sa.create_engine(db_url)
    try:
        with eng.begin() as c:
            key = "`key`" if backend == "mysql" else '"key"'
            c.exec_driver_sql(f"CREATE TABLE {name} ({key} VARCHAR(20), next_run_time FLOAT NULL, error TEXT)")
            c.exec_driver_sql(f"INSERT INTO {name} VALUES ('x', NULL, NULL)")
        yield name
    finally:
        with eng.begin() as c:
            c.exec_driver_sql(f"DROP TABLE {name}")
        eng.dispose()


def test_a_foreign_schedule_table_does_not_break_the_scrape(queue, db_url, table_name, backend):
    """A table of that name that is not perfectsched's (its next_run_time may be NULL): the
    schedule gauges may be left out, the queue's own metrics must still be served."""
    import perfectsched.metrics as psm

    with foreign_schedule_table(db_url, table_name + "_f", backend) as name:
        queue.submit("k", "t")
        got = scrape_with(queue, added=[psm.samples], schedule_table=name)
        assert got[("pq_tasks", L(queue="default", status="waiting", type="t"))] == 1


def test_an_added_collector_that_crashes_is_left_out(queue):
    def broken(q, now, options):
        raise RuntimeError("bug in a plugin")

    queue.submit("k", "t")
    got = scrape_with(queue, added=[broken])
    assert got[("pq_tasks", L(queue="default", status="waiting", type="t"))] == 1


def test_gauges_by_status(queue, clock):
    queue.submit("due", "t")
    queue.submit("later", "t", run_at=clock.now() + 600)
    queue.submit("run", "t")
    queue.submit("lost", "t")
    clock.advance(1)
    held = queue.poll_multi(3, alive_time=30)
    assert {t.key for t in held} == {"due", "run", "lost"}
    clock.advance(40)  # all three leases expired...
    fresh = queue.poll(alive_time=300)  # ...one claimed again
    got = scrape_with(queue, added=[])
    s = lambda st: got[("pq_tasks", L(queue="default", status=st, type="t"))]  # noqa: E731
    assert (s("waiting"), s("scheduled"), s("running"), s("pending")) == (2, 1, 1, 0), fresh.key
    # the expired leases ended at claim + 30 = 11 s ago
    assert got[("pq_oldest_waiting_age_seconds", L(queue="default"))] == pytest.approx(10.0)


def test_counters_never_go_back_over_cleanup_and_prune(queue, clock):
    for i in range(3):
        queue.submit(f"k{i}", "t")
        queue.poll(alive_time=60).finish()
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    before = scrape_with(queue, added=[])
    clock.advance(40 * 86400)
    queue.cleanup()
    after = scrape_with(queue, added=[])
    for name in ("pq_tasks_started_total", "pq_task_run_seconds_count", "pq_task_wait_seconds_bucket"):
        for k, v in before.items():
            if k[0] == name:
                assert after[k] >= v
    b = L(queue="default", type="t")
    inf = [v for k, v in after.items() if k[0] == "pq_task_run_seconds_bucket" and ("le", "+Inf") in k[1]]
    assert inf == [after[("pq_task_run_seconds_count", b)]] == [3]


def test_a_table_of_an_older_version_is_a_schema_error(queue, clock, db_url, table_name):
    from conftest import downgrade

    downgrade(queue.store, (), 5)
    q = queue_core.open(db_url, table_name, clock=clock)
    try:
        with pytest.raises(SchemaError, match="init"):
            q.statistics()
        with pytest.raises(SchemaError, match="init"):
            metrics.exposition(q)
    finally:
        q.close()


def test_upgrade_counts_retained_events_once(queue, clock, db_url, table_name):
    from conftest import downgrade

    for i in range(3):
        queue.submit(f"k{i}", "t")
        queue.poll(alive_time=60).finish()
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    downgrade(queue.store, (), 5)
    queue.init()
    queue.init()  # twice: idempotent
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    [b] = queue.stats_totals()
    assert (b.tally.started, b.tally.succeeded) == (3, 3)


def test_metrics_once_with_a_foreign_schedule_table(ready, db_url, table_name, backend):  # noqa: F811
    """`perfectqueue metrics --once --schedule-table X` where X is not perfectsched's table."""
    with foreign_schedule_table(db_url, table_name + "_f", backend) as name:
        result = ready("metrics", "--once", "--schedule-table", name)
        assert result.exit_code == 0 and "# TYPE pq_tasks gauge" in result.stdout, (
            result.exit_code,
            result.stderr[-300:],
            repr(result.exception),
        )


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize("listen", ["a" * 100 + ":9187", "[::::::]:9187", "256.1.1.1:9187", "-x:9187"])
def test_metrics_listen_hostile_is_one_line(ready, listen):  # noqa: F811
    result = ready("metrics", "--listen", listen)
    assert_error(result, result.exit_code if result.exit_code in (1, 2) else 1)


@pytest.mark.parametrize(
    "since",
    [
        "nan",
        "inf",
        "1e400",
        "-5",
        "9" * 400,
        "99999999999999999999h",
        "2026-02-30T00:00:00+00:00",
        "2026-01-01T00:00:00",
        "\udcff",
        "1h\x00",
    ],
)
def test_stats_since_hostile_is_one_line(ready, since):  # noqa: F811
    result = ready("stats", "--since", since)
    if result.exit_code == 0:  # a value it takes as a time: fine, if it printed the statistics
        assert result.stdout.startswith("since "), result.stdout
        return
    assert_error(result, result.exit_code if result.exit_code in (1, 2) else 1)


def test_no_password_in_errors(backend):
    if backend == "sqlite":
        pytest.skip("no password")
    for url in (os.environ.get("TEST_MYSQL_URL"), os.environ.get("TEST_PG_URL")):
        if not url:
            continue
        u = sa.engine.make_url(url).set(password="S3cr3t_r15c_pw")
        text = u.render_as_string(hide_password=False)
        for args in (("stats", "--since", "1h"), ("metrics", "--once")):
            result = invoke(*args, "-D", text)
            assert result.exit_code != 0
            assert "S3cr3t_r15c_pw" not in result.stdout + result.stderr
            assert_error(result, result.exit_code)
