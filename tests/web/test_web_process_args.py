"""A real ``pqweb -D URL`` process keeps the URL's password out of its argv
(``/proc/<pid>/cmdline``, readable by every user of the host) and still serves that database."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from sqlalchemy.engine import make_url
from test_web_browser import STARTUP_DEADLINE, _free_port, _wait_until_up

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/cmdline")


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_a_database_password_given_with_d_is_not_in_the_process_arguments(backend, wq, db_url):
    password = make_url(db_url).password
    assert password, "the test servers use passwords"
    wq.submit("visible-task", "t")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ")}
    cmd = [sys.executable, "-m", "pqweb", "-D", db_url, "--table", wq.table, "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, base, time.monotonic() + STARTUP_DEADLINE)
        shown = _cmdline(proc.pid)
        assert password not in shown and db_url not in shown, shown
        assert "pqweb" in shown and "--table" in shown and "-D" not in shown.split()
        assert "visible-task" in httpx.get(base + "/tasks", timeout=10).text  # the -D database is served
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert password not in err
