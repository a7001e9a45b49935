"""``module:Name`` and ``-r module`` import from the directory a command is started in, as
``celery -A`` and ``rq worker`` do: the real console scripts, started in a fresh directory that
holds the module (a console script's own ``sys.path[0]`` is its bin directory). The commands under test run as
processes; what they find ready (a task, a schedule) is made in this process. Their subject is the
runtime, not the database: SQLite and one server (marker ``one_server``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfectsched
import queue_core

pytestmark = pytest.mark.one_server

BIN = Path(sys.executable).parent

HANDLERS = """
import pathlib
import queue_core
import pqflow


class Touch(queue_core.Application):
    def perform(self):
        pathlib.Path(self.task.key + ".done").write_text("ok")


class Worker(queue_core.Dispatch):
    routes = [("touch", Touch)]


flow = pqflow.Workflow("cwd_flow", retry_wait=0)


@flow.step()
def only(ctx):
    pathlib.Path(ctx.run_id + ".done").write_text("ok")
    return 1


class Decider(pqflow.Decider):
    workflows = [flow]


def occurrence(task):
    pathlib.Path(f"{task.key}.{task.scheduled_time}.done").write_text("ok")
"""


def _run(prog: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_") and k != "PYTHONPATH"}
    proc = subprocess.run([str(BIN / prog), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (prog, args, proc.returncode, proc.stderr[-3000:])
    return proc


@pytest.fixture
def here(tmp_path, db_url, table_name, backend):
    (tmp_path / "cwdapp.py").write_text(HANDLERS)
    with queue_core.open(db_url, table_name) as q:
        q.init()
    yield tmp_path
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


@pytest.mark.parametrize("target", [["cwdapp:Worker"], ["-r", "cwdapp", "Worker"]])
def test_perfectqueue_run_imports_the_target_from_the_current_directory(here, db_url, table_name, target):
    db = ["-D", db_url, "--table", table_name]
    with queue_core.open(db_url, table_name) as q:
        q.submit("t1", "touch", {})
    _run("perfectqueue", "run", *target, *db, "--burst", "--poll-interval", "0.1", cwd=here)
    assert (here / "t1.done").read_text() == "ok"
    with queue_core.open(db_url, table_name) as q:
        assert q["t1"].metadata().outcome == "success"


@pytest.mark.parametrize("target", [["cwdapp:Decider"], ["-r", "cwdapp", "Decider"]])
def test_pqflow_run_imports_the_decider_from_the_current_directory(here, db_url, table_name, target):
    db = ["-D", db_url, "--table", table_name]
    _run("pqflow", "start", "cwd_flow", "r1", *db, cwd=here)
    _run("pqflow", "run", *target, *db, "--burst", "--poll-interval", "0.1", cwd=here)
    assert (here / "r1.done").read_text() == "ok"
    assert "succeeded" in _run("pqflow", "status", "r1", *db, cwd=here).stdout


@pytest.mark.parametrize("target", [["cwdapp:occurrence"], ["-r", "cwdapp", "occurrence"]])
def test_perfectsched_run_imports_the_handler_from_the_current_directory(here, db_url, table_name, backend, target):
    db = ["-D", db_url, "--table", table_name, "--schedule-table", table_name + "_s"]
    with perfectsched.open(db_url, table_name + "_s", table_name) as sched:
        sched.init()
        sched.add("nightly", "job", cron="0 0 * * *", next_time=1767225600, catchup="latest")  # 2026-01-01 UTC
    _run("perfectsched", "run", *target, *db, "--burst", "--poll-interval", "0.1", cwd=here)
    assert [p.name for p in here.glob("nightly.*.done")], sorted(p.name for p in here.iterdir())
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name + "_s")
