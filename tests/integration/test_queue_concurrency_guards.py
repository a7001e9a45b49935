"""The concurrency cap when lowered while tasks run, when a lease expires while its
holder still runs (it cannot heartbeat back into a slot), with rate and cap together."""

from __future__ import annotations

import pytest

from queue_core.errors import PreemptedError

T0 = 1_700_000_000.0


def test_a_lowered_cap_admits_nothing_until_under_it(queue):
    for i in range(6):
        queue.submit(f"k{i}", "t", {}, queue="api", now=T0 - 10)
    queue.limit("api", concurrency=4, now=T0)
    held = queue.poll_multi(4, now=T0, queues="api")
    queue.limit("api", concurrency=2, now=T0)
    held[0].finish(now=T0)
    held[1].finish(now=T0)
    assert queue.poll_multi(5, now=T0, queues="api") == []  # 2 still run: at the new cap
    held[2].finish(now=T0)
    assert len(queue.poll_multi(5, now=T0, queues="api")) == 1


def test_an_expired_holder_cannot_heartbeat_back_into_a_full_queue(queue):
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    queue.submit("b", "t", {}, queue="api", now=T0 - 10)
    queue.limit("api", concurrency=1, now=T0)
    first = queue.poll(now=T0, alive_time=10, queues="api")
    later = T0 + 11
    second = queue.poll(now=later, alive_time=10, queues="api")
    assert second is not None
    with pytest.raises(PreemptedError):
        first.heartbeat(now=later + 0.5)
    assert queue.poll(now=later + 0.5, queues="api") is None
