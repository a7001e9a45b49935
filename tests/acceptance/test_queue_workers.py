"""Named queues with real worker processes on SQLite, MariaDB and PostgreSQL: a concurrency limit
holds across many racing processes, a paused queue hands out nothing to any of them while the
others' work goes on, and nothing is lost or doubled."""

from __future__ import annotations

from collections import Counter

import pytest
from procs import finish, run_to_end, runs, start_worker, wait_for

import queue_core

pytestmark = pytest.mark.slow


def stop(workers) -> None:
    for w in workers:
        w.terminate()
    for w in workers:
        finish(w)


def most_at_once(counter) -> int:
    return int(counter.read_text().split()[1])


@pytest.mark.parametrize("round_", [1, 2])
def test_a_concurrency_limit_is_never_exceeded_by_racing_workers(queue, tmp_path, round_):
    log, counter = tmp_path / "runs.log", tmp_path / "counter"
    queue.limit("api", concurrency=3)
    queue.submit_many(
        [
            {
                "key": f"c{i}",
                "type": "concurrent",
                "queue": "api",
                "data": {"log": str(log), "counter": str(counter), "sleep": 0.05},
            }
            for i in range(60)
        ]
    )
    queue.submit_many([{"key": f"d{i}", "type": "plain", "data": {"log": str(log)}} for i in range(20)])
    workers = [
        start_worker(
            queue.config["url"], queue.table, burst=True, processors=3, queues="api,default", wake_interval=0.01
        )
        for _ in range(4)
    ]
    run_to_end(workers, timeout=120)
    done = Counter(key for key, _ in runs(log, "done"))
    ran = Counter(key for key, _ in runs(log))
    assert set(done) == {f"c{i}" for i in range(60)} and max(done.values()) == 1  # none lost, none doubled
    assert set(ran) == set(done) | {f"d{i}" for i in range(20)} and max(ran.values()) == 1
    assert most_at_once(counter) == 3  # the cap reached, never passed (12 processors raced for it)


def test_a_paused_queue_gives_nothing_to_any_worker_until_resumed(queue, tmp_path):
    log = tmp_path / "runs.log"
    queue.submit("b0", "plain", {"log": str(log)}, queue="billing")
    queue.pause("billing")
    queue.submit_many(
        [{"key": f"b{i}", "type": "plain", "queue": "billing", "data": {"log": str(log)}} for i in range(1, 10)]
    )
    workers = [
        start_worker(queue.config["url"], queue.table, processors=2, queues="billing,default", wake_interval=0.01)
        for _ in range(2)
    ]
    try:
        # the default queue's work goes on meanwhile: 30 tasks done, over many claims of every worker
        for i in range(30):
            queue.submit(f"d{i}", "plain", {"log": str(log)})
        wait_for(lambda: len(runs(log)) >= 30, timeout=60, what="the default queue's tasks")
        assert not [k for k, _ in runs(log) if k.startswith("b")]
        assert {i.name: i.waiting for i in queue.queues()}["billing"] == 10
        queue.resume("billing")
        wait_for(lambda: len(runs(log)) >= 40, timeout=60, what="the billing tasks after resume")
    finally:
        stop(workers)
    assert Counter(k for k, _ in runs(log)) == Counter([f"b{i}" for i in range(10)] + [f"d{i}" for i in range(30)])


def test_pausing_a_queue_lets_its_running_tasks_finish(queue, tmp_path):
    log = tmp_path / "runs.log"
    queue.submit("slow", "handler", {"log": str(log), "sleep": 1.5}, queue="billing")
    queue.submit("next", "handler", {"log": str(log)}, queue="billing")
    worker = start_worker(queue.config["url"], queue.table, processors=1, queues="billing,default", wake_interval=0.01)
    try:
        wait_for(lambda: runs(log), timeout=30, what="the slow task to start")
        queue.pause("billing")
        wait_for(lambda: queue["slow"].metadata().outcome == "success", timeout=30, what="the slow task's success")
        queue.submit("probe", "handler", {"log": str(log)})  # claimed after the pause, billing first
        wait_for(lambda: len(runs(log, "done")) == 2, timeout=30, what="the probe")
    finally:
        worker.terminate()
        finish(worker)
    assert [k for k, _ in runs(log)] == ["slow", "probe"]
    assert queue["next"].metadata().status == "waiting"


def test_the_worker_logs_the_queues_it_serves(queue, tmp_path):
    worker = start_worker(queue.config["url"], queue.table, burst=True, queues="critical=5,default=1")
    code, out = finish(worker)
    assert code == 0 and "from queues critical=5,default=1" in out, out[-2000:]


def test_a_bad_queue_list_stops_the_worker_at_start(queue):
    with pytest.raises(queue_core.ConfigError, match="names a queue twice"):
        queue_core.config.build({"queues": "a,a"})


def test_a_burst_worker_waits_out_a_rate_limit_instead_of_leaving_tasks_behind(queue, tmp_path):
    """--burst ends when nothing is due; tasks a rate limit holds back are due, so it waits for
    the window (as long as it takes, not a poll interval) and ends with all of them done."""
    log = tmp_path / "runs.log"
    queue.limit("api", rate="5/s")
    queue.submit_many([{"key": f"r{i}", "type": "plain", "queue": "api", "data": {"log": str(log)}} for i in range(12)])
    worker = start_worker(queue.config["url"], queue.table, burst=True, processors=1, queues="api", poll_interval=30)
    code, out = finish(worker, timeout=60)
    assert code == 0, out[-2000:]
    assert Counter(k for k, _ in runs(log)) == Counter(f"r{i}" for i in range(12))
    starts = sorted(m.started_at for m in queue.list(queue="api"))
    assert 2.0 <= starts[-1] - starts[0] < 10  # 12 starts at 5 a second: a little over 2 s, never a 30 s poll
