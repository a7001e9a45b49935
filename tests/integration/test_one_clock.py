"""One clock for every machine: on MySQL/MariaDB and PostgreSQL the queue tells
the database server's time, whatever this host's wall clock says; on SQLite, the host's.

The host's clock is shifted in-process here (``time.time`` patched); tests/reliability runs real
worker, submitter and scheduler processes under faketime."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.clock import ServerClock, SystemClock
from queue_core.errors import DatabaseError

SKEWS = [-600.0, -30.0, 30.0, 600.0]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))  # db_admin


def _server_now(url: str) -> float:
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            q = (
                "SELECT UNIX_TIMESTAMP(SYSDATE(6))"
                if eng.dialect.name in ("mysql", "mariadb")
                else "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
            )
            return float(conn.execute(sa.text(q)).scalar_one())  # the server's clock, read another way
    finally:
        eng.dispose()


@pytest.fixture
def real(db_url, table_name, backend):
    q = queue_core.open(db_url, table_name)
    q.init()
    yield q
    q.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def _shift_host_clock(monkeypatch, skew: float) -> None:
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)


def test_the_clock_is_the_servers_where_there_is_a_server(real, backend):
    expected = SystemClock if backend == "sqlite" else ServerClock
    assert type(real.clock) is expected
    assert real.db.has_server_clock is (backend != "sqlite")


@pytest.mark.parametrize("skew", SKEWS)
def test_a_host_whose_clock_is_off_tells_the_servers_time(real, backend, db_url, monkeypatch, skew):
    if backend == "sqlite":
        pytest.skip("SQLite has no server: the host's clock is the clock (docs/queue.md, one host)")
    _shift_host_clock(monkeypatch, skew)
    assert abs(time.time() - _server_now(db_url) - skew) < 1.0  # the host really is off
    before = _server_now(db_url)
    told = real.now()  # its first reading of the server, midpoint of the query: off by <= rtt/2
    after = _server_now(db_url)
    assert before - 0.01 <= told <= after + (after - before) / 2 + 0.01, (before, told, after)


@pytest.mark.parametrize("skew", [-600.0, 600.0])
def test_run_now_and_leases_agree_between_hosts_with_different_clocks(db_url, table_name, backend, monkeypatch, skew):
    if backend == "sqlite":
        pytest.skip("SQLite has no server: one host")
    from conftest import drop_tables

    honest = queue_core.open(db_url, table_name)
    honest.init()
    try:
        _shift_host_clock(monkeypatch, skew)
        skewed = queue_core.open(db_url, table_name)  # another machine, its clock `skew` off
        try:
            skewed.submit("now-1", "t", {})
            task = honest.poll(alive_time=30)  # a "run now" task is due at once for the others
            assert task is not None and task.key == "now-1"
            # the lease is 30 s by the server's clock for both: the skewed one cannot take it over
            assert skewed.poll(alive_time=30) is None
            assert skewed["now-1"].metadata().running
            task.heartbeat()  # and the holder's lease is its own to extend
            task.finish()
        finally:
            skewed.close()
        assert honest["now-1"].metadata().finished
    finally:
        honest.close()
        drop_tables(db_url, table_name)


def test_an_unreachable_server_is_a_database_error_not_a_guess(backend):
    if backend == "sqlite":
        pytest.skip("SQLite has no server")
    url = {
        "mysql": "mysql+pymysql://u:secretpw@127.0.0.1:1/x",
        "postgres": "postgresql+psycopg://u:secretpw@127.0.0.1:1/x",
    }[backend]
    q = queue_core.open(url, "nowhere", connect_timeout=1, max_retry_count=0)
    try:
        with pytest.raises(DatabaseError) as err:
            q.now()
        assert "secretpw" not in str(err.value)
        assert str(err.value).startswith(f"cannot connect to {url.replace('secretpw', '***')}: "), str(err.value)
    finally:
        q.close()


#: 01:30 on 2026-11-01 in New York, twice: EDT (UTC-4), then an hour later EST (UTC-5)
REPEATED_HOUR = (1793511000, 1793514600)


@pytest.mark.parametrize("backend", ["mysql"])
def test_the_mysql_server_clock_ignores_the_session_time_zone(backend, db_url):
    """The server's time in epoch seconds, whatever the session's time zone: in the hour a
    daylight-saving zone repeats, UNIX_TIMESTAMP of the local time (what the clock read before)
    gives both readings one epoch, an hour off for one of them; the clock reads UTC. (The test
    sets the session's time with SET timestamp, which UTC_TIMESTAMP follows and SYSDATE does not:
    UNIX_TIMESTAMP(NOW(6)) stands for the old reading.)"""
    from db_admin import mariadb_root, skip_unless_admin

    from queue_core.store.mysql import MySQLDialect

    skip_unless_admin(backend)
    zone = "America/New_York"
    if mariadb_root(f"SELECT COUNT(*) FROM mysql.time_zone_name WHERE Name = '{zone}';").strip() == "0":
        mariadb_root(
            "USE mysql;\n"
            + subprocess.run(
                ["mariadb-tzinfo-to-sql", f"/usr/share/zoneinfo/{zone}", zone],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    eng = sa.create_engine(db_url)
    try:
        with eng.connect() as conn:
            conn.execute(sa.text(f"SET time_zone = '{zone}'"))
            read, old = [], []
            for epoch in REPEATED_HOUR:
                conn.execute(sa.text(f"SET timestamp = {epoch}"))
                read.append(float(conn.execute(sa.select(MySQLDialect().server_time())).scalar_one()))
                old.append(float(conn.execute(sa.text("SELECT UNIX_TIMESTAMP(NOW(6))")).scalar_one()))
    finally:
        eng.dispose()
    assert read == [float(e) for e in REPEATED_HOUR]
    assert old[0] == old[1]  # the old reading could not tell the two apart


def test_the_mysql_server_clock_keeps_its_fraction_whatever_div_precision_increment(backend, db_url, table_name):
    """MariaDB/MySQL: ``TIMESTAMPDIFF(MICROSECOND, ...) / 1000000`` was a DECIMAL division whose
    scale is ``@@div_precision_increment`` (default 4: 100 us); a server configured with 0 read
    whole seconds (up to 1 s off, stepping back at each refresh). Divided by a DOUBLE now."""
    if backend != "mysql":
        pytest.skip("MariaDB/MySQL only")
    q = queue_core.open(db_url, table_name)
    try:

        @sa.event.listens_for(q.db.engine, "connect")
        def _dba_setting(dbapi_conn, _rec):
            with dbapi_conn.cursor() as cur:
                cur.execute("SET SESSION div_precision_increment = 0")
                cur.execute("SET SESSION time_zone = '+00:00'")

        q.db.engine.dispose()
        expr = q.db.dialect.server_time()
        ref = sa.literal_column("UNIX_TIMESTAMP(NOW(6))")  # the same instant (statement start), UTC session
        with q.db.engine.connect() as conn:
            ours, exact = conn.execute(sa.select(expr, ref)).one()
        assert abs(float(ours) - float(exact)) < 0.001, f"server clock read {ours}, the server's time is {exact}"
    finally:
        q.close()
