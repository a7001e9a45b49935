"""Fair scheduling across users (PerfectQueue's weight max_running / (running + 1))."""

from __future__ import annotations

T0 = 1_700_000_000


def test_capped_user_not_acquired_at_cap(queue):
    for i in range(3):
        queue.submit(f"a{i}", "t", user="alice", max_running=2, now=T0)
    got = queue.poll_multi(10, now=T0)
    assert sorted(t.key for t in got) == ["a0", "a1"]
    assert queue.poll(now=T0) is None
    got[0].finish(now=T0 + 1)
    assert queue.poll(now=T0 + 1).key == "a2"


def test_only_live_leases_count_as_running(queue):
    queue.submit("f1", "t", user="u", max_running=1, run_at=T0 + 1000, now=T0)  # future
    queue.submit("r1", "t", user="u", max_running=1, now=T0)
    queue.submit("r2", "t", user="u", max_running=1, now=T0)
    a = queue.poll(now=T0)
    assert a.key == "r1"
    assert queue.poll(now=T0) is None
    a.retry(retry_wait=500, now=T0 + 1)  # retry-waiting does not count
    assert queue.poll(now=T0 + 2).key == "r2"


def test_expired_lease_frees_the_slot(queue):
    queue.submit("a", "t", user="u", max_running=1, now=T0)
    queue.submit("b", "t", user="u", max_running=1, now=T0)
    queue.poll(alive_time=10, now=T0)
    assert queue.poll(now=T0 + 5) is None
    assert queue.poll(now=T0 + 10).key in ("a", "b")


def test_weights_serve_users_with_free_capacity_first(queue):
    # All of alice's tasks are older, but bob and carol have more free capacity.
    for i in range(50):
        queue.submit(f"a{i:02}", "t", user="alice", max_running=1, now=T0)
    for i in range(50):
        queue.submit(f"b{i:02}", "t", user="bob", max_running=2, now=T0 + 1)
    for i in range(50):
        queue.submit(f"c{i:02}", "t", user="carol", max_running=4, now=T0 + 2)
    order = []
    while (t := queue.poll(now=T0 + 10)) is not None:
        order.append(t.key[0])
    # carol (4/1) > bob (2/1) > carol (4/2) > alice (1/1) = bob (2/2) = carol (4/4) ...
    assert order[:3] == ["c", "b", "c"]
    assert sorted(order) == ["a"] + ["b"] * 2 + ["c"] * 4
    assert len(order) == 7


def test_tasks_without_user_are_never_capped(queue):
    for i in range(5):
        queue.submit(f"n{i}", "t", now=T0)
    assert len(queue.poll_multi(10, now=T0)) == 5


def test_uncapped_users_share_by_weight(queue):
    for i in range(20):
        queue.submit(f"a{i:02}", "t", user="alice", now=T0)
    for i in range(20):
        queue.submit(f"b{i:02}", "t", user="bob", now=T0 + 1)
    got = [queue.poll(alive_time=100, now=T0 + 5).key[0] for _ in range(6)]
    assert got == ["a", "b", "a", "b", "a", "b"]


def test_priority_beats_fairness(queue):
    queue.submit("a", "t", user="alice", max_running=5, now=T0)
    queue.submit("b", "t", user="bob", max_running=1, priority=9, now=T0 + 1)
    assert queue.poll(now=T0 + 2).key == "b"


def test_batch_claim_respects_caps(queue):
    for u, cap in (("x", 1), ("y", 2), ("z", 3)):
        for i in range(10):
            queue.submit(f"{u}{i}", "t", user=u, max_running=cap, now=T0)
    got = queue.poll_multi(100, now=T0)
    counts = {u: sum(1 for t in got if t.user == u) for u in "xyz"}
    assert counts == {"x": 1, "y": 2, "z": 3}
