"""The reliability report: results of several sittings merge into one file, and the table
says which code each row was measured on."""

from __future__ import annotations

import json

import pytest

from reliability import report
from reliability.result import Result


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    return tmp_path


def _result(scenario: str, backend: str, **kw) -> Result:
    return Result(scenario, backend, tasks=10, duration_s=1.0, **kw)


def test_a_sitting_replaces_its_own_rows_and_keeps_the_others(results_dir, monkeypatch):
    monkeypatch.setattr(report, "_git", lambda: "aaaaaaa")
    path = report.save([_result("worker_crashes", "sqlite"), _result("soak", "sqlite")], "full")
    monkeypatch.setattr(report, "_git", lambda: "bbbbbbb")
    again = report.save([_result("soak", "sqlite", kills=3)], "full")
    assert again == path
    rows = {(r["scenario"], r["backend"]): r for r in json.loads(path.read_text())["results"]}
    assert set(rows) == {("worker_crashes", "sqlite"), ("soak", "sqlite")}
    assert rows["worker_crashes", "sqlite"]["commit"] == "aaaaaaa"
    assert rows["soak", "sqlite"]["commit"] == "bbbbbbb"
    assert rows["soak", "sqlite"]["kills"] == 3


def test_rows_of_different_commits_show_their_commit(results_dir, monkeypatch):
    monkeypatch.setattr(report, "_git", lambda: "aaaaaaa")
    report.save([_result("worker_crashes", "sqlite")], "full")
    monkeypatch.setattr(report, "_git", lambda: "bbbbbbb")
    path = report.save([_result("soak", "sqlite")], "full")
    text = report.table(json.loads(path.read_text()))
    assert "the commit of each row" in text
    lines = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 8 ")]
    assert lines[0].endswith("| aaaaaaa |") and lines[1].endswith("| bbbbbbb |")


def test_one_commit_is_named_once_in_the_heading(results_dir, monkeypatch):
    monkeypatch.setattr(report, "_git", lambda: "ccccccc")
    path = report.save([_result("worker_crashes", "sqlite"), _result("long_tasks", "mariadb")], "full")
    text = report.table(json.loads(path.read_text()))
    assert "commit ccccccc)" in text
    assert " commit |" not in text.splitlines()[2]


def test_rows_saved_before_per_row_commits_take_the_files(results_dir):
    doc = {
        "date": "2026-01-01T00:00:00",
        "host": "h",
        "cpus": 2,
        "python": "3.11",
        "mode": "full",
        "commit": "ddddddd",
        "results": [{**_result("contention", "postgres").to_dict()}],
    }
    text = report.table(doc)
    assert text.startswith("Measured 2026-01-01T00:00:00 on `h`")
    assert "commit ddddddd)" in text


def test_failures_are_listed_under_the_table(results_dir):
    r = _result("scheduler_storm", "mariadb")
    r.duplicate("occurrence m1.60 has 2 tasks")
    doc = {
        "date": "d",
        "host": "h",
        "cpus": 2,
        "python": "3.11",
        "mode": "quick",
        "commit": "e",
        "results": [{**r.to_dict(), "measured": "d", "commit": "e"}],
    }
    text = report.table(doc)
    assert "| **FAIL** | 10 | 0 | 0 | 1 | 0 |" in text
    assert text.endswith("Failures:\n\n- scheduler_storm on mariadb: duplicate: occurrence m1.60 has 2 tasks")


def _soak_doc(samples: list[dict]) -> dict:
    r = _result("soak", "postgres")
    r.figures["samples"] = samples
    return {
        "date": "d",
        "host": "h",
        "cpus": 2,
        "python": "3.11",
        "mode": "full",
        "commit": "e",
        "results": [r.to_dict(), _result("worker_crashes", "postgres").to_dict()],
    }


def test_no_soak_chart_without_soak_samples(tmp_path):
    doc = _soak_doc([])
    assert report.soak_chart(doc, tmp_path / "soak.png") == "no soak samples in this results file"
    assert not (tmp_path / "soak.png").exists()


def test_soak_chart_is_drawn_from_the_samples(tmp_path):
    samples = [
        {"t": 10.0 * i, "processes": 6, "rss_mb": 300.0 + i % 2, "fds": 60, "db_sessions": 12} for i in range(20)
    ]
    why = report.soak_chart(_soak_doc(samples), tmp_path / "soak.png")
    try:
        import matplotlib  # noqa: F401 - only the bench extra installs it
    except ImportError:
        assert why is not None and "matplotlib" in why
    else:
        assert why is None
        assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_row_keeps_the_time_its_scenario_ended(results_dir, monkeypatch):
    monkeypatch.setattr(report, "now", lambda: "2026-01-01T10:00:00")
    ended = _result("soak", "mariadb")
    ended.measured = "2026-01-01T09:30:00"
    path = report.save([ended, _result("soak", "postgres")], "full")
    rows = {r["backend"]: r for r in json.loads(path.read_text())["results"]}
    assert rows["mariadb"]["measured"] == "2026-01-01T09:30:00"
    assert rows["postgres"]["measured"] == "2026-01-01T10:00:00"
    assert report.table(json.loads(path.read_text())).startswith(
        "Measured 2026-01-01T09:30:00 to 2026-01-01T10:00:00 on"
    )
