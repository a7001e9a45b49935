"""A claim writes the time of its statements, read after every lock it waited for: the lease's
expiry and ``started_at``, and a rate limit's start. A claim that waits for a lock held by another
transaction (SQLite: the database's write lock; MySQL/MariaDB and PostgreSQL: a limited queue's
settings row, the fair lock of capped users) for longer than its ``alive_time`` is not born
expired: nobody else claims the task while its holder runs it.

The injected clock stands for the server's: it moves on while the claim waits."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

import queue_core

ALIVE = 10.0
WAIT = ALIVE + 5  # how far the clock moves while the claim waits for the lock


def _waiting(engine, backend: str, table: str) -> bool:
    """Whether a session waits for a lock in a statement naming ``table`` (MySQL, PostgreSQL)."""
    if backend == "postgres":
        sql = f"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%%{table}%%'"
    else:
        sql = (  # this account's own sessions: a locking read of the table still under way
            "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() "
            f"AND info LIKE '%%{table}%%' AND info LIKE '%%FOR UPDATE%%'"
        )
    with engine.connect() as c:
        return bool(c.exec_driver_sql(sql).scalar())


class _Holder:
    """Another transaction holding the lock a claim waits for, until :meth:`release`."""

    def __init__(self, queue, backend: str, db_url: str, kind: str):
        self.backend, self.queue = backend, queue
        if backend == "sqlite":
            self.raw = sqlite3.connect(sa.engine.make_url(db_url).database, isolation_level=None)
            self.raw.execute("BEGIN IMMEDIATE")  # the database's write lock
            return
        self.engine = sa.create_engine(db_url)
        self.conn = self.engine.connect()
        self.tx = self.conn.begin()
        store = queue.store
        if kind == "settings":
            lock = sa.select(store.queues_t.c.name).where(store.queues_t.c.name == "api")
        else:
            lock = sa.select(store.meta.c.name).where(store.meta.c.name == "fair_lock")
        assert self.conn.execute(lock.with_for_update()).all()
        self.waited_on = store.queues_t.name if kind == "settings" else store.meta.name

    def wait_for_claim(self, started: threading.Event) -> None:
        assert started.wait(30)
        if self.backend == "sqlite":  # no view of who waits: give the claim time to reach BEGIN
            time.sleep(0.5)
            return
        deadline = time.monotonic() + 60
        while not _waiting(self.engine, self.backend, self.waited_on):
            assert time.monotonic() < deadline, "the claim never waited for the lock"
            time.sleep(0.05)

    def release(self) -> None:
        if self.backend == "sqlite":
            self.raw.rollback()
            self.raw.close()
            return
        self.tx.rollback()
        self.conn.close()
        self.engine.dispose()


def _claim_behind_a_lock(queue, clock, backend, db_url, kind):
    """Claim while another transaction holds the lock; the clock moves on by WAIT meanwhile.
    Returns the task leased and the time the lock was released."""
    got: dict = {}
    started = threading.Event()

    def claim():
        started.set()
        got["task"] = queue.poll(alive_time=ALIVE, queues="api")

    holder = _Holder(queue, backend, db_url, kind)
    claimer = threading.Thread(target=claim, daemon=True)
    try:
        claimer.start()
        holder.wait_for_claim(started)
        released_at = clock.advance(WAIT)
    finally:
        holder.release()
    claimer.join(60)
    assert not claimer.is_alive()
    return got["task"], released_at


@pytest.mark.parametrize("kind", ["settings", "fair"])
def test_a_lease_claimed_after_a_lock_wait_expires_alive_time_after_the_wait(queue, clock, backend, db_url, kind):
    if kind == "settings":  # a rate-limited queue: its claims lock its settings row
        queue.limit("api", rate="1/1s")
        queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    else:  # a capped user: its claims take the fair lock
        queue.submit("a", "t", {}, queue="api", user="u", max_running=1, now=clock.now() - 1)
    task, released_at = _claim_behind_a_lock(queue, clock, backend, db_url, kind)
    assert task is not None and task.key == "a"
    assert task.timeout >= released_at + ALIVE, f"lease ends {task.timeout - released_at:+.1f} s after the wait"
    assert task.started_at >= released_at
    t = queue.store.t
    stored = queue.db.run(lambda c: c.execute(sa.select(t.c.started_at, t.c.timeout)).one(), write=False)
    assert stored.started_at >= released_at and stored.timeout >= released_at + ALIVE
    other = queue_core.open(db_url, queue.table, clock=clock)
    try:
        clock.advance(ALIVE / 2)  # the first lease still runs
        assert other.poll(alive_time=ALIVE, queues="api") is None, "a second claimer took the running task"
    finally:
        other.close()
    task.heartbeat(alive_time=ALIVE)  # still its holder's


def test_a_rate_limited_start_is_recorded_after_the_claims_lock_wait(queue, clock, backend, db_url):
    queue.limit("api", rate="1/1s")
    for key in ("a", "b"):
        queue.submit(key, "t", {}, queue="api", now=clock.now() - 1)
    task, released_at = _claim_behind_a_lock(queue, clock, backend, db_url, "settings")
    assert task is not None
    st = queue.store.starts_t
    recorded = queue.db.run(lambda c: [r[0] for r in c.execute(sa.select(st.c.started_at))], write=False)
    assert recorded and min(recorded) >= released_at, f"start recorded {min(recorded) - released_at:+.1f} s"
    # the window of the start made after the wait is still full half a window later
    assert queue.poll(queues="api", now=released_at + 0.5) is None
