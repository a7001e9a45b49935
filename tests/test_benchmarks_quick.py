"""The benchmark harness must not rot: ``python -m benchmarks --smoke`` (a quick run at the smallest
counts) on each of the three databases.

It exercises every pq scenario (raw limit, enqueue, drain, latency, poll cost, fairness,
scheduler, workflows, maps, memory, idle load, start-up) with small counts and checks the results file, not the speed.
Peers run only when their packages (the ``bench`` extra) are installed; otherwise they must be
reported as skipped. The Markdown goes to a temporary file, never to docs/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import BEGIN, END
from benchmarks.scenarios import SECTIONS
from benchmarks.sizes import SMOKE

ROOT = Path(__file__).resolve().parents[1]
DATABASES = ("sqlite", "mariadb", "postgres")
SERVERS = {"mariadb": "TEST_MYSQL_URL", "postgres": "TEST_PG_URL"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("db", DATABASES)
def test_quick_benchmark_covers_every_scenario(db, tmp_path):
    """One database per test: a failure names its database."""
    var = SERVERS.get(db)
    if var is not None and not os.environ.get(var):
        msg = f"{var} not set (scripts/start-databases.sh starts the servers)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    out_json, out_md = tmp_path / "results.json", tmp_path / "benchmarks.md"
    docs_md = ROOT / "docs" / "benchmarks.md"
    docs_before = docs_md.stat().st_mtime_ns if docs_md.exists() else None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--db",
            db,
            "--out-json",
            str(out_json),
            "--out-md",
            str(out_md),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    doc = json.loads(out_json.read_text())
    assert doc["mode"] == "quick" and doc["machine"]["cores"]
    assert doc["sizes"]["drain_tasks"] == SMOKE.drain_tasks, "not the --smoke sizes"
    assert doc["machine"]["databases"][db], db
    assert sorted(doc["pq"]) == [db]
    for section in SECTIONS:
        sec = doc["pq"][db].get(section)
        assert sec is not None, f"{db}: no {section} results"
        assert not sec["errors"], f"{db}/{section}: {sec['errors']}"
        assert sec["metrics"], f"{db}/{section}: no figures"
        for key, m in sec["metrics"].items():
            median = m["median"]
            assert isinstance(median, (int, float)), f"{db}/{section}/{key}: {median!r}"
            assert median > 0 or (m.get("zero_ok") and median >= 0), f"{db}/{section}/{key} = {median}"
        assert all(n == 0 for n in sec["checks"].values()), f"{db}/{section}: {sec['checks']}"
    for section in ("drain", "latency", "scheduler", "workflow", "maps"):
        assert any("duplicates" in k for k in doc["pq"][db][section]["checks"]), f"{db}/{section}"

    for name, peer in doc["peers"].items():
        assert peer["status"] == "ok" or peer["status"].startswith("skipped"), f"peer {name}: {peer['status']}"
        if peer["status"] == "ok":
            assert peer["result"]["median"] > 0, name

    text = out_md.read_text()
    assert BEGIN in text and END in text
    assert "### 3. Drain" in text and "### Targets of issue 5" in text and "### Targets of issue 11" in text
    assert "### 12. Worker start-up" in text and "### Targets of issue 13" in text
    assert (tmp_path / "benchmarks.png").exists() or "_No chart:" in text
    assert (docs_md.stat().st_mtime_ns if docs_md.exists() else None) == docs_before, "docs/ was written"
