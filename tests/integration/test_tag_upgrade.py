"""Upgrade to schema 4 from v3 and from v1, with rows in every
state; before init every tag/track entry point is a SchemaError (not a raw 'no such table')."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conftest import downgrade

import queue_core
from queue_core.errors import SchemaError

T0 = 1_700_000_000.0


def _rows_in_every_state(q):
    q.submit_many([{"key": k, "type": "t"} for k in ("w", "r", "f")], now=T0)
    held = q.poll_multi(2, now=T0)
    held[0].finish(now=T0)
    return {m.key: m.status for m in q.list(now=T0)}


@pytest.mark.parametrize("version, columns", [(3, ()), (1, ("result", "workflow", "definition", "queue"))])
def test_upgrade_to_4_keeps_rows_untracked_untagged_and_then_tags_and_tracks(
    queue, db_url, table_name, version, columns
):
    """A v3 (or v1) table with waiting/running/finished rows; a new process opens it:
    submit with tags, tag, untag, track, list(tag), list(tracked) each raise SchemaError; init
    upgrades: every row untracked, untagged; then tagging, tracking and listing work, and the
    tracked and tag indexes exist."""
    before = _rows_in_every_state(queue)
    downgrade(queue.store, columns, version)
    calls = {
        "submit": lambda q: q.submit("new", "t", tags=["a"], now=T0),
        "tag": lambda q: q["w"].tag("a"),
        "untag": lambda q: q["w"].untag("a"),
        "track": lambda q: q["w"].track(),
        "list_tag": lambda q: list(q.list(tag="a", now=T0)),
        "list_tracked": lambda q: list(q.list(tracked=True, now=T0)),
        "metadata": lambda q: q["w"].metadata(now=T0),
    }
    for _name, call in calls.items():
        with queue_core.open(db_url, table_name) as older, pytest.raises(SchemaError):
            call(older)
    with queue_core.open(db_url, table_name) as q:
        q.init()
        assert {m.key: m.status for m in q.list(now=T0)} == before
        assert all(m.tags == () and not m.tracked for m in q.list(now=T0))
        for k in before:
            q[k].tag("x")
            q[k].track()
        assert (
            [m.key for m in q.list(tag="x", now=T0)]
            == [m.key for m in q.list(tracked=True, now=T0)]
            == sorted(before, key=lambda k: q.store.task_get(k)["id"])
        )
        with q.db.engine.connect() as conn:
            names = {ix["name"] for ix in sa.inspect(conn).get_indexes(table_name)}
            tag_names = {ix["name"] for ix in sa.inspect(conn).get_indexes(f"{table_name}_tags")}
        assert f"ix_{table_name}_tracked" in names and f"ix_{table_name}_tags_task" in tag_names
