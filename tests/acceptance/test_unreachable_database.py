"""A database that cannot be reached is named as such, whatever the command was about to do:
"cannot connect to URL: why", the password masked, one line on stderr and exit 5, from the real
console scripts of perfectqueue, perfectsched and pqflow (a closed port for the servers, a file in
a directory that does not exist for SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
COMMANDS = [["perfectqueue", "list"], ["perfectqueue", "init"], ["perfectsched", "list"], ["pqflow", "runs"]]


def _unreachable(backend: str, tmp_path: Path) -> tuple[str, str]:
    """A URL that cannot be connected to, and how it must be shown."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/missing/dir/pq.db"
        return url, url
    scheme = {"mysql": "mysql+pymysql", "postgres": "postgresql+psycopg"}[backend]
    return f"{scheme}://acc:s3cret-pw@127.0.0.1:1/acc", f"{scheme}://acc:***@127.0.0.1:1/acc"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unreachable_database_says_it_cannot_connect(backend, tmp_path, command):
    url, shown = _unreachable(backend, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    proc = subprocess.run(
        [str(BIN / command[0]), *command[1:], "-D", url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 5, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{command[0]}: error: cannot connect to {shown}: "), lines[0]
    assert "s3cret-pw" not in proc.stderr
    assert not (tmp_path / "missing").exists()
