"""Tests marked ``one_server`` run on SQLite and on one server database, each server getting some;
``every_database`` keeps a test of such a module on all three; ``PQ_EVERY_DATABASE=1`` runs every
test on all three (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["tests/acceptance/test_worker_processes.py"]


def _collected(**env: str) -> dict[str, set[str]]:
    """The databases each test function of FOLDERS is collected on."""
    environ = {k: v for k, v in os.environ.items() if k != "PQ_EVERY_DATABASE"} | env
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *FOLDERS],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, set[str]] = defaultdict(set)
    for node in re.findall(r"^(\S+::\w+)\[([^\]]+)\]$", out, re.M):
        found[node[0]] |= set(node[1].split("-")) & {"sqlite", "mysql", "postgres"}
    return found


def test_a_runtime_test_runs_on_sqlite_and_one_server_and_each_server_gets_some():
    found = _collected()
    together = "tests/acceptance/test_worker_processes.py::test_concurrent_workers_never_run_a_task_twice"
    assert found.pop(together) == {"sqlite", "mysql", "postgres"}  # marked every_database
    assert all(len(dbs) == 2 and "sqlite" in dbs for dbs in found.values()), found
    assert {db for dbs in found.values() for db in dbs} == {"sqlite", "mysql", "postgres"}


def test_every_database_runs_them_all():
    found = _collected(PQ_EVERY_DATABASE="1")
    assert found and all(dbs == {"sqlite", "mysql", "postgres"} for dbs in found.values()), found
