"""Reduced versions of the fault and load scenarios (the QUICK sizes of ``python -m reliability
--quick``): each must find no loss, no duplicate and no broken guarantee, and must really have
injected its faults. See docs/reliability.md for what each scenario does and checks.

Where they run: MariaDB and PostgreSQL are the shared test servers of the root conftest
(TEST_MYSQL_URL / TEST_PG_URL: skipped when missing, failed under CI), SQLite a temporary file.
The database-restart scenario gets private servers of its own, started once per session by
scripts/start-databases.sh on other ports (see reliability/dbserver.py) and stopped at the end.
"""

from __future__ import annotations

import os

import pytest
from conftest import _server_url

from reliability.dbserver import PrivateServers, ServerError
from reliability.result import Result
from reliability.scenarios import (
    clock_skew,
    contention,
    db_restarts,
    graceful_restart,
    long_tasks,
    lost_acks,
    paused_holders,
    scheduler_storm,
    worker_crashes,
    workflow_chaos,
)
from reliability.stage import Context

ROOT_BACKEND = {"mariadb": "mysql", "postgres": "postgres"}


@pytest.fixture(scope="session")
def private_servers():
    servers = PrivateServers()
    try:
        servers.open()
    except (ServerError, OSError) as exc:
        servers.close(stop=False)
        msg = f"private database servers could not be started: {exc}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    yield servers
    servers.close()


def make_context(backend: str, tmp_path, servers=None) -> Context:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/rel.db"
    elif servers is not None:
        url = servers.urls[backend]
    else:
        url = _server_url(ROOT_BACKEND[backend])
    return Context(backend, url, tmp_path, servers=servers)


def backends(mod):
    return pytest.mark.parametrize("backend", mod.BACKENDS)


def passed(result: Result) -> Result:
    assert result.failures == [], "\n".join(result.failures)
    assert (result.losses, result.duplicates) == (0, 0)
    return result


@backends(worker_crashes)
@pytest.mark.one_server
def test_worker_crashes(backend, tmp_path):
    r = passed(worker_crashes.run(make_context(backend, tmp_path), worker_crashes.QUICK))
    assert r.kills >= 1 and r.tasks == worker_crashes.QUICK.tasks


@backends(db_restarts)
def test_db_restarts(backend, tmp_path, private_servers):
    r = passed(db_restarts.run(make_context(backend, tmp_path, private_servers), db_restarts.QUICK))
    assert r.restarts == 3 and r.figures["burst_acked"] >= 2 * db_restarts.QUICK.burst_acks


@backends(graceful_restart)
@pytest.mark.one_server
def test_graceful_restart(backend, tmp_path):
    r = passed(graceful_restart.run(make_context(backend, tmp_path), graceful_restart.QUICK))
    assert r.restarts >= 2


@backends(contention)
def test_contention(backend, tmp_path):
    r = passed(contention.run(make_context(backend, tmp_path), contention.QUICK))
    assert r.figures["submitted"] > 0 and r.figures["claimed"] > 0


@backends(scheduler_storm)
def test_scheduler_storm(backend, tmp_path):
    r = passed(scheduler_storm.run(make_context(backend, tmp_path), scheduler_storm.QUICK))
    assert r.kills == scheduler_storm.QUICK.minutes


@backends(workflow_chaos)
@pytest.mark.one_server
def test_workflow_chaos(backend, tmp_path):
    r = passed(workflow_chaos.run(make_context(backend, tmp_path), workflow_chaos.QUICK))
    assert r.kills >= 1


@backends(long_tasks)
@pytest.mark.one_server
def test_long_tasks(backend, tmp_path):
    r = passed(long_tasks.run(make_context(backend, tmp_path), long_tasks.QUICK))
    assert r.figures["late"]["block-finish"] == "late:refused"


@backends(clock_skew)
def test_clock_skew(backend, tmp_path):
    r = passed(clock_skew.run(make_context(backend, tmp_path), clock_skew.QUICK))
    assert r.tasks == clock_skew.QUICK.tasks + clock_skew.QUICK.submitted
    assert r.figures["submitted"] == clock_skew.QUICK.submitted


@backends(paused_holders)
def test_paused_holders(backend, tmp_path):
    r = passed(paused_holders.run(make_context(backend, tmp_path), paused_holders.QUICK))
    assert r.kills >= 1 and r.figures["max_per_user"] <= 1


@backends(lost_acks)
def test_lost_acks(backend, tmp_path):
    r = passed(lost_acks.run(make_context(backend, tmp_path), lost_acks.QUICK))
    assert r.kills >= len(lost_acks.REQUIRED) and r.figures["occurrences"] > 0
