"""Acceptance tests of the ``perfectsched`` command line: on SQLite and one server database
(marker ``one_server``), and on all three what meets a database's own errors (``every_database``).

Most cases run in-process with click's CliRunner (stdout and stderr separate); a few run the
installed console script in a subprocess. Time-dependent behaviour uses explicit times
(``--start``, ``--from``) instead of waiting for time to pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import forkserver
import pytest
from cli_support import assert_one_line_error, clean_env  # noqa: F401
from click.testing import CliRunner

import perfectsched
import queue_core
from perfectsched.cli import cli

pytestmark = pytest.mark.one_server

VENV_BIN = Path(sys.executable).parent
PERFECTSCHED = VENV_BIN / "perfectsched"
YEARLY = "0 0 1 1 *"


def epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


# -- helpers ---------------------------------------------------------------------------------------


def invoke(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env=env, input=input)


def assert_error(result, code: int, *fragments: str) -> str:
    return assert_one_line_error("perfectsched", result, code, *fragments)


class PS:
    """perfectsched bound to one database, a queue table and a schedule table."""

    def __init__(self, url: str, table: str):
        self.url, self.table, self.schedule_table = url, table, table + "_s"

    def opts(self) -> list[str]:
        return ["-D", self.url, "--table", self.table, "--schedule-table", self.schedule_table]

    def __call__(self, command: str, *args: str, env: dict | None = None, input: str | None = None):
        return invoke(command, *self.opts(), *args, env=env, input=input)

    def ok(self, command: str, *args: str, env: dict | None = None) -> str:
        result = self(command, *args, env=env)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        if command != "run":  # run logs to stderr
            assert result.stderr == ""
        return result.stdout

    def json(self, command: str, *args: str):
        return json.loads(self.ok(command, *args, "--format", "json"))

    def sched(self):
        return perfectsched.open(self.url, self.schedule_table, self.table)

    def meta(self, key: str):
        with self.sched() as sc:
            return sc[key].metadata()

    def schedules(self) -> list:
        with self.sched() as sc:
            return list(sc.list())

    def task_keys(self) -> list[str]:
        with queue_core.open(self.url, self.table) as q:
            return sorted(m.key for m in q.list())


@pytest.fixture
def ps(db_url, table_name, backend):
    p = PS(db_url, table_name)
    yield p
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, p.table, p.schedule_table)


@pytest.fixture
def ready(ps):
    ps.ok("init")
    return ps


def due_yearly(start: str, now: float) -> list[int]:
    """Jan 1 00:00 UTC occurrences at or after ``start`` and at or before ``now``."""
    times = perfectsched.upcoming(YEARLY, epoch(start) - 1, 30)
    return [t for t in times if t <= now]


# -- init ----------------------------------------------------------------------------------------
def test_init_twice(ps):
    out = ps.ok("init")
    assert out.startswith(f"initialized schedule table {ps.schedule_table} and queue table {ps.table} in ")
    assert ps.ok("init") == out
    assert ps.json("list") == []
    assert ps.task_keys() == []  # the queue table exists too


@pytest.mark.every_database
def test_commands_before_init_are_database_errors(ps):
    assert_error(ps("list"), 5, "table not found", "run 'init' first")
    assert_error(ps("run", "--burst"), 5, "run 'init' first")


@pytest.mark.every_database
def test_run_on_a_schedule_table_init_did_not_upgrade_says_so(ready):
    from conftest import downgrade

    with ready.sched() as sc:
        downgrade(sc.store, ["error", "queue", "tags"], 1)  # made by the release before set-aside schedules
    assert_error(ready("run", "--burst"), 5, "schema version 1", "run 'init' to upgrade it")
    ready.ok("init")
    assert ready("run", "--burst").exit_code == 0


# -- add -----------------------------------------------------------------------------------------
def test_the_users_example(ready):
    before = time.time()
    out = ready.ok("add", "s1", "type", "0 * * * *", "{}")
    m = ready.meta("s1")
    assert (m.key, m.type, m.cron, m.data, m.delay, m.timezone) == ("s1", "type", "0 * * * *", {}, 0, "UTC")
    assert (m.catchup, m.dst) == ("all", "vixie")
    assert m.next_time % 3600 == 0 and before < m.next_time <= before + 3600
    assert m.next_run_time == m.next_time
    iso = datetime.fromtimestamp(m.next_time, UTC).isoformat()
    assert out == f"s1 next_time={iso} next_run_time={iso}\n"


@pytest.mark.parametrize("style", ["short", "long"])
def test_add_with_every_option(ready, style):
    names = {"short": ["-d", "-t", "-s", "-a"], "long": ["--delay", "--timezone", "--start", "--at"]}[style]
    d, t, s, a = names
    out = ready.ok(
        "add",
        "full",
        "report",
        "0 9 * * mon-fri",
        '{"a": [1, 2], "b": "x"}',
        d,
        "30",
        t,
        "Asia/Tokyo",
        s,
        "2026-11-21T00:00:00+09:00",
        a,
        "2026-11-23T09:05:00+09:00",
        "--catchup",
        "latest",
        "--dst",
        "exact",
    )
    m = ready.meta("full")
    assert (m.type, m.cron, m.data, m.delay, m.timezone, m.catchup, m.dst) == (
        "report",
        "0 9 * * mon-fri",
        {"a": [1, 2], "b": "x"},
        30,
        "Asia/Tokyo",
        "latest",
        "exact",
    )
    # 2026-11-21 is a Saturday: the first weekday 09:00 in Tokyo is Monday the 23rd
    assert m.next_time == epoch("2026-11-23T09:00:00+09:00")
    assert m.next_run_time == epoch("2026-11-23T09:05:00+09:00")  # --at wins over next_time + delay
    assert out == "full next_time=2026-11-23T09:00:00+09:00 next_run_time=2026-11-23T09:05:00+09:00\n"


def test_add_an_interval_schedule_with_an_offset_and_a_queue(ready):
    start = epoch("2030-01-01T00:00:30Z")
    out = ready.ok("add", "sync", "type", "@every:15m", "{}", "--offset", "5m", "-s", str(start))
    m = ready.meta("sync")
    assert (m.cron, m.next_time) == ("@every:15m+5m", epoch("2030-01-01T00:05:00Z"))
    assert out.startswith("sync next_time=2030-01-01T00:05:00+00:00 ")
    assert "@every:15m+5m" in ready.ok("list")
    ready.ok("add", "billing", "type", "0 * * * *", "--queue", "billing")
    assert ready.meta("billing").queue_name == "billing"
    ready.ok("modify", "billing", "--queue", "other")
    assert ready.meta("billing").queue_name == "other"
    assert ready("add", "b2", "type", "0 * * * *", "--queue", "a b").exit_code == 2
    assert_error(ready("add", "bad", "type", "@every:15m", "--offset", "1h"), 1, "offset must be shorter")
    assert_error(ready("add", "bad", "type", "0 * * * *", "--offset", "5m"), 1, "--offset needs an interval")
    assert_error(ready("show", "bad"), 4, "not found")


def test_add_start_as_epoch_and_delay(ready):
    start = epoch("2030-01-01T00:00:30Z")
    out = ready.ok("add", "k", "t", "*/15 * * * *", "-s", str(start), "-d", "60")
    m = ready.meta("k")
    assert m.next_time == epoch("2030-01-01T00:15:00Z") and m.next_run_time == m.next_time + 60
    assert "next_run_time=2030-01-01T00:16:00+00:00" in out


def test_default_timezone_comes_from_the_config(ready, tmp_path):
    ready.ok("add", "env", "t", "0 0 * * *", env={"PQ_TIMEZONE": "Asia/Tokyo"})
    assert ready.meta("env").timezone == "Asia/Tokyo"
    (tmp_path / "pq.toml").write_text('[development]\ntimezone = "Europe/Paris"\n')
    ready.ok("add", "file", "t", "0 0 * * *", "-c", "pq.toml")
    assert ready.meta("file").timezone == "Europe/Paris"
    ready.ok("add", "opt", "t", "0 0 * * *", "-c", "pq.toml", "-t", "America/New_York")
    assert ready.meta("opt").timezone == "America/New_York"
    assert_error(ready("add", "bad", "t", "0 0 * * *", env={"PQ_TIMEZONE": "JST-9"}), 6, "timezone", "JST-9")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["???"], ["invalid cron", "???", "expected 5 fields"]),
        (["0 * * * * *"], ["invalid cron", "expected 5 fields", "got 6"]),
        (["0 0 30 2 *"], ["invalid cron", "never fires"]),
        (["61 * * * *"], ["invalid cron", "minute value 61"]),
        (["0 * * * *", "-t", "JST-9"], ["invalid timezone 'JST-9'"]),
        (["0 * * * *", "<>"], ["DATA is not valid JSON"]),
        (["0 * * * *", "[1]"], ["DATA must be a JSON object"]),
        (["0 * * * *", "-s", "tomorrow"], ["--start"]),
        (["0 * * * *", "-a", "2026-11-21T10:00:00"], ["--at", "no UTC offset"]),
        (["0 * * * *", "-d", "-5"], ["delay"]),
    ],
)
def test_invalid_input_exits_1_and_writes_nothing(ready, args, fragments):
    assert_error(ready("add", "s1", "type", *args), 1, *fragments)
    assert ready.json("list") == []


def test_duplicate_exits_3(ready):
    ready.ok("add", "s1", "type", "0 * * * *", "{}")
    before = ready.meta("s1")
    assert_error(ready("add", "s1", "other", "*/5 * * * *", "{}"), 3, "schedule 's1' already exists")
    assert ready.meta("s1") == before


# -- list / show -----------------------------------------------------------------------------------
def test_list_and_show_in_each_schedules_own_zone(ready):
    ready.ok("add", "tokyo", "report", "0 9 * * *", '{"x": 1}', "-t", "Asia/Tokyo", "-s", "2026-11-21T00:00:00Z")
    ready.ok("add", "utc", "job", "30 * * * *", "-s", "2026-11-21T00:00:00Z", "-d", "15")
    out = ready.ok("list")
    lines = out.splitlines()
    assert lines[0].split() == [
        "key",
        "type",
        "cron",
        "queue",
        "delay",
        "timezone",
        "next_time",
        "next_run_time",
        "catchup",
        "dst",
        "status",
        "data",
    ]
    assert lines[-1] == "2 entries."
    utc_row = next(line.split() for line in lines if line.startswith("utc "))
    tokyo_row = next(line.split() for line in lines if line.startswith("tokyo "))
    assert utc_row[2:] == [
        "30",
        "*",
        "*",
        "*",
        "*",
        "default",
        "15",
        "UTC",
        "2026-11-21T00:30:00+00:00",
        "2026-11-21T00:30:15+00:00",
        "all",
        "vixie",
        "active",
        "{}",
    ]
    # 00:00Z is 09:00 in Tokyo: at-or-after, so it is the first occurrence
    assert tokyo_row[-6:] == [
        "2026-11-21T09:00:00+09:00",
        "2026-11-21T09:00:00+09:00",
        "all",
        "vixie",
        "active",
        '{"x":1}',
    ]
    rows = {r["key"]: r for r in ready.json("list")}
    assert rows["tokyo"]["next_time"] == epoch("2026-11-21T00:00:00Z")
    assert rows["tokyo"]["next_time_iso"] == "2026-11-21T09:00:00+09:00"
    assert rows["utc"]["next_run_time"] == epoch("2026-11-21T00:30:15Z")
    assert rows["utc"]["next_run_time_iso"] == "2026-11-21T00:30:15+00:00"
    assert rows["tokyo"]["data"] == {"x": 1} and rows["tokyo"]["timezone"] == "Asia/Tokyo"

    text = ready.ok("show", "tokyo")
    assert "timezone:       Asia/Tokyo" in text
    assert f"next_time:      2026-11-21T09:00:00+09:00 ({epoch('2026-11-21T00:00:00Z')})" in text
    shown = ready.json("show", "tokyo")
    assert shown["next_time_iso"] == "2026-11-21T09:00:00+09:00" and shown["cron"] == "0 9 * * *"


def test_list_empty_and_one_entry(ready):
    assert ready.ok("list").splitlines()[-1] == "0 entries."
    ready.ok("add", "a", "t", "@daily")
    assert ready.ok("list").splitlines()[-1] == "1 entry."


# -- show / delete / modify ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["show"], ["delete"], ["modify", "--type", "x"]])
def test_unknown_key_exits_4(ready, command):
    name, *rest = command
    assert_error(ready(name, "nope", *rest), 4, "schedule 'nope' not found")


def test_modify_recomputes_next_time(ready):
    ready.ok("add", "s", "t", YEARLY, "-s", "2020-06-01T00:00:00Z")
    assert ready.meta("s").next_time == epoch("2021-01-01T00:00:00Z")
    out = ready.ok("modify", "s", "--type", "other", "--data", '{"v": 2}', "--catchup", "skip")
    m = ready.meta("s")
    assert (m.type, m.data, m.catchup, m.next_time) == ("other", {"v": 2}, "skip", epoch("2021-01-01T00:00:00Z"))
    assert out == "s next_time=2021-01-01T00:00:00+00:00 next_run_time=2021-01-01T00:00:00+00:00\n"

    before = time.time()
    out = ready.ok("modify", "s", "--cron", "0 * * * *", "--delay", "5")
    m = ready.meta("s")
    assert m.cron == "0 * * * *" and m.delay == 5
    assert before < m.next_time <= time.time() + 3600 and m.next_time % 3600 == 0
    assert m.next_run_time == m.next_time + 5
    assert out.startswith(f"s next_time={datetime.fromtimestamp(m.next_time, UTC).isoformat()} ")

    out = ready.ok("modify", "s", "--timezone", "Asia/Kolkata", "--dst", "exact")
    m = ready.meta("s")
    assert (m.timezone, m.dst) == ("Asia/Kolkata", "exact")
    assert "+05:30" in out and m.next_time % 1800 == 0  # :00 in Kolkata is :30 in UTC

    result = ready("modify", "s")
    assert result.exit_code == 2 and "nothing to change" in result.stderr
    assert_error(ready("modify", "s", "--cron", "0 0 30 2 *"), 1, "never fires")
    assert_error(ready("modify", "s", "--timezone", "JST-9"), 1, "JST-9")
    assert_error(ready("modify", "s", "--data", "<>"), 1, "--data is not valid JSON")
    assert ready.meta("s") == m


def test_delete(ready):
    ready.ok("add", "a", "t", "* * * * *")
    ready.ok("add", "b", "t", "* * * * *")
    assert ready.ok("delete", "a") == "deleted\n"
    assert [r["key"] for r in ready.json("list")] == ["b"]
    assert_error(ready("delete", "a"), 4)


# -- next (no database) ----------------------------------------------------------------------------------
def next_lines(*args: str) -> list[str]:
    result = invoke("next", *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stderr == ""
    return result.stdout.splitlines()


def test_next_spring_forward_vixie_shifts_exact_skips():
    args = ["0 2 * * *", "-t", "America/Los_Angeles", "--from", "2015-03-07T00:00:00-08:00", "-n", "3"]
    assert [line.split() for line in next_lines(*args)] == [
        ["2015-03-07T02:00:00-08:00", "2015-03-07T10:00:00Z"],
        ["2015-03-08T03:00:00-07:00", "2015-03-08T10:00:00Z", "shifted", "(DST", "gap)"],
        ["2015-03-09T02:00:00-07:00", "2015-03-09T09:00:00Z"],
    ]
    exact = next_lines(*args, "--dst", "exact")
    assert [line.split()[0] for line in exact] == [
        "2015-03-07T02:00:00-08:00",
        "2015-03-09T02:00:00-07:00",
        "2015-03-10T02:00:00-07:00",
    ]
    assert not any("shifted" in line for line in exact)


def test_next_fall_back_exact_repeats_vixie_once():
    args = ["30 1 * * *", "-t", "America/Los_Angeles", "--from", "2015-10-31T12:00:00Z", "-n", "3"]
    assert next_lines(*args, "--dst", "exact") == [
        "2015-11-01T01:30:00-07:00  2015-11-01T08:30:00Z",
        "2015-11-01T01:30:00-08:00  2015-11-01T09:30:00Z  repeated (DST fold)",
        "2015-11-02T01:30:00-08:00  2015-11-02T09:30:00Z",
    ]
    vixie = next_lines(*args)
    assert [line.split()[0] for line in vixie] == [
        "2015-11-01T01:30:00-07:00",
        "2015-11-02T01:30:00-08:00",
        "2015-11-03T01:30:00-08:00",
    ]


def test_next_json_default_count_and_config_zone(tmp_path):
    result = invoke(
        "next", "@hourly", "--from", "2026-01-01T00:00:00Z", "--format", "json", env={"PQ_TIMEZONE": "Asia/Tokyo"}
    )
    assert result.exit_code == 0, result.stderr
    items = json.loads(result.stdout)
    assert len(items) == 10
    assert items[0] == {
        "time": epoch("2026-01-01T01:00:00Z"),
        "local": "2026-01-01T10:00:00+09:00",
        "utc": "2026-01-01T01:00:00Z",
        "shifted": False,
        "repeated": False,
    }
    before = time.time()
    lines = next_lines("* * * * *", "-n", "2")
    assert len(lines) == 2 and epoch(lines[0].split()[1]) > before  # default --from is now


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["???"], 1, "invalid cron"),
        (["0 0 30 2 *"], 1, "never fires"),
        (["* * * * *", "-t", "JST-9"], 1, "invalid timezone 'JST-9'"),
        (["* * * * *", "--from", "soon"], 1, "--from"),
    ],
)
def test_next_errors(args, code, fragment):
    assert_error(invoke("next", *args), code, fragment)


def test_next_previews_an_interval_with_its_offset():
    lines = next_lines("@every:15m", "--offset", "5m", "--from", "2026-01-01T00:00:00Z", "-n", "3", "-t", "Asia/Tokyo")
    assert [line.split() for line in lines] == [
        ["2026-01-01T09:05:00+09:00", "2026-01-01T00:05:00Z"],
        ["2026-01-01T09:20:00+09:00", "2026-01-01T00:20:00Z"],
        ["2026-01-01T09:35:00+09:00", "2026-01-01T00:35:00Z"],
    ]
    assert_error(invoke("next", "@every:15m", "--offset", "15m"), 1, "offset must be shorter")
    assert_error(invoke("next", "0 * * * *", "--offset", "5m"), 1, "--offset needs an interval")
    assert_error(invoke("next", "@every:fortnight"), 1, "invalid interval", "@every:15m")


def test_next_usage_errors():
    assert invoke("next", "* * * * *", "-n", "0").exit_code == 2
    assert invoke("next", "* * * * *", "--dst", "summer").exit_code == 2


# -- run ---------------------------------------------------------------------------------------------
def test_run_burst_submits_due_occurrences_once(ready):
    ready.ok("add", "y", "report", YEARLY, '{"n": 1}', "-s", "2021-01-01T00:00:00Z", "-d", "7")
    ready.ok("add", "future", "report", YEARLY, "-s", "2100-01-01T00:00:00Z")
    before = time.time()
    ready.ok("run", "--burst")
    due = due_yearly("2021-01-01T00:00:00Z", time.time())
    assert due == due_yearly("2021-01-01T00:00:00Z", before) and len(due) >= 6
    assert ready.task_keys() == sorted(f"y.{t}" for t in due)
    with queue_core.open(ready.url, ready.table) as q:
        m = q[f"y.{due[0]}"].metadata()
    assert (m.type, m.data, m.run_at) == ("report", {"n": 1}, due[0] + 7)
    assert ready.meta("y").next_time == perfectsched.next_time(YEARLY, due[-1])
    assert ready.meta("future").next_time == epoch("2100-01-01T00:00:00Z")

    ready.ok("run", "--burst")  # nothing new
    assert ready.task_keys() == sorted(f"y.{t}" for t in due)


def test_run_burst_catchup_policies(ready):
    for policy in ("all", "latest", "skip"):
        ready.ok("add", policy, "t", YEARLY, "-s", "2022-01-01T00:00:00Z", "--catchup", policy)
    ready.ok("run", "--burst")
    due = due_yearly("2022-01-01T00:00:00Z", time.time())
    keys = ready.task_keys()
    assert [k for k in keys if k.startswith("all.")] == sorted(f"all.{t}" for t in due)
    assert [k for k in keys if k.startswith("latest.")] == [f"latest.{due[-1]}"]
    assert [k for k in keys if k.startswith("skip.")] == []
    assert {ready.meta(p).next_time for p in ("all", "latest", "skip")} == {perfectsched.next_time(YEARLY, due[-1])}


HANDLER = """
import os

