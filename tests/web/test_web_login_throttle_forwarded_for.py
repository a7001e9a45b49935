"""A real ``pqweb`` process throttles wrong tokens per client address: a client cannot escape
the throttle by sending a made-up ``X-Forwarded-For`` header with each attempt.

uvicorn, as ``pqweb.cli.serve`` starts it, trusts ``X-Forwarded-For`` from 127.0.0.1 by default
(``proxy_headers=True``, ``forwarded_allow_ips="127.0.0.1"``): ``request.client.host`` then is
whatever the header says, and ``pqweb/views/auth.py::_client`` keys the throttle on it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import httpx
from test_web_browser import STARTUP_DEADLINE, _free_port, _wait_until_up

from pqweb.throttle import MAX_FAILURES

TOKEN = "review-token-0123456789abcdef"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _pqweb(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ")}
    env["PQWEB_TOKEN"] = TOKEN
    db = f"sqlite:///{tmp_path / 'pq.db'}"
    subprocess.run([sys.executable, "-m", "queue_core.cli", "init", "-D", db], env=env, check=True)
    cmd = [sys.executable, "-m", "pqweb", "-D", db, "--allow-actions", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    _wait_until_up(proc, base, time.monotonic() + STARTUP_DEADLINE)
    return proc, base


def test_a_forged_x_forwarded_for_does_not_reset_the_login_throttle(tmp_path):
    proc, base = _pqweb(tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=10) as c:
            statuses = []
            for i in range(MAX_FAILURES + 5):
                csrf = _CSRF.search(c.get("/login").text)[1]
                r = c.post(
                    "/login",
                    data={"csrf": csrf, "token": f"wrong-token-{i:012d}"},
                    headers={"X-Forwarded-For": f"198.51.100.{i + 1}"},
                )
                statuses.append(r.status_code)
            # the same client (127.0.0.1) sent 10 wrong tokens: the last ones must be 429
            assert statuses[MAX_FAILURES:] == [429] * 5, statuses
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
