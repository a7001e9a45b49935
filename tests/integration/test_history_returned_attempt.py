"""A tracked task's history while a later holder runs it, after the earlier holder (its lease lost
before its handler started) gave its attempt back: the running attempt's claim has a row of its
own, and the ``attempt_returned`` written during that attempt does not end it — ``show`` lists
that claim once, not a second time from the task row, on the three databases."""

from __future__ import annotations

from queue_core import config
from queue_core.worker.main import Processor


def test_a_returned_attempt_during_a_later_holders_tracked_attempt_shows_its_claim_once(queue, clock):
    queue.submit("k", "t", max_attempts=5)
    queue["k"].track()
    proc = Processor(
        lambda task: None, config.build({"url": queue.config["url"], "table": queue.table}), burst=True, queue=queue
    )
    first = queue.poll(alive_time=10)
    clock.advance(11)  # A's lease expires while k waits in A's batch
    second = queue.poll(alive_time=10)  # B takes it over: its claim is recorded (tracked)
    assert second is not None and second.key == "k"
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()
    assert first.lost
    clock.advance(1)
    assert first.lost_before_start() == "returned"  # A gives its attempt back, during B's attempt
    entries = queue.history("k")
    kinds = [e.kind for e in entries]
    assert kinds.count("attempt_returned") == 1, kinds
    b_claims = [e for e in entries if e.kind == "claimed" and e.owner == second.owner and e.at == second.claimed_at]
    assert len(b_claims) == 1, [(e.kind, e.at, e.attempt, e.owner) for e in entries]
    assert kinds == ["submitted", "claimed", "expired", "claimed", "attempt_returned"], kinds
