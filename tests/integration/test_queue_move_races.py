"""`move` racing a claim. The claim of queue A reads its candidates, then another
connection moves one of them to queue B (paused, or at its concurrency limit) and commits, then
the claim locks and leases. The interleaving is made deterministic by running the move from a
hook at the claim's step between its candidate read and its row lock (PostgreSQL and MariaDB:
SQLite's BEGIN IMMEDIATE serialises writers, so the move could not run there)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.store.claim.view import ClaimView

T0 = 1_700_000_000.0


@pytest.fixture
def other(db_url, table_name, clock, backend):
    if backend == "sqlite":
        pytest.skip("SQLite serialises the move behind the claim's write transaction")
    q = queue_core.open(db_url, table_name, clock=clock)
    yield q
    q.close()


def leased_in(queue, name):
    t = queue.store.t
    stmt = sa.select(t.c.key).where(t.c.state == 0, t.c.leased == 1, t.c.timeout > T0, t.c.queue == name)
    return sorted(r[0] for r in queue.db.run(lambda c: c.execute(stmt).all(), write=False))


def move_during_claim(monkeypatch, other, key, to):
    """Run `other.move(key, to)` (committed) once, inside the claim, after its candidates were read."""
    orig = ClaimView._running_counts
    done = []

    def hooked(self, conn, users, now):
        if not done:
            done.append(1)
            other.move(key, to, now=T0)
        return orig(self, conn, users, now)

    monkeypatch.setattr(ClaimView, "_running_counts", hooked)
    return done


def test_move_into_a_full_queue_during_a_claim_never_exceeds_its_limit(queue, other, monkeypatch):
    queue.submit("x", "t", {}, user="u", queue="a", now=T0 - 10)  # a user's task: the fair-share path
    queue.submit("y", "t", {}, queue="b", now=T0 - 10)
    queue.limit("b", concurrency=1, now=T0)
    assert [t.key for t in queue.poll_multi(5, now=T0, queues="b")] == ["y"]  # b is full
    done = move_during_claim(monkeypatch, other, "x", "b")
    got = queue.poll_multi(5, now=T0, queues="a")
    assert done
    # expected: x (now in b) is not leased by a claim of a; b never holds more than 1 lease
    assert leased_in(queue, "b") == ["y"], (leased_in(queue, "b"), [(t.key, t.queue_name) for t in got])


def test_move_into_a_paused_queue_during_a_claim_is_not_handed_out(queue, other, monkeypatch):
    queue.submit("x", "t", {}, user="u", queue="a", now=T0 - 10)
    queue.submit("p0", "t", {}, queue="p", now=T0 - 10)
    queue.pause("p", now=T0)
    done = move_during_claim(monkeypatch, other, "x", "p")
    got = queue.poll_multi(5, now=T0, queues="a")
    assert done
    # expected: nothing of the paused queue p is leased, and a claim serving only a gets nothing of p
    assert [(t.key, t.queue_name) for t in got] == [], [(t.key, t.queue_name) for t in got]
    assert leased_in(queue, "p") == []


def test_move_of_a_userless_task_during_a_claim_is_not_leased(queue, other, monkeypatch):
    """the same interleaving on the userless path (SKIP LOCKED read with queue = a)."""
    queue.submit("x", "t", {}, queue="a", now=T0 - 10)
    queue.submit("y", "t", {}, queue="b", now=T0 - 10)
    queue.limit("b", concurrency=1, now=T0)
    assert [t.key for t in queue.poll_multi(5, now=T0, queues="b")] == ["y"]
    orig = ClaimView._pick_userless
    done = []

    def hooked(self, conn, n, now, lock, types=None, tops=None):
        if not done:
            done.append(1)
            other.move("x", "b", now=T0)
        return orig(self, conn, n, now, lock, types, tops)

    monkeypatch.setattr(ClaimView, "_pick_userless", hooked)
    got = queue.poll_multi(5, now=T0, queues="a")
    assert done
    assert leased_in(queue, "b") == ["y"], [(t.key, t.queue_name) for t in got]
