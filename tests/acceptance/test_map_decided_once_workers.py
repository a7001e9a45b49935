"""A map step fired by the first of its parents (trigger one_success) starts once, whatever the
order in which its parents' completions commit on real worker processes, and its run does not
end while its items run: SQLite and one server database (marker one_server)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pqflow

sys.path.insert(0, str(Path(__file__).parent))
import flows  # noqa: E402
from procs import run_to_end, wait_for  # noqa: E402
from test_workflows import executions, worker  # noqa: E402

pytestmark = pytest.mark.one_server

# The parents of a run wait for each other (and an item for the test): each processor leases one
# task at a time (batch_size=1), or one that had run quick decisions would lease both parents of a
# run in one batch and run them one after the other, each waiting out the other's minute.


def _parents_ended(wq, run_id: str) -> bool:
    statuses = pqflow.get_run(run_id, queue=wq).statuses
    return statuses["rows"] == "succeeded" and statuses["side"] == "succeeded"


def _check_open_then_release(wq, tmp_path, runs: list[str], procs) -> None:
    """Once both parents of each run ended: the map runs, its run too; then let the items end."""
    try:
        for r in runs:
            wait_for(lambda r=r: _parents_ended(wq, r), timeout=120, what=f"both parents of {r} ended")
        for r in runs:
            run = pqflow.get_run(r, queue=wq)
            assert run.status == "running", (r, run.status, run.statuses, run.steps["each_row"].error)
            assert run.statuses["each_row"] in ("waiting", "running"), (r, run.statuses)
            assert run.steps["each_row"].items.total == 4
    finally:
        for r in runs:
            (tmp_path / f"{r}.release").write_text("")
        run_to_end(procs, timeout=180)


def _check_succeeded(wq, log: Path, runs: list[str]) -> None:
    counts = executions(log)
    for r in runs:
        run = pqflow.get_run(r, queue=wq)
        assert run.status == "succeeded", (r, run.statuses, run.steps["each_row"].error)
        assert run.steps["rows_total"].result == 100
        assert [counts[(r, f"each_row[{i}]")] for i in range(4)] == [1, 1, 1, 1]
        assert counts[(r, "rows_total")] == 1


def test_a_parent_ending_after_the_map_started_on_another_worker(wq, tmp_path):
    log = tmp_path / "steps.log"
    flows.late_parent.start("lp", {"log": str(log), "dir": str(tmp_path), "side_after_map": True}, queue=wq)
    procs = [worker(wq, processors=1, batch_size=1) for _ in range(2)]
    _check_open_then_release(wq, tmp_path, ["lp"], procs)
    _check_succeeded(wq, log, ["lp"])


@pytest.mark.every_database
def test_both_parents_ending_together_on_two_workers(wq, tmp_path):
    log = tmp_path / "steps.log"
    runs = [f"tg{i}" for i in range(3)]
    for r in runs:
        flows.late_parent.start(r, {"log": str(log), "dir": str(tmp_path)}, queue=wq)
    procs = [worker(wq, processors=2, batch_size=1) for _ in range(3)]  # every parent runs at once
    _check_open_then_release(wq, tmp_path, runs, procs)
    _check_succeeded(wq, log, runs)
