"""Workers lease only the task types their target serves: a ``perfectqueue run`` worker and a
``pqflow run`` worker sharing one table, as real processes of the installed commands."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from procs import runs, wait_for

import pqflow
import queue_core

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from cli_support import clean_env  # noqa: E402,F401

pytestmark = pytest.mark.one_server

BIN = Path(sys.executable).parent
HANDLERS = str(HERE / "handlers.py")
STEPS = ["extract", "transform", "audit", "load", "cleanup"]


def start(command: str, target: str, queue, log: Path, *extra: str) -> subprocess.Popen:
    """``<command> run TARGET`` on the queue's table until stopped; its log goes to ``log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                str(BIN / command),
                "run",
                target,
                "-I",
                str(HERE),
                "-D",
                queue.config["url"],
                "--table",
                queue.table,
                "--poll-interval",
                "0.1",
                "--processors",
                "2",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen, log: Path) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("worker did not stop:\n" + log.read_text()[-3000:]) from None
    text = log.read_text()
    assert code == 0, text[-3000:]
    return text


def processor_pids(log_text: str) -> set[int]:
    return {int(pid) for pid in re.findall(r"processor \d+ running pid=(\d+)", log_text)}


def owner_pid(meta: queue_core.TaskMetadata) -> int | None:
    return int(meta.owner.rsplit(":", 1)[1]) if meta.owner else None


def submit_wave(q, wave: int, logs: dict[str, Path]) -> tuple[list[str], list[str]]:
    """Invoices (one attempt each, at a better priority than the runs) and runs of cli_etl."""
    invoices = [f"invoice-{wave}-{i}" for i in range(12)]
    q.submit_many(
        [
            {"key": k, "type": "invoice", "data": {"log": str(logs["invoices"])}, "max_attempts": 1, "priority": 5}
            for k in invoices
        ]
    )
    run_ids = [f"run-{wave}-{i}" for i in range(3)]
    for run_id in run_ids:  # submitted as plain tasks, as `perfectqueue submit RUN cli_etl` would
        q.submit(run_id, "cli_etl", {"log": str(logs["steps"])})
    return invoices, run_ids


def runs_succeeded(q, run_ids) -> bool:
    return all(pqflow.get_run(r, queue=q).status == "succeeded" for r in run_ids)


def invoices_finished(q, keys) -> bool:
    return all(q[k].metadata().finished for k in keys)


def test_a_perfectqueue_worker_and_a_pqflow_worker_each_take_only_their_types(wq, tmp_path):
    logs = {name: tmp_path / f"{name}.log" for name in ("invoices", "steps", "pq_worker", "flow_worker")}
    invoices, run_ids = submit_wave(wq, 0, logs)
    flow = start("pqflow", "flows_cli:EtlOnly", wq, logs["flow_worker"])
    pq = None
    try:
        # Alone with due invoices of a better priority, the pqflow worker runs the workflows only.
        wait_for(lambda: runs_succeeded(wq, run_ids), timeout=90, what="the first runs")
        for key in invoices:
            m = wq[key].metadata()
            assert (m.status, m.attempts, m.error, m.owner) == ("waiting", 0, None, None), m
        # Both at once, with a second wave submitted while they run.
        pq = start("perfectqueue", f"{HANDLERS}:Invoices", wq, logs["pq_worker"])
        more_invoices, more_runs = submit_wave(wq, 1, logs)
        invoices, run_ids = invoices + more_invoices, run_ids + more_runs
        wait_for(
            lambda: invoices_finished(wq, invoices) and runs_succeeded(wq, run_ids),
            timeout=90,
            what="every invoice and every run",
        )
    finally:
        flow_log = stop(flow, logs["flow_worker"])
        pq_log = stop(pq, logs["pq_worker"]) if pq is not None else ""

    pq_pids, flow_pids = processor_pids(pq_log), processor_pids(flow_log)
    assert pq_pids and flow_pids and not pq_pids & flow_pids
    for key in invoices:  # each ran once, by the invoice worker, and succeeded at its one attempt
        m = wq[key].metadata()
        assert (m.outcome, m.attempts, m.error) == ("success", 1, None), m
        assert owner_pid(m) in pq_pids
    assert Counter(k for k, _ in runs(logs["invoices"])) == dict.fromkeys(invoices, 1)
    assert {pid for _, pid in runs(logs["invoices"])} <= pq_pids
    for run_id in run_ids:  # every step ran once, by the pqflow worker, without an error
        run = pqflow.get_run(run_id, queue=wq)
        assert run.statuses == dict.fromkeys(STEPS, "succeeded"), run
        assert all(s.attempts == 1 and s.error is None for s in run.steps.values()), run
    steps = [m for m in wq.list() if m.type.startswith("cli_etl")]
    assert len(steps) == len(run_ids) * (1 + len(STEPS))
    assert all(m.error is None and (m.owner is None or owner_pid(m) in flow_pids) for m in steps)
    assert Counter(logs["steps"].read_text().split("\n")[:-1]) == {f"{r} {s}": 1 for r in run_ids for s in STEPS}
    # Each worker said what it serves, and never touched the other's tasks.
    assert "serving 1 task type: invoice" in pq_log
    assert "serving 6 task types: cli_etl, cli_etl.audit, cli_etl.cleanup, cli_etl.extract" in flow_log
    assert "invoice" not in flow_log
    assert "cli_etl" not in pq_log


def test_a_catch_all_function_worker_still_takes_every_type(wq, tmp_path):
    log, worker_log = tmp_path / "runs.log", tmp_path / "worker.log"
    types = ["invoice", "cli_etl.extract", "email", "anything else"]
    wq.submit_many(
        [
            {"key": f"k{i}", "type": types[i % 4], "data": {"log": str(log)}, "max_attempts": 1, "priority": i % 3}
            for i in range(20)
        ]
    )
    proc = start("perfectqueue", f"{HANDLERS}:plain", wq, worker_log, "--burst")
    try:
        assert proc.wait(timeout=60) == 0, worker_log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = worker_log.read_text()
    assert "serving every task type (catch-all target)" in text
    assert Counter(k for k, _ in runs(log)) == {f"k{i}": 1 for i in range(20)}
    assert {pid for _, pid in runs(log)} <= processor_pids(text)
    assert all((m.outcome, m.attempts, m.error) == ("success", 1, None) for m in wq.list())


@pytest.mark.parametrize("command, target", [("perfectqueue", f"{HANDLERS}:Worker"), ("pqflow", "flows_cli:Decider")])
def test_the_served_types_are_logged_once_at_start(wq, tmp_path, command, target):
    log = tmp_path / "worker.log"
    proc = start(command, target, wq, log, "--burst")
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    lines = [ln for ln in log.read_text().splitlines() if " serving " in ln]
    assert len(lines) == 1, lines
    expected = (
        "every task type (catch-all target)"
        if command == "perfectqueue"
        else "8 task types: cli_etl, cli_etl.audit, cli_etl.cleanup, cli_etl.extract"
    )
    assert expected in lines[0]