import queue_core

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "handled.txt")


class Handler:
    def __init__(self, task):
        self.task = task

    def run(self):
        with open(OUT, "a") as fh:
            fh.write(f"{self.task.key} {self.task.scheduled_time}\\n")
        if self.task.data.get("fail"):
            raise RuntimeError("boom")
        if self.task.data.get("invalid"):
            raise queue_core.PermanentError("no such account")


class Boom(queue_core.Application):
    def perform(self):
        Handler(self.task).run()
        raise RuntimeError("app boom")


class Worker(queue_core.Dispatch):
    routes = [("job", Handler), ("boom", Boom)]
"""


def test_run_target_burst_handles_due_occurrences_in_order_once(ready, tmp_path):
    handlers = tmp_path / "sched_handlers.py"
    handlers.write_text(HANDLER)
    out = tmp_path / "handled.txt"
    ready.ok("add", "h", "job", YEARLY, "-s", "2023-01-01T00:00:00Z")
    ready.ok("add", "bad", "job", YEARLY, '{"fail": true}', "-s", "2024-06-01T00:00:00Z")
    result = ready("run", f"{handlers}:Handler", "--burst")
    assert result.exit_code == 0, result.stderr
    due = due_yearly("2023-01-01T00:00:00Z", time.time())
    lines = out.read_text().splitlines()
    assert [line for line in lines if line.startswith("h ")] == [f"h {t}" for t in due]
    # the failing handler ran its first occurrence once and was retried later (retry_wait)
    assert [line for line in lines if line.startswith("bad ")] == [f"bad {epoch('2025-01-01T00:00:00Z')}"]
    assert ready.meta("h").next_time == perfectsched.next_time(YEARLY, due[-1])
    assert ready.meta("bad").next_time == epoch("2025-01-01T00:00:00Z")
    assert "retry schedule=bad" in result.stderr and "RuntimeError: boom" in result.stderr
    assert ready.task_keys() == []  # handlers do not go through the queue

    assert ready("run", f"{handlers}:Handler", "--burst").exit_code == 0  # nothing new
    assert out.read_text().splitlines() == lines


def test_run_target_skips_an_occurrence_whose_handler_raised_a_permanent_error(ready, tmp_path):
    """PermanentError: that occurrence can never succeed; it is skipped, logged as an error, and
    the schedule goes on with its next occurrences (each run once, each skipped once)."""
    handlers = tmp_path / "sched_handlers.py"
    handlers.write_text(HANDLER)
    ready.ok("add", "inv", "job", YEARLY, '{"invalid": true}', "-s", "2024-06-01T00:00:00Z")
    result = ready("run", f"{handlers}:Handler", "--burst", env={"PQ_RETRY_WAIT": "0"})
    assert result.exit_code == 0, result.stderr
    due = due_yearly("2024-06-01T00:00:00Z", time.time())
    assert (tmp_path / "handled.txt").read_text().splitlines() == [f"inv {t}" for t in due]
    assert result.stderr.count("skipped schedule=inv") == len(due)
    assert "PermanentError: no such account" in result.stderr and "retry schedule=inv" not in result.stderr
    assert ready.meta("inv").next_time == perfectsched.next_time(YEARLY, due[-1])


def test_run_target_dispatch_application_errors_retry_once_per_burst(ready, tmp_path):
    handlers = tmp_path / "sched_handlers.py"
    handlers.write_text(HANDLER)
    ready.ok("add", "ok", "job", YEARLY, "-s", "2025-06-01T00:00:00Z")
    ready.ok("add", "app", "boom", YEARLY, "-s", "2025-06-01T00:00:00Z")
    jan1 = epoch("2026-01-01T00:00:00Z")
    # retry_wait 0: the failed occurrence is due again at once; a burst still tries it once
    result = ready("run", f"{handlers}:Worker", "--burst", env={"PQ_RETRY_WAIT": "0"})
    assert result.exit_code == 0, result.stderr
    assert sorted((tmp_path / "handled.txt").read_text().splitlines()) == [f"app {jan1}", f"ok {jan1}"]
    assert "retry schedule=app" in result.stderr and "RuntimeError: app boom" in result.stderr
    assert "already attempted in this burst" in result.stderr
    assert ready.meta("app").next_time == jan1 and not ready.meta("app").leased
    assert ready.meta("ok").next_time == epoch("2027-01-01T00:00:00Z")


def test_run_target_errors(ready, tmp_path):
    assert_error(ready("run", "no_such_module_xyz:Handler", "--burst"), 6, "no_such_module_xyz")
    (tmp_path / "hh.py").write_text("class Handler:\n    pass\n")
    assert_error(ready("run", f"{tmp_path}/hh.py:Nope", "--burst"), 6, "Nope")
    assert ready("run", "-r", "json", "--burst").exit_code == 2  # -r without TARGET
    assert ready("run", "--poll-interval", "0").exit_code == 2


# -- set-aside schedules ------------------------------------------------------------------------------
def hand_edit(ps, key: str, **values) -> None:
    """Change a schedule row by hand, as an operator's SQL would."""
    import sqlalchemy as sa

    with ps.sched() as sc:
        t = sc.store.t
        sc.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == key).values(**values)), what="hand edit")


