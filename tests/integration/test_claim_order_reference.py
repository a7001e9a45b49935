"""Claims drain in the order a reference model gives (priority, due time, id), batch by batch,
with and without type filters: the claim that stops reading levels once its batch is full and
reads the first level with the due-user probe takes what it took before."""

from __future__ import annotations

import random

import pytest

T0 = 1_700_000_000.0


def _model(rows, n, types=None, running=None):
    """Expected keys of a claim of ``n`` among userless ``rows`` (key, type, priority, due)."""
    due = [r for r in rows if r[3] <= T0 and (types is None or r[1] in types)]
    due.sort(key=lambda r: (-r[2], r[3], r[4]))
    return [r[0] for r in due[:n]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("typed", [False, True])
def test_userless_batches_follow_priority_due_time_and_id(queue, seed, typed):
    rnd = random.Random(seed)
    rows = []
    for i in range(40):
        key = f"k{i:02d}"
        typ = rnd.choice(["a", "b", "c"])
        prio = rnd.choice([0, 1, 1, 2, 5])
        due = T0 - rnd.choice([0, 1, 2, 3])
        if rnd.random() < 0.15:
            due = T0 + 100  # future: never claimed now
        queue.submit(key, typ, run_at=due, priority=prio, now=T0 - 10)
        rows.append([key, typ, prio, due, i])
    types = ["a", "b"] if typed else None
    left = list(rows)
    sizes = [1, 2, 3, 4, 5, 7, 1, 8, 16]
    for n in sizes:
        want = _model(left, n, types)
        got = [t.key for t in queue.poll_multi(n, alive_time=600, now=T0, types=types)]
        assert got == want, (n, got, want)
        left = [r for r in left if r[0] not in got]


def test_a_batch_that_exactly_fills_a_level_then_the_next_level(queue):
    for i in range(3):
        queue.submit(f"p5-{i}", "t", priority=5, now=T0 - 3 + i)
    for i in range(3):
        queue.submit(f"p3-{i}", "t", priority=3, now=T0 - 3 + i)
    queue.submit("p3-future", "t", priority=3, run_at=T0 + 60, now=T0)
    queue.submit("p1", "t", priority=1, now=T0)
    assert [t.key for t in queue.poll_multi(3, alive_time=60, now=T0)] == ["p5-0", "p5-1", "p5-2"]
    assert [t.key for t in queue.poll_multi(3, alive_time=60, now=T0)] == ["p3-0", "p3-1", "p3-2"]
    assert [t.key for t in queue.poll_multi(3, alive_time=60, now=T0)] == ["p1"]


def test_a_level_with_a_blocked_user_does_not_hide_lower_levels(queue):
    queue.submit("u-run", "t", user="u", max_running=1, priority=9, now=T0 - 5)
    assert queue.poll(alive_time=600, now=T0).key == "u-run"
    queue.submit("u-blocked", "t", user="u", max_running=1, priority=9, now=T0 - 4)
    queue.submit("free-9", "t", priority=9, now=T0 - 1)
    queue.submit("free-2", "t", priority=2, now=T0 - 3)
    queue.submit("v-2", "t", user="v", max_running=1, priority=2, now=T0 - 2)
    queue.submit("free-0", "t", priority=0, now=T0 - 9)
    got = [t.key for t in queue.poll_multi(2, alive_time=600, now=T0)]
    assert got == ["free-9", "free-2"]
    got = [t.key for t in queue.poll_multi(1, alive_time=600, now=T0)]
    assert got == ["v-2"]
    got = [t.key for t in queue.poll_multi(5, alive_time=600, now=T0)]
    assert got == ["free-0"]


def test_types_at_the_same_level_merge_by_due_time(queue):
    queue.submit("a1", "a", priority=1, now=T0 - 5)
    queue.submit("b1", "b", priority=1, now=T0 - 4)
    queue.submit("a2", "a", priority=1, now=T0 - 3)
    queue.submit("c1", "c", priority=1, now=T0 - 6)
    queue.submit("b0", "b", priority=0, now=T0 - 9)
    assert [t.key for t in queue.poll_multi(2, alive_time=60, now=T0, types=["a", "b"])] == ["a1", "b1"]
    assert [t.key for t in queue.poll_multi(1, alive_time=60, now=T0, types=["a", "b"])] == ["a2"]
    assert [t.key for t in queue.poll_multi(5, alive_time=60, now=T0, types=["a", "b"])] == ["b0"]
