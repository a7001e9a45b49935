"""Task rows edited by hand into values pq never writes, one column at a time, on SQLite, MariaDB
and PostgreSQL.

Every read (``Queue.list``, ``Task.metadata``, ``stats``, ``perfectqueue list/show/stats``)
refuses such a row with ``CorruptRowError`` naming the table, the key and the column (the CLI:
one line, exit 5); the claim sets a due one aside (finished as failure, the reason in its error)
instead of leasing it, and leases the other rows; no other row is written. A real worker keeps
serving through such rows. Values of pq's own ranges (a due time in 1970 or 9999, attempts past
max_attempts, a lease token copied from another row) are not corrupt and behave as stored.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner
from hand_edits import ONLY, Edit, RawTable, key_set
from hostile_support import (  # noqa: F401 - fixtures
    HERE,
    clean_environ,
    one_line_error,
    shared_queue_fixture,
    shared_tables_fixture,
)

import queue_core
from queue_core import CorruptRowError, PreemptedError
from queue_core.cli.main import cli as pq_cli

T0 = 1_700_000_000.0
BIN = os.path.dirname(sys.executable)
KEY = {"mysql": "`key`", "*": '"key"'}


CORRUPT = [
    Edit("data-not-json", "data = 'not json'", "data"),
    Edit("data-empty", "data = ''", "data"),
    Edit("data-not-text", {**ONLY, "sqlite": "data = X'FF00'"}, "data"),
    Edit("key-empty", key_set("''"), "key"),
    Edit("key-not-utf8", {**key_set("X'FF61'"), "postgres": None}, "key"),
    Edit("type-empty", "type = ''", "type", in_stats=True),
    Edit("user-empty", "resource = ''", "resource"),
    Edit("max-running-zero", "resource = 'u', max_running = 0", "max_running"),
    Edit("max-running-negative", "resource = 'u', max_running = -5", "max_running"),
    Edit("priority-text", {**ONLY, "sqlite": "priority = 'high'"}, "priority"),
    Edit("priority-past-int32", {**ONLY, "sqlite": "priority = 9223372036854775807"}, "priority"),
    Edit("state-7", "state = 7", "state", set_aside=False, in_stats=True),
    Edit("state-negative", "state = -1", "state", set_aside=False, in_stats=True),
    Edit("leased-2", "leased = 2", "leased", in_stats=True),
    Edit("leased-while-finished", "state = 1, leased = 1, outcome = 'success'", "leased", set_aside=False),
    Edit("finished-without-outcome", "state = 1", "outcome", set_aside=False),
    Edit("outcome-while-waiting", "outcome = 'success'", "outcome"),
    Edit("outcome-unknown", "state = 1, outcome = 'bogus'", "outcome", set_aside=False, in_stats=True),
    Edit("timeout-negative", "timeout = -1e300", "timeout"),
    Edit("timeout-huge", "timeout = 1e300", "timeout", set_aside=False),
    Edit("timeout-nan", {**ONLY, "postgres": "timeout = 'NaN'"}, "timeout", set_aside=False),
    Edit("timeout-text", {**ONLY, "sqlite": "timeout = 'soon'"}, "timeout", set_aside=False),
    Edit("run-at-negative", "run_at = -5", "run_at"),
    Edit("created-at-infinite", {"postgres": "created_at = 'Infinity'", "*": "created_at = 1e300"}, "created_at"),
    Edit("started-at-negative", "started_at = -1", "started_at"),
    Edit("finished-at-huge", "finished_at = 1e300", "finished_at"),
    Edit("attempts-negative", "attempts = -3", "attempts"),
    Edit("max-attempts-zero", "max_attempts = 0", "max_attempts"),
    Edit("lease-token-negative", "lease_token = -1", "lease_token"),
    Edit("cancel-requested-5", "cancel_requested = 5", "cancel_requested"),
    Edit("error-not-text", {**ONLY, "sqlite": "error = X'00'"}, "error"),
    Edit("owner-not-text", {**ONLY, "sqlite": "owner = X'00'"}, "owner"),
    Edit("data-nan", """data = '{"a": NaN}'""", "data"),
    Edit("data-overflow", """data = '{"a": 1e999}'""", "data"),
    Edit("data-minus-infinity", """data = '{"a": -Infinity}'""", "data"),
    Edit("data-list", "data = '[1, 2]'", "data"),
    Edit("data-string", """data = '"text"'""", "data"),
    Edit("data-null", "data = 'null'", "data"),
    Edit("result-not-json", "result = 'not json'", "result"),
    Edit("result-nan", "result = '[NaN]'", "result"),
    Edit("group-empty", "grp = ''", "grp"),
    Edit("workflow-not-text", {**ONLY, "sqlite": "workflow = X'00'"}, "workflow"),
    Edit("definition-not-text", {**ONLY, "sqlite": "definition = X'00'"}, "definition"),
]


@pytest.fixture
def raw(shared_queue, db_url):
    """The module's queue table, emptied before and after the test (each test owns it whole)."""
    r = RawTable(db_url, shared_queue.table)
    r.wipe()
    yield r
    r.wipe()
    r.close()


