"""A task that kills its worker process is charged the crash; the tasks its process held besides
it (leased behind it in the same batch, or run before it with their successes not yet written)
are given back uncharged: real worker processes on SQLite and one server database (marker one_server)."""

from __future__ import annotations

import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

import pqflow

sys.path.insert(0, str(Path(__file__).parent))
import crash_handlers  # noqa: E402
from procs import finish, start_worker, wait_for  # noqa: E402

pytestmark = pytest.mark.one_server

HANDLERS = str(Path(__file__).with_name("crash_handlers.py"))
#: the lease the crashed task waits out before it runs again (its holder is dead)
ALIVE = 3.0


def _worker(q, target: str, **settings):
    settings = {"alive_time": ALIVE, "processors": 2, "task_prefetch": 9, **settings}
    return start_worker(q.config["url"], q.table, target=target, _file=HANDLERS, **settings)


def _stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc, timeout=60)
    assert code == 0, out[-3000:]
    return out


def _runs(log: Path) -> Counter:
    return Counter(ln.split()[0] for ln in log.read_text().splitlines())


def test_a_map_item_that_kills_its_process_alone_is_charged_its_crashes(wq, tmp_path):
    log = tmp_path / "runs.log"
    data = {"log": str(log), "dir": str(tmp_path), "n": 30, "crash": "i10"}
    crash_handlers.crash_map.start("cm", data, queue=wq)
    proc = _worker(wq, "CrashDecider")
    try:
        wait_for(lambda: pqflow.get_run("cm", queue=wq).status != "running", timeout=240, what="the run's end")
    finally:
        out = _stop(proc)
    run = pqflow.get_run("cm", queue=wq)
    items = {i.item: i for i in run.items("work")}
    crashed = items.pop("i10")
    assert crashed.status == "failed", out[-3000:]
    assert crashed.error == "its worker died 6 times while running it (lease expired)"
    assert crashed.attempts == 7 and _runs(log)["i10"] == 6  # six runs charged, the seventh refused
    assert {k: (i.status, i.attempts) for k, i in items.items()} == {k: ("succeeded", 1) for k in items}, out[-3000:]
    assert run.status == "failed" and run.steps["work"].error == "1 of 30 items failed"


def test_plain_tasks_of_one_batch_are_not_charged_a_neighbours_crash(wq, tmp_path):
    log = tmp_path / "runs.log"
    keys = [f"t{i}" for i in range(30)]
    for k in keys:
        wq.submit(k, "crashing", {"log": str(log), "dir": str(tmp_path), "crash": "t10", "crashes": 2})
    proc = _worker(wq, "crashing", processors=1, task_prefetch=29)
    try:
        wait_for(lambda: all(t.status == "finished" for t in wq.list()), timeout=120, what="every task's end")
    finally:
        out = _stop(proc)
    rows = {t.key: t for t in wq.list()}
    assert {k: t.outcome for k, t in rows.items()} == dict.fromkeys(keys, "success"), out[-3000:]
    assert rows["t10"].attempts == 3 and _runs(log)["t10"] == 3  # two crashes charged, then its success
    assert {k: rows[k].attempts for k in keys if k != "t10"} == {k: 1 for k in keys if k != "t10"}, out[-3000:]
    assert out.count("exited with -9") == 2


def test_a_child_that_died_between_its_claim_and_its_ledger_gives_its_batch_back_uncharged(wq, tmp_path):
    """Its replacement knows only the claim's lease token: every row leased under it goes back at
    once, uncharged (not after its lease of ten minutes, as a crash)."""
    log = tmp_path / "runs.log"
    keys = ["a", "b", "c"]
    for k in keys:
        wq.submit(k, "ran", {"log": str(log), "dir": str(tmp_path)})
    proc = start_worker(
        wq.config["url"],
        wq.table,
        target="ran",
        _file=str(Path(__file__).with_name("claim_crash_handlers.py")),
        alive_time=600,
        processors=1,
        task_prefetch=2,
    )
    try:
        wait_for(lambda: all(t.status == "finished" for t in wq.list()), timeout=30, what="every task's end")
    finally:
        out = _stop(proc)
    assert (tmp_path / "claim.crash").exists() and out.count("exited with -9") == 1, out[-3000:]
    assert "3 task(s)" not in out and "and a claim it had not recorded: 3 given back uncharged" in out, out[-3000:]
    rows = {t.key: t for t in wq.list()}
    assert {k: (t.outcome, t.attempts) for k, t in rows.items()} == dict.fromkeys(keys, ("success", 1))
    assert _runs(log) == dict.fromkeys(keys, 1)


def test_a_stopping_worker_gives_back_the_unrecorded_claim_of_a_child_it_does_not_replace(wq, tmp_path):
    """The child dies between its claim's COMMIT and its ledger record while the worker stops:
    the supervisor, which forks nobody in its place, gives the claim's rows back itself."""
    log = tmp_path / "runs.log"
    for k in ("a", "b", "c"):
        wq.submit(k, "ran", {"log": str(log), "dir": str(tmp_path), "await": "stop.sent"})
    proc = start_worker(
        wq.config["url"],
        wq.table,
        target="ran",
        _file=str(Path(__file__).with_name("claim_crash_handlers.py")),
        alive_time=600,
        processors=1,
        task_prefetch=2,
    )
    wait_for(lambda: (tmp_path / "claim.crash").exists(), timeout=30, what="the claim")
    proc.send_signal(signal.SIGTERM)
    (tmp_path / "stop.sent").touch()
    out = _stop(proc)
    assert "exited with -9" in out and not log.exists(), out[-3000:]
    assert {t.key: (t.status, t.attempts) for t in wq.list()} == dict.fromkeys("abc", ("waiting", 0)), out[-3000:]
