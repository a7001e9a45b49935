"""A claim whose COMMIT acknowledgement was lost is run again (``Database.run``) and finds the
leases its earlier run committed (``store.lost_claims.leased_under``, ``timeout IN stamps``). When the
retries took longer than the lease (a server failover: connection attempts with their timeouts
and backoff), those leases have expired by the time the claim returns them: the holder starts a
handler on a lease any other worker may take (its heartbeat, fenced by an unexpired lease, fails),
the task runs twice at once. The claim must deliver only leases alive when it returns."""

from __future__ import annotations

from contextlib import contextmanager

import sqlalchemy as sa

import queue_core

ALIVE = 30.0


@contextmanager
def poll_ack_lost_while_clock_moves(q, clock, seconds):
    """The next "poll" transaction commits, then its client sees the connection drop before the
    acknowledgement; the retries take ``seconds`` (the clock moves on) before one runs again."""
    db = q.db
    original, real_run = db._connection, db.run
    state = {"fired": 0}

    def run(fn, *, write=True, what="query", **kw):
        if what != "poll" or state["fired"]:
            return real_run(fn, write=write, what=what, **kw)

        @contextmanager
        def conn_then_drop(write_, *args):
            with original(write_, *args) as conn:
                yield conn
            if not state["fired"]:
                state["fired"] += 1
                clock.advance(seconds)
                raise sa.exc.OperationalError(
                    "COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True
                )

        db._connection = conn_then_drop
        try:
            return real_run(fn, write=write, what=what, **kw)
        finally:
            db._connection = original

    db.run = run
    try:
        yield state
    finally:
        db.run = real_run


def test_a_claim_retried_past_its_lease_delivers_no_expired_lease(queue, clock, db_url):
    queue.submit("k", "t", {})
    with poll_ack_lost_while_clock_moves(queue, clock, ALIVE + 5) as state:
        got = queue.poll_multi(5, alive_time=ALIVE)
    assert state["fired"] == 1
    expired = [round(queue.now() - queue.store.task_get(t.key)["timeout"], 1) for t in got]
    other = queue_core.open(db_url, queue.table, clock=clock)
    try:
        taken = other.poll_multi(5, alive_time=ALIVE)
    finally:
        other.close()
    assert not (got and taken), f"two holders of one task: the lease delivered had expired {expired} s before"
