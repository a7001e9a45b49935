"""A ``--burst`` worker (what a cron job or CI step runs) on an unreachable database ends with
one clear error line and a non-zero exit, as ``perfectqueue list`` does (exit 5, "cannot connect
to mysql+pymysql://u:***@..."), and as ``--burst`` does for a missing table; it does not poll
forever logging "read the server clock: transient database error"."""

from __future__ import annotations

import os
import subprocess
import sys

URL = "mysql+pymysql://u:secret@127.0.0.1:1/x"
APP = """
import queue_core

class Noop(queue_core.Application):
    def perform(self):
        pass

class Worker(queue_core.Dispatch):
    routes = [("noop", Noop)]
"""


def test_a_burst_worker_on_an_unreachable_database_exits_non_zero_with_one_line(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ")}
    cmd = [sys.executable, "-m", "queue_core.cli", "run", "app:Worker", "-D", URL, "--burst"]
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        lines = err.splitlines()
        raise AssertionError(
            f"--burst still running after 60 s, {len(lines)} stderr lines, e.g. {lines[-1] if lines else ''!r}"
        ) from None
    assert proc.returncode == 5, proc.stderr
    assert "cannot connect to mysql+pymysql://u:***@127.0.0.1:1/x" in proc.stderr
    assert "secret" not in proc.stderr + proc.stdout
