"""A MySQL/MariaDB worker account without grants on <table>_failed_ids gets a clear
AccessDeniedError and loses nothing (the failure is not written without its note)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))
import db_admin  # noqa: E402
from conftest import drop_tables  # noqa: E402

import queue_core  # noqa: E402
from queue_core import AccessDeniedError  # noqa: E402
from queue_core.clock import FakeClock  # noqa: E402

T0 = 1_700_000_000.0


@contextmanager
def worker_without_failed_ids(backend, db_url, table_name):
    """An admin queue and the URL of a worker account with every grant but those on
    ``<table>_failed_ids`` (MySQL/MariaDB only)."""
    if backend != "mysql":
        pytest.skip("only MySQL/MariaDB has <table>_failed_ids")
    db_admin.skip_unless_admin(backend)
    admin = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    admin.init()
    try:
        tables = [t for t in db_admin.queue_tables(table_name, backend) if not t.endswith("_failed_ids")]
        with db_admin.account(backend, db_url, tables, "SELECT, INSERT, UPDATE, DELETE") as (url, _pw):
            yield admin, url
    finally:
        admin.close()
        drop_tables(db_url, table_name)


@pytest.mark.parametrize("grant_on_failed", [None, "SELECT, INSERT"])
def test_a_worker_without_grants_on_the_failed_table(backend, db_url, table_name, grant_on_failed):
    with worker_without_failed_ids(backend, db_url, table_name) as (admin, url):
        if grant_on_failed:
            name = db_admin.make_url(url).username
            db_admin.mariadb_root(
                f"GRANT {grant_on_failed} ON `{db_admin.make_url(db_url).database}`."
                f"`{table_name}_failed_ids` TO '{name}'@'%';"
            )
        with queue_core.open(url, table_name, clock=FakeClock(T0)) as q:
            q.submit("k", "t", now=T0)
            task = q.poll(now=T0 + 1)
            if grant_on_failed is None:
                with pytest.raises(AccessDeniedError):
                    task.fail("ValueError: x", now=T0 + 2, retention_time=10)
                assert admin.store.task_get("k")["state"] != 1  # not finished without its note
                return
            task.fail("ValueError: x", now=T0 + 2, retention_time=10)
            assert sum(g.count for g in admin.failures()) == 1
            with pytest.raises(AccessDeniedError):  # no DELETE on <table>_failed_ids
                q.cleanup(now=T0 + 100)
            assert admin.store.task_get("k") is not None
            assert sum(g.count for g in admin.failures()) == 1


def test_a_success_needs_no_grant_on_the_failed_table(backend, db_url, table_name):
    """A plain Task.finish (success) notes no failed id: a worker without INSERT on
    <table>_failed_ids finishes successes (it ran INSERT IGNORE ... SELECT there for each before)."""
    with worker_without_failed_ids(backend, db_url, table_name) as (admin, url):
        with queue_core.open(url, table_name, clock=FakeClock(T0)) as q:
            q.submit("k", "t", now=T0)
            q.poll(now=T0 + 1).finish(now=T0 + 2, retention_time=10)
            assert admin.store.task_get("k")["outcome"] == "success"
