"""Maps (dynamic fan-out over a step's result) end to end: real worker processes on SQLite and one
server database (marker one_server)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

import pqflow

sys.path.insert(0, str(Path(__file__).parent))
import flows  # noqa: E402
from procs import finish, run_to_end  # noqa: E402
from test_workflows import drain, executions, kill_workers_until, worker  # noqa: E402

pytestmark = pytest.mark.one_server

FLOWS = str(Path(__file__).with_name("flows.py"))


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "steps.log"


def _intervals(log: Path, run: str) -> list[tuple[float, float]]:
    """(start, end) of every successful bill item of ``run``, from the step log."""
    starts, ends = {}, {}
    for r, step, _pid, kind in (ln.split() for ln in log.read_text().splitlines()):
        if r == run and step.startswith("bill[") and "@" in kind:
            what, at = kind.split("@")
            (starts if what == "start" else ends)[step] = float(at)
    return [(starts[s], ends[s]) for s in ends]


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def test_map_runs_each_item_once_in_item_order_within_max_parallel(wq, log):
    customers = [f"c{i}" for i in range(12)]
    flows.billing.start("m1", {"log": str(log), "customers": customers, "flaky": ["c4"], "item_sleep": 0.05}, queue=wq)
    run_to_end([worker(wq, processors=2) for _ in range(3)])
    run = pqflow.get_run("m1", queue=wq)
    assert run.status == "succeeded", run.statuses
    assert run.steps["report"].result == {"customers": customers, "total": 2 * 10 + 3 * 2}
    counts = executions(log)
    assert counts[("m1", "customers")] == 1 and counts[("m1", "report")] == 1
    assert {i: counts[("m1", f"bill[{i}]")] for i in range(12)} == {i: 2 if i == 4 else 1 for i in range(12)}
    items = run.steps["bill"].items
    assert (items.total, items.succeeded, items.failed, items.running, items.waiting) == (12, 12, 0, 0, 0)
    assert str(items) == "12/12 succeeded"
    listed = run.items("bill")
    assert [i.index for i in listed] == list(range(12)) and {i.status for i in listed} == {"succeeded"}
    assert listed[4].attempts == 2 and listed[5].result == {"customer": "c5", "amount": 2}
    assert _most_at_once(_intervals(log, "m1")) <= 3  # max_parallel across 6 processors
    # one row per item, keyed by run, step and index
    keys = Counter(m.key for m in wq.list() if m.key.startswith("m1#bill#"))
    assert sorted(keys) == sorted(f"m1#bill#{i}" for i in range(12)) and set(keys.values()) == {1}


def test_empty_list_and_non_list(wq, log):
    flows.billing.start("e1", {"log": str(log), "customers": []}, queue=wq)
    flows.billing.start("e2", {"log": str(log), "customers": {"not": "a list"}}, queue=wq)
    drain(wq)
    empty = pqflow.get_run("e1", queue=wq)
    assert empty.status == "succeeded" and empty.statuses["bill"] == "succeeded"
    assert empty.steps["report"].result == {"customers": [], "total": 0}
    bad = pqflow.get_run("e2", queue=wq)
    assert bad.status == "failed" and bad.statuses == {"customers": "succeeded", "bill": "failed", "report": "skipped"}
    assert bad.steps["bill"].error == "step 'customers' returned dict, not a list to map over"


def test_failed_item_fails_the_map_and_retry_reruns_only_failed_items(wq, log, tmp_path):
    flows.billing.start("f1", {"log": str(log), "n": 5, "bad": ["c3"], "fix": str(tmp_path / "fix")}, queue=wq)
    drain(wq)
    run = pqflow.get_run("f1", queue=wq)
    assert run.status == "failed" and run.statuses["bill"] == "failed" and run.statuses["report"] == "skipped"
    assert run.steps["bill"].error == "1 of 5 items failed"
    assert str(run.steps["bill"].items) == "4/5 succeeded, 1 failed"
    item = run.items("bill")[3]
    assert item.status == "failed" and item.attempts == 2 and "c3 cannot be billed" in item.error
    (tmp_path / "fix").write_text("")
    assert run.retry().status == "running"
    drain(wq)
    run = pqflow.get_run("f1", queue=wq)
    assert run.status == "succeeded" and run.steps["report"].result["customers"] == [f"c{i}" for i in range(5)]
    counts = executions(log)
    assert {i: counts[("f1", f"bill[{i}]")] for i in range(5)} == {0: 1, 1: 1, 2: 1, 3: 3, 4: 1}
    assert counts[("f1", "customers")] == 1 and counts[("f1", "report")] == 1


def test_allow_failed_items_and_a_map_over_a_map(wq, log):
    flows.tolerant.start("t1", {"log": str(log)}, queue=wq)
    drain(wq)
    run = pqflow.get_run("t1", queue=wq)
    assert run.status == "succeeded", run.statuses
    assert str(run.steps["invert"].items) == "5/6 succeeded, 1 failed"
    assert run.steps["summary"].result == {
        "invert": [None, 60, 30, 20, 15, 12],
        "double": [None, 120, 60, 40, 30, 24],
        "failed": {"invert": [0]},
    }
    assert sum(n for (r, s), n in executions(log).items() if r == "t1" and s.startswith("double[")) == 6


@pytest.mark.every_database
def test_wide_map_join_submitted_exactly_once_under_racing_workers(wq, log):
    """Many items of many maps finishing at the same moment on different workers: every join once."""
    runs = [f"w{i}" for i in range(8)]
    for r in runs:
        flows.billing.start(r, {"log": str(log), "n": 60}, queue=wq)
    procs = [worker(wq, processors=2) for _ in range(3)]
    for p in procs:
        code, out = finish(p, timeout=180)
        assert code == 0, out[-3000:]
    counts = executions(log)
    for r in runs:
        run = pqflow.get_run(r, queue=wq)
        assert run.status == "succeeded", (r, run.statuses)
        assert counts[(r, "report")] == 1 and len(run.steps["report"].result["customers"]) == 60
        assert all(counts[(r, f"bill[{i}]")] == 1 for i in range(60))


def test_sigkilled_workers_over_maps_and_joins(wq, log):
    runs = [f"k{i}" for i in range(4)]
    for r in runs:
        flows.billing.start(r, {"log": str(log), "n": 30, "item_sleep": 0.01}, queue=wq)
    kill_workers_until(wq, runs, log, random.Random(11), seconds=240, every=(0.4, 1.0))
    for r in runs:
        run = pqflow.get_run(r, queue=wq)
        assert run.status == "succeeded", (r, run.statuses)
        assert str(run.steps["bill"].items) == "30/30 succeeded"
        assert run.steps["report"].result["customers"] == [f"c{i}" for i in range(30)]
    rows = Counter(m.key for m in wq.list() if "#" in m.key)
    assert set(rows.values()) == {1} and len(rows) == len(runs) * (3 + 30)
    assert all(m.status == "finished" and m.outcome == "success" for m in wq.list())


def test_status_shows_a_map_as_one_line_with_counts(wq, log):
    """`pqflow status` shows a map as one line with its counts."""
    flows.billing.start("s1", {"log": str(log), "n": 3}, queue=wq)
    drain(wq)
    from click.testing import CliRunner

    from pqflow.cli import cli

    def pqflow_cli(*args):
        res = CliRunner().invoke(cli, [*args, "-D", wq.config["url"], "--table", wq.table])
        assert res.exit_code == 0, res.output
        return res.output

    line = next(ln for ln in pqflow_cli("status", "s1").splitlines() if ln.startswith("bill"))
    assert "succeeded (3/3 succeeded)" in line
    items = [ln.split() for ln in pqflow_cli("status", "s1", "--items", "bill").splitlines()[1:]]
    assert [(i[0], i[1], i[2], i[3]) for i in items] == [
        ("0", "succeeded", "1", '"c0"'),
        ("1", "succeeded", "1", '"c1"'),
        ("2", "succeeded", "1", '"c2"'),
    ]
    assert pqflow_cli("why", "s1", "bill") == "step 'bill' succeeded; map over customers: 3/3 succeeded\n"
    assert "[map over customers: 3/3 succeeded]" in pqflow_cli("graph", "--run", "s1")
    dot = pqflow_cli("graph", "--run", "s1", "--format", "dot")
    assert "bill\\nsucceeded\\nmap over customers: 3/3 succeeded" in dot
    res = CliRunner().invoke(cli, ["status", "s1", "--items", "report", "-D", wq.config["url"], "--table", wq.table])
    assert res.exit_code == 4 and "'report' is not a map step" in res.output
