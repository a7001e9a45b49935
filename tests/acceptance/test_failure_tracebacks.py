"""A handler's or a step's error, as a worker logs it and its task's history keeps it: at WARNING
(it will run again) or ERROR (it failed for good) with its traceback, once per attempt; kept with
the attempt (worker and attempt number) and shown by ``perfectqueue show``. Real worker
processes on SQLite and one server database (marker one_server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pqflow
from pqflow.cli import cli as flow_cli
from queue_core.cli.main import cli

sys.path.insert(0, str(Path(__file__).parent))
import error_handlers  # noqa: E402
from procs import finish, start_worker  # noqa: E402

pytestmark = pytest.mark.one_server

HANDLERS = str(Path(__file__).with_name("error_handlers.py"))
HEAD = "Traceback (most recent call last):"


def drain(q, target: str) -> str:
    code, out = finish(start_worker(q.config["url"], q.table, target=target, burst=True, _file=HANDLERS), 120)
    assert code == 0, out[-3000:]
    return out


def logged(out: str, fragment: str) -> list[str]:
    """The lines of a worker's output from each line naming ``fragment`` to the next log line."""
    lines, found = out.splitlines(), []
    for i, line in enumerate(lines):
        if fragment in line:
            end = next((j for j in range(i + 1, len(lines)) if lines[j][:4].isdigit()), len(lines))
            found.append("\n".join(lines[i:end]))
    return found


def attempt_ends(q, key: str) -> list:
    return [e for e in q[key].history() if e.kind in ("retried", "finished")]


def test_a_handler_error_is_logged_with_its_traceback_once_per_attempt(wq):
    wq.submit("tb-1", "failing", {}, max_attempts=2)
    out = drain(wq, "Huge")
    retried, failed = logged(out, "retry task=tb-1"), logged(out, "failed task=tb-1")
    assert len(retried) == 1 and len(failed) == 1, out[-3000:]
    assert "WARNING" in retried[0] and "ERROR" in failed[0]
    for text, attempt in ((retried[0], 1), (failed[0], 2)):
        assert HEAD in text and "in _deep_failure" in text and f"ValueError: bad value on attempt {attempt}" in text
    assert out.count(HEAD) == 2


def test_the_history_keeps_each_attempts_traceback_with_its_worker_and_perfectqueue_show_prints_it(wq):
    wq.submit("tb-2", "failing", {}, max_attempts=2)
    drain(wq, "Huge")
    ends = attempt_ends(wq, "tb-2")
    assert [(e.kind, e.attempt) for e in ends] == [("retried", 1), ("finished", 2)]
    for e in ends:
        assert e.owner and e.traceback.startswith(HEAD) and "in _deep_failure" in e.traceback
        assert e.traceback.endswith(f"ValueError: bad value on attempt {e.attempt}")
    shown = CliRunner().invoke(cli, ["show", "tb-2", "-D", wq.config["url"], "--table", wq.table])
    assert shown.exit_code == 0, (shown.stdout, shown.stderr)
    for e in ends:
        assert f"traceback of attempt {e.attempt} on worker {e.owner}:" in shown.stdout
        assert f"ValueError: bad value on attempt {e.attempt}" in shown.stdout
    assert shown.stdout.count(HEAD) == 2


def test_a_successful_task_keeps_no_traceback(wq):
    wq.submit("ok-1", "fine", {})
    wq.submit("tb-3", "failing", {}, max_attempts=1)
    drain(wq, "Huge")
    ok, failed = wq["ok-1"].history(), wq["tb-3"].history()
    assert [e.kind for e in ok] == ["submitted", "claimed", "finished"] and wq["ok-1"].metadata().outcome == "success"
    assert all(e.traceback is None for e in ok)
    assert [e.traceback is not None for e in failed] == [False, False, True]  # its end only


def test_a_step_error_is_logged_with_its_traceback_and_kept_with_the_attempt(wq):
    error_handlers.failing_flow.start("wob", {}, queue=wq)
    out = drain(wq, "Decider")
    retried, failed = (
        logged(out, "step retry run=wob step=wobbly attempt="),
        logged(out, "step failed run=wob step=wobbly attempt="),
    )
    assert len(retried) == 1 and len(failed) == 1, out[-3000:]
    assert "WARNING" in retried[0] and "ERROR" in failed[0]
    assert HEAD in retried[0] and HEAD in failed[0] and "in _deep_failure" in failed[0]
    assert pqflow.get_run("wob", queue=wq).steps["wobbly"].status == "failed"
    ends = attempt_ends(wq, "wob#wobbly")
    assert [(e.kind, e.attempt) for e in ends] == [("retried", 1), ("finished", 2)]
    assert all(e.owner and e.traceback.startswith(HEAD) for e in ends)
    db = ["-D", wq.config["url"], "--table", wq.table]
    head = f"traceback of step wobbly (attempt 2 on worker {ends[1].owner}):"
    for args in (["status", "wob"], ["why", "wob", "wobbly"]):
        shown = CliRunner().invoke(flow_cli, [*args, *db])
        assert shown.exit_code == 0, (shown.stdout, shown.stderr)
        assert head in shown.stdout and shown.stdout.count(HEAD) == 1, shown.stdout
        assert "in _deep_failure" in shown.stdout and "ValueError: bad value on attempt 2" in shown.stdout
    shown = CliRunner().invoke(flow_cli, ["status", "wob", "--format", "json", *db])
    assert json.loads(shown.stdout)["steps"]["wobbly"]["traceback"] == ends[1].traceback
