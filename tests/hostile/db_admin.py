"""Superuser access to the test servers, to create accounts with fewer privileges than the test
user: MariaDB root over its socket, PostgreSQL ``postgres`` through ``runuser``/psql, both as
started by scripts/start-databases.sh (tests/hostile/test_hostile_grants.py,
test_hostile_privileges.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from glob import glob
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

DB_ROOT = Path(os.environ.get("PQ_DB_ROOT", "/tmp/pq-test-dbs"))
MARIADB_SOCKET = DB_ROOT / "mariadb" / "mysqld.sock"
PG_SOCKET_DIR = DB_ROOT / "postgres"


def mariadb_root(sql: str) -> str:
    client = shutil.which("mariadb") or shutil.which("mysql")
    proc = subprocess.run(
        [client, "--no-defaults", f"--socket={MARIADB_SOCKET}", "-uroot", "-N", "-B"],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _psql_bin() -> str | None:
    for candidate in (
        os.path.join(os.environ.get("PQ_PG_BIN", ""), "psql"),
        *sorted(glob("/usr/lib/postgresql/*/bin/psql")),
        shutil.which("psql") or "",
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def pg_super(sql: str, port: int, database: str = "postgres") -> str:
    proc = subprocess.run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            _psql_bin(),
            "-h",
            str(PG_SOCKET_DIR),
            "-p",
            str(port),
            "-U",
            "postgres",
            "-d",
            database,
            "-qAt",
            "-v",
            "ON_ERROR_STOP=1",
        ],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def skip_unless_admin(backend: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating database accounts needs root (superuser access through the local sockets)")
    if backend == "mysql" and not (MARIADB_SOCKET.exists() and (shutil.which("mariadb") or shutil.which("mysql"))):
        pytest.skip(f"no MariaDB root socket at {MARIADB_SOCKET}")
    if backend == "postgres" and not (PG_SOCKET_DIR.exists() and _psql_bin() and shutil.which("runuser")):
        pytest.skip(f"no PostgreSQL socket directory {PG_SOCKET_DIR} or psql/runuser")


def url_for(server_url: str, user: str, password: str, database: str | None = None) -> str:
    u = make_url(server_url)
    return u.set(username=user, password=password, database=database or u.database).render_as_string(
        hide_password=False
    )


def queue_tables(table: str, backend: str) -> list[str]:
    """A queue table and the tables ``init`` makes beside it on ``backend``: every one a worker uses."""
    return [
        table,
        f"{table}_meta",
        f"{table}_queues",
        f"{table}_starts",
        f"{table}_tags",
        f"{table}_events",
        f"{table}_workers",
        f"{table}_stats",
        f"{table}_stats_gaps",
        f"{table}_receipts",
        *([f"{table}_failed_ids"] if backend == "mysql" else []),
    ]


@contextmanager
def account(
    backend: str,
    server: str,
    tables: Sequence[str],
    privileges: str,
    *,
    read_only: bool = False,
    sequences: Sequence[str] = (),
) -> Iterator[tuple[str, str]]:
    """A fresh account with ``privileges`` on ``tables`` (PostgreSQL: USAGE on ``sequences``;
    ``read_only``: ``default_transaction_read_only``, as on a hot standby), dropped at the end:
    its URL and its password (which holds characters a URL must escape)."""
    name, password = f"pqpriv_{uuid.uuid4().hex[:8]}", f"pw@{uuid.uuid4().hex}:/x"
    database = make_url(server).database
    if backend == "mysql":
        mariadb_root(
            f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}';\n"
            + "".join(f"GRANT {privileges} ON `{database}`.`{t}` TO '{name}'@'%';\n" for t in tables)
        )
        drop = lambda: mariadb_root(f"DROP USER IF EXISTS '{name}'@'%';")  # noqa: E731
    else:
        port = make_url(server).port or 5432
        pg_super(f"CREATE ROLE {name} LOGIN PASSWORD '{password}';", port)
        pg_super(
            f"GRANT USAGE ON SCHEMA public TO {name};\n"
            f"GRANT {privileges} ON {', '.join(tables)} TO {name};\n"
            + "".join(f"GRANT USAGE ON SEQUENCE {s} TO {name};\n" for s in sequences)
            + (f"ALTER ROLE {name} SET default_transaction_read_only = on;\n" if read_only else ""),
            port,
            database,
        )
        drop = lambda: pg_super(f"DROP OWNED BY {name};\nDROP ROLE {name};", port, database)  # noqa: E731
    try:
        yield url_for(server, name, password), password
    finally:
        drop()
