"""Reduced privileges and read-only databases.

An account without DELETE (MariaDB and PostgreSQL; SQLite has no accounts, whoever can write the
file can delete: not applicable) submits, claims and finishes; the purge is refused with
``AccessDeniedError`` (CLI: one line, exit 5), a worker logs that once and keeps serving, and a
refused batch writes nothing. A read-only database given to a worker (PostgreSQL: a role with
``default_transaction_read_only = on``; MariaDB: an account with SELECT only; SQLite: the file
opened ``mode=ro``) ends the worker at start with one line and exit 5, instead of polling and
failing for ever; the library raises ``AccessDeniedError``; no output holds the password.
Accounts are made through the servers' superuser connections (db_admin.py) with fresh names and
dropped at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import db_admin
import pytest
from click.testing import CliRunner
from db_admin import skip_unless_admin
from hostile_support import HERE, clean_environ, one_line_error
from sqlalchemy.engine import make_url

import queue_core
from queue_core import AccessDeniedError
from queue_core.cli.main import cli as pq_cli
from queue_core.clock import FakeClock

T0 = 1_700_000_000.0
BIN = Path(sys.executable).parent
SERVERS = ["mysql", "postgres"]


def _cli(*args):
    return CliRunner().invoke(pq_cli, list(args), env=clean_environ())


def account(backend: str, server: str, table: str, privileges: str, *, read_only: bool = False):
    """A fresh account with ``privileges`` on ``table`` and the tables beside it; its URL and password."""
    return db_admin.account(
        backend,
        server,
        db_admin.queue_tables(table, backend),
        privileges,
        read_only=read_only,
        sequences=[f"{table}_id_seq", f"{table}_events_id_seq"],
    )


@pytest.fixture
def admin_queue(backend, db_url, table_name):
    """The queue table, made and read by the test user (all privileges)."""
    q = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    q.init()
    yield q
    q.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def _snapshot(q) -> str:
    return repr(sorted(((m.key, m.status, m.outcome, m.attempts) for m in q.list(now=T0)), key=repr))


def _worker(url: str, table: str, *extra: str, env: dict | None = None, timeout: float = 60):
    return subprocess.run(
        [
            str(BIN / "perfectqueue"),
            "run",
            f"{HERE / 'hostile_handlers.py'}:Worker",
            "--burst",
            "-D",
            url,
            "--table",
            table,
            "--poll-interval",
            "0.1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean_environ(), **(env or {})},
    )


@pytest.mark.parametrize("backend", SERVERS)  # SQLite: no accounts, nothing to revoke
def test_an_account_without_delete_submits_claims_and_finishes(backend, db_url, admin_queue):
    skip_unless_admin(backend)
    q, table = admin_queue, admin_queue.table
    q.submit("expired", "ok", {}, now=T0)
    q.poll(now=T0).finish(now=T0, retention_time=0)
    with account(backend, db_url, table, "SELECT, INSERT, UPDATE") as (url, password):
        with queue_core.open(url, table, clock=FakeClock(T0), max_retry_count=0) as nd:
            nd.submit("a", "ok", {}, now=T0)
            assert nd.submit_many([{"key": "b", "type": "ok"}, {"key": "a", "type": "ok"}], now=T0) == 1
            nd.submit("capped", "ok", {}, user="team", max_running=1, priority=5, now=T0)  # the cap's lock row
            held = nd.poll_multi(3, now=T0 + 1)
            assert [t.key for t in held] == ["capped", "a", "b"]
            held[0].finish(now=T0 + 1)
            held[1].retry(retry_wait=0, error="again", now=T0 + 1)
            held[2].release(now=T0 + 1)
            assert nd.finish_many(nd.poll_multi(5, now=T0 + 2), now=T0 + 2) == []
            before = _snapshot(q)
            with pytest.raises(AccessDeniedError, match="refused by") as info:
                nd.cleanup(now=T0 + 10**6)
            assert password not in str(info.value)
            # a key whose finished row's retention ended needs its row purged: the batch is refused whole
            with pytest.raises(AccessDeniedError):
                nd.submit_many([{"key": "c", "type": "ok"}, {"key": "expired", "type": "ok"}], now=T0 + 10**6)
            assert _snapshot(q) == before
        assert _cli("submit", "cli", "ok", "-D", url, "--table", table).exit_code == 0
        err = one_line_error("perfectqueue", _cli("cleanup", "-D", url, "--table", table), 5)
        assert "refused by" in err and password not in err
        for i in range(4):  # limited tasks are leased one per poll: a purge is tried before each
            q.submit(f"w{i}", "ok", {}, max_attempts=1, now=T0)
        proc = _worker(url, table, "--processors", "1", env={"PQ_CLEANUP_INTERVAL": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and password not in proc.stdout + proc.stderr
    assert proc.stderr.count("cleanup failed") == 1, proc.stderr[-3000:]  # logged once, not at every poll
    done = {m.key: m.outcome for m in q.list(now=T0)}
    assert all(done[k] == "success" for k in ("cli", "w0", "w1", "w2", "w3")), done


def _read_only(backend: str, db_url: str, table: str, tmp_path):
    if backend == "sqlite":
        return _sqlite_read_only(db_url)
    if backend == "mysql":
        return account(backend, db_url, table, "SELECT")
    return account(backend, db_url, table, "SELECT, INSERT, UPDATE, DELETE", read_only=True)


@contextmanager
def _sqlite_read_only(db_url: str):
    yield f"sqlite:///file:{make_url(db_url).database}?mode=ro&uri=true", None


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"])
def test_a_read_only_database_given_to_a_worker(backend, db_url, admin_queue, tmp_path):
    if backend != "sqlite":
        skip_unless_admin(backend)
    q, table = admin_queue, admin_queue.table
    q.submit("running", "ok", {}, now=T0)
    q.poll(now=T0, alive_time=10**6)
    q.submit("old", "ok", {}, now=T0)
    q.poll(now=T0).finish(now=T0, retention_time=0)  # cleanup would purge it
    q.submit("due", "ok", {}, now=T0)
    before = _snapshot(q)
    with _read_only(backend, db_url, table, tmp_path) as (url, password):
        with queue_core.open(url, table, clock=FakeClock(T0 + 1)) as ro:
            assert [m.key for m in ro.list()] == ["running", "old", "due"]  # a replica serves reads
            for call in (
                ro.check_writable,
                ro.poll,
                lambda: ro.submit("new", "ok", {}),
                lambda: ro["due"].cancel_request(),
                ro.cleanup,
            ):
                with pytest.raises(AccessDeniedError, match="refused by") as info:
                    call()
                assert password is None or password not in str(info.value)
        assert _cli("list", "-D", url, "--table", table).exit_code == 0
        for command in (["submit", "new", "ok"], ["cancel", "due"], ["force-finish", "running"]):
            err = one_line_error("perfectqueue", _cli(*command, "-D", url, "--table", table), 5)
            assert "refused by" in err and (password is None or password not in err), err
        proc = _worker(url, table, timeout=120)
    assert proc.returncode == 5, (proc.returncode, proc.stderr[-3000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("perfectqueue: error: ")]
    assert len(errors) == 1 and "refused by" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "poll failed" not in proc.stderr, proc.stderr[-3000:]
    assert password is None or password not in proc.stdout + proc.stderr
    assert _snapshot(q) == before


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open (its start-up check connected to the database)."""
    try:
        return any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.parametrize("sig, said", [(signal.SIGTERM, "stop"), (signal.SIGQUIT, "immediate stop")])
