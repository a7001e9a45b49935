"""pqflow.runs_page: runs newest first a page at a time, by workflow and status, bounded (keyset
pages, no OFFSET), on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import pytest

import pqflow
from queue_core import ValidationError

wa = pqflow.Workflow("lst_a", retry_wait=0)


@wa.step()
def one(ctx):
    if ctx.data.get("fail"):
        raise ValueError("no")
    return 1


wb = pqflow.Workflow("lst_b", retry_wait=0)


@wb.step()
def two(ctx):
    return 2


class Decider(pqflow.Decider):
    workflows = [wa, wb]


def _drive(q):
    while (task := q.poll(alive_time=30, queues="default")) is not None:
        Decider(task).run()
        if task.deferred is not None:
            q.finish_many([task])


def _all_pages(q, **filters):
    seen, cursor = [], None
    while True:
        page = pqflow.runs_page(q, cursor=cursor, limit=3, **filters)
        seen += [r.run_id for r in page.runs]
        cursor = page.next_cursor
        if cursor is None:
            return seen


def test_pages_newest_first_by_workflow_and_status(queue):
    for i in range(8):
        (wa if i % 2 else wb).start(f"r{i}", {"fail": i in (3, 5)}, queue=queue)
    queue.submit("plain", "lst_a")  # a run of lst_a no decider took up yet
    queue.submit("other", "t", queue="elsewhere")  # not a run
    assert _all_pages(queue) == ["plain"] + [f"r{i}" for i in range(7, -1, -1)]
    assert _all_pages(queue, workflow="lst_b") == ["r6", "r4", "r2", "r0"]
    assert _all_pages(queue, status="running") == _all_pages(queue)
    _drive(queue)
    assert _all_pages(queue, status="failed") == ["r5", "r3"]
    assert _all_pages(queue, status="succeeded", workflow="lst_a") == ["plain", "r7", "r1"]
    first = pqflow.runs_page(queue, limit=2).runs
    assert [(r.run_id, r.workflow, r.steps_total, r.steps_succeeded) for r in first] == [
        ("plain", "lst_a", 1, 1),
        ("r7", "lst_a", 1, 1),
    ]


def test_bad_filters_are_refused(queue):
    with pytest.raises(ValidationError):
        pqflow.runs_page(queue, status="done")
    with pytest.raises(ValidationError):
        pqflow.runs_page(queue, limit=0)
    assert pqflow.runs_page(queue).runs == ()
