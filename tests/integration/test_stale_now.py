"""A heartbeat judges its lease at the time of the run of its transaction that applies it, not at
a time read before a first run that failed: Database.run retries transient errors for up to
max_retry_count × retry_max_wait seconds, plus connect and lock-wait timeouts, and a lease can
expire meanwhile (an expired lease is never revived). On sqlite, mysql and postgres.
"""

from __future__ import annotations

import pytest
from workflow_faults.fault_support import connection_drops_once

from queue_core import PreemptedError


def test_a_heartbeat_retried_after_its_lease_expired_never_revives_it_past_the_users_cap(
    queue, clock, db_url, table_name
):
    """A heartbeat of an already-expired lease fails with PreemptedError and
    never revives it; a user never holds more live leases than max_running.

    Interleaving: user u has tasks a, b with max_running=1. Worker 1 holds a (alive_time 10).
    At t+9 its heartbeat starts (now=t+9, lease still live) but its connection drops; while
    Database.run backs off and retries, the lease expires and worker 2 (another process, its own
    connection) claims b at t+11: u's slot is free since a's lease expired. The heartbeat's retry
    then runs with the ``now`` read before the first attempt (t+9): its UNEXPIRED fence
    ``timeout > now`` compares a's lease (t+10) with the stale t+9 and extends it.

    What happens: the heartbeat succeeds, a is running again next to b: u holds 2 live leases with
    max_running=1.
    """
    import queue_core

    queue.submit("a", "t", user="u", max_running=1)
    queue.submit("b", "t", user="u", max_running=1)
    held = queue.poll(alive_time=10)
    assert held is not None and held.key == "a"
    other_q = queue_core.open(db_url, table_name, clock=clock)
    got = {}

    def meanwhile():
        clock.advance(2)  # the retries took 2 s: a's lease ended at t+10
        got["b"] = other_q.poll(alive_time=30)

    clock.advance(9)
    try:
        with connection_drops_once(queue, "heartbeat", meanwhile) as st:
            with pytest.raises(PreemptedError):
                held.heartbeat(alive_time=10)
        assert st["fired"] == 1
    finally:
        assert got.get("b") is not None and got["b"].key == "b"  # u's slot was free at t+11
        running = sorted(m.key for m in queue.list() if m.status == "running")
        other_q.close()
    assert running == ["b"], f"user u (max_running=1) holds live leases on {running}"


def test_a_schedule_heartbeat_retried_after_its_lease_expired_never_revives_it(sched, clock):
    """A heartbeat of an already-expired schedule lease fails with
    PreemptedError and never revives it.

    Interleaving: a poller leases schedule s's occurrence (alive_time 10). At t+9 it heartbeats
    (lease still live); the connection drops and Database.run backs off and retries; by the retry
    it is t+11 and the lease has expired (no other poller happened to look meanwhile). The retry
    uses the ``now`` read before the first attempt (t+9), so SqlScheduleStore.schedule_heartbeat's UNEXPIRED
    fence ``timeout > now`` passes and the expired lease is extended to t+19 instead of refused.
    Same root cause as the task heartbeat above.
    """
    sched.add("s", "t", cron="* * * * *")
    clock.advance(120)
    held = sched.poll(alive_time=10)
    assert held is not None
    clock.advance(9)

    def meanwhile():
        clock.advance(2)  # the retries took 2 s: the lease ended at t+10

    with connection_drops_once(sched.queue, "heartbeat", meanwhile) as st:
        with pytest.raises(PreemptedError):
            held.heartbeat(alive_time=10)
    assert st["fired"] == 1
