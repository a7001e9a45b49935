"""The worker registry under faults: a registration whose insert acknowledgement is lost, renewals
racing each other and a sweep: no error, the row present and current."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import sqlalchemy as sa

from queue_core.store.workers import WorkerIdentity

ME = WorkerIdentity(owner="host:1", host="host", pid=1, queues='["default"]', types=None, version="x")


@contextmanager
def ack_lost_at(q, what, nth):
    """The ``nth`` run labelled ``what`` commits, then its client sees the connection drop."""
    db = q.db
    real_run, original = db.run, db._connection
    seen = {"n": 0, "fired": 0}

    def run(fn, *, what="query", **kw):
        if what == wanted:
            seen["n"] += 1
            if seen["n"] == nth:

                @contextmanager
                def conn_then_drop(*args):
                    with original(*args) as conn:
                        yield conn
                    if not seen["fired"]:
                        seen["fired"] += 1
                        raise sa.exc.OperationalError(
                            "COMMIT", {}, ConnectionError("lost"), connection_invalidated=True
                        )

                db._connection = conn_then_drop
                try:
                    return real_run(fn, what=what, **kw)
                finally:
                    db._connection = original
        return real_run(fn, what=what, **kw)

    wanted = what
    db.run = run
    try:
        yield seen
    finally:
        db.run = real_run


def _row(q):
    w = q.store.workers_t
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(w))], write=False)


def test_a_registration_whose_insert_ack_is_lost_leaves_one_current_row(queue, clock):
    queue.submit("warm", "t")  # one ordinary query first
    with ack_lost_at(queue, "register worker", 2) as seen:  # 1: the delete, 2: the insert
        queue.store.worker_register(ME, clock.now())
    assert seen["fired"] == 1
    [row] = _row(queue)
    assert row["last_seen"] == clock.now() and row["started_at"] == clock.now()


def test_renewals_racing_a_sweep_end_with_the_row_present_and_current(queue, clock):
    queue.submit("warm", "t")
    queue.store.worker_register(ME, clock.now())
    errors = []
    start = clock.now()

    def renew(i):
        try:
            for j in range(15):
                queue.store.worker_renew(ME, start, start + i * 100 + j)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def sweep():
        try:
            for _ in range(15):
                queue.store.worker_sweep(start + 10_000)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=renew, args=(i,)) for i in (1, 2)] + [threading.Thread(target=sweep)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    queue.store.worker_renew(ME, start, start + 1000)
    [row] = _row(queue)
    assert row["last_seen"] == start + 1000 and row["started_at"] == start
