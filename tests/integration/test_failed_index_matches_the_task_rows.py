"""The failed tasks' own index (<table>_failed_ids on MySQL/MariaDB, a partial index on
SQLite/PostgreSQL) against the task rows themselves: every reader (failures(), retry_failed
dry-run, browse(status="failed")) shows exactly the rows finished with outcome failure."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from queue_core.store.tasks import Settled

T0 = 1_700_000_000.0


def truth(queue) -> set[str]:
    t = queue.store.t
    return set(
        queue.db.run(
            lambda c: c.execute(sa.select(t.c.key).where(t.c.state == 1, t.c.outcome == "failure")).scalars().all()
        )
    )


def shown(queue, now) -> tuple[int, int, set[str]]:
    groups = sum(g.count for g in queue.failures())
    dry = queue.retry_failed(dry_run=True, now=now)
    keys, cursor = set(), None
    while True:
        page = queue.browse(status="failed", cursor=cursor, limit=7, now=now)
        keys |= {t.key for t in page.tasks}
        cursor = page.next_cursor
        if cursor is None:
            return groups, dry, keys


def assert_exact(queue, now):
    want = truth(queue)
    groups, dry, keys = shown(queue, now)
    assert (groups, keys) == (len(want), want)
    # retry_failed counts plain tasks only (workflow rows are retried by pqflow)
    t = queue.store.t
    plain = queue.db.run(
        lambda c: c.execute(
            sa.select(sa.func.count()).where(t.c.state == 1, t.c.outcome == "failure", t.c.workflow.is_(None))
        ).scalar()
    )
    assert dry == plain


def test_a_failure_written_by_an_older_release_or_by_hand_is_shown_after_init(queue):
    """A v6 worker still running after `init` upgraded the table (require_current_version only
    refuses OLDER tables, so an older release keeps writing a v7 table) or an operator's UPDATE
    writes a failed row without noting its id: on SQLite/PostgreSQL it is shown, on MySQL it is
    invisible forever (init back-fills only on the upgrade to version 7)."""
    queue.submit("old-release", "t", now=T0)
    t = queue.store.t
    queue.db.run(
        lambda c: c.execute(
            sa.update(t)
            .where(t.c.key == "old-release")
            .values(state=1, outcome="failure", error="ValueError: by v6", finished_at=T0 + 1, timeout=T0 + 10**6)
        )
    )
    queue.init()  # the documented repair step: init again
    assert_exact(queue, T0 + 2)


def test_every_way_in_and_out_of_failure_matches_the_rows(queue, clock):
    now = T0
    purge = T0 + 10**6
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(12)], now=now)
    held = queue.poll_multi(12, now=now)
    # fail by hand, fail with a batch settle, success with a batch settle
    held[0].fail("KeyError: a", now=now + 1, retention_time=50)
    settled = [Settled(x._id, x._token, purge, "failure" if i % 2 else "success") for i, x in enumerate(held[1:7])]
    assert queue.store.task_settle(settled, now + 2) == []
    for x in held[7:]:
        x.fail("OSError: b", now=now + 3, retention_time=10**5)
    assert_exact(queue, now + 4)
    # retry some, fail them again, succeed others
    assert queue.retry_failed(type="t", error="OSError", now=now + 5) == 5
    again = queue.poll_multi(5, now=now + 6)
    for i, x in enumerate(again):
        (x.fail if i % 2 else x.finish)(*(["ZeroDivisionError: c"] if i % 2 else []), now=now + 7, retention_time=10**5)
    assert_exact(queue, now + 8)
    # force_finish as failure of a waiting task
    queue.submit("forced", "t", now=now)
    queue.store.task_force_finish("forced", now + 9, purge, outcome="failure")
    assert_exact(queue, now + 10)
    # give-up at claim time
    queue.submit("giveup", "t", max_attempts=1, now=now + 10)
    queue.poll(now=now + 10, alive_time=1)
    queue.poll(now=now + 20)
    assert_exact(queue, now + 21)
    # a submission takes the expired key of a failed task: the new task is not failed
    queue.submit("k1", "t", now=now + 10**6 + 1)
    assert_exact(queue, now + 10**6 + 2)
    # cleanup of everything past retention
    queue.cleanup(now=now + 10**7)
    assert_exact(queue, now + 10**7)
    # init --force empties it all
    queue.init(force=True)
    assert_exact(queue, now + 10**7)
    if queue.store.failures.keeps_failed_ids:
        f = queue.store.failed_t
        assert queue.db.run(lambda c: c.execute(sa.select(sa.func.count()).select_from(f)).scalar()) == 0


def test_a_task_retried_by_key_and_failed_again(queue):
    queue.submit("r", "t", now=T0)
    queue.poll(now=T0).fail("KeyError: 1", now=T0 + 1, retention_time=100)
    queue.retry_task("r", now=T0 + 2)
    assert_exact(queue, T0 + 2)
    queue.poll(now=T0 + 3).fail("KeyError: 2", now=T0 + 4, retention_time=100)
    assert_exact(queue, T0 + 5)


def test_many_threads_failing_retrying_and_purging(queue, backend, clock):
    """Failures, retries and purges of the same tasks at once: no error escapes (deadlocks are
    retried), and the readers match the rows."""
    import queue_core

    n = 120
    queue.submit_many([{"key": f"c{i}", "type": "t"} for i in range(n)], now=T0)
    errors: list[BaseException] = []

    def own():
        return queue_core.open(
            queue.store.db.engine.url.render_as_string(hide_password=False), queue.table, clock=clock
        )

    def failer(seed):
        q = own()
        try:
            for r in range(6):
                for task in q.poll_multi(10, now=T0 + r * 10):
                    task.fail(f"E{seed}: x", now=T0 + r * 10 + 1, retention_time=5)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            q.close()

    def purger():
        q = own()
        try:
            for r in range(12):
                q.cleanup(now=T0 + r * 10 + 8)
                q.retry_failed(now=T0 + r * 10 + 9)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            q.close()

    threads = [threading.Thread(target=failer, args=(i,)) for i in range(3)] + [
        threading.Thread(target=purger) for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert errors == []
    assert_exact(queue, T0 + 1000)
    if queue.store.failures.keeps_failed_ids:  # no id noted for a task that is gone
        f, t = queue.store.failed_t, queue.store.t
        orphans = queue.db.run(
            lambda c: c.execute(
                sa.select(sa.func.count()).select_from(f).where(f.c.failed_task_id.not_in(sa.select(t.c.id)))
            ).scalar()
        )
        assert orphans == 0


def test_init_that_makes_a_missing_failed_table_fills_it(queue, backend):
    """A version-7 table without <table>_failed_ids (made at 9425adc/512199e/10a9aeb, which already
    wrote version 7, or the table dropped by hand): init makes the table but fills it only on the
    upgrade to 7, so the tasks that failed before stay invisible on MySQL."""
    queue.submit("before", "t", now=T0)
    queue.poll(now=T0).fail("KeyError: old", now=T0 + 1, retention_time=10**6)
    if queue.store.failures.keeps_failed_ids:
        queue.db.run(lambda c: queue.store.failed_t.drop(c))
    queue.init()
    assert_exact(queue, T0 + 2)
