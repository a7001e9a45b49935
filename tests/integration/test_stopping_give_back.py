"""A stopping worker gives back what it had not started, each attempt once (policy rule 3): a task
taken over before its monitor noticed gets its attempt back, a lost task's locked row does not hold
back the release of the others, and the same-task fence matches a task's own row for realistic
submission times, on the databases each test names."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from queue_core import config
from queue_core.worker.main import Processor
from queue_core.worker.processor import GIVE_BACK_TIME


def _processor(queue, target=lambda task: None, **settings):
    s = config.build({"url": queue.config["url"], "table": queue.table, **settings})
    return Processor(target, s, burst=True, queue=queue)


@pytest.mark.parametrize("start", [1718000000.1234567, 1795681730.432986, 1700000000.000001, 1712345678.9876543])
def test_same_task_fence_matches_its_own_row_for_realistic_created_at(queue, clock, start):
    """lost_before_start of a lease taken over gives back its attempt ("returned")."""
    clock.set(start) if hasattr(clock, "set") else setattr(clock, "now", start)
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue)
    first = queue.poll(alive_time=10)
    assert first.created_at == queue.store.task_get("k")["created_at"]
    clock.advance(11)
    second = queue.poll(alive_time=10)
    assert second is not None and second.attempts == 2
    proc.monitor.hold(first)
    proc.monitor._heartbeat_all()
    assert first.lost
    done = first.lost_before_start()
    assert done == "returned", f"created_at {first.created_at!r}: fence did not match its own row ({done!r})"
    assert queue["k"].metadata().attempts == 1


def test_stopping_worker_gives_back_the_attempt_of_a_task_taken_over_before_its_monitor_noticed(queue, clock):
    """A leases k (max_attempts=2); A is paused past alive_time (its
    monitor never heartbeat meanwhile, so k is not marked lost); B takes k over (attempts 2) and
    starts it; A resumes and is told to stop: _release puts k in ``held`` (not t.lost) and
    release_many, fenced by A's token, matches nothing; A's attempt, whose handler never ran, is
    never given back. B dies: k gives up after one real run."""
    queue.submit("k", "t", max_attempts=2)
    proc = _processor(queue)
    first = queue.poll(alive_time=10)
    proc.monitor.hold(first)
    clock.advance(11)  # A paused; its lease expired unnoticed
    second = queue.poll(alive_time=10)  # B takes over and runs k
    assert second is not None and second.attempts == 2
    assert not first.lost
    proc._release([first])  # A stops: its unstarted batch given back
    attempts = queue["k"].metadata().attempts
    assert attempts == 1, f"attempts {attempts} while only B ever ran k: A's unrun attempt was kept"


@pytest.mark.parametrize("locked", [True, False], ids=["locked", "control-unlocked"])
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_immediate_stop_releases_held_tasks_even_when_a_lost_task_row_is_locked(backend, queue, clock, locked):
    """Still releases its other unstarted tasks: give_back_now -> _release settles
    each lost task first, one statement each, then release_many of the held ones; stop_at_once
    waits GIVE_BACK_TIME (1.5 s) then os._exit. A lost task's row is exactly the row another worker
    took over (locked by its write in progress): the held tasks are never released and wait for
    their lease to expire."""
    queue.submit("k1", "t", priority=1)
    queue.submit("k2", "t")
    proc = _processor(queue)
    a1 = queue.poll(alive_time=10)
    assert a1.key == "k1"
    proc.monitor.hold(a1)
    clock.advance(11)
    queue.submit("dummy", "t", priority=-5)
    b1 = queue.poll(alive_time=100)  # B takes k1 over
    assert b1.key == "k1"
    a2 = queue.poll(alive_time=100)  # A's k2, leased after (a second claim of A's batch)
    assert a2.key == "k2"
    proc.monitor.hold(a2)
    proc.monitor._heartbeat_all()
    assert a1.lost and not a2.lost
    proc._unstarted = [a1, a2]
    eng = sa.create_engine(queue.config["url"])
    conn = eng.connect()
    tx = conn.begin()
    q = '"' if backend == "postgres" else "`"
    if locked:
        # B writing k1
        conn.exec_driver_sql(f"SELECT id FROM {q}{queue.table}{q} WHERE {q}key{q} = 'k1' FOR UPDATE").all()
    try:
        th = threading.Thread(target=proc.give_back_now, daemon=True)
        th.start()
        th.join(GIVE_BACK_TIME)  # what stop_at_once waits before os._exit
        row = queue.store.task_get("k2")
        assert row["leased"] == 0, (
            "k2 (held, never started) was not released within GIVE_BACK_TIME: it waits for its lease to expire"
        )
    finally:
        tx.rollback()
        conn.close()
        eng.dispose()
        th.join(20)
