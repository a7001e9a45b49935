"""Bounds of the wake-up probe (no wake-up without a new row, a pool of one shared with claims,
no checkpoint held back) and of PostgreSQL's notifications (due only, never for a refused key)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from conftest import own_queue

from queue_core.errors import IdempotentAlreadyExistsError
from queue_core.store.watch import NewestIdWatch
from queue_core.worker.listener import start_listener

T0 = 1_700_000_000.0


class _Counter:
    def __init__(self):
        self.n = 0
        self.event = threading.Event()

    def __call__(self):
        self.n += 1
        self.event.set()


def test_idle_polls_behind_a_users_cap_and_a_purge_wake_nobody_but_a_new_row_does(db_url, table_name, backend):
    """A due task blocked by its user's cap stays due for ever: polling it changes nothing the
    probe reads, so an idle worker is not woken into a claim loop; a purge may change the
    highest id once; a new row always does."""
    with own_queue(db_url, table_name, backend, notify=False, retention_time=0) as q:
        q.submit("held", "t", user="u", max_running=1, now=T0)
        q.submit("blocked", "t", user="u", max_running=1, now=T0)
        for i in range(5):
            q.submit(f"done{i}", "t", now=T0)
        held = q.poll_multi(10, alive_time=300, now=T0)
        assert "held" in {t.key for t in held} and "blocked" not in {t.key for t in held}
        q.finish_many([t for t in held if t.key != "held"], now=T0)
        with NewestIdWatch(q.db, q.store.t) as watch:
            watch.changed()
            for i in range(20):  # an idle worker polling: the blocked task stays blocked
                assert q.poll_multi(10, alive_time=300, now=T0 + 1 + i) == []
                assert not watch.changed()
            q.cleanup(now=T0 + 30)  # purges the finished rows (the highest id among them)
            watch.changed()  # one change at most: the next read sees none
            assert not watch.changed()
            q.submit("new", "t", now=T0 + 31)
            assert watch.changed()


def test_probe_and_claims_share_a_pool_of_one(db_url, table_name, backend):
    with own_queue(db_url, table_name, backend, wake_interval=0.01, notify=False, pool_size=1) as q:
        counter = _Counter()
        listener = start_listener(q, counter)
        try:
            for i in range(20):
                q.submit(f"k{i}", "t")
                task = q.poll(alive_time=30)
                assert task is not None
                task.finish()
            assert counter.event.wait(10)
        finally:
            listener.stop()
            listener.join(5)
        assert not listener.is_alive()
        assert q.stats()["outcomes"]["success"] == 20


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_probe_does_not_hold_back_a_checkpoint_while_running(db_url, table_name, backend):
    with own_queue(db_url, table_name, backend, wake_interval=0.005) as q:
        counter = _Counter()
        listener = start_listener(q, counter)
        try:
            for i in range(50):
                q.submit(f"k{i}", "t")
            assert counter.event.wait(10)
            eng = sa.create_engine(db_url)
            try:
                busy_seen = 0
                for _ in range(20):
                    with eng.connect() as conn:
                        busy, _, _ = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
                    busy_seen += busy
            finally:
                eng.dispose()
        finally:
            listener.stop()
            listener.join(5)
        assert busy_seen <= 2  # at most a read caught mid-flight, never held


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_notifications_due_future_refused_and_retaken(queue, db_url):
    import psycopg

    url = sa.engine.make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{queue.store.channel}"')

        def heard() -> int:
            return sum(1 for _ in listener.notifies(timeout=0.3, stop_after=5))

        queue.submit("later", "t", run_at=T0 + 3600, now=T0)
        assert heard() == 0
        queue.submit("due", "t", now=T0)
        assert heard() == 1
        with pytest.raises(IdempotentAlreadyExistsError):
            queue.submit("due", "t", now=T0)
        with pytest.raises(IdempotentAlreadyExistsError):
            queue.submit("later", "t", now=T0)
        assert heard() == 0
        queue.poll(now=T0).finish(now=T0 + 1)
        heard()
        later = T0 + 2 + queue.config["retention_time"]
        queue.submit("due", "t", now=later)  # retention ended: retaken, due
        assert heard() == 1
        queue.submit("future2", "t", run_at=later + 60, now=later)
        assert heard() == 0


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_notify_off_sends_no_notification(db_url, table_name, backend):
    import psycopg

    with own_queue(db_url, table_name, backend, notify=False) as q:
        url = sa.engine.make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(url, autocommit=True) as listener:
            listener.execute(f'LISTEN "pq_{table_name}"')
            q.submit("due", "t", now=T0)
            assert sum(1 for _ in listener.notifies(timeout=0.3, stop_after=5)) == 0
