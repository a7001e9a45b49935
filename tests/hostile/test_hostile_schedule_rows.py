"""Schedule rows edited by hand into values perfectsched never writes, one column at a time, on
SQLite, MariaDB and PostgreSQL, reconciled with the set-aside schedules.

Such a row is one more schedule that cannot be computed: the reads show it and say why, column
first, and never fail for it (``Scheduler.list``, ``perfectsched list/show``: status ``corrupt``
until a scheduler sets it aside); ``Schedule.metadata()`` of such an active row raises
``CorruptRowError`` naming the table, the key and the column; the tick sets it aside with the
reason, logged once, while the other schedule fires; ``resume`` refuses a row still corrupt (it
stays set aside, nothing written, nothing logged again) and brings back one the set-aside mended.
No read writes a row of either table.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid

import pytest
from click.testing import CliRunner
from hand_edits import ONLY, Edit, RawTable, key_set

import perfectsched
from perfectsched.cli import cli as sched_cli
from queue_core import CorruptRowError, ValidationError

T0 = 1_700_000_000
#: the hour after T0, when both schedules are due
LATER = T0 + 3600


def stored(column: str) -> str:
    """The reason of a value only the store's check refuses (a column no rule of ``add`` reads)."""
    return f"column {column}: "


EDITS = [
    Edit("data-not-json", "data = 'not json'", "data", extra={"reason": "data is not valid JSON", "show": True}),
    Edit("data-empty", "data = ''", "data", extra={"reason": stored("data")}),
    Edit("data-nan", """data = '{"a": NaN}'""", "data", extra={"reason": "data is not valid JSON: NaN is not JSON"}),
    Edit("data-overflow", """data = '{"a": 1e999}'""", "data", extra={"reason": "data is not valid JSON: 1e999 is"}),
    Edit("data-list", "data = '[1, 2]'", "data", extra={"reason": "task data must be a JSON object (dict), not list"}),
    Edit("data-not-text", {**ONLY, "sqlite": "data = X'FF00'"}, "data", extra={"reason": "data is not valid JSON"}),
    Edit("key-empty", key_set("''"), "key", extra={"reason": "schedule key must not be empty"}),
    Edit(
        "key-not-utf8",
        {**key_set("X'FF61'"), "postgres": None},
        "key",
        extra={"reason": {"mysql": "schedule key is not valid Unicode", "sqlite": "schedule key must be a string"}},
    ),
    Edit("type-empty", "type = ''", "type", extra={"reason": "schedule type must not be empty"}),
    Edit("cron-empty", "cron = ''", "cron", extra={"reason": "invalid cron ''"}),
    Edit(
        "cron-with-newline",
        {
            "mysql": "cron = CONCAT('* * * * *', CHAR(10))",
            "postgres": "cron = '* * * * *' || CHR(10)",
            "sqlite": "cron = '* * * * *' || CHAR(10)",
        },
        "cron",
        extra={"reason": stored("cron")},
    ),
    Edit(
        "cron-unparseable",
        "cron = '99 * * * *'",
        "cron",
        extra={"reason": "invalid cron '99 * * * *'", "cli_only": True, "show": True},
    ),
    Edit(
        "timezone-unknown",
        "timezone = 'Mars/Base'",
        "timezone",
        extra={"reason": "invalid timezone 'Mars/Base'", "show": True},
    ),
    Edit(
        "timezone-path",
        "timezone = '../../etc/passwd'",
        "timezone",
        extra={"reason": "invalid timezone '../../etc/passwd'"},
    ),
    Edit("delay-negative", "delay = -5", "delay", extra={"reason": "delay must be whole seconds"}),
    Edit("delay-huge", "delay = 2000000000", "delay", extra={"reason": "delay must be whole seconds"}),
    Edit("catchup-unknown", "catchup = 'maybe'", "catchup", extra={"reason": "catchup must be one of"}),
    Edit("dst-unknown", "dst = 'zz'", "dst", extra={"reason": "invalid dst policy 'zz'"}),
    Edit("leased-7", "leased = 7", "leased", extra={"reason": stored("leased"), "mended": True}),
    Edit("next-time-negative", "next_time = -5", "next_time", extra={"reason": "next_time -5 is not a valid"}),
    Edit("next-time-huge", "next_time = 9000000000000000000", "next_time", extra={"reason": "next_time 9000"}),
    Edit("next-run-time-huge", "next_run_time = 1e300", "next_run_time", extra={"reason": "next_run_time 1e+300"}),
    Edit("timeout-negative", "timeout = -1e300", "timeout", extra={"reason": stored("timeout"), "mended": True}),
    Edit(
        "timeout-nan",
        {**ONLY, "postgres": "timeout = 'NaN'"},
        "timeout",
        extra={"reason": stored("timeout"), "never_due": True},
    ),
    Edit(
        "timeout-text",
        {**ONLY, "sqlite": "timeout = 'soon'"},
        "timeout",
        extra={"reason": stored("timeout"), "never_due": True},
    ),
    Edit(
        "lease-token-negative",
        "lease_token = -1",
        "lease_token",
        extra={"reason": stored("lease_token"), "mended": True},
    ),
    Edit("created-at-huge", "created_at = 1e300", "created_at", extra={"reason": stored("created_at")}),
    Edit(
        "updated-at-negative", "updated_at = -1", "updated_at", extra={"reason": stored("updated_at"), "mended": True}
    ),
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
    return CliRunner().invoke(
        sched_cli, [*args, "-D", url, "--table", sc.queue.table, "--schedule-table", sc.table], env=env
    )


def _ok(result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def _target(listed: list) -> perfectsched.ScheduleMetadata:
    """The hand-edited schedule among the listed ones (its key may be the edit)."""
    (target,) = [m for m in listed if m.key != "other"]
    return target


def _aside_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "set aside schedule=" in r.getMessage()]


def _reads_show_it(sc, url, edit, reason):
    """Every read shows the edited row with its reason, the other one as healthy, and fails for nothing."""
    listed = list(sc.list())
    target = _target(listed)
    assert (target.status, target.error) == ("active", None) and reason in target.problem, target.problem
    assert [(m.status, m.problem) for m in listed if m.key == "other"] == [("active", None)]
    if not edit.extra.get("cli_only") and edit.column != "key":
        with pytest.raises(CorruptRowError, match=f"column {edit.column} holds") as info:
            sc["target"].metadata()
        assert sc.table in str(info.value) and "'target'" in str(info.value)
    shown = {m["key"]: m for m in json.loads(_ok(_cli(sc, url, "list", "--format", "json")))}
    assert (shown["other"]["status"], shown["other"]["problem"]) == ("active", None)
    (edited,) = [m for k, m in shown.items() if k != "other"]
    assert edited["status"] == "corrupt" and reason in edited["problem"]
    table = _ok(_cli(sc, url, "list")).splitlines()
    assert table[-1] == "2 entries." and [" corrupt " in line for line in table[1:-1]].count(True) == 1
    assert [" active " in line for line in table[1:-1]].count(True) == 1
    if edit.column != "key":
        text = _ok(_cli(sc, url, "show", "target"))
        assert "status:         corrupt\n" in text and f"problem:        {reason}" in text


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.name)
def test_a_hand_edited_schedule_row_is_shown_by_name_and_set_aside(sc, backend, db_url, edit, caplog):
    clause = edit.clause(backend)
    if clause is None:
        pytest.skip(f"{backend} cannot store {edit.name}")
    sc.add("target", "t", cron="* * * * *", data={"n": 1}, next_time=T0 + 60, now=T0)
    sc.add("other", "t", cron="0 * * * *", next_time=T0 + 60, now=T0)
    raw, queue_raw = RawTable(db_url, sc.table), RawTable(db_url, sc.queue.table)
    try:
        assert raw.edit(clause, "type = 't' AND cron = '* * * * *'") == 1
        before = repr((raw.rows(), queue_raw.rows()))
        reason = edit.extra["reason"]
        reason = reason if isinstance(reason, str) else reason[backend]
        _reads_show_it(sc, db_url, edit, reason)
        assert sc["other"].metadata().cron == "0 * * * *"
        assert repr((raw.rows(), queue_raw.rows())) == before  # no read wrote anything

        with caplog.at_level(logging.INFO, logger="perfectsched"):
            assert sc.tick(now=LATER) == 1  # the other one fired
            assert sc.tick(now=LATER + 3600) == 1
        assert sorted(m.key for m in sc.queue.list()) == [f"other.{T0 + 2800}", f"other.{T0 + 6400}"]
        target = _target(list(sc.list()))
        if edit.extra.get("never_due"):  # never due: never set aside, still shown as corrupt
            assert (target.status, target.error, _aside_lines(caplog)) == ("active", None, [])
            assert reason in target.problem
            return
        assert target.status == "set_aside" and reason in target.error and sc.queue.owner in target.error
        (line,) = _aside_lines(caplog)  # logged once
        assert reason in line
        if edit.column != "key":
            _resume_does_not_loop(sc, db_url, edit, reason, raw, caplog)
    finally:
        raw.close()
        queue_raw.close()


