"""Acceptance tests of the ``perfectqueue`` command line: on SQLite and one server database (marker
``one_server``: the store they reach runs its conformance suite on the three), and on all three
what meets a database's own limits, errors and text (``every_database``).

Most cases run in-process with click's CliRunner (stdout and stderr separate); a few run
the installed console script in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import forkserver
import pytest
from cli_support import assert_one_line_error, clean_env  # noqa: F401
from click.testing import CliRunner

import queue_core
from queue_core.cli.kit import exits, options, output, parsing, passwords, settings
from queue_core.cli.main import cli

pytestmark = pytest.mark.one_server

VENV_BIN = Path(sys.executable).parent
PERFECTQUEUE = VENV_BIN / "perfectqueue"
UNREACHABLE = "mysql+pymysql://u:s3cretpw@127.0.0.1:1/x"
ISO = "2026-11-21T10:00:00Z"
ISO_EPOCH = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC).timestamp()


# -- helpers ---------------------------------------------------------------------------------------


def invoke(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env=env, input=input)


def assert_error(result, code: int, *fragments: str) -> str:
    return assert_one_line_error("perfectqueue", result, code, *fragments)


class PQ:
    """perfectqueue bound to one database and a fresh table."""

    def __init__(self, url: str, table: str):
        self.url, self.table = url, table

    def __call__(self, command: str, *args: str, env: dict | None = None, input: str | None = None):
        # common options go right after the subcommand, so "--" in args still works
        return invoke(command, "-D", self.url, "--table", self.table, *args, env=env, input=input)

    def ok(self, command: str, *args: str, env: dict | None = None) -> str:
        result = self(command, *args, env=env)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        assert result.stderr == ""
        return result.stdout

    def json(self, command: str, *args: str):
        return json.loads(self.ok(command, *args, "--format", "json"))

    def queue(self):
        return queue_core.open(self.url, self.table)


@pytest.fixture
def pq(db_url, table_name, backend):
    p = PQ(db_url, table_name)
    yield p
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


@pytest.fixture
def ready(pq):
    pq.ok("init")
    return pq


def table_lines(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()]


# -- init ----------------------------------------------------------------------------------------
def test_init_twice(pq):
    out = pq.ok("init")
    assert out.startswith(f"initialized table {pq.table} in ")
    assert pq.ok("init") == out
    assert pq.json("list") == []
    pq.ok("submit", "k", "t")
    assert "re-created" in pq.ok("init", "--force")
    assert pq.json("list") == []


@pytest.mark.every_database
def test_commands_before_init_fail_as_database_error(pq):
    result = pq("list")
    assert_error(result, 5, "table not found", "run 'init' first")


# -- happy paths ---------------------------------------------------------------------------------
def test_submit_list_show_stats(ready):
    pq = ready
    assert (
        pq.ok(
            "submit",
            "k1",
            "email",
            '{"to": "a@example.com", "n": [1, 2]}',
            "-u",
            "alice",
            "--priority",
            "5",
            "--max-attempts",
            "3",
            "--max-running",
            "2",
            "-t",
            ISO,
        )
        == "k1\n"
    )
    assert pq.ok("submit", "k2", "report") == "k2\n"

    out = pq.ok("list")
    lines = out.splitlines()
    assert lines[0].split() == [
        "key",
        "queue",
        "type",
        "user",
        "status",
        "outcome",
        "priority",
        "attempts",
        "run_at",
        "created_at",
        "tags",
        "error",
    ]
    assert lines[-1] == "2 entries."
    rows = table_lines(out)[1:-1]
    assert rows[0][:9] == ["k1", "default", "email", "alice", "waiting", "-", "5", "0", "2026-11-21T10:00:00+00:00"]
    assert rows[1][:8] == ["k2", "default", "report", "-", "waiting", "-", "0", "0"]
    assert "a@example.com" not in out  # data stays out of the table

    tasks = pq.json("list")
    assert [t["key"] for t in tasks] == ["k1", "k2"]
    k1 = tasks[0]
    assert k1["data"] == {"to": "a@example.com", "n": [1, 2]}
    assert (k1["user"], k1["priority"], k1["max_attempts"], k1["max_running"]) == ("alice", 5, 3, 2)
    assert k1["run_at"] == ISO_EPOCH and k1["status"] == "waiting" and k1["outcome"] is None
    assert tasks[1]["data"] == {}

    # filters
    assert [t["key"] for t in pq.json("list", "--type", "report")] == ["k2"]
    assert [t["key"] for t in pq.json("list", "--user", "alice")] == ["k1"]
    assert [t["key"] for t in pq.json("list", "--limit", "1")] == ["k1"]
    assert pq.ok("list", "--status", "finished").splitlines()[-1] == "0 entries."
    assert len(pq.json("list", "--status", "waiting")) == 2

    shown = pq.ok("show", "k1")
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in shown.splitlines()}
    assert fields["key"] == "k1" and fields["type"] == "email" and fields["user"] == "alice"
    assert fields["status"] == "waiting" and fields["priority"] == "5"
    assert fields["run_at"] == "2026-11-21T10:00:00+00:00"
    assert json.loads(fields["data"]) == {"to": "a@example.com", "n": [1, 2]}
    assert set(fields) >= {
        "outcome",
        "attempts",
        "created_at",
        "error",
        "max_attempts",
        "started_at",
        "finished_at",
        "owner",
        "cancel_requested",
        "group",
        "max_running",
        "timeout",
    }
    shown_json = pq.json("show", "k1")
    assert [e["kind"] for e in shown_json.pop("history")] == ["submitted"]  # show adds the history
    assert shown_json == k1

    st = pq.json("stats")
    assert (st["pending"], st["waiting"], st["running"], st["finished"], st["total"]) == (0, 2, 0, 0, 2)
    assert st["types"]["email"]["waiting"] == 1 and st["types"]["report"]["waiting"] == 1
    out = pq.ok("stats")
    assert table_lines(out)[0] == ["type", "pending", "waiting", "running", "finished", "total"]
    assert ["(all)", "0", "2", "0", "0", "2"] in table_lines(out)
    assert out.splitlines()[-1] == "outcomes: success 0, failure 0, cancelled 0, skipped 0"


def test_submit_epoch_and_offset_times(ready):
    ready.ok("submit", "a", "t", "-t", "1795255200")
    ready.ok("submit", "b", "t", "--run-at", "2026-11-21T19:00:00+09:00")
    ready.ok("submit", "c", "t", "-t", "1795255200.5")
    got = {t["key"]: t["run_at"] for t in ready.json("list")}
    assert got == {"a": ISO_EPOCH, "b": ISO_EPOCH, "c": ISO_EPOCH + 0.5}
    assert_error(ready("submit", "d", "t", "-t", "2026-11-21T10:00:00"), 1, "offset")
    assert_error(ready("submit", "d", "t", "-t", "tomorrow"), 1, "ISO 8601")
    assert [t["key"] for t in ready.json("list")] == ["a", "b", "c"]


def test_cancel_force_finish_cleanup(ready):
    pq = ready
    for key in ("a", "b", "c", "d"):
        pq.ok("submit", key, "t")
    with pq.queue() as q:
        held = q.poll()  # "a" is now running
        assert held.key == "a"

    assert pq.ok("cancel", "b") == "finished\n"
    assert pq.json("show", "b")["outcome"] == "cancelled"
    assert pq.ok("cancel", "a") == "running\n"
    a = pq.json("show", "a")
    assert a["status"] == "running" and a["cancel_requested"] is True
    assert pq.ok("cancel_request", "c") == "finished\n"  # hidden alias

    assert pq.ok("force-finish", "a") == "finished\n"
    a = pq.json("show", "a")
    assert a["status"] == "finished" and a["outcome"] == "success"
    assert pq.ok("force_finish", "d") == "finished\n"  # hidden alias
    assert_error(pq("force-finish", "d"), 1, "already finished")

    st = pq.json("stats")
    assert st["finished"] == 4 and st["outcomes"] == {"success": 2, "failure": 0, "cancelled": 2, "skipped": 0}

    assert pq.ok("cleanup") == "0 rows purged.\n"  # retention not over yet
    pq.ok("submit", "e", "t")
    pq.ok("force-finish", "e", env={"PQ_RETENTION_TIME": "0"})
    time.sleep(0.01)
    assert pq.ok("cleanup") == "1 row purged.\n"
    assert sorted(t["key"] for t in pq.json("list")) == ["a", "b", "c", "d"]


def test_help_lists_commands_not_aliases():
    result = invoke("--help")
    assert result.exit_code == 0
    for name in ("init", "submit", "list", "show", "stats", "cancel", "force-finish", "cleanup", "run"):
        assert f"  {name} " in result.stdout
    assert "cancel_request" not in result.stdout and "force_finish" not in result.stdout
    assert "Exit codes" in result.stdout and "3 already exists" in result.stdout
    assert invoke("-h").stdout == result.stdout
    sub = invoke("submit", "-h")
    assert sub.exit_code == 0 and "--database" in sub.stdout and "PQ_DATABASE_URL" in sub.stdout


def test_version():
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"perfectqueue {version('pq')}\n"


# -- refused input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, message",
    [
        ("<>", "DATA is not valid JSON: Expecting value at line 1 column 1"),
        ("[1]", "DATA must be a JSON object like '{\"a\": 1}', got a list"),
        ('{"a":', "DATA is not valid JSON: Expecting value at line 1 column 6"),
        ('"s"', "got a string"),
        ('{"a": NaN}', "NaN is not allowed"),
    ],
)
def test_invalid_json_is_refused(ready, data, message):
    assert_error(ready("submit", "k", "t", data), 1, message)
    assert ready.json("list") == []


def test_duplicate_submit_exits_3(ready):
    ready.ok("submit", "k", "t", '{"a": 1}')
    err = assert_error(ready("submit", "k", "other"), 3)
    assert err == "perfectqueue: error: task 'k' already exists\n"
    assert ready.json("show", "k")["type"] == "t"


@pytest.mark.parametrize("command", ["show", "cancel", "force-finish"])
def test_unknown_key_exits_4(ready, command):
    err = assert_error(ready(command, "nope"), 4)
    assert err == "perfectqueue: error: task 'nope' not found\n"


def test_invalid_arguments_exit_1(ready):
    assert_error(ready("submit", "k", "t", "--priority", str(2**40)), 1, "priority")
    assert_error(ready("submit", "k", "t", "--max-running", "0"), 1, "max_running")
    assert_error(ready("submit", "", "t"), 1, "task key must not be empty")
    assert_error(ready("submit", "k" * 256, "t"), 1, "limit is 255")
    assert ready.json("list") == []


def test_usage_errors_exit_2(ready):
    result = ready("list", "--status", "sleeping")
    assert result.exit_code == 2 and "Invalid value" in result.stderr
    result = ready("submit", "only-a-key")
    assert result.exit_code == 2 and "Missing argument" in result.stderr
    assert invoke("frobnicate").exit_code == 2


@pytest.mark.every_database
def test_data_over_the_size_limit_exits_1(ready, tmp_path):
    big = json.dumps({"blob": "x" * 200})
    assert_error(ready("submit", "k", "t", big, env={"PQ_MAX_DATA_SIZE": "100"}), 1, "the limit is 100")
    # the default limit (1 MiB), data read from a file
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"blob": "x" * (1024 * 1024 + 1)}))
    assert_error(ready("submit", "k", "t", f"@{path}"), 1, "the limit is 1048576")
    assert ready.json("list") == []
    # under the limit: from a file and from stdin
    path.write_text('{"ok": true}')
    ready.ok("submit", "f", "t", f"@{path}")
    result = ready("submit", "s", "t", "-", input='{"stdin": 1}')
    assert result.exit_code == 0, result.stderr
    assert {t["key"]: t["data"] for t in ready.json("list")} == {"f": {"ok": True}, "s": {"stdin": 1}}


HOSTILE_KEYS = [
    'it\'s "quoted"',
    "x'; DROP TABLE pq_tasks; --",
    "a\\b%_*?",
    "ключ-ü-日本語-🎉",
    "  spaced  ",
    "-dash-first",
]


@pytest.mark.every_database
def test_hostile_keys_round_trip(ready):
    pq = ready
    for i, key in enumerate(HOSTILE_KEYS):
        out = pq.ok("submit", "--", key, "tÿpe'\"", json.dumps({"i": i, "k": key}))
        assert out == key + "\n"
    for i, key in enumerate(HOSTILE_KEYS):
        meta = json.loads(pq.ok("show", "--format", "json", "--", key))
        assert (meta["key"], meta["type"], meta["data"]) == (key, "tÿpe'\"", {"i": i, "k": key})
        text = pq.ok("show", "--", key)
        assert text.splitlines()[0].split(":", 1)[1].strip() == key.strip()
    assert sorted(t["key"] for t in pq.json("list")) == sorted(HOSTILE_KEYS)
    assert pq.ok("list").splitlines()[-1] == f"{len(HOSTILE_KEYS)} entries."
    assert pq.ok("cancel", "--", HOSTILE_KEYS[1]) == "finished\n"
    assert pq.json("stats")["total"] == len(HOSTILE_KEYS)  # the table is still there


def test_long_error_is_truncated_in_the_table(ready):
    ready.ok("submit", "k", "t")
    with ready.queue() as q:
        q.poll().fail("E" * 100 + "\nsecond line")
    out = ready.ok("list")
    row = out.splitlines()[1]
    assert "E" * 57 + "..." in row and "E" * 58 not in row and "second" not in row
    assert ready.json("show", "k")["error"] == "E" * 100 + "\nsecond line"


# -- database and configuration errors ---------------------------------------------------------------
@pytest.mark.every_database
@pytest.mark.parametrize("command", [["init"], ["list"], ["submit", "k", "t"], ["stats"], ["show", "k"], ["cleanup"]])
def test_unreachable_database_exits_5_masked(command):
    started = time.monotonic()
    result = invoke(command[0], "-D", UNREACHABLE, *command[1:])
    err = assert_error(result, 5, "mysql+pymysql://u:***@127.0.0.1:1/x")
    assert "s3cretpw" not in result.stdout + result.stderr
    assert time.monotonic() - started < 15
    assert err


@pytest.mark.every_database
def test_unreachable_database_from_env_and_config_file_is_masked(tmp_path):
    result = invoke("list", env={"PQ_DATABASE_URL": UNREACHABLE})
    assert_error(result, 5, "u:***@127.0.0.1:1")
    assert "s3cretpw" not in result.output
    cfg = tmp_path / "pq.toml"
    cfg.write_text(f'[development]\nurl = "{UNREACHABLE}"\n')
    result = invoke("list", "-c", str(cfg))
    assert_error(result, 5, "u:***@127.0.0.1:1")
    assert "s3cretpw" not in result.output


@pytest.mark.every_database
def test_password_never_printed_even_by_unexpected_errors(monkeypatch):
    def boom(self, **kw):
        raise RuntimeError(f"driver said: cannot log in as u with s3cretpw via {UNREACHABLE}")

    monkeypatch.setattr(queue_core.Queue, "list", boom)
    result = invoke("list", "-D", UNREACHABLE)
    assert_error(result, 1, "RuntimeError: driver said")
    assert "s3cretpw" not in result.output


@pytest.mark.parametrize("table", ["bad-name", "1abc", "x; DROP TABLE y", "a" * 41])
def test_bad_table_name_exits_6(tmp_path, table):
    result = invoke("init", "-D", f"sqlite:///{tmp_path}/pq.db", "--table", table)
    assert_error(result, 6, "invalid table name")


def test_bad_database_url_exits_6(tmp_path):
    assert_error(invoke("list", "-D", "nosuchdb://x/y"), 6)
    assert_error(invoke("list", "-D", "not a url"), 6)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pq.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def keys_in(url: str, table: str) -> list[str]:
    with queue_core.open(url, table) as q:
        return [m.key for m in q.list()]


def test_config_file_environments(tmp_path):
    dev, prod = f"sqlite:///{tmp_path}/dev.db", f"sqlite:///{tmp_path}/prod.db"
    cfg = write_config(
        tmp_path,
        f"""
        [development]
        url = "{dev}"
        table = "dev_tasks"

        [prod]
        url = "{prod}"
        table = "prod_tasks"
        alive_time = 60
    """,
    )
    assert "dev_tasks" in invoke("init", "-c", cfg).stdout
    assert "prod_tasks" in invoke("init", "-c", cfg, "-e", "prod").stdout
    assert invoke("submit", "d1", "t", "-c", cfg).exit_code == 0
    assert invoke("submit", "p1", "t", "--config", cfg, "--environment", "prod").exit_code == 0
    assert invoke("submit", "p2", "t", env={"PQ_CONFIG": cfg, "PQ_ENV": "prod"}).exit_code == 0
    assert keys_in(dev, "dev_tasks") == ["d1"]
    assert keys_in(prod, "prod_tasks") == ["p1", "p2"]
    assert_error(invoke("list", "-c", cfg, "-e", "staging"), 6, "no [staging] table", "development, prod")


def test_config_precedence_option_beats_env_beats_file(tmp_path):
    urls = {name: f"sqlite:///{tmp_path}/{name}.db" for name in ("file", "env", "opt")}
    cfg = write_config(
        tmp_path,
        f"""
        [development]
        url = "{urls["file"]}"
        table = "file_t"
    """,
    )
    for url in urls.values():
        for table in ("file_t", "env_t", "opt_t"):
            queue_core.open(url, table).init()
    env = {"PQ_DATABASE_URL": urls["env"]}
    assert invoke("submit", "k-file", "t", "-c", cfg).exit_code == 0
    assert invoke("submit", "k-env", "t", "-c", cfg, env=env).exit_code == 0
    assert invoke("submit", "k-opt", "t", "-c", cfg, "-D", urls["opt"], env=env).exit_code == 0
    env_table = {"PQ_TABLE": "env_t"}
    assert invoke("submit", "k-envtable", "t", "-c", cfg, env=env_table).exit_code == 0
    assert invoke("submit", "k-opttable", "t", "-c", cfg, "--table", "opt_t", env=env_table).exit_code == 0
    assert keys_in(urls["file"], "file_t") == ["k-file"]
    assert keys_in(urls["env"], "file_t") == ["k-env"]
    assert keys_in(urls["opt"], "file_t") == ["k-opt"]
    assert keys_in(urls["file"], "env_t") == ["k-envtable"]
    assert keys_in(urls["file"], "opt_t") == ["k-opttable"]


def test_settings_merge_and_retry_lowering(tmp_path, monkeypatch):
    cfg = write_config(
        tmp_path,
        """
        [development]
        alive_time = 30
        retry_wait = 7
        [tuned]
        max_retry_count = 9
    """,
    )
    state = options.CLIState(config_file=cfg)
    monkeypatch.setenv("PQ_RETRY_WAIT", "8")
    s = settings.settings(state)
    assert s["alive_time"] == 30.0 and s["retry_wait"] == 8.0 and s["table"] == "pq_tasks"
    assert s.sources == {"alive_time": "file", "retry_wait": "env"}
    with settings.open_queue(s) as q:
        assert q.db.max_retry_count == 2  # short-lived command: fail fast
    s = settings.settings(state, overrides={"retry_wait": 9, "processors": None})
    assert s["retry_wait"] == 9.0 and s["processors"] == 1
    tuned = settings.settings(options.CLIState(config_file=cfg, environment="tuned"))
    with settings.open_queue(tuned) as q:
        assert q.db.max_retry_count == 9  # set explicitly: kept
    # extra keys (perfectsched style): validated when the kind is known, else passed through
    extra = {
        "schedule_table": ("pq_schedules", "str", "schedule table"),
        "timezone": ("UTC", "tz", "default time zone"),
    }
    monkeypatch.setenv("PQ_TIMEZONE", "Asia/Tokyo")
    s = settings.settings(state, extra_keys=extra)
    assert s["schedule_table"] == "pq_schedules" and s["timezone"] == "Asia/Tokyo"
    with settings.open_queue(s) as q:  # extra keys are not queue options
        assert q.table == "pq_tasks"
    monkeypatch.setenv("PQ_SCHEDULE_TABLE", "")
    assert settings.settings(state, extra_keys=extra)["schedule_table"] == "pq_schedules"
    with pytest.raises(queue_core.ConfigError):
        settings.settings(state, extra_keys={"workers": (1, "int+", "n")}, overrides={"workers": 0})


def test_malformed_toml_exits_6(tmp_path):
    cfg = write_config(tmp_path, "[development\nurl = 'x'\n")
    assert_error(invoke("list", "-c", cfg), 6, "is not valid TOML")


def test_unknown_config_key_exits_6(tmp_path):
    cfg = write_config(
        tmp_path,
        """
        [development]
        url = "sqlite:///x.db"
        bogus_key = 1
    """,
    )
    assert_error(invoke("list", "-c", cfg), 6, "unknown config key 'bogus_key'", "[development]")


def test_bad_config_values_exit_6(tmp_path):
    cfg = write_config(
        tmp_path,
        """
        [development]
        alive_time = "soon"
    """,
    )
    assert_error(invoke("list", "-c", cfg), 6, "alive_time")
    assert_error(invoke("list", "-c", str(tmp_path / "missing.toml")), 6, "config file not found")
    assert_error(invoke("list", env={"PQ_ALIVE_TIME": "-1"}), 6, "alive_time")
    assert_error(invoke("list", "-e", "prod"), 6, "needs a config file")


def test_keyboard_interrupt_exits_130_quietly(monkeypatch, tmp_path):
    def interrupted(self, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(queue_core.Queue, "list", interrupted)
    result = invoke("list", "-D", f"sqlite:///{tmp_path}/pq.db")
    assert result.exit_code == 130 and result.stderr == "" and result.stdout == ""


def test_debug_shows_traceback(monkeypatch, tmp_path):
    def broken(self, **kw):
        raise ValueError("kaputt")

    monkeypatch.setattr(queue_core.Queue, "stats", broken)
    url = f"sqlite:///{tmp_path}/pq.db"
    assert_error(invoke("stats", "-D", url), 1, "ValueError: kaputt")
    for args, env in ((["-v"], None), ([], {"PQ_DEBUG": "1"})):
        result = invoke("stats", "-D", url, *args, env=env)
        assert result.exit_code == 1
        assert "Traceback" in result.stderr
        assert result.stderr.splitlines()[-1] == "perfectqueue: error: ValueError: kaputt"
    # the verbose setup does not leak into later commands of the same process
    assert_error(invoke("stats", "-D", url), 1, "ValueError: kaputt")


# -- helpers of queue_core.cli.kit ---------------------------------------------------------------------------
def test_parse_and_format_helpers():
    assert parsing.parse_time("1795255200") == ISO_EPOCH
    assert parsing.parse_time("2026-11-21T10:00:00+00:00") == ISO_EPOCH
    assert parsing.parse_time("2026-11-21T11:00:00+01:00") == ISO_EPOCH
    with pytest.raises(exits.CLIError, match="no UTC offset"):
        parsing.parse_time("2026-11-21T10:00:00")
    assert output.format_time(ISO_EPOCH) == "2026-11-21T10:00:00+00:00"
    assert output.format_time(ISO_EPOCH, "Asia/Tokyo") == "2026-11-21T19:00:00+09:00"
    assert output.format_time(ISO_EPOCH + 0.25) == "2026-11-21T10:00:00.250+00:00"
    assert output.format_time(None) == "-"
    assert parsing.parse_json_object('{"a": [1]}') == {"a": [1]}
    with pytest.raises(exits.CLIError, match="got null"):
        parsing.parse_json_object("null", what="PARAMS")
    assert passwords.scrub("postgresql://bob:hunter2@db/x failed") == "postgresql://bob:***@db/x failed"
    assert "pa ss" not in passwords.scrub("pa ss!", urls=["mysql://u:pa%20ss@h/d"])


def test_print_table_aligns_wide_characters(capsys):
    output.print_table([{"a": "日本", "b": 1}, {"a": "xyzw", "b": None}], ["a", "b"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["a     b", "日本  1", "xyzw  -"]


# -- run -----------------------------------------------------------------------------------------
def test_run_with_a_bad_target_exits_6(tmp_path):
    url = f"sqlite:///{tmp_path}/pq.db"
    assert_error(invoke("run", "no_such_module_xyz:Handler", "--burst", "-D", url), 6)
    assert_error(invoke("run", f"{tmp_path}/missing.py:Handler", "--burst", "-D", url), 6)
    result = invoke("run", "x:Y", "--processors", "0", "-D", url)
    assert result.exit_code == 2


def test_run_without_the_worker_module_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "queue_core.worker.main", None)  # import fails
    result = invoke("run", "handlers.py:Handler", "--burst", "-D", f"sqlite:///{tmp_path}/pq.db")
    assert_error(result, 6, "worker is not available")


def test_run_with_a_bad_target_names_it(tmp_path):
    pytest.importorskip("queue_core.worker.main")
    url = f"sqlite:///{tmp_path}/pq.db"
    assert_error(invoke("run", "no_such_module_xyz:Handler", "--burst", "-D", url), 6, "no_such_module_xyz")
    (tmp_path / "handlers.py").write_text("class Handler:\n    pass\n")
    assert_error(invoke("run", f"{tmp_path}/handlers.py:Nope", "--burst", "-D", url), 6, "Nope")


# -- real processes ----------------------------------------------------------------------------------
def script(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 60):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    full_env.update(env or {})
    return forkserver.run(
        [str(PERFECTQUEUE), *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout
    )


@pytest.mark.every_database
def test_script_unreachable_database_one_masked_line():
    assert PERFECTQUEUE.exists(), PERFECTQUEUE
    started = time.monotonic()
    proc = script("submit", "k", "t", "-D", UNREACHABLE)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("perfectqueue: error: ")
    assert "u:***@127.0.0.1:1/x" in proc.stderr and "s3cretpw" not in proc.stderr
    assert time.monotonic() - started < 15


def test_script_submit_list_and_module_entry_point(tmp_path):
    env = {"PQ_DATABASE_URL": f"sqlite:///{tmp_path}/pq.db"}
    assert script("init", env=env).returncode == 0
    assert script("submit", "k1", "t", '{"a": 1}', env=env).stdout == "k1\n"
    dup = script("submit", "k1", "t", env=env)
    assert dup.returncode == 3 and dup.stderr == "perfectqueue: error: task 'k1' already exists\n"
    proc = subprocess.run(
        [sys.executable, "-m", "queue_core.cli", "list", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PQ_")}, **env},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert [t["key"] for t in json.loads(proc.stdout)] == ["k1"]


HANDLERS = """
import json, os

