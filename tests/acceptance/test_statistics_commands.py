"""Statistics from the command line and from real worker processes: ``perfectqueue stats --since``
prints what ran per queue and type (on SQLite and one server database), and workers roll the
events up while they run, with many processes racing to do it (on all three)."""

from __future__ import annotations

import pytest
from procs import finish, start_worker, wait_for
from test_perfectqueue_cli import assert_error, pq, ready  # noqa: F401 - pq, ready: the fixtures

pytestmark = pytest.mark.one_server

#: a horizon short enough for tests in real time (event_gap_timeout, the roll-up's horizon)
FAST = {"PQ_EVENT_GAP_TIMEOUT": "0.001"}


def test_stats_since_prints_counts_and_times_per_queue_and_type(ready):  # noqa: F811
    pq = ready  # noqa: F811
    with pq.queue() as q:
        for i in range(3):
            q.submit(f"b{i}", "invoice", queue="billing")
        q.submit("r", "report")
        for t in q.poll_multi(3, queues="billing"):
            t.finish()
        q.poll().fail(ValueError("x"))
    text = pq.ok("stats", "--since", "1h", env=FAST)
    lines = text.splitlines()
    assert lines[0].startswith("since ")
    assert lines[1].split()[:7] == ["queue", "type", "started", "succeeded", "failed", "cancelled", "retried"]
    rows = {tuple(line.split()[:2]): line.split()[2:7] for line in lines[2:]}
    assert rows == {("billing", "invoice"): ["3", "3", "0", "0", "0"], ("default", "report"): ["1", "0", "1", "0", "0"]}
    doc = pq.json("stats", "--since", "1h", "--queue", "billing", "--type", "invoice")
    [total] = doc["totals"]
    assert (total["started"], total["wait"]["count"], total["run"]["count"]) == (3, 3, 3)
    assert doc["span"] == 60 and all(b["queue"] == "billing" for b in doc["buckets"])


def test_stats_inputs_are_one_line_errors(ready):  # noqa: F811
    pq = ready  # noqa: F811
    assert_error(pq("stats", "--since", "yesterday"), 1, "--since")
    assert_error(pq("stats", "--type", "t"), 2, "--since")
    assert_error(pq("stats", "--since", "1h", "--type", "x" * 300), 1, "task type")


@pytest.mark.every_database
@pytest.mark.slow
def test_workers_roll_up_the_statistics_while_they_run(wq, tmp_path):
    """Three worker processes of two processors each roll up concurrently: every start and
    every outcome is counted once."""
    n = 60
    wq.submit_many(
        [{"key": f"k{i}", "type": "handler", "data": {"fail": i % 4 == 0}, "max_attempts": 1} for i in range(n)]
    )
    workers = [
        start_worker(wq.config["url"], wq.table, processors=2, stats_interval=0.05, event_gap_timeout=0.05)
        for _ in range(3)
    ]
    try:

        def counted():
            totals = wq.statistics(since=0, roll_up=False).totals()
            tally = totals.get(("default", "handler"))
            return tally if tally is not None and tally.succeeded + tally.failed == n else None

        tally = wait_for(counted, timeout=60, what="the workers to roll up every outcome")
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            finish(w, timeout=60)
    assert (tally.started, tally.succeeded, tally.failed, tally.retried) == (n, 45, 15, 0)
    assert tally.run.count == n and tally.wait.count == n
