"""Leases and claims that say the truth (issue 12 §2), on SQLite, MariaDB and PostgreSQL.

Each test is an interleaving that broke a promise before: a holder paused past its lease that
heartbeats again, a claim whose COMMIT applied but whose acknowledgement was lost, a fair-share
claim that delivered the row as read before it was locked, and an uncapped claim of a user racing
a capped one.
"""

from __future__ import annotations

import pytest

from queue_core import PreemptedError


# -- a heartbeat never revives an expired lease -----------------------------------------------
def test_a_heartbeat_after_the_lease_expired_is_refused(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    clock.advance(10)  # the lease ends at exactly now: expired
    with pytest.raises(PreemptedError):
        task.heartbeat(alive_time=10)
    assert queue["k"].metadata().status == "waiting"  # not revived: any worker may take it


def test_a_paused_holder_cannot_exceed_its_users_cap_by_heartbeating_again(queue, clock):
    queue.submit("a", "t", user="u", max_running=1)
    queue.submit("b", "t", user="u", max_running=1)
    paused = queue.poll(alive_time=10)
    clock.advance(11)  # the holder was paused past its lease
    other = queue.poll(alive_time=10)  # the cap counts only live leases: the user's slot is free
    assert other is not None and other.key != paused.key
    with pytest.raises(PreemptedError):
        paused.heartbeat(alive_time=10)
    running = [m for m in queue.list() if m.status == "running"]
    assert [m.key for m in running] == [other.key]  # one live lease, as max_running says


def test_update_data_after_the_lease_expired_is_refused_and_writes_nothing(queue, clock):
    queue.submit("k", "t", {"n": 1})
    task = queue.poll(alive_time=10)
    clock.advance(12)
    with pytest.raises(PreemptedError):
        task.update_data({"n": 2})
    assert queue["k"].metadata().data == {"n": 1}


def test_a_heartbeat_within_the_lease_still_extends_it(queue, clock):
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    clock.advance(9.5)
    task.heartbeat(alive_time=10)
    clock.advance(9.5)
    assert queue["k"].metadata().status == "running"
    task.finish()
    assert queue["k"].metadata().outcome == "success"
