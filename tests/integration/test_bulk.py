"""Failure groups and bulk actions on SQLite, MariaDB and PostgreSQL: failed tasks
grouped by queue, type and error class; every matching failed task run again once, in bounded
batches, however often the command runs; waiting tasks cancelled by the same filters; failures
kept longer than successes.

Interleavings covered: the same bulk retry run twice (each task requeued once), a bulk retry in
batches smaller than the match (none skipped), a task that a worker holds while a bulk cancel
runs (left alone), a row of a workflow run among the matches (left to pqflow), hostile filters
(typed errors before anything is read)."""

from __future__ import annotations

import pytest
from conftest import own_queue

from queue_core.errors import ValidationError

T0 = 1_700_000_000.0


def fail(q, key, error, type_="t", queue="default", now=T0, tags=()):
    q.submit(key, type_, queue=queue, tags=list(tags), now=now)
    t = q.poll(now=now, queues=queue)
    assert t.key == key
    t.fail(error, now=now + 1)


def test_failures_are_grouped_by_queue_type_and_error_class(queue):
    fail(queue, "a", ValueError("bad input\ntrace"), now=T0)
    fail(queue, "b", ValueError("other input"), now=T0 + 10)
    fail(queue, "c", KeyError("k"), now=T0 + 20)
    fail(queue, "d", "gave up by hand", type_="u", now=T0 + 30)
    fail(queue, "e", ValueError("x"), queue="mail", now=T0 + 40)
    queue.submit("ok", "t", now=T0)
    queue.poll(now=T0 + 50).finish(now=T0 + 51)
    groups = [
        (g.queue, g.type, g.error_class, g.count, g.sample_key, g.message, g.first_seen, g.last_seen)
        for g in queue.failures()
    ]
    assert groups == [
        ("default", "t", "ValueError", 2, "b", "ValueError: other input", T0 + 1, T0 + 11),
        ("default", "t", "KeyError", 1, "c", "KeyError: 'k'", T0 + 21, T0 + 21),
        ("default", "u", "(no class)", 1, "d", "gave up by hand", T0 + 31, T0 + 31),
        ("mail", "t", "ValueError", 1, "e", "ValueError: x", T0 + 41, T0 + 41),
    ]
    assert [g.sample_key for g in queue.failures(queue="mail")] == ["e"]
    assert [g.count for g in queue.failures(type="u")] == [1]


def test_the_database_names_the_same_error_class_as_the_pure_rule(queue):
    """The groups are counted in the database by the error's text before its first colon; the
    class that text names is the pure rule's (``failures.error_class``), whatever the text."""
    from queue_core.rules.failure_groups import error_class

    errors = [
        "ValueError: a",
        "requests.exceptions.HTTPError: 503",
        "no colon at all",
        "two words: here",
        "first line\nSecond: line",
        ":leading colon",
        "Ünïcode: non-ASCII",
        "X" * 199 + ": long class",
        "<script>alert(1)</script>: x",
        "a;b: DROP TABLE x",
        "ValueError:",
        "  Spaced: lead",
    ]
    for i, text in enumerate(errors):
        fail(queue, f"e{i}", text, now=T0 + i)
    want: dict[str, int] = {}
    for text in errors:
        want[error_class(text)] = want.get(error_class(text), 0) + 1
    got = {g.error_class: g.count for g in queue.failures()}
    assert got == want
    none = next(g for g in queue.failures() if g.error_class == "(no class)")
    assert (none.first_seen, none.last_seen) == (T0 + 3, T0 + 12)  # merged from several heads
    assert none.sample_key == "e11" and none.message == "Spaced: lead"  # the newest of the latest head


def test_a_bulk_retry_requeues_each_match_once_in_batches(queue):
    for i in range(5):
        fail(queue, f"v{i}", ValueError("api down"), now=T0 + i, tags=["customer:acme"] if i < 4 else [])
    fail(queue, "k", KeyError("x"), now=T0 + 10)
    assert queue.retry_failed(error="ValueError", tag="customer:acme", dry_run=True, now=T0 + 100) == 4
    assert sum(g.count for g in queue.failures()) == 6  # a dry run changes nothing
    assert queue.retry_failed(error="ValueError", tag="customer:acme", batch=2, now=T0 + 100) == 4
    assert queue.retry_failed(error="ValueError", tag="customer:acme", batch=2, now=T0 + 101) == 0
    m = queue["v0"].metadata()
    assert (m.status, m.attempts, m.run_at, m.outcome) == ("waiting", 0, T0 + 100, None)
    assert [e.kind for e in queue["v0"].history()][-1] == "requeued"
    assert [(g.sample_key, g.count) for g in queue.failures()] == [("k", 1), ("v4", 1)]  # KeyError < ValueError
    got = {queue.poll(now=T0 + 200).key for _ in range(4)}
    assert got == {"v0", "v1", "v2", "v3"}


