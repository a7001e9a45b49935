"""A rate limit bounds the starts of handlers, not only the leases, with real worker processes on
SQLite, MariaDB and PostgreSQL: prefetch never leases a rate-limited task behind another task of
the batch (it would start when that one is done, next to the following start), and claims that
wait for the queue's lock count their starts at the time they lease. Each handler notes
``time.time()`` as it starts. The bound holds for processes that are not stalled for more than
half their start grace between deciding to start a handler and its first line (docs/queue.md):
25 ms for a one-second window, which a machine running other tests' processes may exceed, so
these tests run one at a time (marker ``timing``)."""

from __future__ import annotations

from collections import Counter

import pytest
from procs import finish, start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timing]

#: clock resolution: the handlers' clock against the one the claims stamp (the server's, read by
#: each process through its own round trip, on MariaDB and PostgreSQL on this very host)
SLACK = 0.002


def handler_starts(path) -> list[float]:
    if not path.exists():
        return []
    return sorted(float(line.split()[1]) for line in path.read_text().splitlines())


def most_in_a_window(starts: list[float], window: float) -> int:
    """The most starts any half-open window ``[s, s + window - SLACK)`` holds."""
    return max(sum(1 for s in starts[i:] if s < first + window - SLACK) for i, first in enumerate(starts))


def stop(workers) -> None:
    for w in workers:
        w.terminate()
    for w in workers:
        finish(w)


def test_prefetch_never_leases_a_rate_limited_task_behind_another_queues_task(queue, tmp_path):
    """``--queues slow,api`` with prefetch 2, api limited to 1 start per 3 s: each batch would hold
    a slow task and then an api task, counted as started at the claim, run 1 s later."""
    starts, slow_log = tmp_path / "api.starts", tmp_path / "slow.starts"
    queue.limit("api", rate="1/3s")
    queue.submit_many(
        [
            {"key": f"s{i}", "type": "stamped", "queue": "slow", "data": {"starts": str(slow_log), "sleep": 1.0}}
            for i in range(8)
        ]
    )
    queue.submit_many(
        [{"key": f"a{i}", "type": "stamped", "queue": "api", "data": {"starts": str(starts)}} for i in range(3)]
    )
    workers = [
        start_worker(
            queue.config["url"],
            queue.table,
            target="stamped",
            processors=2,
            queues="slow,api",
            task_prefetch=2,
            poll_interval=0.05,
        )
        for _ in range(2)
    ]
    try:
        wait_for(
            lambda: len(handler_starts(starts)) >= 3 and len(handler_starts(slow_log)) >= 8,
            timeout=120,
            what="the api and slow tasks",
        )
    finally:
        stop(workers)
    api = handler_starts(starts)
    assert len(api) == 3
    gaps = [b - a for a, b in zip(api, api[1:], strict=False)]
    assert most_in_a_window(api, 3.0) == 1, f"api handler starts {gaps} s apart (1 per 3 s)"


@pytest.mark.parametrize("round_", [1, 2])
def test_a_rate_limit_bounds_claims_and_handler_starts_across_racing_workers(queue, tmp_path, round_):
    """60 tasks, at most 10 starts in any second, 4 worker processes of 2 processors racing for
    the queue's lock, prefetch 1: no window of a second holds more than 10 starts, neither by the
    start each claim stamped (the database's clock on MariaDB and PostgreSQL) nor by the time each
    handler began; every task runs once, and the limit is used (about 6 s)."""
    starts = tmp_path / "api.starts"
    queue.limit("api", rate="10/s")
    queue.submit_many(
        [{"key": f"r{i}", "type": "stamped", "queue": "api", "data": {"starts": str(starts)}} for i in range(60)]
    )
    workers = [
        start_worker(
            queue.config["url"],
            queue.table,
            target="stamped",
            processors=2,
            queues="api",
            task_prefetch=1,
            poll_interval=0.05,
        )
        for _ in range(4)
    ]
    try:
        wait_for(lambda: len(handler_starts(starts)) >= 60, timeout=120, what="the 60 tasks")
    finally:
        stop(workers)
    keys = Counter(line.split()[0] for line in starts.read_text().splitlines())
    assert keys == Counter(f"r{i}" for i in range(60))
    claimed = sorted(m.started_at for m in queue.list(queue="api"))
    assert len(claimed) == 60
    assert most_in_a_window(claimed, 1.0 + SLACK) == 10, claimed  # reached, never passed
    assert claimed[-1] - claimed[0] >= 5.0  # 60 starts at 10 a second take at least 5 s
    began = handler_starts(starts)
    assert most_in_a_window(began, 1.0) == 10, began
