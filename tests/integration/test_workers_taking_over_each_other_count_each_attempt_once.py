"""Two workers (threads, each with its own Queue) draining one table with short leases,
so that they take over each other's tasks while the other still settles them: each task gets
exactly one ``finished`` event (of the attempt whose holder was told it finished it), each
attempt taken over one ``expired`` event, and the statistics and histories count each attempt
once. On MariaDB the settle writes its events from the held attempts; on PostgreSQL both ways."""

from __future__ import annotations

import functools
import random
import time

import pytest
import sqlalchemy as sa
from conftest import run_together
from event_checks import event_rows

import queue_core

N = 240


def _taken_over(q, batch) -> bool:
    ids = ",".join(str(t._id) for t in batch)
    sql = sa.text(f"SELECT owner FROM {q.table} WHERE id IN ({ids})")
    return any(o not in (None, q.owner) for o in q.db.run(lambda c: c.execute(sql).scalars().all()))


def _worker(q, seed, told, stop_at):
    rng = random.Random(seed)
    batch: list = []
    hold_first = seed == 0  # worker 0 holds its first batch until the other took one of it over
    while time.monotonic() < stop_at:
        if batch and hold_first:
            hold_first = False
            # The other worker claims the due rows first (their due times are older than these
            # leases' expiry): on a loaded machine it drains them in seconds, so wait for it until
            # shortly before the end, not a fixed 4 s that ran out before any takeover.
            until = stop_at - 3
            while not _taken_over(q, batch) and time.monotonic() < until:
                time.sleep(0.05)
        elif batch and rng.random() < 0.25:
            time.sleep(0.25)  # past its lease: the other worker may take these over meanwhile
        finish = batch
        if rng.random() < 0.5:
            lost = {id(t) for t in q.finish_many(finish)}
            nxt = q.poll_multi(8, alive_time=0.15)
        else:
            nxt = q.poll_multi(8, alive_time=0.15, finish=finish)
            lost = {id(t) for t in finish if t.lost}
        for t in finish:
            assert t.done != (id(t) in lost), t
            if id(t) not in lost:
                told.append((t._id, t.attempts, q.owner))
        batch = nxt
        if not batch and not finish:
            t = q.poll_multi(1, alive_time=0.15)
            if not t:
                left = q.db.run(
                    lambda c: c.execute(sa.text(f"SELECT COUNT(*) FROM {q.table} WHERE state <> 1")).scalar()
                )
                if not left:
                    return
                time.sleep(0.05)
            batch = t


def test_two_workers_taking_over_each_other(queue, db_url, backend):
    if backend == "sqlite":
        pytest.skip("two servers' workers: MariaDB and PostgreSQL")
    queue.submit_many([{"key": f"c{i}", "type": "t"} for i in range(N)])
    workers = [queue_core.open(db_url, queue.table) for _ in range(2)]
    for i, w in enumerate(workers):
        w.owner = f"worker-{i}:{i}"
    told: list = []
    stop_at = time.monotonic() + 12
    try:
        errors = run_together(*(functools.partial(_worker, w, i, told, stop_at) for i, w in enumerate(workers)))
    finally:
        for w in workers:
            w.close()
    assert not errors, errors
    t = queue.store.t
    rows = {r.id: r for r in queue.db.run(lambda c: c.execute(sa.select(t)).all())}
    assert all(r.state == 1 for r in rows.values()), "not drained"
    finished = event_rows(queue, "finished")
    expired = event_rows(queue, "expired")
    by_task: dict[int, list] = {}
    for e in finished:
        by_task.setdefault(e["task_id"], []).append(e)
    assert sorted(by_task) == sorted(rows), "a task without, or an event without a task"
    doubled = {k: v for k, v in by_task.items() if len(v) != 1}
    assert not doubled, doubled
    # the worker told it finished a task is the one its event names, at the attempt it held
    assert sorted(told) == sorted((e["task_id"], e["attempt"], e["owner"]) for e in finished)
    for e in finished:
        r = rows[e["task_id"]]
        assert (e["attempt"], e["owner"], e["at"]) == (r.attempts, r.owner, r.finished_at)
        assert e["ran"] == e["at"] - r.started_at
    ended = {}
    for e in expired:
        ended.setdefault(e["task_id"], []).append(e["attempt"])
    for i, r in rows.items():
        assert sorted(ended.get(i, [])) == list(range(1, r.attempts)), (r.key, ended.get(i), r.attempts)
    attempts = sum(r.attempts for r in rows.values())
    assert attempts > N, "no takeover happened: the test proves nothing"
    end = max(r.finished_at for r in rows.values()) + 3600  # past event_gap_timeout
    assert queue.roll_up_stats(now=end) > 0
    stats = queue.statistics(since=min(r.created_at for r in rows.values()) - 120, until=end, now=end)
    [tally] = stats.totals().values()
    assert (tally.started, tally.succeeded) == (attempts, N)
    for r in list(rows.values())[:: N // 12]:
        h = queue.history(r.key)
        want = ["submitted", *["claimed", "expired"] * (r.attempts - 1), "claimed", "finished"]
        assert [x.kind for x in h] == want, r.key
        assert [x.attempt for x in h if x.kind == "claimed"] == list(range(1, r.attempts + 1))
