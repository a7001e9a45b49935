"""Real worker processes draining a backlog write one ``finished`` event per task, each exactly
what an INSERT ... SELECT of its row writes, whichever way the settle wrote it (on MySQL/MariaDB
from what the worker held of the claim: ``store/settles.py``)."""

from __future__ import annotations

import pytest
from event_checks import assert_like_reference, event_rows, reference_rows
from procs import run_to_end, runs, start_worker

pytestmark = pytest.mark.slow


def test_real_workers_write_each_finish_once_as_the_rows_say(queue, tmp_path):
    log = tmp_path / "runs.log"
    queue.submit_many([{"key": f"w{i}", "type": "plain", "data": {"log": str(log)}} for i in range(300)])
    workers = [start_worker(queue.config["url"], queue.table, burst=True, processors=2) for _ in range(2)]
    run_to_end(workers, timeout=120)
    assert sorted(k for k, _ in runs(log)) == sorted(f"w{i}" for i in range(300))
    rows = event_rows(queue, "finished")
    assert sorted(r["key"] for r in rows) == sorted(f"w{i}" for i in range(300))
    for at in sorted({r["at"] for r in rows}):
        batch = sorted((r for r in rows if r["at"] == at), key=lambda r: r["task_id"])
        assert_like_reference(batch, reference_rows(queue, "finished", [r["task_id"] for r in batch], at))
