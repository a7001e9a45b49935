"""``perfectqueue workers`` (table and JSON), ``Queue.workers()`` and the dashboard's workers page
list the keys of the tasks each worker holds, not only how many: a real worker process holding a
task, on SQLite and one server database (marker one_server)."""

from __future__ import annotations

import json
import signal
import warnings

import pytest
from click.testing import CliRunner
from procs import finish, start_worker, wait_for

from pqweb.app import create_app
from pqweb.settings import WebSettings
from queue_core.cli.main import cli

with warnings.catch_warnings():  # Starlette 1.x asks for httpx2; httpx serves its TestClient the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

pytestmark = [pytest.mark.slow, pytest.mark.one_server]


def test_workers_list_the_keys_of_the_tasks_they_hold(wq, tmp_path):
    log = tmp_path / "runs.log"
    wq.submit("invoice-7", "killable", {"log": str(log), "sleep": 60})  # stops when told
    wq.submit("later", "handler", {"log": str(log)}, run_at=wq.now() + 3600)  # waiting: held by nobody
    worker = start_worker(wq.config["url"], wq.table, processors=1, registry_interval=0.2)
    try:
        listed = wait_for(
            lambda: (ws := wq.workers()) and ws[0].held == 1 and ws, timeout=60, what="the worker holding the task"
        )
        assert [(w.held, w.held_keys) for w in listed] == [(1, ("invoice-7",))]
        args = ["workers", "-D", wq.config["url"], "--table", wq.table]
        shown = CliRunner().invoke(cli, [*args, "--format", "json"])
        assert shown.exit_code == 0, shown.output
        assert [(w["owner"], w["held"], w["held_keys"]) for w in json.loads(shown.stdout)] == [
            (listed[0].owner, 1, ["invoice-7"])
        ]
        table = CliRunner().invoke(cli, args).stdout.splitlines()
        assert table[0].split()[-2:] == ["held", "held_keys"]
        assert table[1].split()[-2:] == ["1", "invoice-7"]
        page = TestClient(create_app(wq, WebSettings())).get("/workers")
        assert page.status_code == 200
        assert '<a class="held-key key" href="/task?key=invoice-7">invoice-7</a>' in page.text
        assert "later" not in page.text
    finally:
        worker.send_signal(signal.SIGQUIT)  # an immediate stop: the task is told to stop
        finish(worker, timeout=60)
