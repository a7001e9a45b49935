"""Bounds of the wake-up probe (no wake-up without a new row, a pool of one shared with claims,
no checkpoint held back) and of PostgreSQL's notifications (due only, never for a refused key)
(written by the adversarial review of issue 13)."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import IdempotentAlreadyExistsError
from queue_core.listener import start_listener

T0 = 1_700_000_000.0


class _Counter:
    def __init__(self):
        self.n = 0
        self.event = threading.Event()

    def __call__(self):
        self.n += 1
        self.event.set()


def test_idle_with_a_blocked_user_and_purges_the_probe_wakes_only_on_new_rows(db_url, table_name, backend):
    q = queue_core.open(db_url, table_name, wake_interval=0.01, notify=False, retention_time=0)
    try:
        q.init()
        q.submit("held", "t", user="u", max_running=1)
        q.submit("blocked", "t", user="u", max_running=1)
        for i in range(5):
            q.submit(f"done{i}", "t")
        held = q.poll_multi(10, alive_time=300)
        keys = {t.key for t in held}
        assert "held" in keys and "blocked" not in keys
        for t in held:
            if t.key != "held":
                t.finish()
        counter = _Counter()
        listener = start_listener(q, counter)
        try:
            time.sleep(0.3)
            base = counter.n
            for _ in range(20):  # an idle worker polling: the blocked task stays blocked
                assert q.poll_multi(10, alive_time=300) == []
            time.sleep(0.5)
            idle_wakes = counter.n - base
            q.cleanup()  # purges the finished rows (maybe the top id): at most one spurious wake
            time.sleep(0.5)
            after_purge = counter.n - base - idle_wakes
            q.submit("new", "t")
            assert counter.event.wait(5)
            deadline = time.monotonic() + 5
            before = counter.n
            while counter.n == before and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            listener.stop()
            listener.join(5)
        assert idle_wakes == 0
        assert after_purge <= 1
        assert counter.n > before
    finally:
        q.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


def test_probe_and_claims_share_a_pool_of_one(db_url, table_name, backend):
    q = queue_core.open(db_url, table_name, wake_interval=0.01, notify=False, pool_size=1)
    try:
        q.init()
        counter = _Counter()
        listener = start_listener(q, counter)
        try:
            for i in range(20):
                q.submit(f"k{i}", "t")
                task = q.poll(alive_time=30)
                assert task is not None
                task.finish()
            t_end = time.monotonic() + 5
            while counter.n == 0 and time.monotonic() < t_end:
                time.sleep(0.01)
        finally:
            listener.stop()
            listener.join(5)
        assert not listener.is_alive()
        assert counter.n >= 1
        assert q.stats()["outcomes"]["success"] == 20
    finally:
        q.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_probe_does_not_hold_back_a_checkpoint_while_running(db_url, table_name):
    q = queue_core.open(db_url, table_name, wake_interval=0.005)
    try:
        q.init()
        counter = _Counter()
        listener = start_listener(q, counter)
        try:
            for i in range(50):
                q.submit(f"k{i}", "t")
            time.sleep(0.1)
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
    finally:
        q.close()


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
def test_notify_off_sends_no_notification(db_url, table_name):
    import psycopg

    q = queue_core.open(db_url, table_name, notify=False)
    try:
        q.init()
        url = sa.engine.make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(url, autocommit=True) as listener:
            listener.execute(f'LISTEN "pq_{table_name}"')
            q.submit("due", "t", now=T0)
            assert sum(1 for _ in listener.notifies(timeout=0.3, stop_after=5)) == 0
    finally:
        q.close()
        from conftest import drop_tables

        drop_tables(db_url, table_name)