def _cli(*args):
    return CliRunner().invoke(pq_cli, list(args), env={k: None for k in os.environ if k.startswith("PQ_")})


def _three(q, raw) -> dict[str, int]:
    """target and bystander due, other not due for an hour; their ids."""
    q.submit("target", "t", {"n": 1}, now=T0 - 30)
    q.submit("bystander", "t", {"n": 2}, now=T0 - 20)
    q.submit("other", "other", {"n": 3}, run_at=T0 + 3600, now=T0 - 10)
    return {_text(r["key"]): r["id"] for r in raw.rows()}


def _text(value) -> str:
    """A name as the test's own engine reads it (MySQL: VARBINARY bytes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _rows(raw, where: str, **params) -> str:
    """Rows compared as their repr: a NaN a test wrote equals itself."""
    return repr(raw.rows(where, **params))


def _edited(raw, backend, edit: Edit) -> dict[str, int]:
    clause = edit.clause(backend)
    if clause is None:
        pytest.skip(f"{backend} cannot store {edit.name}")
    return clause


@pytest.mark.parametrize("edit", CORRUPT, ids=lambda e: e.name)
def test_a_hand_edited_task_row_is_refused_by_name_and_set_aside(shared_queue, raw, backend, db_url, edit):
    q = shared_queue
    clause = _edited(raw, backend, edit)
    ids = _three(q, raw)
    assert raw.edit(clause, "id = :id", id=ids["target"]) == 1
    edited = _rows(raw, "id = :id", id=ids["target"])
    untouched = _rows(raw, "id <> :id", id=ids["target"])
    other = _rows(raw, "id = :id", id=ids["other"])
    wrong = f"column {edit.column} holds"

    with pytest.raises(CorruptRowError, match=wrong) as info:
        list(q.list(now=T0))
    assert q.table in str(info.value)
    if edit.column != "key":
        with pytest.raises(CorruptRowError, match=wrong):
            q["target"].metadata(now=T0)
    if edit.in_stats:
        with pytest.raises(CorruptRowError, match=f"column {edit.column}"):
            q.stats(now=T0)
    else:
        assert q.stats(now=T0)["total"] == 3
    assert wrong in one_line_error("perfectqueue", _cli("list", "-D", db_url, "--table", q.table), 5)
    assert _rows(raw, "id = :id", id=ids["target"]) == edited and _rows(raw, "id <> :id", id=ids["target"]) == untouched

    # the claim leases the bystander; the edited row is set aside, or left alone where unclaimable
    assert [t.key for t in q.poll_multi(5, now=T0)] == ["bystander"]
    assert q.poll_multi(5, now=T0 + 1) == []
    (after,) = raw.rows("id = :id", id=ids["target"])
    if edit.set_aside:
        assert (after["state"], after["leased"], after["outcome"]) == (1, 0, "failure"), after
        assert after["error"].startswith("set aside by the claim: task ") and wrong in after["error"], after
    else:
        assert repr([after]) == edited
    assert _rows(raw, "id = :id", id=ids["other"]) == other


TEXT_PRIORITY = Edit("priority-text", {**ONLY, "sqlite": "priority = 'high'"}, "priority")


@pytest.mark.parametrize("edited", ["other", "target"], ids=["not-due", "due"])
def test_a_text_priority_leaves_claims_limited_to_types_working(shared_queue, raw, backend, edited):
    """A claim limited to types (a worker serving its declared types) walks the types' priority
    levels in Python: a text level (SQLite keeps one) is ordered as SQLite orders it, above every
    number, instead of ending every claim with TypeError; due, the row is set aside."""
    q = shared_queue
    clause = _edited(raw, backend, TEXT_PRIORITY)
    ids = _three(q, raw)
    assert raw.edit(clause, "id = :id", id=ids[edited]) == 1
    got = q.poll_multi(5, types=["t", "other"], now=T0)
    assert sorted(t.key for t in got) == (["bystander"] if edited == "target" else ["bystander", "target"])
    (after,) = raw.rows("id = :id", id=ids[edited])
    if edited == "target":
        assert (after["state"], after["outcome"]) == (1, "failure") and "column priority holds" in after["error"]
    else:
        assert (after["state"], after["leased"], after["priority"]) == (0, 0, "high")


FINE = [
    Edit("due-in-1970", "timeout = 0, run_at = 0", None),
    Edit("due-in-9999", "timeout = 253402300799, run_at = 253402300799", None),
    Edit("attempts-past-max", "attempts = 10, max_attempts = 3", None),
    Edit("lowest-priority", "priority = -2147483648", None),
]


@pytest.mark.parametrize("edit", FINE, ids=lambda e: e.name)
def test_odd_values_of_pq_s_own_ranges_behave_as_stored(shared_queue, raw, backend, edit):
    q = shared_queue
    ids = _three(q, raw)
    raw.edit(edit.clause(backend), "id = :id", id=ids["target"])
    metas = {m.key: m for m in q.list(now=T0)}
    assert q.stats(now=T0)["total"] == 3
    claimed = [t.key for t in q.poll_multi(5, now=T0)]
    target = q["target"].metadata(now=T0)
    if edit.name == "due-in-9999":
        assert claimed == ["bystander"] and target.status == "waiting" and target.run_at == 253402300799
    elif edit.name == "attempts-past-max":
        assert claimed == ["bystander"]
        assert (target.outcome, target.error) == ("failure", "lease expired (gave up after 10 attempts)")
    elif edit.name == "lowest-priority":
        assert claimed == ["bystander", "target"] and metas["target"].priority == -(2**31)
    else:
        assert claimed == ["target", "bystander"]


def test_operators_end_a_corrupt_row_or_are_told_why(shared_queue, raw, db_url):
    """cancel and force-finish are how an operator gets rid of a corrupt row (they write the
    lease columns only); a state no transition starts from is refused by name, and not
    reported as done (cancel used to print "finished" and write nothing). show and stats: one
    line each, like list in the test above."""
    q = shared_queue
    for key in ("bad-data", "bad-data-2", "bad-state"):
        q.submit(key, "t", {}, now=T0)
    raw.edit("data = 'not json'", f"{KEY.get(raw.engine.dialect.name, KEY['*'])} IN ('bad-data', 'bad-data-2')")
    raw.edit("state = 7", f"{KEY.get(raw.engine.dialect.name, KEY['*'])} = 'bad-state'")
    opts = ["-D", db_url, "--table", q.table]
    result = _cli("cancel", "bad-data", *opts)
    assert (result.exit_code, result.stdout) == (0, "finished\n"), result.stderr
    result = _cli("force-finish", "bad-data-2", *opts)
    assert (result.exit_code, result.stdout) == (0, "finished\n"), result.stderr
    rows = {_text(r["key"]): r for r in raw.rows()}
    assert (rows["bad-data"]["state"], rows["bad-data"]["outcome"]) == (1, "cancelled")
    assert (rows["bad-data-2"]["state"], rows["bad-data-2"]["outcome"]) == (1, "success")
    for command in ("cancel", "force-finish", "show", "stats"):
        err = one_line_error("perfectqueue", _cli(command, *(["bad-state"] if command != "stats" else []), *opts), 5)
        assert "column state" in err
        if command in ("show", "stats"):
            continue
        assert "task 'bad-state'" in err and "column state holds 7" in err, err
        with pytest.raises(CorruptRowError, match="column state holds 7"):
            getattr(q["bad-state"], command.replace("-", "_").replace("cancel", "cancel_request"))(now=T0)
    assert {_text(r["key"]): r for r in raw.rows()} == rows


def test_a_lease_token_copied_from_another_row_fences_only_that_row(shared_queue, raw):
    q = shared_queue
    q.submit("a", "t", {}, now=T0)
    q.submit("b", "t", {}, now=T0)
    first, second = q.poll(now=T0), q.poll(now=T0)
    raw.edit(f"lease_token = {second.lease_token}", "id = :id", id=first.row_id)
    second.heartbeat(now=T0 + 1)
    second.finish(now=T0 + 2)
    held = raw.rows("id = :id", id=first.row_id)
    for call in (lambda: first.heartbeat(now=T0 + 3), lambda: first.finish(now=T0 + 3)):
        with pytest.raises(PreemptedError, match="taken over"):
            call()
    assert raw.rows("id = :id", id=first.row_id) == held
    assert q["b"].metadata(now=T0).outcome == "success"


# -- a real worker ------------------------------------------------------------------------------------
#: the nastiest edits for a worker: data it cannot decode, a name it cannot decode, a user cap
#: that never lets the row run, a lease flag out of range
WORKER_EDITS = {
    "data": "data = 'not json'",
    "leased": "leased = 2",
    "max_running": "resource = 'u', max_running = 0",
}


def test_a_worker_serves_around_hand_edited_rows(tmp_path):
    from conftest import _server_url, drop_tables

    urls = {
        "sqlite": f"sqlite:///{tmp_path}/rows.db",
        "mysql": _server_url("mysql"),
        "postgres": _server_url("postgres"),
    }
    table = f"hr{os.getpid() % 10000}_{uuid.uuid4().hex[:8]}"
    procs, raws, logs = {}, {}, {}
    try:
        for backend, url in urls.items():
            logs[backend] = log = tmp_path / f"{backend}.log"
            with queue_core.open(url, table) as q:
                q.init()
                for column in WORKER_EDITS:
                    q.submit(f"bad-{column}", "ok", {"log": str(log)}, priority=5)
                if backend != "postgres":
                    q.submit("bad-key", "ok", {"log": str(log)}, priority=5)
                for i in range(6):
                    q.submit(f"ok{i}", "ok", {"log": str(log)})
            raws[backend] = raw = RawTable(url, table)
            key = KEY.get(raw.engine.dialect.name, KEY["*"])
            for column, sets in WORKER_EDITS.items():
                assert raw.edit(sets, f"{key} = :k", k=f"bad-{column}") == 1
            if backend != "postgres":
                assert raw.edit(f"{key} = X'FF6261642D6B6579'", f"{key} = 'bad-key'") == 1
            procs[backend] = subprocess.Popen(
                [
                    f"{BIN}/perfectqueue",
                    "run",
                    f"{HERE / 'hostile_handlers.py'}:Worker",
                    "--burst",
                    "-D",
                    url,
                    "--table",
                    table,
                    "--processors",
                    "2",
                    "--poll-interval",
                    "0.1",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=clean_environ(),
            )
        outputs = {backend: p.communicate(timeout=120) for backend, p in procs.items()}
        for backend, raw in raws.items():
            code, (_out, err) = procs[backend].returncode, outputs[backend]
            assert code == 0, (backend, err[-3000:])
            assert "Traceback" not in err, (backend, err[-3000:])
            rows = {r["id"]: r for r in raw.rows()}
            ok = [r for r in rows.values() if _text(r["key"]).startswith("ok")]
            assert len(ok) == 6 and all(r["outcome"] == "success" for r in ok), (backend, ok, err[-3000:])
            bad = [r for r in rows.values() if r not in ok]
            assert len(bad) == len(WORKER_EDITS) + (backend != "postgres")
            for r in bad:
                assert (r["state"], r["outcome"]) == (1, "failure"), (backend, r)
                assert r["error"].startswith("set aside by the claim: "), (backend, r)
            set_aside = [line for line in err.splitlines() if "claim set aside: task" in line]
            assert len(set_aside) == len(bad), (backend, err[-3000:])  # one line each, not one per poll
            runs = logs[backend].read_text().split() if logs[backend].exists() else []
            assert not any(word.startswith("bad") for word in runs), runs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
        for backend, raw in raws.items():
            raw.close()
            if backend != "sqlite":
                drop_tables(urls[backend], table)
