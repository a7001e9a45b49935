"""Error texts past what a column holds: capped by one rule (``validate.cap_text``) on every path,
with a marker, as valid UTF-8; and input that can never succeed fails at once. Real worker
processes on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import pqflow
from queue_core.rules.validate import MAX_ERROR_BYTES

sys.path.insert(0, str(Path(__file__).parent))
import error_handlers  # noqa: E402
from procs import finish, start_worker  # noqa: E402

HANDLERS = str(Path(__file__).with_name("error_handlers.py"))
CUT = re.compile(r"… \[cut: (\d+) bytes more\]$")


def drain(q, target: str) -> str:
    code, out = finish(start_worker(q.config["url"], q.table, target=target, burst=True, _file=HANDLERS), 120)
    assert code == 0, out[-3000:]
    return out


def runs(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def assert_capped(text: str, unit: str) -> None:
    """``text``: the error of a ~100 KB message of ``unit``, cut to the column with its marker."""
    raw = text.encode("utf-8")  # a character cut in two would not encode back (surrogates) nor decode
    assert len(raw) <= MAX_ERROR_BYTES
    found = CUT.search(text)
    assert found, text[-200:]
    assert int(found[1]) > 0
    assert text[: found.start()].endswith(unit * 100)  # cut between whole characters of the message


@pytest.mark.parametrize("unit", ["x", "€"])
def test_a_task_whose_error_is_past_the_column_fails_after_its_retries_with_the_error_cut(wq, tmp_path, unit):
    log = tmp_path / "runs.log"
    wq.submit("huge-1", "huge", {"log": str(log), "unit": unit}, max_attempts=3)
    drain(wq, "Huge")
    meta = wq["huge-1"].metadata()
    assert (meta.status, meta.outcome, meta.attempts) == ("finished", "failure", 3)
    assert runs(log) == ["huge-1"] * 3
    assert meta.error.startswith("RuntimeError: start " + unit)
    assert_capped(meta.error, unit)
    ends = [e for e in wq["huge-1"].history() if e.kind in ("retried", "finished")]
    assert [e.kind for e in ends] == ["retried", "retried", "finished"]
    for e in ends:  # each attempt's end keeps the error's head and its traceback, cut the same way
        assert e.error.startswith("RuntimeError: start " + unit)
        assert_capped(e.traceback, unit)
        assert e.traceback.startswith("Traceback (most recent call last):")


@pytest.mark.parametrize("unit", ["x", "é"])
def test_a_step_whose_error_is_past_the_column_fails_after_its_retries_with_the_error_cut(wq, tmp_path, unit):
    log = tmp_path / "runs.log"
    error_handlers.huge_flow.start("big1", {"log": str(log), "unit": unit}, queue=wq)
    drain(wq, "Decider")
    run = pqflow.get_run("big1", queue=wq)
    step = run.steps["boom"]
    assert (run.status, step.status, step.attempts) == ("failed", "failed", 2)  # retries=1: ran twice
    assert runs(log) == ["big1#boom"] * 2
    assert step.error.startswith("RuntimeError: start " + unit) and "worker died" not in step.error
    assert_capped(step.error, unit)
    ends = [e for e in wq["big1#boom"].history() if e.kind in ("retried", "finished")]
    assert [e.kind for e in ends] == ["retried", "finished"]
    for e in ends:
        assert_capped(e.traceback, unit)


def test_a_run_task_with_an_invalid_run_id_fails_at_once_with_its_reason(wq, tmp_path):
    wq.submit("r#1", error_handlers.huge_flow.name, {})  # a run submitted as a plain task, no attempt limit
    out = drain(wq, "Decider")
    meta = wq["r#1"].metadata()
    assert (meta.status, meta.outcome, meta.attempts) == ("finished", "failure", 1)
    assert meta.error == "InvalidRunIdError: run id must not contain '#'"
    assert "failed task=r#1" in out and "InvalidRunIdError" in out
