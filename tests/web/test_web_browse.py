"""Queue.browse and Queue.retry_task (queue_core/api/queue_browse.py, store/browse.py) on every database:
filters, keyset pages newest first, and the one statement a page costs."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queue_core.errors import NotFoundError, ValidationError


def _keys(page):
    return [t.key for t in page.tasks]


def _all_pages(q, **filters):
    seen, cursor = [], None
    while True:
        page = q.browse(**filters, cursor=cursor, limit=3)
        seen += _keys(page)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_pages_are_newest_first_and_stay_whole_while_tasks_are_added(queue):
    for i in range(10):
        queue.submit(f"k{i:02d}", "t")
    first = queue.browse(limit=4)
    assert _keys(first) == ["k09", "k08", "k07", "k06"]
    queue.submit("new-1", "t")  # newer than every page: on none of the next ones
    second = queue.browse(cursor=first.next_cursor, limit=4)
    queue.submit("new-2", "t")
    third = queue.browse(cursor=second.next_cursor, limit=4)
    assert _keys(second) == ["k05", "k04", "k03", "k02"]
    assert _keys(third) == ["k01", "k00"] and third.next_cursor is None


def test_filters(queue):
    queue.submit("a/1", "mail", queue="q1", user="u1", tags=["red"])
    queue.submit("a/2", "mail", queue="q2", user="u2")
    queue.submit("A/3", "sms", queue="q1", tags=["red"])
    queue.submit("b/4", "sms", queue="q1")
    held = queue.poll(queues="q2")
    held.fail("ValueError: no")
    assert _all_pages(queue, queue="q1") == ["b/4", "A/3", "a/1"]
    assert _all_pages(queue, type="sms") == ["b/4", "A/3"]
    assert _all_pages(queue, user="u1") == ["a/1"]
    assert _all_pages(queue, tag="red") == ["A/3", "a/1"]
    assert _all_pages(queue, key_prefix="a/") == ["a/2", "a/1"]  # case kept (SQLite's LIKE folds it)
    assert _all_pages(queue, key_prefix="%") == []  # a LIKE wildcard is a plain character
    assert _all_pages(queue, status="failed") == ["a/2"]
    assert _all_pages(queue, status="waiting", tag="red") == ["A/3", "a/1"]
    with pytest.raises(ValidationError):
        queue.browse(status="lost")


def test_a_tag_page_walks_the_tag_index(queue):
    for i in range(7):
        queue.submit(f"k{i}", "t", tags=["x"] if i % 2 else [])
    assert _all_pages(queue, tag="x") == ["k5", "k3", "k1"]


def test_a_page_is_one_statement_without_offset_or_count(queue):
    for i in range(5):
        queue.submit(f"k{i}", "t", tags=["x"])
    seen: list[str] = []

    def spy(conn, cursor, statement, parameters, *rest):
        # SQLite's compiler writes "LIMIT ? OFFSET ?" with an offset of 0 to every LIMIT
        if statement.rstrip().endswith("LIMIT ? OFFSET ?") and parameters[-1] == 0:
            statement = statement.rstrip()[: -len(" OFFSET ?")]
        seen.append(statement)

    sa.event.listen(queue.db.engine, "before_cursor_execute", spy)
    try:
        queue.browse(queue="default", status="waiting", key_prefix="k", limit=2)
    finally:
        sa.event.remove(queue.db.engine, "before_cursor_execute", spy)
    statements = [s for s in seen if not s.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "SET"))]
    assert len(statements) == 2, statements  # the page, and the tags of its tasks
    assert not any("OFFSET" in s.upper() or "COUNT(" in s.upper() for s in statements)


def test_retry_task(queue):
    queue.submit("k", "t")
    queue.poll().fail("ValueError: boom")
    queue.retry_task("k")
    meta = queue["k"].metadata()
    assert meta.status == "waiting" and meta.attempts == 0
    with pytest.raises(ValidationError, match="did not fail"):
        queue.retry_task("k")
    with pytest.raises(NotFoundError):
        queue.retry_task("nope")