def test_a_bulk_cancel_cancels_the_waiting_matches_and_leaves_running_ones(queue):
    for i in range(4):
        queue.submit(f"w{i}", "report", queue="batch", now=T0)
    queue.submit("other", "mail", queue="batch", now=T0)
    held = queue.poll(now=T0, queues="batch")
    assert queue.cancel_waiting(queue="batch", type="report", dry_run=True, now=T0 + 1) == 3
    assert queue.cancel_waiting(queue="batch", type="report", batch=2, now=T0 + 1) == 3
    assert queue.cancel_waiting(queue="batch", type="report", now=T0 + 2) == 0
    statuses = {m.key: (m.status, m.outcome) for m in queue.list()}
    assert statuses[held.key] == ("running", None)
    assert statuses["other"] == ("waiting", None)
    assert sorted(k for k, s in statuses.items() if s == ("finished", "cancelled")) == sorted(
        f"w{i}" for i in range(4) if f"w{i}" != held.key
    )
    held.finish(now=T0 + 3)  # its holder was never disturbed


def test_failures_are_kept_longer_than_successes(db_url, table_name, backend, clock):
    with own_queue(db_url, table_name, backend, retention_time=60, failure_retention=3600) as q:
        q.clock = clock
        q.submit("ok", "t", now=T0)
        q.poll(now=T0).finish(now=T0)
        fail(q, "bad", RuntimeError("boom"), now=T0)
        q.cleanup(now=T0 + 61)
        assert [m.key for m in q.list()] == ["bad"]
        assert [g.sample_key for g in q.failures()] == ["bad"]
        q.cleanup(now=T0 + 3602)
        assert list(q.list()) == [] and q.failures() == []


@pytest.mark.parametrize(
    "bad",
    [dict(queue="a'; DROP TABLE x; --"), dict(tag="x" * 101), dict(tag=""), dict(type="\udcff"), dict(queue="\x00")],
)
def test_hostile_filters_are_refused_before_anything_is_read(queue, bad):
    with pytest.raises(ValidationError):
        queue.failures(**bad)
    with pytest.raises(ValidationError):
        queue.retry_failed(**bad)
    with pytest.raises(ValidationError):
        queue.cancel_waiting(**bad)


def test_an_error_class_that_names_nothing_matches_nothing(queue):
    fail(queue, "a", ValueError("x"))
    assert queue.retry_failed(error="ValueError' OR 1=1 --") == 0
    assert queue["a"].metadata().outcome == "failure"


def test_a_bulk_change_whose_acknowledgement_was_lost_counts_what_it_changed_once(queue):
    """The COMMIT of a batch applied, its acknowledgement lost: the store runs the batch again,
    finds its rows changed and their events there, and counts them (not 0); each task has one
    event of the change. A batch of more rows than the first run changed counts both."""
    from test_history import commit_ack_lost_once, kinds

    for k in ("a", "b", "c"):
        fail(queue, k, ValueError("boom"), now=T0)
    with commit_ack_lost_once(queue) as state:
        assert queue.retry_failed(now=T0 + 10) == 3
    assert state["fired"] == 1
    assert [kinds(queue, k).count("requeued") for k in ("a", "b", "c")] == [1, 1, 1]
    assert queue.retry_failed(now=T0 + 11) == 0  # nothing failed any more
    with commit_ack_lost_once(queue) as state:
        assert queue.cancel_waiting(now=T0 + 20) == 3
    assert state["fired"] == 1
    assert [kinds(queue, k).count("cancelled") for k in ("a", "b", "c")] == [1, 1, 1]
    assert {queue[k].metadata().outcome for k in ("a", "b", "c")} == {"cancelled"}


def test_a_rerun_batch_counts_each_row_once_and_not_an_earlier_change_of_it(queue):
    """x was requeued before (an operator's retry, acknowledged) and failed again: the run whose
    acknowledgement is lost counts x and y once each, not x's earlier requeue."""
    from test_history import commit_ack_lost_once, kinds

    fail(queue, "x", ValueError("boom"), now=T0)
    assert queue.retry_failed(now=T0 + 5) == 1
    queue.poll(now=T0 + 6).fail("again", now=T0 + 7)
    fail(queue, "y", ValueError("boom"), now=T0)
    with commit_ack_lost_once(queue) as state:
        assert queue.retry_failed(now=T0 + 10) == 2
    assert state["fired"] == 1
    assert (kinds(queue, "x").count("requeued"), kinds(queue, "y").count("requeued")) == (2, 1)