class Handler:
    def __init__(self, task):
        self.task = task

    def run(self):
        with open(os.path.join(os.path.dirname(__file__), "done.txt"), "a") as fh:
            fh.write(self.task.key + "\\n")
"""


def test_run_burst_end_to_end(tmp_path):
    pytest.importorskip("queue_core.worker.main")
    (tmp_path / "handlers.py").write_text(HANDLERS)
    url = f"sqlite:///{tmp_path}/pq.db"
    assert script("init", "-D", url).returncode == 0
    for i in range(3):
        assert script("submit", f"job{i}", "t", json.dumps({"i": i}), "-D", url).returncode == 0
    proc = script(
        "run",
        str(tmp_path / "handlers.py") + ":Handler",
        "--burst",
        "-D",
        url,
        "--poll-interval",
        "0.2",
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    with queue_core.open(url) as q:
        tasks = {m.key: m for m in q.list()}
    assert sorted(tasks) == ["job0", "job1", "job2"]
    assert all(m.status == "finished" and m.outcome == "success" for m in tasks.values()), tasks
    assert sorted((tmp_path / "done.txt").read_text().split()) == ["job0", "job1", "job2"]


@pytest.mark.every_database
@pytest.mark.parametrize("processor_type", ["thread", "process"])
def test_a_burst_worker_without_its_table_exits_5_in_one_line(tmp_path, processor_type):
    """A worker without --burst polls through a table not made yet (deployed before ``init``); a
    burst worker, which ends once nothing is due, says the table is missing and exits 5 (as
    ``perfectsched run`` does) instead of polling for ever."""
    target = tmp_path / "t.py"
    target.write_text("def plain(task):\n    pass\n")
    cmd = [
        str(Path(sys.executable).with_name("perfectqueue")),
        "run",
        f"{target}:plain",
        "--processor-type",
        processor_type,
        "--burst",
        "-D",
        f"sqlite:///{tmp_path / 'none.db'}",
        "--table",
        "missing",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    errors = [line for line in p.stderr.splitlines() if line.startswith("perfectqueue: error: ")]
    assert p.returncode == 5, p.stderr[-1500:]
    assert len(errors) == 1 and "table not found" in errors[0] and "run 'init' first" in errors[0], p.stderr
