"""Rate limits: at most N starts in any window of W seconds, whatever the clocks of the claimers
read and whatever an operator changed since the starts were recorded."""

from __future__ import annotations

import sqlalchemy as sa

T0 = 1_700_000_000.0


def starts(queue):
    st = queue.store.starts_t
    return queue.db.run(
        lambda c: c.execute(sa.select(st.c.rate_key, st.c.started_at).order_by(st.c.started_at)).all(), write=False
    )


def leases_started(queue, name):
    t = queue.store.t
    stmt = sa.select(t.c.started_at).where(t.c.queue == name, t.c.started_at.is_not(None)).order_by(t.c.started_at)
    return [r[0] for r in queue.db.run(lambda c: c.execute(stmt).all(), write=False)]


def test_a_claimer_whose_clock_reads_ahead_does_not_erase_anothers_window(queue):
    """clocks of two claimers read 100 s apart (FakeClock going backwards between claims)."""
    queue.limit("api", rate="1/10s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    assert [t.key for t in queue.poll_multi(5, now=T0, queues="api")] == ["a"]
    # a claimer whose clock reads T0 + 100 finds nothing due in api: its claim still prunes
    assert queue.poll_multi(5, now=T0 + 100, queues="api") == []
    queue.submit("b", "t", {}, queue="api", now=T0 - 10)
    got = queue.poll_multi(5, now=T0 + 1, queues="api")
    # expected: refused, the start of T0 is still in every window containing T0 + 1
    assert got == [], (leases_started(queue, "api"), starts(queue))


def test_a_claimer_whose_clock_reads_behind_counts_later_stamped_starts(queue):
    """Guard (holds by design): a start stamped later than a claimer's now still counts."""
    queue.limit("api", rate="1/10s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    queue.submit("b", "t", {}, queue="api", now=T0 - 10)
    assert len(queue.poll_multi(5, now=T0 + 5, queues="api")) == 1
    assert queue.poll_multi(5, now=T0 - 30, queues="api") == []


def test_changing_the_rate_key_keeps_the_starts_already_made(queue):
    """2/60s per user, two users start 2 each; the operator makes it 2/60s for the whole queue.
    The window then already holds 4 starts: no more may start until it slides."""
    for i in range(3):
        queue.submit(f"a{i}", "t", {}, user="acme", queue="api", now=T0 - 10)
        queue.submit(f"b{i}", "t", {}, user="bolt", queue="api", now=T0 - 10)
    queue.limit("api", rate="2/60s", rate_key="user", now=T0)
    got = []
    for i in range(8):  # one task per claim or a batch: the same 4 starts
        got += queue.poll_multi(10, now=T0 + i * 0.01, queues="api")
    assert sorted(t.user for t in got) == ["acme", "acme", "bolt", "bolt"]
    queue.limit("api", rate="2/60s", now=T0 + 1)  # one limit for the whole queue
    got = queue.poll_multi(10, now=T0 + 2, queues="api")
    assert got == [], f"{len(got)} more starts; starts in the last 60 s: {leases_started(queue, 'api')}"


def test_a_rate_refusal_by_key_spends_no_attempt_and_other_keys_run(queue):
    """Guard: per-type key, one type spent, the other type's task starts; refused one keeps attempts 0."""
    queue.limit("api", rate="1/60s", rate_key="type", now=T0)
    queue.submit("x1", "invoice", {}, queue="api", priority=5, now=T0 - 10, max_attempts=1)
    queue.submit("x2", "invoice", {}, queue="api", priority=5, now=T0 - 9, max_attempts=1)
    queue.submit("y1", "email", {}, queue="api", now=T0 - 5)
    assert [t.key for t in queue.poll_multi(1, now=T0, queues="api")] == ["x1"]
    assert [t.key for t in queue.poll_multi(1, now=T0 + 1, queues="api")] == ["y1"]
    assert queue["x2"].metadata(now=T0 + 1).attempts == 0


def test_an_expired_lease_reclaimed_counts_as_a_start(queue):
    queue.limit("api", rate="2/100s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    queue.submit("b", "t", {}, queue="api", now=T0 - 10)
    alive = 10
    assert len(queue.poll_multi(1, now=T0, alive_time=alive, queues="api")) == 1
    assert len(queue.poll_multi(1, now=T0 + alive + 1, alive_time=alive, queues="api")) == 1  # a again
    assert queue.poll_multi(5, now=T0 + alive + 2, queues="api") == []
