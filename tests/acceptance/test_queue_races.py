"""Real processes: the concurrency cap with fair-share (user) tasks and workers serving the queue
through different lists; and `move` racing real workers (with real processes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import sqlalchemy as sa
from procs import ROOT, finish, run_to_end, runs, start_worker  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_cap_holds_for_user_tasks_claimed_through_different_queue_lists(queue, tmp_path):
    log, counter = tmp_path / "runs.log", tmp_path / "counter"
    queue.limit("api", concurrency=2)
    queue.submit_many(
        [
            {
                "key": f"c{i}",
                "type": "concurrent",
                "queue": "api",
                "user": f"u{i % 5}",
                "data": {"log": str(log), "counter": str(counter), "sleep": 0.03},
            }
            for i in range(60)
        ]
    )
    queue.submit_many([{"key": f"x{i}", "type": "plain", "queue": "x", "data": {"log": str(log)}} for i in range(20)])
    lists = ["api", "x,api", "x=1,api=5", "api=1,x=1", "api", "x,api"]
    workers = [
        start_worker(queue.config["url"], queue.table, burst=True, processors=3, queues=qs, wake_interval=0.01)
        for qs in lists
    ]
    run_to_end(workers, timeout=180)
    done = Counter(key for key, _ in runs(log, "done"))
    assert set(done) == {f"c{i}" for i in range(60)} and max(done.values()) == 1
    assert int(counter.read_text().split()[1]) <= 2  # never passed


MOVER = textwrap.dedent("""
    import random, sys, time
    import queue_core
    url, table, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    q = queue_core.open(url, table)
    deadline = time.time() + 25
    moved = 0
    while time.time() < deadline:
        rows = q.store.task_list(status="waiting", queue="a", limit=3, now=q.now(None), with_data=False)
        if not rows:
            break
        for r in rows:
            try:
                q.move(r["key"], "p")
                moved += 1
            except Exception:
                pass
    print("mover moved", moved, flush=True)
    print("mover done", flush=True)
""")


def test_workers_serving_a_never_run_a_task_moved_to_a_paused_queue(queue, tmp_path, backend):
    if backend == "sqlite":
        pytest.skip("SQLite serialises writers: the race window does not exist there")
    log = tmp_path / "runs.log"
    n = 1500
    queue.submit("p-seed", "plain", {}, queue="p")
    queue.pause("p")
    queue.submit_many(
        [
            {
                "key": f"t{i}",
                "type": "plain",
                "queue": "a",
                "user": f"u{i % 7}",
                "max_running": 1000,
                "data": {"log": str(log)},
            }
            for i in range(n)
        ]
    )
    workers = [
        start_worker(
            queue.config["url"],
            queue.table,
            burst=True,
            processors=2,
            queues="a",
            wake_interval=0.01,
            poll_interval=0.01,
        )
        for _ in range(4)
    ]
    from procs import wait_for

    wait_for(lambda: log.exists() and len(runs(log)) >= 20, timeout=60, what="first runs")
    mover = subprocess.Popen(
        [sys.executable, "-c", MOVER, queue.config["url"], queue.table, str(n)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        mover_out, _ = mover.communicate(timeout=60)
        assert "mover moved" in mover_out, mover_out[-2000:]
        for w in workers:
            code, out = finish(w, timeout=120)
            assert code == 0, out[-3000:]
    finally:
        for p in [*workers, mover]:
            if p.poll() is None:
                p.kill()
    t = queue.store.t
    ran_in_p = queue.db.run(
        lambda c: c.execute(sa.select(t.c.key).where(t.c.queue == "p", t.c.started_at.is_not(None))).all(), write=False
    )
    assert ran_in_p == [], (
        f"{mover_out.strip()}; ran {len(runs(log))}; {len(ran_in_p)} tasks of the paused queue p "
        f"were leased: {ran_in_p[:10]}"
    )
