"""The failed tasks' index stays exact when a COMMIT's acknowledgement is lost (the transaction
runs again) around the changes that note and forget failed ids, and when many threads fail and
purge on MariaDB."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from test_failed_index_matches_the_task_rows import assert_exact
from test_history import commit_ack_lost_once

import queue_core
from queue_core.store.tasks import Settled

T0 = 1_700_000_000.0


def test_lost_acknowledgements_around_failure_notes(queue):
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(6)], now=T0)
    held = queue.poll_multi(6, now=T0 + 1)
    with commit_ack_lost_once(queue) as state:
        held[0].fail("KeyError: a", now=T0 + 2, retention_time=10)
    assert state["fired"] == 1
    with commit_ack_lost_once(queue) as state:
        assert queue.store.task_settle([Settled(x._id, x._token, T0 + 10, "failure") for x in held[1:4]], T0 + 3) == []
    assert state["fired"] == 1
    with commit_ack_lost_once(queue):  # its re-run finds its own earlier commit: no error
        queue.store.task_force_finish("k4", T0 + 3, T0 + 10, outcome="failure")
    assert_exact(queue, T0 + 4)
    with commit_ack_lost_once(queue):
        queue.retry_failed(error="KeyError", now=T0 + 5)  # (reports 0 when its commit ack was lost)
    assert_exact(queue, T0 + 5)
    with commit_ack_lost_once(queue):
        queue.cleanup(now=T0 + 100)
    assert_exact(queue, T0 + 100)
    if queue.store.failures.keeps_failed_ids:
        f, t = queue.store.failed_t, queue.store.t
        assert (
            queue.db.run(
                lambda c: c.execute(
                    sa.select(sa.func.count()).select_from(f).where(f.c.failed_task_id.not_in(sa.select(t.c.id)))
                ).scalar()
            )
            == 0
        )


def test_many_threads_failing_and_purging_real_time(wq, backend):
    """Real clock: failures with retention 0 are purged while others fail; 6 threads."""
    url = wq.db.engine.url.render_as_string(hide_password=False)
    n = 600
    wq.submit_many([{"key": f"c{i}", "type": "t"} for i in range(n)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def failer():
        q = queue_core.open(url, wq.table)
        try:
            while True:
                batch = q.poll_multi(5)
                if not batch:
                    return
                for task in batch:
                    task.fail("E: x", retention_time=0 if task.key.endswith(("0", "5")) else 3600)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            q.close()

    def purger():
        q = queue_core.open(url, wq.table)
        try:
            while not stop.is_set():
                q.cleanup()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            q.close()

    fs = [threading.Thread(target=failer) for _ in range(4)]
    ps = [threading.Thread(target=purger) for _ in range(2)]
    for th in fs + ps:
        th.start()
    for th in fs:
        th.join(300)
    stop.set()
    for th in ps:
        th.join(60)
    assert errors == []
    # a second on: each Queue object reads the server's clock on its own, each reading as precise
    # as its round trip (up to SERVER_CLOCK_MAX_RTT on a loaded machine), so a failure with
    # retention 0 just written by another one may not be due yet at this one's now
    later = wq.now() + 1
    wq.cleanup(now=later)
    assert_exact(wq, later)
    t = wq.store.t
    assert wq.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(t)).scalar()) == n - n // 5
    if wq.store.failures.keeps_failed_ids:
        f = wq.store.failed_t
        assert wq.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(f)).scalar()) == n - n // 5
