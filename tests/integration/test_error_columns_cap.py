"""Every column that holds error text caps what is written to it the same way, whichever path
writes it (``validate.cap_text`` bound by ``schema.ErrorText``): a schedule set aside, a holder's
retry and failure and the events that end their attempts. On SQLite, MariaDB (strict mode: an
over-long value is an error there, not a cut) and PostgreSQL."""

from __future__ import annotations

import re

import pytest

from perfectsched.rows import MAX_REASON
from queue_core.rules.validate import MAX_ERROR_BYTES

T0 = 1_700_000_000 - 1_700_000_000 % 86400
CUT = re.compile(r"… \[cut: (\d+) bytes more\]$")
HUGE = {"ascii": "x" * 100_000, "two-byte": "é" * 50_000, "three-byte": "€" * 40_000}


def assert_cut(text: str, original: str, limit: int = MAX_ERROR_BYTES) -> None:
    raw = text.encode("utf-8")
    found = CUT.search(text)
    assert found and len(raw) <= limit, (len(raw), text[-60:])
    kept = text[: found.start()]
    assert original.startswith(kept) and len(kept.encode()) + int(found[1]) == len(original.encode())


@pytest.mark.parametrize("unit", list(HUGE))
def test_a_schedule_set_aside_with_a_huge_error_keeps_it_cut_with_a_marker(sched, unit):
    sched.add("s", "t", cron="0 * * * *", now=T0 - 1)
    expected = sched["s"].metadata().next_time
    error = HUGE[unit]
    assert sched.db.run(lambda c: sched.store.schedule_set_aside(c, "s", expected, error, T0), what="set aside")
    m = sched["s"].metadata()
    assert m.status == "set_aside"
    assert_cut(m.error, error)


@pytest.mark.parametrize("unit", list(HUGE))
def test_a_holders_retry_and_failure_with_huge_errors_are_cut_in_the_row_and_its_events(queue, unit):
    error = HUGE[unit]
    queue.submit("k", "t", {}, max_attempts=2)
    task = queue.poll(now=queue.now())
    # the store's own operations, past the queue's formatting: the column caps what it is given
    queue.store.task_retry(task._id, task._token, queue.now(), queue.now(), error, traceback=error)
    assert_cut(queue["k"].metadata().error, error)
    task = queue.poll(now=queue.now() + 1)
    queue.store.task_finish(task._id, task._token, "failure", error, queue.now() + 99, queue.now() + 1, traceback=error)
    assert_cut(queue["k"].metadata().error, error)
    ends = [e for e in queue["k"].history() if e.kind in ("retried", "finished")]
    assert [e.kind for e in ends] == ["retried", "finished"]
    for e in ends:
        assert_cut(e.traceback, error)
        assert error.startswith(e.error)  # the head an event keeps (``DETAIL_LENGTH`` characters)


def test_a_reason_is_cut_to_its_own_limit_with_the_same_marker():
    from perfectsched.rows import reason

    text = reason(ValueError("é" * 5000))
    assert len(text.encode()) <= MAX_REASON and CUT.search(text)


def test_event_rows_appended_as_values_are_cut_like_bound_ones(queue):
    # MySQL/MariaDB renders such rows as SQL itself (past the column types' binding): cut the same
    error = HUGE["three-byte"]
    queue.submit("k", "t", {})
    row = queue.store.task_get("k")
    event = {"task_id": row["id"], "key": "k", "queue": row["queue"], "type": "t", "kind": "retried", "at": 1.0}
    event |= {"attempt": 1, "owner": "h:1", "outcome": None, "detail": error, "waited": None, "ran": None}
    event |= {"due_at": None, "tracked": 0, "traceback": error}
    queue.store.db.run(lambda c: queue.store.event_record(c, [event]), what="record")
    (kept,) = [e for e in queue["k"].history() if e.kind == "retried"]
    assert_cut(kept.error, error)
    assert_cut(kept.traceback, error)
