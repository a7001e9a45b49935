"""The runnable examples run as documented (real CLIs and worker processes, embedded SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", str(ROOT / script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_billing_example_maps_over_customers():
    out = _run("examples/billing/run.sh")
    assert "bill       succeeded (24/25 succeeded, 1 failed)" in out
    assert "[map over customers: 24/25 succeeded, 1 failed]" in out
    assert "report: {'billed': 24, 'total_cents': " in out and "'by_hand': ['customer-007']}" in out
    assert sum(1 for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()) == 25


def test_queues_example_pauses_resumes_and_rate_limits_the_partner_api():
    out = _run("examples/queues/run.sh")
    paused, resumed = out.split("== the partner is back")
    assert all(f"report {name} done" in paused for name in ("sales", "churn", "usage"))
    assert [line.split()[:3] for line in paused.splitlines() if line.startswith("partner  ")] == [
        ["partner", "paused", "12"]
    ]
    assert "partner API calls: 12\n" in resumed and "most starts in any second: 4 (the limit: 4)" in resumed
    assert [line.split()[:6] for line in resumed.splitlines() if line.startswith("partner  ")] == [
        ["partner", "running", "0", "0", "0", "12"]
    ]


def test_the_tour_runs_a_schedule_of_workflow_runs_with_a_map_and_names_the_dashboard():
    """README's first command (scripts/example.sh) runs this tour: the whole product on SQLite."""
    out = _run("examples/tour/run.sh")
    runs = [line.split() for line in out.splitlines() if line.startswith("billing.")]
    assert len(runs) == 3 and all(r[1:4] == ["billing", "succeeded", "3/3"] for r in runs), out[-2000:]
    assert "bill       succeeded (11/12 succeeded, 1 failed)" in out
    assert "[map over customers: 11/12 succeeded, 1 failed]" in out
    assert "then open http://127.0.0.1:8080/" in out and "tour finished in" in out
    customers = [f"customer-{i:03d}" for i in range(12)]
    assert f"customers: {customers}" in out  # what the steps computed, not only their statuses
    total = sum(1000 + 37 * i for i in range(12) if i != 7)
    assert f'report:    {{"billed": 11, "total_cents": {total}, "by_hand": ["customer-007"]}}' in out
