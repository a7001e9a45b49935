"""Schedule rows edited by hand into values pq never writes, one column at a time, on SQLite,
MariaDB and PostgreSQL (issue 12 §4): the reads (``Scheduler.list``, ``Schedule.metadata``,
``perfectsched list/show``) refuse them with ``CorruptRowError`` naming the table, the key and
the column (the CLI: one line, exit 5, nothing on stdout); no row of either table is written.
What the scheduler's tick does with such rows is not tested here (its own change)."""

from __future__ import annotations

import os
import uuid

import pytest
from click.testing import CliRunner

import perfectsched
from hand_edits import ONLY, Edit, RawTable, key_set
from hostile_support import one_line_error
from perfectsched.cli import cli as sched_cli
from queue_core import CorruptRowError

T0 = 1_700_000_000


EDITS = [
    Edit("data-not-json", "data = 'not json'", "data", extra={"show": True}),
    Edit("data-empty", "data = ''", "data"),
    Edit("data-not-text", {**ONLY, "sqlite": "data = X'FF00'"}, "data"),
    Edit("key-empty", key_set("''"), "key"),
    Edit("key-not-utf8", {**key_set("X'FF61'"), "postgres": None}, "key"),
    Edit("type-empty", "type = ''", "type"),
    Edit("cron-empty", "cron = ''", "cron"),
    Edit("cron-with-newline", {"mysql": "cron = CONCAT('* * * * *', CHAR(10))", "postgres": "cron = '* * * * *' || CHR(10)",
                               "sqlite": "cron = '* * * * *' || CHAR(10)"}, "cron"),
    Edit("cron-unparseable", "cron = '99 * * * *'", "cron", extra={"cli_only": True, "show": True}),
    Edit("timezone-unknown", "timezone = 'Mars/Base'", "timezone", extra={"show": True}),
    Edit("timezone-path", "timezone = '../../etc/passwd'", "timezone"),
    Edit("delay-negative", "delay = -5", "delay"),
    Edit("delay-huge", "delay = 2000000000", "delay"),
    Edit("catchup-unknown", "catchup = 'maybe'", "catchup"),
    Edit("dst-unknown", "dst = 'zz'", "dst"),
    Edit("leased-7", "leased = 7", "leased"),
    Edit("next-time-negative", "next_time = -5", "next_time"),
    Edit("next-time-huge", "next_time = 9000000000000000000", "next_time"),
    Edit("next-run-time-huge", "next_run_time = 1e300", "next_run_time"),
    Edit("timeout-negative", "timeout = -1e300", "timeout"),
    Edit("timeout-nan", {**ONLY, "postgres": "timeout = 'NaN'"}, "timeout"),
    Edit("timeout-text", {**ONLY, "sqlite": "timeout = 'soon'"}, "timeout"),
    Edit("lease-token-negative", "lease_token = -1", "lease_token"),
    Edit("created-at-huge", "created_at = 1e300", "created_at"),
    Edit("updated-at-negative", "updated_at = -1", "updated_at"),
]


@pytest.fixture(scope="module")
def _schedulers():
    made: dict = {}
    yield made
    from conftest import drop_tables

    for (backend, url), sc in made.items():
        sc.close()
        if backend != "sqlite":
            drop_tables(url, sc.queue.table, sc.table)


@pytest.fixture
def sc(backend, db_url, _schedulers):
    """A scheduler on tables shared by the module's tests on one database, emptied per test."""
    if (backend, db_url) not in _schedulers:
        name = f"hs{os.getpid() % 10000}_{uuid.uuid4().hex[:8]}"
        s = perfectsched.open(db_url, name + "_s", name)
        s.init()
        _schedulers[(backend, db_url)] = s
    s = _schedulers[(backend, db_url)]
    for table in (s.table, s.queue.table):
        raw = RawTable(db_url, table)
        raw.wipe()
        raw.close()
    return s


def _cli(sc, url, *args):
    env = {k: None for k in os.environ if k.startswith("PQ_")}
    return CliRunner().invoke(sched_cli, [*args, "-D", url, "--table", sc.queue.table, "--schedule-table", sc.table],
                              env=env)


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.name)
def test_a_hand_edited_schedule_row_is_refused_by_name(sc, backend, db_url, edit):
    clause = edit.clause(backend)
    if clause is None:
        pytest.skip(f"{backend} cannot store {edit.name}")
    sc.add("target", "t", cron="* * * * *", data={"n": 1}, next_time=T0 + 60, now=T0)
    sc.add("other", "t", cron="0 * * * *", next_time=T0 + 60, now=T0)
    raw, queue_raw = RawTable(db_url, sc.table), RawTable(db_url, sc.queue.table)
    try:
        target = "type = 't' AND cron = '* * * * *'"
        assert raw.edit(clause, target) == 1
        before = repr((raw.rows(), queue_raw.rows()))
        wrong = f"column {edit.column} holds"
        if not edit.extra.get("cli_only"):
            with pytest.raises(CorruptRowError, match=wrong) as info:
                list(sc.list())
            assert sc.table in str(info.value)
            if edit.column != "key":
                with pytest.raises(CorruptRowError, match=wrong):
                    sc["target"].metadata()
        assert wrong in one_line_error("perfectsched", _cli(sc, db_url, "list"), 5)
        if edit.extra.get("show"):
            assert wrong in one_line_error("perfectsched", _cli(sc, db_url, "show", "target"), 5)
        assert sc["other"].metadata().cron == "0 * * * *"
        assert repr((raw.rows(), queue_raw.rows())) == before
    finally:
        raw.close()
        queue_raw.close()
