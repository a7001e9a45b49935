"""``perfectqueue show`` (the history), ``events``, ``workers``, ``failures``, ``retry --failed``
and ``cancel --waiting``: what an operator types, on SQLite and one server database; bad input
is one line on stderr and a non-zero exit, nothing changed."""

from __future__ import annotations

import json

import pytest
from test_perfectqueue_cli import assert_error, pq, ready  # noqa: F401 - pq, ready: the fixtures

pytestmark = pytest.mark.one_server


def fail(q, key: str, error, type_: str = "t") -> None:
    q.submit(key, type_)
    t = q.poll()
    t.fail(error)


def test_show_prints_the_history_as_a_timeline(ready):  # noqa: F811
    pq = ready  # noqa: F811
    with pq.queue() as q:
        q.submit("k", "t")
        q.poll().retry(0, error=ValueError("api down"))
        q.poll().finish()
    text = pq.ok("show", "k")
    lines = text.split("history:\n", 1)[1].splitlines()
    assert [line.split()[1] for line in lines] == ["submitted", "claimed", "retried", "claimed", "finished"]
    assert "error=ValueError: api down" in lines[2] and "outcome=success" in lines[4]
    kinds = [e["kind"] for e in pq.json("show", "k")["history"]]
    assert kinds == ["submitted", "claimed", "retried", "claimed", "finished"]


def test_events_prints_what_happened_and_resumes_from_a_cursor(ready):  # noqa: F811
    pq = ready  # noqa: F811
    pq.ok("submit", "a", "t")
    pq.ok("submit", "b", "t", "--queue", "mail")
    lines = [json.loads(x) for x in pq.ok("events", "--format", "json").splitlines()]
    assert [(e["kind"], e["key"]) for e in lines] == [("submitted", "a"), ("submitted", "b")]
    after = pq.ok("events", "--since", lines[0]["cursor"])
    assert len(after.splitlines()) == 1 and " submitted " in after and " b " in after
    assert pq.ok("events", "--queue", "mail", "--since", "10m").count("submitted") == 1
    assert pq.ok("events", "--kind", "finished") == ""
    assert_error(pq("events", "--since", "yesterday-ish"), 1, "--since")
    assert_error(pq("events", "--since", "t1.e"), 1, "cursor")


def test_failures_then_a_bulk_retry_with_a_dry_run(ready):  # noqa: F811
    pq = ready  # noqa: F811
    with pq.queue() as q:
        for i in range(3):
            fail(q, f"v{i}", ValueError("api down"))
        fail(q, "k", KeyError("x"))
    table = pq.ok("failures")
    assert table.splitlines()[0].split()[:4] == ["queue", "type", "error_class", "count"]
    assert "4 failed tasks in 2 groups." in table
    groups = pq.json("failures")
    assert [(g["error_class"], g["count"]) for g in groups] == [("ValueError", 3), ("KeyError", 1)]
    assert pq.ok("retry", "--failed", "--error", "ValueError", "--dry-run").strip() == "would requeue 3 tasks"
    assert pq.ok("retry", "--failed", "--error", "ValueError").strip() == "requeued 3 tasks"
    assert pq.ok("retry", "--failed", "--error", "ValueError").strip() == "requeued 0 tasks"
    assert [g["error_class"] for g in pq.json("failures")] == ["KeyError"]
    assert_error(pq("retry"), 2, "--failed")


def test_cancel_by_key_or_every_waiting_task_by_filters(ready):  # noqa: F811
    pq = ready  # noqa: F811
    for i in range(3):
        pq.ok("submit", f"r{i}", "report", "--queue", "batch")
    pq.ok("submit", "keep", "mail", "--queue", "batch")
    assert (
        pq.ok("cancel", "--waiting", "--queue", "batch", "--type", "report", "--dry-run").strip()
        == "would cancel 3 tasks"
    )
    assert pq.ok("cancel", "--waiting", "--queue", "batch", "--type", "report").strip() == "cancelled 3 tasks"
    assert pq.ok("cancel", "keep").strip() == "finished"
    assert_error(pq("cancel"), 2, "KEY")
    assert_error(pq("cancel", "x", "--waiting"), 2, "KEY")


def test_workers_lists_nobody_when_no_worker_runs(ready):  # noqa: F811
    pq = ready  # noqa: F811
    assert pq.ok("workers").strip().splitlines()[-1] == "0 workers."
    assert pq.json("workers") == []
