"""A reload against a locked or never-answering database does not block the service's signal
handling for ever: the check of a reloaded configuration is bounded (``service.RELOAD_CHECK_TIME``)
and a database that does not answer in time is taken, as at start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from queue_core import config
from queue_core.worker.processor import open_checked
from queue_core.worker.service import reload_settings

SCRIPT = Path(__file__).with_name("supervisor_reload_script.py")


def _lock_table(backend, url, table):
    """Another session holds a lock that blocks pq's writes (a migration, CREATE INDEX, LOCK TABLES)."""
    eng = sa.create_engine(url)
    conn = eng.connect()
    if backend == "postgres":
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql(f'LOCK TABLE "{table}" IN SHARE MODE')  # what a plain CREATE INDEX takes
    else:
        conn.exec_driver_sql(f"LOCK TABLES `{table}` WRITE")
    return eng, conn


def _reload_in_thread(new, old):
    out = []
    th = threading.Thread(
        target=lambda: out.append(reload_settings(lambda: dict(new), old, opens=open_checked)), daemon=True
    )
    th.start()
    return th, out


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_reload_check_against_a_locked_table_returns(backend, queue):
    """open_checked runs an UPDATE ... WHERE false: behind another session's table lock it waits
    PostgreSQL's lock_timeout (0: for ever) / MariaDB's lock_wait_timeout (86400 s)."""
    url = queue.config["url"]
    old = config.build({"url": url, "table": queue.table, "processors": 1})
    eng, conn = _lock_table(backend, url, queue.table)
    try:
        th, out = _reload_in_thread(dict(old), old)
        th.join(30)
        assert not th.is_alive(), "reload_settings(opens=open_checked) still blocked after 30 s behind a table lock"
    finally:
        conn.close()
        eng.dispose()
        th.join(10)


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_reload_against_a_server_that_accepts_but_never_answers_returns(backend, queue):
    """A stalled server (SIGSTOPped, overloaded, a proxy with no backend): TCP connects (the kernel
    completes it from the listen backlog), the protocol handshake never comes. connect_timeout=2."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)  # never accept()
    port = lsock.getsockname()[1]
    scheme = "mysql+pymysql" if backend == "mysql" else "postgresql+psycopg"
    dead = f"{scheme}://u:p@127.0.0.1:{port}/db"
    old = config.build({"url": queue.config["url"], "table": queue.table, "processors": 1})
    new = config.build({"url": dead, "table": queue.table, "processors": 1, "connect_timeout": 2})
    try:
        th, out = _reload_in_thread(new, old)
        th.join(30)
        assert not th.is_alive(), "reload still blocked after 30 s (connect_timeout=2) on a server that never answers"
    finally:
        lsock.close()


@pytest.mark.parametrize("locked", [True, False], ids=["locked", "control-unlocked"])
@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_supervisor_obeys_term_while_its_reload_waits_on_a_locked_table(backend, queue, locked):
    """Process mode: HUP reloads in the supervisor's main loop (Supervisor._reload ->
    reload_settings -> open_checked) which is also where signals are acted on; a TERM sent then
    is not acted on while the check waits behind the lock."""
    url = queue.config["url"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), url, queue.table, url, queue.table],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    eng = conn = None
    try:
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(2)  # its child forked
        if locked:
            eng, conn = _lock_table(backend, url, queue.table)
        proc.send_signal(signal.SIGHUP)  # same config: only re-read
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail("supervisor still running 20 s after TERM: its reload blocks signal handling behind the lock")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
        if conn is not None:
            conn.close()
            eng.dispose()
