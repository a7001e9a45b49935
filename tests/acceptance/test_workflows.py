"""pqflow end to end: real worker processes on SQLite and one server database (marker one_server)."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import pqflow

sys.path.insert(0, str(Path(__file__).parent))
import flows  # noqa: E402
from procs import finish, start_worker, wait_for  # noqa: E402

pytestmark = pytest.mark.one_server

FLOWS = str(Path(__file__).with_name("flows.py"))


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "steps.log"


def worker(q, *, burst=True, **kw):
    return start_worker(q.config["url"], q.table, target="Decider", burst=burst, _file=FLOWS, **kw)


def executions(log: Path, what="run") -> Counter:
    if not log.exists():
        return Counter()
    return Counter((r, s) for r, s, _pid, kind in (ln.split() for ln in log.read_text().splitlines()) if kind == what)


def kill_workers_until(wq, runs, log: Path, rng, *, seconds: float, every: tuple[float, float] = (0.2, 0.6)) -> None:
    """Two workers serve ``runs``; one of them is SIGKILLed (and replaced) every ``every`` seconds
    (uniformly drawn) until every run succeeded or ``seconds`` passed.

    A kill waits until some step ran since the previous one (``log`` grew): on a loaded machine
    a worker's start-up can outlast the interval, and kills that land only on starting workers
    would stop all progress without testing anything."""
    procs = [worker(wq, burst=False, alive_time=1.5, task_heartbeat_interval=0.3) for _ in range(2)]
    deadline = time.monotonic() + seconds
    seen = 0
    try:
        while time.monotonic() < deadline:
            if all(pqflow.get_run(r, queue=wq).status == "succeeded" for r in runs):
                break
            time.sleep(rng.uniform(*every))
            ran = log.stat().st_size if log.exists() else 0
            if ran == seen:
                continue
            seen = ran
            victim = rng.randrange(len(procs))
            os.killpg(procs[victim].pid, signal.SIGKILL)
            finish(procs[victim])
            procs[victim] = worker(wq, burst=False, alive_time=1.5, task_heartbeat_interval=0.3)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            finish(p)


def drain(q, timeout=120, **kw):
    code, out = finish(worker(q, **kw), timeout=timeout)
    assert code == 0, out[-3000:]
    return out


def test_diamond_and_wide_fan_in(wq, log):
    for i in range(4):
        flows.diamond.start(f"d{i}", {"log": str(log)}, queue=wq)
    for i in range(2):
        flows.wide.start(f"w{i}", {"log": str(log)}, queue=wq)
    drain(wq, processors=2)
    for i in range(4):
        run = pqflow.get_run(f"d{i}", queue=wq)
        assert run.status == "succeeded", run
        assert {n: s.status for n, s in run.steps.items()} == dict.fromkeys(
            ["a", "b", "c", "d", "cleanup"], "succeeded"
        )
        assert run.steps["d"].result == 6
    for i in range(2):
        run = pqflow.get_run(f"w{i}", queue=wq)
        assert run.status == "succeeded"
        assert run.steps["join"].result == sum(10 + k for k in range(flows.WIDE_N))
    counts = executions(log)
    assert set(counts.values()) == {1}  # no kills: every step ran exactly once
    assert len(counts) == 4 * 5 + 2 * (flows.WIDE_N + 2)


def test_failure_skips_dependents_runs_all_done_and_hooks(wq, log):
    flows.diamond.start("f1", {"log": str(log), "fail_b": True}, queue=wq)
    drain(wq)
    run = pqflow.get_run("f1", queue=wq)
    assert run.status == "failed"
    st = run.statuses
    assert (st["a"], st["b"], st["c"], st["d"], st["cleanup"]) == (
        "succeeded",
        "failed",
        "succeeded",
        "skipped",
        "succeeded",
    )
    assert "b failed on purpose" in run.steps["b"].error
    assert "b (failed)" in run.why("d")
    assert executions(log, "hook_failed") == Counter({("f1", "b"): 1})
    assert executions(log, "hook_finished") == Counter({("f1", "failed"): 1})
    # retry the run once the cause is fixed: failed and skipped steps run, succeeded ones keep results
    fix = log.parent / "fix"
    fix.write_text("")
    # the run input is fixed at start; the marker path was not in it, so use the file the step checks:
    wq.transaction(lambda tx: tx.update_data("f1", _with_fix(tx.get("f1").data, str(fix))))
    run = run.retry()
    assert run.status == "running"
    drain(wq)
    run = pqflow.get_run("f1", queue=wq)
    assert run.status == "succeeded" and run.steps["d"].result == 6
    counts = executions(log)
    assert counts[("f1", "a")] == 1 and counts[("f1", "c")] == 1  # kept, not re-run
    assert counts[("f1", "b")] == 2 and counts[("f1", "d")] == 1
    assert counts[("f1", "cleanup")] == 1  # it succeeded the first time: kept like every succeeded step


def _with_fix(data, path):
    return {**data, "fix": path}  # the run row's data is the run's input


def test_step_retries_do_not_retrigger_downstream(wq, log):
    flows.retrying.start("r1", {"log": str(log)}, queue=wq)
    drain(wq)
    run = pqflow.get_run("r1", queue=wq)
    assert run.status == "succeeded"
    assert run.steps["flaky"].attempts == 3 and run.steps["flaky"].result == 3
    assert executions(log)[("r1", "after_flaky")] == 1
    assert run.steps["after_flaky"].result == 3


def test_cancel_running_run_then_retry(wq, log):
    fast = log.parent / "fast"
    flows.slow.start("c1", {"log": str(log), "fast": str(fast)}, queue=wq)
    p = worker(wq, burst=False, task_heartbeat_interval=0.2)
    try:
        wait_for(lambda: executions(log)[("c1", "long")] == 1, what="long step started")
        run = pqflow.get_run("c1", queue=wq).cancel()
        assert run.cancel_requested
        wait_for(lambda: pqflow.get_run("c1", queue=wq).status == "cancelled", timeout=20, what="cancelled")
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)
    run = pqflow.get_run("c1", queue=wq)
    assert run.statuses == {"long": "cancelled", "after_long": "skipped"}
    assert executions(log, "cancelled")[("c1", "long")] == 1
    fast.write_text("")
    run.retry()
    drain(wq)
    run = pqflow.get_run("c1", queue=wq)
    assert run.status == "succeeded" and run.steps["after_long"].result == "long done"


@pytest.mark.parametrize("how", ["start", "submit"])
def test_cancel_before_any_step_ran(wq, log, how):
    if how == "start":  # the run's rows exist at once, its root step waiting
        flows.diamond.start("c2", {"log": str(log)}, queue=wq)
    else:  # a plain task of the workflow's type: the decider takes it up as a run
        wq.submit("c2", "e2e_diamond", {"log": str(log)})
        t = wq.poll()
        assert t.key == "c2"
        flows.Decider(t).run()
        assert wq["c2"].metadata().data == {"log": str(log)}  # the run's data stays the user's input
    assert pqflow.get_run("c2", queue=wq).statuses["a"] == "waiting"
    pqflow.get_run("c2", queue=wq).cancel()
    drain(wq)
    run = pqflow.get_run("c2", queue=wq)
    assert run.status == "cancelled"
    assert run.statuses["a"] == "cancelled" and run.statuses["d"] == "skipped"
    assert executions(log) == Counter()


@pytest.mark.every_database
def test_simultaneous_parents_join_exactly_once(wq, log):
    n = 30
    for i in range(n):
        flows.race.start(f"j{i}", {"log": str(log)}, queue=wq)
    procs = [worker(wq, processors=2) for _ in range(3)]
    for p in procs:
        code, out = finish(p, timeout=180)
        assert code == 0, out[-3000:]
    for i in range(n):
        run = pqflow.get_run(f"j{i}", queue=wq)
        assert run.status == "succeeded", (i, run.statuses)
        assert run.steps["both"].result == "lr"
    assert executions(log) == Counter({(f"j{i}", "both"): 1 for i in range(n)})


@pytest.mark.every_database
def test_sigkilled_workers_lose_and_double_no_step(wq, log):
    runs = [f"k{i}" for i in range(12)]
    for r in runs:
        (flows.diamond if r[-1] in "02468" else flows.wide).start(r, {"log": str(log)}, queue=wq)
    kill_workers_until(wq, runs, log, random.Random(7), seconds=90)
    for r in runs:
        run = pqflow.get_run(r, queue=wq)
        assert run.status == "succeeded", (r, run.statuses)
        assert all(s.status == "succeeded" for s in run.steps.values())
    step_rows = Counter(m.key for m in wq.list() if "#" in m.key)
    assert set(step_rows.values()) == {1}
    assert len(step_rows) == sum(5 if r[-1] in "02468" else flows.WIDE_N + 2 for r in runs)


@pytest.mark.parametrize("decider", ["KillingDecider", "KillingOneByOneDecider"])
def test_sigkill_at_each_point_of_a_step(wq, log, tmp_path, decider):
    """Killed after k1's completion committed (successors already submitted in the same
    transaction), and in the middle of k2: the run completes, each step once in effect.

    With batched completions (KillingDecider) k1's completion is written with the worker's next
    claim, which may already lease k2 in the same commit: the kill after that commit then costs
    k2 a lease it never ran with (3 leases), unless the monitor wrote k1 alone first (2)."""
    flows.killing.start("kp", {"log": str(log), "dir": str(tmp_path)}, queue=wq)
    p = start_worker(
        wq.config["url"], wq.table, target=decider, _file=FLOWS, alive_time=1.5, task_heartbeat_interval=0.3
    )
    try:
        wait_for(lambda: pqflow.get_run("kp", queue=wq).status == "succeeded", timeout=60, what="run done")
    finally:
        p.send_signal(signal.SIGTERM)
        finish(p)
    run = pqflow.get_run("kp", queue=wq)
    assert run.steps["k3"].result == 3
    assert (tmp_path / "kp.after_k1").exists() and (tmp_path / "kp.k2").exists()  # both kills happened
    counts = executions(log)
    assert counts[("kp", "k1")] == 1  # its completion had committed before the kill: not re-run
    assert counts[("kp", "k2")] == 2  # killed mid-run: run again after its lease expired
    assert counts[("kp", "k3")] == 1
    if decider == "KillingOneByOneDecider":
        assert run.steps["k2"].attempts == 2
    else:
        assert run.steps["k2"].attempts in (2, 3)


def test_deploy_changing_the_workflow_does_not_reshape_runs(wq, log, tmp_path, backend):
    v1 = tmp_path / "deploy_v1.py"
    v1.write_text(
        "import pqflow\n"
        f"wf = pqflow.Workflow('e2e_deploy_{backend}')\n"
        "@wf.step()\ndef a(ctx): return 1\n"
        "@wf.step(after=a)\ndef b(ctx, a): return a + 1\n"
        "class Decider(pqflow.Decider):\n    workflows = [wf]\n"
    )
    v2 = tmp_path / "deploy_v2.py"
    v2.write_text(
        "import pqflow\n"
        f"wf = pqflow.Workflow('e2e_deploy_{backend}')\n"
        "@wf.step()\ndef a(ctx): return 1\n"
        "@wf.step(after=a)\ndef c(ctx, a): return a + 2\n"
        "class Decider(pqflow.Decider):\n    workflows = [wf]\n"
        "class TakesEverything(Decider):\n    served_types = None\n"
    )
    # The run starts with the old code (v1 snapshot); workers already run the new code (v2).
    from queue_core.worker.loader import load_target

    load_target(f"{v1}:wf").start("dep1", queue=wq)
    code, out = finish(
        start_worker(wq.config["url"], wq.table, target="Decider", burst=True, _file=str(v2)), timeout=60
    )
    assert code == 0, out[-2000:]
    # A worker without step b's code does not lease it: b waits for a worker that has it, uncharged.
    run = pqflow.get_run("dep1", queue=wq)
    assert run.status == "running" and run.statuses["a"] == "succeeded" and run.statuses["b"] == "waiting"
    assert run.steps["b"].attempts == 0 and run.steps["b"].error is None
    # A decider that takes every type (served_types = None) leases it and fails it.
    code, out = finish(
        start_worker(wq.config["url"], wq.table, target="TakesEverything", burst=True, _file=str(v2)), timeout=60
    )
    assert code == 0, out[-2000:]
    run = pqflow.get_run("dep1", queue=wq)
    assert list(run.steps) == ["a", "b"]  # the shape of the snapshot, not of the new code
    assert run.statuses["a"] == "succeeded" and run.statuses["b"] == "failed"
    assert "no longer exists in the worker's code" in run.steps["b"].error
    assert run.status == "failed"


def test_cron_schedule_starts_one_run_per_occurrence(wq, log, db_url):
    import perfectsched

    sc = perfectsched.open(db_url, wq.table + "_s", wq.table)
    sc.init()
    try:
        t0 = 1_700_000_000 - 1_700_000_000 % 3600
        sc.add("nightly", "e2e_diamond", cron="0 * * * *", data={"log": str(log)}, now=t0 + 1)
        assert sc.tick(now=t0 + 3 * 3600 + 5) == 3
        assert sc.tick(now=t0 + 3 * 3600 + 6) == 0
    finally:
        sc.close()
    drain(wq, processors=2)
    for k in range(1, 4):
        run = pqflow.get_run(f"nightly.{t0 + k * 3600}", queue=wq)
        assert run.status == "succeeded" and run.input == {"log": str(log)}
    assert Counter(r for r, s in executions(log) if s == "a") == Counter(
        {f"nightly.{t0 + k * 3600}": 1 for k in range(1, 4)}
    )


def test_thousand_step_dag(wq, log, backend):
    flows.big.start("big1", {}, queue=wq)
    drain(wq, processors=2, timeout=600)
    run = pqflow.get_run("big1", queue=wq)
    assert run.status == "succeeded"
    assert len(run.steps) == flows.LAYERS * flows.WIDTH
    assert all(s.status == "succeeded" and s.attempts == 1 for s in run.steps.values())