def test_run_sets_aside_what_it_cannot_compute_and_list_show_resume_and_modify(ready):
    ready.ok("add", "ok", "job", YEARLY, "-s", "2021-01-01T00:00:00Z")
    ready.ok("add", "moon", "job", YEARLY, "-s", "2020-01-01T00:00:00Z")  # due first
    hand_edit(ready, "moon", timezone="Mars/Olympus_Mons")
    result = ready("run", "--burst")
    assert result.exit_code == 0, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "set aside" in x]
    assert "schedule=moon" in line and "invalid timezone 'Mars/Olympus_Mons': unknown IANA zone" in line
    assert ready.meta("ok").next_time > time.time() and [k for k in ready.task_keys() if k.startswith("moon")] == []
    assert "set aside" not in ready("run", "--burst").stderr  # logged once: it is not due any more

    lines = ready.ok("list").splitlines()
    assert lines[0].split() == [
        "key",
        "type",
        "cron",
        "queue",
        "delay",
        "timezone",
        "next_time",
        "next_run_time",
        "catchup",
        "dst",
        "status",
        "data",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert rows["moon"][-2:] == ["set_aside", "{}"] and rows["ok"][-2:] == ["active", "{}"]
    text = ready.ok("show", "moon")
    assert "status:         set_aside\n" in text
    assert "error:          invalid timezone 'Mars/Olympus_Mons': unknown IANA zone (set aside by " in text
    assert "error:          -\n" in ready.ok("show", "ok")
    shown = {r["key"]: r for r in ready.json("list")}
    assert (shown["moon"]["status"], shown["ok"]["status"], shown["ok"]["error"]) == ("set_aside", "active", None)
    assert "unknown IANA zone" in ready.json("show", "moon")["error"]

    assert_error(ready("resume", "moon"), 1, "invalid timezone 'Mars/Olympus_Mons'")
    assert_error(ready("resume", "nope"), 4, "schedule 'nope' not found")
    out = ready.ok("modify", "moon", "--timezone", "Asia/Tokyo")
    assert out.startswith("moon next_time=") and "+09:00" in out
    assert (ready.meta("moon").status, ready.meta("moon").error) == ("active", None)
    assert ready.meta("moon").next_time > time.time()  # from now, as for a new schedule


def test_resume_continues_where_it_stopped(ready):
    ready.ok("add", "y", "job", YEARLY, "-s", "2021-01-01T00:00:00Z", "--catchup", "latest")
    hand_edit(ready, "y", cron="0 0 1 13 *")
    assert ready("run", "--burst").exit_code == 0
    assert ready.meta("y").status == "set_aside"
    hand_edit(ready, "y", cron=YEARLY)
    assert ready.ok("resume", "y") == "y next_time=2021-01-01T00:00:00+00:00 next_run_time=2021-01-01T00:00:00+00:00\n"
    assert ready.ok("resume", "y").startswith("y next_time=")  # an active schedule: nothing to do
    ready.ok("run", "--burst")
    due = due_yearly("2021-01-01T00:00:00Z", time.time())
    assert ready.task_keys() == [f"y.{due[-1]}"]  # its catch-up policy decided about the missed ones


# -- real processes ----------------------------------------------------------------------------------
def script(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 60):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    full_env.update(env or {})
    return forkserver.run(
        [str(PERFECTSCHED), *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout
    )


def test_script_next_and_one_line_errors(tmp_path):
    assert PERFECTSCHED.exists(), PERFECTSCHED
    proc = script("next", "0 2 * * *", "-t", "America/Los_Angeles", "--from", "2015-03-07T00:00:00-08:00", "-n", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "2015-03-08T03:00:00-07:00  2015-03-08T10:00:00Z  shifted (DST gap)"
    proc = script("add", "s1", "type", "0 * * * *", "<>", "-D", f"sqlite:///{tmp_path}/pq.db")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("perfectsched: error: DATA is not valid JSON") and proc.stderr.count("\n") == 1


def test_script_run_submits_until_sigterm(ps, tmp_path):
    opts = ps.opts()
    assert script("init", *opts).returncode == 0
    start_ts = time.time() - 180
    start = datetime.fromtimestamp(start_ts, UTC).isoformat()
    proc = script("add", "every", "tick", "* * * * *", "{}", "--start", start, *opts)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("every next_time=")
    # occurrences at or after --start (which has fractions of a second) that are due by now
    due = [t for t in perfectsched.upcoming("* * * * *", start_ts - 1, 10) if start_ts <= t <= time.time()]
    log_file = tmp_path / "sched.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    runner = subprocess.Popen(
        [str(PERFECTSCHED), "run", *opts, "--poll-interval", "0.2", "--log", str(log_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while len(ps.task_keys()) < len(due) and time.monotonic() < deadline and runner.poll() is None:
            time.sleep(0.1)
        assert runner.poll() is None, runner.communicate()
        keys = ps.task_keys()
        assert set(keys) >= {f"every.{t}" for t in due}
        runner.send_signal(signal.SIGHUP)  # restart: re-reads the config, keeps running
        time.sleep(0.5)
        assert runner.poll() is None
        runner.send_signal(signal.SIGTERM)
        out, err = runner.communicate(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    assert runner.returncode == 0, err
    assert out == "" and err == ""
    text = log_file.read_text()
    assert "submitted" in text and "restart signal SIGHUP" in text and "stop signal SIGTERM" in text
    # each occurrence once, keys derived from the time
    keys = ps.task_keys()
    assert len(keys) == len(set(keys)) and all(k.startswith("every.") for k in keys)
