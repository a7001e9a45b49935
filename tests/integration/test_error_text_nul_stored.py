"""An error text with a NUL character (a handler's ``ValueError(b"..".decode())`` of binary input)
is stored like any other: capped and made storable by ``validate.cap_text`` on every database.
PostgreSQL's text type cannot hold NUL: the retry/failure write must not raise there (else the
settle fails, the lease expires and the task runs again, charged as a crash, forever)."""

from __future__ import annotations


def test_a_retry_and_a_failure_with_a_nul_in_their_error_are_written(queue):
    queue.submit("k", "t", {}, max_attempts=2)
    task = queue.poll(now=queue.now())
    try:
        raise ValueError("bad byte a\x00b in input")
    except ValueError as exc:
        error = exc
    assert task.retry_or_fail(error) == "retry"
    assert "a" in queue["k"].metadata().error
    task = queue.poll(now=queue.now() + 3600)
    assert task.retry_or_fail(error) == "failure"
    m = queue["k"].metadata()
    assert m.status == "finished" and m.outcome == "failure"
    assert "bad byte" in m.error and "\\x00" in m.error  # the NUL kept, escaped
