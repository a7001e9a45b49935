"""A burst worker with several processors keeps them while a sibling runs a task that may submit
more (a map step submitting its items, a decider its next steps): real worker processes (and
threads) on SQLite and one server database (marker one_server)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pqflow

sys.path.insert(0, str(Path(__file__).parent))
import flows  # noqa: E402
from procs import finish  # noqa: E402
from test_maps import _intervals, _most_at_once  # noqa: E402
from test_workflows import worker  # noqa: E402

pytestmark = pytest.mark.one_server


@pytest.mark.parametrize("processor_type", ["process", "thread"])
def test_a_burst_worker_runs_map_items_on_all_its_processors(wq, tmp_path, processor_type):
    log = tmp_path / "steps.log"
    flows.billing.start("b1", {"log": str(log), "n": 7, "item_sleep": 1.0}, queue=wq)
    code, out = finish(worker(wq, processors=3, processor_type=processor_type, poll_interval=0.2), timeout=180)
    assert code == 0, out[-3000:]
    run = pqflow.get_run("b1", queue=wq)
    assert run.status == "succeeded", run.statuses
    intervals = _intervals(log, "b1")
    assert len(intervals) == 7
    assert _most_at_once(intervals) >= 2, intervals  # the siblings did not end while the map was submitted