def _resume_does_not_loop(sc, url, edit, reason, raw, caplog):
    """A row still corrupt stays set aside (resume refused with the reason, nothing written, not
    logged again); one the set-aside mended (its lease and due-time columns) resumes and fires."""
    meta = sc["target"].metadata()  # set aside: shown, not refused
    assert meta.status == "set_aside" and reason in meta.error
    before = repr(raw.rows())
    if edit.extra.get("mended"):
        assert meta.problem is None
        assert _ok(_cli(sc, url, "resume", "target")).startswith("target next_time=")
        with caplog.at_level(logging.INFO, logger="perfectsched"):
            assert sc.tick(now=LATER + 3600) > 0
        assert len(_aside_lines(caplog)) == 1 and sc["target"].metadata().status == "active"
        return
    with pytest.raises(ValidationError, match=re.escape(reason)):
        sc["target"].resume(now=LATER + 3600)
    result = _cli(sc, url, "resume", "target")
    assert result.exit_code == 1 and reason in result.stderr and result.stderr.count("\n") == 1
    assert repr(raw.rows()) == before
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        sc.tick(now=LATER + 7200)
    assert len(_aside_lines(caplog)) == 1 and sc["target"].metadata().status == "set_aside"


def test_modify_brings_back_a_hand_edited_schedule_from_now_or_says_why_not(sc, db_url):
    """Any change of a schedule that cannot be computed as stored writes its times and lease anew,
    from now, as for a set-aside one; a change that leaves the edited column as it is is refused
    by name and writes nothing."""
    sc.add("held", "t", cron="0 * * * *", next_time=T0 + 60, now=T0)
    sc.add("born", "t", cron="0 * * * *", next_time=T0 + 60, now=T0)
    raw = RawTable(db_url, sc.table)
    key = raw.quote("key")
    try:
        raw.edit("leased = 7, lease_token = -1", f"{key} = 'held'")
        raw.edit("created_at = 1e300", f"{key} = 'born'")
        problems = {m.key: m.problem.split(":")[0] for m in sc.list()}
        assert problems == {"held": "column leased", "born": "column created_at"}
        m = sc.modify("held", type="u", now=LATER)
        assert (m.status, m.problem, m.type, m.next_time, m.leased) == ("active", None, "u", T0 + 6400, False)
        (held,) = raw.rows(f"{key} = 'held'")
        assert (held["leased"], held["lease_token"], held["timeout"]) == (0, None, T0 + 6400)
        before = raw.rows()
        with pytest.raises(ValidationError, match="column created_at: 1e"):
            sc.modify("born", type="u", now=LATER)
        assert raw.rows() == before
    finally:
        raw.close()
