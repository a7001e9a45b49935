"""On MariaDB, a deadlock inside a deferred-finish batch must be retried by the
Database layer (deferred.py: "A database error aborts the whole transaction (retried by the
caller as a whole)"). deferred.write runs each writer inside a SAVEPOINT. MariaDB rolls the
whole transaction back on a deadlock (1213), so SQLAlchemy's ROLLBACK TO SAVEPOINT then fails
with 1305 "SAVEPOINT sa_savepoint_1 does not exist" — that error replaces the deadlock, is not
classified transient, and finish_many / poll_multi raise DatabaseError to the worker instead of
retrying (the worker logs "poll failed"/"finish failed", backs off and tries again later).
Workflow completions deadlock like this when two batched completions cascade (skips, joins) into
each other's rows at different levels.
"""

from __future__ import annotations

import threading
import time

import queue_core
from queue_core.api.deferred import Deferred


def test_deadlock_in_a_deferred_batch_is_retried(db_url, table_name, backend, queue):
    if backend == "sqlite":
        return  # BEGIN IMMEDIATE serialises writers: no deadlock
    queue.submit("lock_a", "side", {})
    queue.submit("lock_b", "side", {})
    queue.submit("t1", "job", {})
    queue.submit("t2", "job", {})
    barrier = threading.Barrier(2, timeout=20)
    first_try: dict = {}

    def writer_for(order):
        def writer(tx, tasks):
            tx.update_data(order[0], {"by": tasks[0].key})
            if not first_try.get(tasks[0].key):
                first_try[tasks[0].key] = True
                barrier.wait()
                time.sleep(0.3)
            tx.update_data(order[1], {"by": tasks[0].key})
            return []

        return writer

    held = [queue.poll(alive_time=60, now=queue.now() + 1), queue.poll(alive_time=60, now=queue.now() + 1)]
    held = [t for t in held if t is not None]
    jobs = {t.key: t for t in held if t.key in ("t1", "t2")}
    # claim until both jobs are held (the side rows may come first)
    while len(jobs) < 2:
        t = queue.poll(alive_time=60, now=queue.now() + 1)
        jobs[t.key] = t
    errors = []

    def finish(key, order):
        q = queue_core.open(db_url, table_name, clock=queue.clock)
        try:
            task = jobs[key]
            task.queue = q
            task.deferred = Deferred(writer_for(order), None)
            assert q.finish_many([task]) == []
            assert task.done
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            q.close()

    threads = [
        threading.Thread(target=finish, args=("t1", ("lock_a", "lock_b"))),
        threading.Thread(target=finish, args=("t2", ("lock_b", "lock_a"))),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


# -- the same through pqflow: two batched completions of one run whose skip cascades cross -----
import pqflow  # noqa: E402
from pqflow import completions  # noqa: E402

wf = pqflow.Workflow("rv_dl", retry_wait=0)


@wf.step()
def p1(ctx):
    return 1


@wf.step()
def p2(ctx):
    return 2


@wf.step(after=p1, trigger="all_failed")
def q(ctx):  # skipped when p1 succeeds
    return None


@wf.step(after=p2, trigger="all_failed")
def w(ctx):  # skipped when p2 succeeds
    return None


@wf.step(after=[p1, "w"], trigger="all_done")
def x(ctx):
    return "x"


@wf.step(after=[p2, q], trigger="all_done")
def y(ctx):
    return "y"


class Decider(pqflow.Decider):
    workflows = [wf]


def test_crossing_skip_cascades_of_two_batched_completions(db_url, table_name, backend, queue, monkeypatch):
    """p1's completion locks x and q (level 1), then y (q skipped: level 2); p2's locks w and y,
    then x. Both are successes written by the worker's batch (deferred, in a savepoint)."""
    if backend == "sqlite":
        return
    wf.start("d", queue=queue)
    held = {}
    for _ in range(2):
        t = queue.poll(alive_time=60)
        Decider(t).run()
        held[t.key] = t
    assert set(held) == {"d#p1", "d#p2"} and all(t.deferred for t in held.values())
    barrier = threading.Barrier(2, timeout=20)
    real_advance = completions._advance
    waited = set()

    def advance(tx, runs, ended):
        out = real_advance(tx, runs, ended)
        me = threading.get_ident()
        if me not in waited:  # after level 1 of each completion's first attempt
            waited.add(me)
            barrier.wait()
            time.sleep(0.3)
        return out

    monkeypatch.setattr(completions, "_advance", advance)
    errors = []

    def finish(task):
        q2 = queue_core.open(db_url, table_name, clock=queue.clock)
        try:
            task.queue = q2
            assert q2.finish_many([task]) == [] and task.done
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            q2.close()

    threads = [threading.Thread(target=finish, args=(t,)) for t in held.values()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    monkeypatch.setattr(completions, "_advance", real_advance)
    for _ in range(3):
        t = queue.poll(alive_time=60)
        if t is None:
            break
        Decider(t).run()
        if t.deferred:
            queue.finish_many([t])
    run = pqflow.get_run("d", queue=queue)
    assert run.status == "succeeded", run.statuses
