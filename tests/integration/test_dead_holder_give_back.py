"""The leases a dead process held without running them are given back by (task id, lease token):
due now, their attempts given back; a lease finished or taken over meanwhile is left alone."""

from __future__ import annotations


def test_release_leases_gives_back_only_the_dead_holders_own_leases(queue, clock):
    for k in ("a", "b", "c", "d"):
        queue.submit(k, "t")
    batch = queue.poll_multi(4, alive_time=10)
    assert [t.key for t in batch] == ["a", "b", "c", "d"] and {t.attempts for t in batch} == {1}
    by_key = {t.key: t for t in batch}
    by_key["b"].finish()
    clock.advance(11)  # every lease expired; another worker takes c over
    (again,) = queue.poll_multi(1, alive_time=10)
    assert again.key == "a"  # the longest due first: a, then c, d
    queue.release_leases([(t._id, t._token) for t in batch])
    assert queue["a"].metadata().attempts == 2  # held by its new holder: left alone
    assert queue["b"].metadata().status == "finished"
    for k in ("c", "d"):
        m = queue[k].metadata()
        assert (m.status, m.attempts) == ("waiting", 0), k
        assert m.run_at == clock.now()


def test_release_leases_returns_how_many_it_gave_back(queue, clock):
    queue.submit("a", "t")
    queue.submit("b", "t")
    batch = queue.poll_multi(2, alive_time=10)
    assert queue.release_leases([(t._id, t._token) for t in batch]) == 2
    assert queue.release_leases([(t._id, t._token) for t in batch]) == 0  # not held any more
    assert [t.key for t in queue.poll_multi(2, alive_time=10)] == ["a", "b"]
