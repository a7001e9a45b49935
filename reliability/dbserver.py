"""Private MariaDB and PostgreSQL servers that the database-restart scenario may kill.

They are started by the project's own ``scripts/start-databases.sh`` with ``PQ_DB_ROOT``,
``MARIADB_PORT`` and ``PG_PORT`` pointing away from the shared servers (default
``/tmp/pq-chaos-dbs`` on ports 3307 and 5433), killed with SIGKILL by the pid in their pid file
(MariaDB: ``mariadb/mysqld.pid``; PostgreSQL: first line of ``postgres/data/postmaster.pid``)
and restarted by sourcing the script again, which keeps the data directories. The shared
servers on 3306/5432 are never touched.

An exclusive ``flock`` on ``<root>.lock`` is held while a :class:`PrivateServers` is open, so two
test sessions on one machine never kill each other's servers.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

from .procs import ROOT, alive, children, gone, wait_for

BACKEND_ENV = {"mariadb": "TEST_MYSQL_URL", "postgres": "TEST_PG_URL"}


class ServerError(RuntimeError):
    pass


class PrivateServers:
    def __init__(self, root: str = "/tmp/pq-chaos-dbs", mariadb_port: int = 3307, pg_port: int = 5433):
        self.root = Path(root)
        self.env = {"PQ_DB_ROOT": str(self.root), "MARIADB_PORT": str(mariadb_port), "PG_PORT": str(pg_port)}
        self.urls: dict[str, str] = {}
        self._lock_fd: int | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> PrivateServers:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self, lock_timeout: float = 900.0) -> None:
        """Take the lock, start both servers (or reuse running ones), learn their URLs."""
        self._lock_fd = os.open(f"{self.root}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerError(f"{self.root}.lock is held by another session") from None
                time.sleep(0.5)
        self.start()

    def close(self, stop: bool = True) -> None:
        """Stop the servers, then unlock."""
        try:
            if stop:
                self.stop()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def start(self) -> None:
        """Source scripts/start-databases.sh (idempotent: running servers are reused)."""
        script = '. scripts/start-databases.sh >/dev/null && printf "%s\\n%s\\n" "$TEST_MYSQL_URL" "$TEST_PG_URL"'
        res = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            start_new_session=True,
            timeout=180,
        )
        lines = res.stdout.split()
        if res.returncode != 0 or len(lines) != 2:
            raise ServerError(f"scripts/start-databases.sh failed ({res.returncode}): {res.stderr[-2000:]}")
        self.urls = {"mariadb": lines[0], "postgres": lines[1]}

    def stop(self) -> None:
        """Graceful stop (scripts/stop-databases.sh), waiting until both servers are gone."""
        pids = [p for p in (self.pid("mariadb"), self.pid("postgres")) if p is not None and alive(p)]
        subprocess.run(
            ["bash", "scripts/stop-databases.sh"], cwd=ROOT, env={**os.environ, **self.env}, check=False, timeout=60
        )
        wait_for(lambda: not any(alive(p) for p in pids), 120, "the private database servers to stop", 0.2)

    # -- faults --------------------------------------------------------------------------
    def pid(self, backend: str) -> int | None:
        path = self.root / ("mariadb/mysqld.pid" if backend == "mariadb" else "postgres/data/postmaster.pid")
        try:
            first = path.read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            return None
        return int(first) if first.isdigit() else None

    def kill(self, backend: str) -> float:
        """SIGKILL the server; return when none of its processes is left. Returns the kill time."""
        pid = self.pid(backend)
        if pid is None or not alive(pid):
            raise ServerError(f"{backend} server is not running")
        helpers = children(pid)  # PostgreSQL's backends and auxiliary processes
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        # A server must be fully gone before the script runs again: pg_ctl counts a zombie
        # postmaster as running, and orphaned backends keep PostgreSQL's shared memory in use.
        dead = gone if backend == "postgres" else (lambda p: not alive(p))
        wait_for(
            lambda: dead(pid) and not any(alive(h) for h in helpers),
            60,
            f"the killed {backend} server's processes to exit",
            0.05,
        )
        return t

    def restart(self, backend: str, attempts: int = 5) -> float:
        """Start the killed server again (same data directory). Returns when it accepts connections."""
        for i in range(attempts):
            try:
                self.start()
                return time.time()
            except ServerError:
                if i == attempts - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")
