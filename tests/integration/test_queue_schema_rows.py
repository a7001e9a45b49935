"""A v2 table before init, hand-edited queue values, pause surviving a reopen."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acceptance"))

import queue_core  # noqa: E402

T0 = 1_700_000_000.0


def test_a_v2_table_used_by_the_new_release_before_init_is_a_schema_error(queue):
    from conftest import downgrade

    queue.submit("old", "t", {}, now=T0 - 10)
    downgrade(queue.store, ("queue",), 2)
    with queue_core.open(queue.config["url"], queue.table, clock=queue.clock) as q:
        calls = {
            "poll": lambda: q.poll_multi(5, now=T0),
            "submit": lambda: q.submit("new", "t", {}, now=T0),
            "metadata": lambda: q["old"].metadata(now=T0),
            "queues": lambda: q.queues(now=T0),
        }
        raised = {}
        for name, call in calls.items():
            try:
                call()
                raised[name] = "no error"
            except Exception as exc:  # noqa: BLE001
                raised[name] = f"{type(exc).__name__}: {exc}"
        # expected: each a SchemaError telling to run init (not a raw driver error)
        assert all(v.startswith("SchemaError") for v in raised.values()), raised


def test_a_pause_survives_a_reopen(queue):
    queue.submit("b", "t", {}, queue="billing", now=T0 - 10)
    queue.pause("billing", now=T0)
    with queue_core.open(queue.config["url"], queue.table, clock=queue.clock) as q:
        assert q.poll_multi(5, now=T0, queues="billing") == []
        q.resume("billing", now=T0)
        assert [t.key for t in q.poll_multi(5, now=T0, queues="billing")] == ["b"]


def _edit_queue(queue, key, value):
    t = queue.store.t
    prep = queue.db.engine.dialect.identifier_preparer

    def work(conn):
        if isinstance(value, bytes):
            conn.exec_driver_sql(
                f"UPDATE {prep.quote(queue.table)} SET {prep.quote('queue')} = %s WHERE {prep.quote('key')} = %s",
                (value, key.encode()),
            )
        else:
            conn.execute(sa.update(t).where(t.c.key == key).values(queue=value))

    queue.db.run(work, what="edit")


@pytest.mark.parametrize("value", ["x" * 300, " default", "default ", "DEFAULT", "a\u0301", "default\n"])
def test_a_hand_edited_queue_value_is_not_run_by_a_worker_of_another_queue(queue, backend, value):
    if backend != "sqlite" and len(value) > 64:
        pytest.skip("the column holds 64 characters there")
    queue.submit("e", "t", {}, now=T0 - 10)
    queue.submit("d", "t", {}, now=T0 - 5)
    _edit_queue(queue, "e", value)
    got = queue.poll_multi(5, now=T0)
    assert [t.key for t in got] == ["d"]
    names = [i.name for i in queue.queues(now=T0)]
    assert value in names


def test_invalid_utf8_in_the_queue_column_does_not_break_the_queues_command(queue, backend):
    if backend != "mysql":
        pytest.skip("bytes that are not UTF-8 fit only MariaDB's VARBINARY column")
    from test_perfectqueue_cli import PQ

    queue.submit("e", "t", {}, now=T0 - 10)
    queue.submit("d", "t", {}, now=T0 - 5)
    _edit_queue(queue, "e", b"bad\xff\xfe")
    assert [t.key for t in queue.poll_multi(5, now=T0)] == ["d"]
    pq = PQ(queue.config["url"], queue.table)
    for args in (("queues",), ("queues", "--format", "json")):
        result = pq(*args)
        assert result.exit_code == 0, (args, result.exit_code, result.stderr[-500:])
