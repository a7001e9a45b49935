"""A rate-limited task whose handler class's ``prefetch`` (code run for the whole batch before its
first handler: pqflow's Decider reads the steps' inputs there) takes longer than the base start
grace (``policy.RATE_START_GRACE``, 0.25 s) still runs: a give-back costs the limit no start, and
the next claim's grace covers the measured prefetch; a short window's grace has a floor that a
claim's COMMIT fits in. Real worker processes."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from procs import finish, start_worker, wait_for  # noqa: E402

HANDLERS = str(Path(__file__).with_name("slow_prefetch_handlers.py"))


def test_a_rate_limited_task_behind_a_slow_prefetch_still_runs(wq, tmp_path):
    log = tmp_path / "runs.log"
    wq.limit("api", rate="10/10s")  # a grace of 0.25 s; the window has room for 10 starts
    wq.submit("a", "stamped", {"log": str(log)}, queue="api")
    proc = start_worker(
        wq.config["url"], wq.table, target="SlowPrefetch", _file=HANDLERS, queues="api", processors=1, task_prefetch=1
    )
    try:
        try:
            wait_for(lambda: wq["a"].metadata().status == "finished", timeout=20, what="task a's end")
        except AssertionError:
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        code, out = finish(proc, timeout=60)
    given_back = out.count("not started by its rate limit's start time")
    assert wq["a"].metadata().outcome == "success", f"given back unrun {given_back} times; {out[-1500:]}"


def test_a_short_window_rate_limited_queue_runs_its_tasks(wq, tmp_path):
    """``10/0.1s`` (a valid rate: 100 starts a second in bursts of 10) gives a start grace of 5 ms
    (a twentieth of the window): the time from the claim's stamp to the handler (the rest of the
    claim's transaction, its COMMIT, the batch's set-up) is longer, every task is given back."""
    log = tmp_path / "runs.log"
    wq.limit("api", rate="10/0.1s")
    wq.submit_many([{"key": f"r{i}", "type": "stamped", "queue": "api", "data": {"log": str(log)}} for i in range(5)])
    proc = start_worker(wq.config["url"], wq.table, target="Plain", _file=HANDLERS, queues="api", processors=1)
    try:
        try:
            wait_for(lambda: all(t.status == "finished" for t in wq.list()), timeout=20, what="the tasks' end")
        except AssertionError:
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        code, out = finish(proc, timeout=60)
    given_back = out.count("not started by its rate limit's start time")
    done = [t.key for t in wq.list() if t.status == "finished"]
    assert len(done) == 5, f"{len(done)} of 5 ran; given back unrun {given_back} times"