def test_a_worker_obeys_a_stop_while_its_start_up_check_waits_for_a_locked_database(tmp_path, sig, said):
    """The check at start writes (an UPDATE of no row), so on a SQLite file another process holds
    locked it waits (30 s, the busy timeout): a stop signal meanwhile ends the worker at once, exit
    0, instead of killing it by the signal's default action or waiting for the lock. The check
    runs in a child process of the worker (queue_core/worker/forked_check.py): it is ended with the worker."""
    import sqlite3

    from procs import _children, start_worker, stop_and_time, wait_for

    path = (tmp_path / "q.db").resolve()
    with queue_core.open(f"sqlite:///{path}", "q") as q:
        q.init()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        p = start_worker(f"sqlite:///{path}", "q", processors=1)
        checkers = wait_for(
            lambda: [k for k in _children(p.pid) if _has_open(k, path)] or p.poll() is not None,
            what="the start-up check connected",
        )
        time.sleep(0.3)
        assert p.poll() is None and not _has_open(p.pid, path)  # the worker itself never connects
        code, out, took = stop_and_time(p, sig)
    finally:
        blocker.close()
    assert code == 0, out
    assert not any(os.path.exists(f"/proc/{k}") for k in checkers), "the check's process outlived the worker"
    assert f"{said}: exiting (before its start-up check ended)" in out and took < 5, (took, out)
    assert "Traceback" not in out
