"""What the benchmarks run on: the databases, a throwaway Redis, the machine's description.

MariaDB and PostgreSQL are started (or reused) exactly as the test command does it, by
sourcing ``scripts/start-databases.sh``, unless ``TEST_MYSQL_URL`` / ``TEST_PG_URL`` are
already set. Redis (for the RQ and Celery peers) is Debian's ``redis-server`` on a free
loopback port without persistence, started here and stopped by PID at the end.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from .procs import ROOT, BenchError, Proc
from .tables import engine

DATABASES = ("sqlite", "mariadb", "postgres")
_ENV_VARS = {"mariadb": "TEST_MYSQL_URL", "postgres": "TEST_PG_URL"}
PACKAGES = (
    "pq",
    "SQLAlchemy",
    "PyMySQL",
    "psycopg",
    "huey",
    "procrastinate",
    "celery",
    "kombu",
    "rq",
    "redis",
    "matplotlib",
)


def log(msg: str) -> None:
    print(f"[bench {dt.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


# -- databases ------------------------------------------------------------------------------
def server_urls(dbs: list[str]) -> dict[str, str]:
    """URLs of the server databases in ``dbs`` (sourcing scripts/start-databases.sh when the
    TEST_* variables are not all set). A database that cannot be had is left out."""
    wanted = [d for d in dbs if d in _ENV_VARS]
    if not wanted:
        return {}
    if not all(os.environ.get(_ENV_VARS[d]) for d in wanted):
        log("starting/reusing the databases: . scripts/start-databases.sh")
        proc = subprocess.run(
            ["bash", "-c", ". scripts/start-databases.sh >&2 && env -0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            timeout=600,
        )
        if proc.returncode == 0:
            for item in proc.stdout.split(b"\0"):
                key, _, value = item.decode(errors="replace").partition("=")
                if key in _ENV_VARS.values() or key.startswith("PQ_PG_") or key.startswith("PQ_MARIADB_"):
                    os.environ[key] = value
        else:
            log("scripts/start-databases.sh failed; only databases named by TEST_* variables are used")
    return {d: os.environ[_ENV_VARS[d]] for d in wanted if os.environ.get(_ENV_VARS[d])}


def server_version(db: str, url: str | None) -> str | None:
    try:
        if db == "sqlite":
            return f"SQLite {sqlite3.sqlite_version}"
        with engine(url).connect() as conn:
            if db == "postgres":
                return "PostgreSQL " + conn.exec_driver_sql("SHOW server_version").scalar()
            return conn.exec_driver_sql("SELECT VERSION()").scalar()
    except Exception as exc:  # noqa: BLE001 - a description, never fatal
        return f"unknown ({type(exc).__name__})"


# -- Redis ----------------------------------------------------------------------------------
class RedisServer:
    """Debian's redis-server on 127.0.0.1:<free port>, ``--save '' --appendonly no``."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.proc: Proc | None = None
        self.url: str | None = None
        self.version: str | None = None
        self.error: str | None = None

    def start(self) -> str | None:
        """The Redis URL, or None (``self.error`` says why)."""
        try:
            binary = shutil.which("redis-server") or self._install()
            port = free_port()
            self.proc = Proc(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                    str(self.workdir),
                ],
                env=dict(os.environ),
                log=self.workdir / "redis.log",
                scoped=False,
            )
            deadline = time.monotonic() + 10
            while not _redis_ping(port):
                if time.monotonic() > deadline or not self.proc.alive():
                    raise BenchError(f"redis-server did not start{self.proc.tail()}")
                time.sleep(0.05)
            out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
            self.version = next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), out.strip())
            self.url = f"redis://127.0.0.1:{port}"
            log(f"redis-server {self.version} on 127.0.0.1:{port} (pid {self.proc.pid})")
            return self.url
        except (BenchError, OSError, subprocess.SubprocessError) as exc:
            self.error = str(exc).splitlines()[0]
            log(f"no Redis: {self.error}")
            return None

    @staticmethod
    def _install() -> str:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise BenchError("redis-server is not installed (apt-get install redis-server, as root)")
        log("installing redis-server with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "redis-server"]
        quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "timeout": 600}
        if subprocess.run(install, **quiet).returncode != 0:  # stale package lists: update once, retry
            subprocess.run(["apt-get", "update", "-qq"], **quiet)
            subprocess.run(install, **quiet)
        path = shutil.which("redis-server")
        if not path:
            raise BenchError("apt-get install redis-server failed")
        return path

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


# -- the machine -------------------------------------------------------------------------------
def machine() -> dict:
    """Cores, memory, CPU, OS, Python, the pq commit and the installed package versions."""
    info: dict = {
        "host": socket.gethostname(),
        "cores": os.cpu_count(),
        "memory_gib": None,
        "cpu": None,
        "os": None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": list(os.getloadavg()),
        "git": _git(),
        "packages": {p: _version(p) for p in PACKAGES},
    }
    try:
        with open("/proc/meminfo") as fh:
            kb = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
        with open("/proc/cpuinfo") as fh:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
        with open("/etc/os-release") as fh:
            info["os"] = next(
                (line.split("=", 1)[1].strip().strip('"') for line in fh if line.startswith("PRETTY_NAME=")), None
            )
    except (OSError, StopIteration, ValueError):
        pass
    return info


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git() -> dict | None:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "queue_core", "perfectsched", "pqflow"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return {"commit": commit or None, "packages_modified": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return None
