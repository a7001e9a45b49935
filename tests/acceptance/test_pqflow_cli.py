"""Acceptance tests of the ``pqflow`` command line: on SQLite and one server database (marker
``one_server``), and on all three what meets a database's own errors (``every_database``).

Most commands run in-process with click's CliRunner (stdout and stderr separate); the
workers, and a few other commands, run the installed console script in a subprocess.
Workflows: tests/acceptance/flows_cli.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from click.testing import CliRunner

import queue_core
from pqflow.cli import cli

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import flows_cli  # noqa: E402
from cli_support import assert_one_line_error, clean_env  # noqa: E402, F401

pytestmark = pytest.mark.one_server

PQFLOW = Path(sys.executable).parent / "pqflow"
FLOWS = str(HERE / "flows_cli.py")
UNREACHABLE = "mysql+pymysql://u:s3cretpw@127.0.0.1:1/x"
STEPS = ["extract", "transform", "audit", "load", "cleanup"]
SUCCEEDED_COLOUR = "#81c995"
FAILED_COLOUR = "#f28b82"
SKIPPED_COLOUR = "#b0b0b0"


# -- helpers ---------------------------------------------------------------------------------------


def invoke(*args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env=env, input=input)


def assert_error(result, code: int, *fragments: str) -> str:
    return assert_one_line_error("pqflow", result, code, *fragments)


def script_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}


def script(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return forkserver.run(
        [str(PQFLOW), *args], capture_output=True, text=True, env=script_env(), cwd=cwd, timeout=timeout
    )


class Flow:
    """pqflow bound to one database and a fresh (initialised) table."""

    def __init__(self, url: str, table: str):
        self.url, self.table = url, table

    def db(self) -> list[str]:
        return ["-D", self.url, "--table", self.table]

    def __call__(self, command: str, *args: str, input: str | None = None):
        return invoke(command, *self.db(), *args, input=input)

    def ok(self, command: str, *args: str, input: str | None = None) -> str:
        result = self(command, *args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        assert result.stderr == ""
        return result.stdout

    def json(self, command: str, *args: str):
        return json.loads(self.ok(command, *args, "--format", "json"))

    def start(self, workflow: str, run_id: str, *args: str, input: str | None = None) -> str:
        """``start`` while no decider runs: the run id on stdout, and on stderr the one line
        saying that no live worker serves the workflow."""
        result = self("start", workflow, run_id, *args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        assert result.stderr == unserved_warning(workflow, run_id)
        return result.stdout

    def worker(self, *target: str, cwd: Path | None = None) -> str:
        """A real ``pqflow run ... --burst`` process; returns its log (stderr)."""
        proc = script("run", *target, *self.db(), "--burst", "--poll-interval", "0.1", cwd=cwd)
        assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
        return proc.stderr

    def queue(self) -> queue_core.Queue:
        return queue_core.open(self.url, self.table)


@pytest.fixture
def flow(db_url, table_name, backend):
    with queue_core.open(db_url, table_name) as q:
        q.init()
    f = Flow(db_url, table_name)
    yield f
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def unserved_warning(workflow: str, run_id: str) -> str:
    return f"pqflow: warning: no live worker serves workflow {workflow}: run {run_id!r} is stored and waits for one\n"


def step_table(stdout: str) -> dict[str, list[str]]:
    """The step lines of ``status`` text output: name -> the other columns."""
    lines = stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["step", "status"])
    return {ln.split()[0]: ln.split()[1:] for ln in lines[header + 1 :] if ln.strip()}


def field(stdout: str, name: str) -> str:
    for line in stdout.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name}: line in {stdout!r}")


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def runs_table(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:4] == ["run", "workflow", "status", "steps"], stdout
    return {ln.split()[0]: ln.split()[1:] for ln in lines[1:-1]}


# -- end to end ------------------------------------------------------------------------------------
def test_runs_end_to_end_with_a_real_worker(flow, tmp_path):
    log = tmp_path / "steps.log"
    assert flow.start("cli_etl", "ok1", json.dumps({"log": str(log)})) == "ok1\n"
    assert flow.start("cli_etl", "bad1", json.dumps({"log": str(log), "fail": True})) == "bad1\n"
    assert flow.start("cli_etl", "gone1") == "gone1\n"
    # not picked up yet: status says so; cancel finishes the run row at once
    out = flow.ok("status", "ok1")
    assert field(out, "status") == "running" and "not picked up by a decider yet" in out
    assert flow.ok("cancel", "gone1") == "cancelled\n"
    assert_error(flow("cancel", "gone1"), 1, "run 'gone1' is already cancelled")
    assert_error(flow("retry", "ok1"), 1, "is running; only failed or cancelled runs can be retried")

    flow.worker(f"{FLOWS}:Decider")

    # the successful run
    out = flow.ok("status", "ok1")
    assert (field(out, "run"), field(out, "workflow"), field(out, "status")) == ("ok1", "cli_etl", "succeeded")
    assert field(out, "finished") != "-"
    steps = step_table(out)
    assert list(steps) == STEPS
    assert all(cols[:2] == ["succeeded", "1"] for cols in steps.values()), out
    doc = flow.json("status", "ok1")
    assert doc["status"] == "succeeded" and doc["workflow"] == "cli_etl" and doc["input"] == {"log": str(log)}
    assert doc["picked_up"] is True and doc["finished_at"] >= doc["created_at"]
    assert {n: s["result"] for n, s in doc["steps"].items()} == {
        "extract": [1, 2, 3],
        "transform": [10, 20, 30],
        "audit": {"count": 3},
        "load": {"loaded": 60, "count": 3},
        "cleanup": "cleaned",
    }
    assert all(s["status"] == "succeeded" and s["attempts"] == 1 for s in doc["steps"].values())
    assert flow.ok("why", "ok1", "load") == "step 'load' succeeded\n"

    # the failed run: transform failed, load skipped, the all_done cleanup still ran
    out = flow.ok("status", "bad1")
    assert field(out, "status") == "failed"
    steps = step_table(out)
    assert steps["extract"][0] == steps["audit"][0] == steps["cleanup"][0] == "succeeded"
    assert steps["transform"][:2] == ["failed", "1"]
    assert "RuntimeError: transform failed as asked" in out
    # skipped: never ran (no attempt, no start), finished when the decision skipped it
    assert steps["load"][:3] == ["skipped", "-", "-"] and steps["load"][3] == steps["transform"][3]
    assert steps["load"][4] == "-"
    doc = flow.json("status", "bad1")
    assert doc["steps"]["transform"]["error"] == "RuntimeError: transform failed as asked by the run input"
    assert doc["steps"]["load"]["status"] == "skipped" and doc["steps"]["load"]["result"] is None
    assert doc["steps"]["cleanup"] == {**doc["steps"]["cleanup"], "status": "succeeded", "result": "cleaned"}
    why = flow.ok("why", "bad1", "load")
    assert why.startswith("step 'load' is skipped: parent transform failed and trigger all_success")
    assert "transform (failed)" in why and "audit (succeeded)" in why and why.count("\n") == 1
    why = flow.ok("why", "bad1", "transform")  # its one line, then its last attempt's traceback
    assert why.startswith("step 'transform' failed\n\ntraceback of step transform (attempt 1 on worker ")
    assert "\n  Traceback (most recent call last):\n" in why
    assert_error(flow("why", "bad1", "nope"), 4, "unknown step 'nope'", "extract, transform, audit, load, cleanup")
    assert_error(flow("retry", "ok1"), 1, "run 'ok1' is succeeded; only failed or cancelled runs can be retried")
    assert_error(flow("cancel", "ok1"), 1, "run 'ok1' is already succeeded")

    # every step ran exactly once; the cancelled run never ran anything
    lines = executions(log)
    assert sorted(lines) == sorted([f"ok1 {s}" for s in STEPS] + [f"bad1 {s}" for s in STEPS if s != "load"])

    # runs: all of them, then filtered
    table = runs_table(flow.ok("runs"))
    assert {r: cols[:3] for r, cols in table.items()} == {
        "ok1": ["cli_etl", "succeeded", "5/5"],
        "bad1": ["cli_etl", "failed", "3/5"],
        "gone1": ["cli_etl", "cancelled", "-"],
    }
    # a plain queue task is no run; every run is listed from the moment it is started, also one of a
    # workflow no decider has served yet
    with flow.queue() as q:
        q.submit("email1", "email", {"to": "x"})
    flow.start("cli_etl", "late1")
    flow.start("cli_other", "other1")
    table = runs_table(flow.ok("runs"))
    assert list(table) == ["ok1", "bad1", "gone1", "late1", "other1"]
    assert table["late1"][:3] == ["cli_etl", "running", "-"] and table["other1"][:3] == ["cli_other", "running", "-"]
    assert list(runs_table(flow.ok("runs", "--workflow", "cli_other"))) == ["other1"]
    assert list(runs_table(flow.ok("runs", "--status", "running"))) == ["late1", "other1"]
    assert list(runs_table(flow.ok("runs", "--status", "failed"))) == ["bad1"]
    assert list(runs_table(flow.ok("runs", "--status", "cancelled", "--workflow", "cli_etl"))) == ["gone1"]
    assert list(runs_table(flow.ok("runs", "--limit", "2"))) == ["ok1", "bad1"]
    assert flow.ok("runs", "--workflow", "cli_ping").splitlines()[-1] == "0 runs."
    listed = flow.json("runs", "--status", "succeeded")
    assert [(r["run_id"], r["workflow"], r["succeeded_steps"], r["total_steps"]) for r in listed] == [
        ("ok1", "cli_etl", 5, 5)
    ]

    # graphs from the database alone, coloured by status
    dot = flow.ok("graph", "--run", "bad1", "--format", "dot")
    assert dot.startswith('digraph "cli_etl"')
    assert f'"transform" [label="transform\\nfailed", fillcolor="{FAILED_COLOUR}"]' in dot
    assert f'"load" [label="load\\nskipped", fillcolor="{SKIPPED_COLOUR}"' in dot
    assert f'fillcolor="{SUCCEEDED_COLOUR}"' in dot
    text = flow.ok("graph", "--run", "ok1")
    assert all(line.startswith("[succeeded] ") for line in text.splitlines()[1:]) and all(s in text for s in STEPS)
    assert "classDef st_failed" in flow.ok("graph", "--run", "bad1", "--format", "mermaid")
    assert_error(flow("graph", "--run", "gone1"), 1, "has no DAG snapshot")


def test_retry_keeps_succeeded_steps_and_require_style_target(flow, tmp_path):
    log, marker = tmp_path / "steps.log", tmp_path / "marker"
    flow.start("cli_etl", "m1", json.dumps({"log": str(log), "marker": str(marker)}))
    # PerfectQueue style: -I PATH -r MODULE Name, from another directory
    flow.worker("-I", str(HERE), "-r", "flows_cli", "Decider", cwd=tmp_path)
    before = flow.json("status", "m1")
    assert before["status"] == "failed"
    assert before["steps"]["transform"]["status"] == "failed"
    assert "marker file" in before["steps"]["transform"]["error"]
    assert before["steps"]["load"]["status"] == "skipped"
    assert sorted(executions(log)) == sorted(["m1 extract", "m1 transform", "m1 audit", "m1 cleanup"])

    marker.write_text("fixed")
    assert flow.ok("retry", "m1") == "running\n"
    doc = flow.json("status", "m1")
    assert doc["status"] == "running" and doc["steps"]["transform"]["status"] == "waiting"
    assert doc["steps"]["load"]["status"] == "pending"
    flow.worker("flows_cli:EtlOnly", "-I", str(HERE))

    after = flow.json("status", "m1")
    assert after["status"] == "succeeded", after
    assert all(s["status"] == "succeeded" for s in after["steps"].values())
    for name in ("extract", "audit", "cleanup"):  # kept, not re-run
        assert after["steps"][name] == before["steps"][name]
        assert after["steps"][name]["attempts"] == 1
    assert after["steps"]["transform"]["result"] == [10, 20, 30]
    assert after["steps"]["load"]["result"] == {"loaded": 60, "count": 3}
    assert sorted(executions(log)) == sorted(
        ["m1 extract", "m1 transform", "m1 audit", "m1 cleanup", "m1 transform", "m1 load"]
    )
    assert list(runs_table(flow.ok("runs", "--status", "succeeded"))) == ["m1"]


def test_cancel_and_retry_of_a_run_started_by_the_library(flow):
    # Workflow.start writes the run and its steps at once (the root step waiting): cancel goes
    # through cancel_run
    with flow.queue() as q:
        flows_cli.etl.start("lib1", {"n": 1}, queue=q)
    assert field(flow.ok("status", "lib1"), "status") == "running"
    assert step_table(flow.ok("status", "lib1")) == {
        s: ["waiting" if s == "extract" else "pending", "-", "-", "-", "-"] for s in STEPS
    }
    assert flow.ok("cancel", "lib1") == "cancelled\n"
    doc = flow.json("status", "lib1")
    assert doc["status"] == "cancelled" and doc["cancel_requested"] is True
    assert {n: s["status"] for n, s in doc["steps"].items()} == {
        s: "cancelled" if s == "extract" else "skipped" for s in STEPS
    }
    assert flow.ok("why", "lib1", "extract") == "step 'extract' was cancelled\n"
    assert "the run was cancelled" in flow.ok("why", "lib1", "load")
    assert flow.ok("retry", "lib1") == "running\n"
    doc = flow.json("status", "lib1")
    assert doc["steps"]["extract"]["status"] == "waiting" and doc["input"] == {"n": 1}
    assert flow.ok("cancel", "lib1") == "cancelled\n"
    assert flow.json("status", "lib1")["steps"]["extract"]["status"] == "cancelled"


# -- errors that need a database -------------------------------------------------------------------
def test_start_errors(flow):
    flow.start("cli_etl", "d1", '{"a": 1}')
    assert_error(flow("start", "cli_etl", "d1"), 3, "run 'd1' already exists")
    assert_error(flow("start", "cli_etl", "j1", "{nope"), 1, "DATA is not valid JSON")
    assert_error(flow("start", "cli_etl", "j2", "[1, 2]"), 1, "DATA must be a JSON object")
    assert_error(flow("start", "cli_etl", "a#b"), 1, "run id must not contain '#'")
    assert_error(flow("start", "cli.etl", "j3"), 1, "invalid workflow name 'cli.etl'")
    flow.start("cli_etl", "j4", '{"__pqflow__": {}}')  # nothing is reserved: the data is the user's
    with flow.queue() as q:
        assert q["j4"].metadata().data == {"__pqflow__": {}}
    assert flow.start("cli_etl", "s1", "-", input='{"from": "stdin"}') == "s1\n"
    assert flow.json("status", "s1")["input"] == {"from": "stdin"}
    with flow.queue() as q:  # exactly queue.submit(RUN_ID, WORKFLOW, DATA); nothing else was written
        assert [(m.key, m.type, m.data) for m in q.list()] == [
            ("d1", "cli_etl", {"a": 1}),
            ("j4", "cli_etl", {"__pqflow__": {}}),
            ("s1", "cli_etl", {"from": "stdin"}),
        ]


@pytest.mark.parametrize(
    "command",
    [
        ["status", "nope"],
        ["status", "nope", "--format", "json"],
        ["why", "nope", "load"],
        ["cancel", "nope"],
        ["retry", "nope"],
        ["graph", "--run", "nope"],
    ],
)
def test_unknown_run_exits_4(flow, command):
    assert_error(flow(*command), 4, "run 'nope' not found")


@pytest.mark.every_database
def test_commands_before_init_exit_5(db_url, table_name):
    assert_error(invoke("status", "r", "-D", db_url, "--table", table_name), 5, "run 'init' first")


# -- graph -----------------------------------------------------------------------------------------
def test_graph_of_workflow_code():
    out = invoke("graph", f"{FLOWS}:etl")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.splitlines()[0] == "workflow cli_etl (5 steps)"
    assert all(s in out.stdout for s in STEPS) and "(trigger all_done)" in out.stdout
    # the same by module, and by workflow name with -I/-r
    assert invoke("graph", "flows_cli:etl", "-I", str(HERE)).stdout == out.stdout
    assert invoke("graph", "-I", str(HERE), "-r", "flows_cli", "cli_etl").stdout == out.stdout
    # a Decider: every workflow as text; one format needs --workflow when there are several
    both = invoke("graph", f"{FLOWS}:Decider").stdout
    assert "workflow cli_etl" in both and "workflow cli_ping" in both and "pong" in both
    assert_error(invoke("graph", f"{FLOWS}:Decider", "--format", "dot"), 1, "--workflow NAME", "cli_etl, cli_ping")
    dot = invoke("graph", f"{FLOWS}:Decider", "--format", "dot", "--workflow", "cli_ping")
    assert dot.exit_code == 0 and dot.stdout.startswith('digraph "cli_ping"')
    only = invoke("graph", f"{FLOWS}:EtlOnly", "--format", "mermaid")
    assert only.exit_code == 0 and only.stdout.startswith("flowchart TD") and "cleanup" in only.stdout
    assert_error(invoke("graph", f"{FLOWS}:Decider", "--workflow", "nope"), 6, "no workflow 'nope'")


def test_graph_errors():
    assert_error(invoke("graph", f"{FLOWS}:nope"), 6, "has no attribute 'nope'")
    assert_error(invoke("graph", "flows_cli:nope", "-I", str(HERE)), 6, "has no attribute 'nope'")
    assert_error(invoke("graph", "no_such_module_xyz:etl"), 6, "cannot import module")
    assert_error(invoke("graph", f"{FLOWS}:not_a_decider"), 6, "neither a pqflow.Workflow nor a pqflow.Decider")
    for args in ([], [f"{FLOWS}:etl", "--run", "r1"]):
        result = invoke("graph", *args)
        assert result.exit_code == 2 and "either TARGET or --run" in result.stderr
    assert invoke("graph", f"{FLOWS}:etl", "--format", "gif").exit_code == 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_graph_svg_and_png_files(tmp_path):
    out = invoke("graph", f"{FLOWS}:etl", "--format", "svg", "-o", str(tmp_path / "out.svg"))
    assert out.exit_code == 0, out.stderr
    assert out.stdout.startswith(f"wrote {tmp_path / 'out.svg'} (")
    svg = (tmp_path / "out.svg").read_text()
    assert "<svg" in svg and all(s in svg for s in STEPS)
    out = invoke("graph", f"{FLOWS}:etl", "--format", "png", "-o", str(tmp_path / "out.png"))
    assert out.exit_code == 0, out.stderr
    assert (tmp_path / "out.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # stdout is not a terminal: the bytes (or the SVG text) go there
    inproc = invoke("graph", f"{FLOWS}:etl", "--format", "png")
    assert inproc.exit_code == 0 and inproc.stdout_bytes.startswith(b"\x89PNG")
    assert invoke("graph", f"{FLOWS}:etl", "--format", "svg").stdout.lstrip().startswith("<?xml")
    piped = subprocess.run(
        [str(PQFLOW), "graph", f"{FLOWS}:etl", "--format", "png"], capture_output=True, env=script_env(), timeout=60
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith(b"\x89PNG") and piped.stderr == b""
    assert_error(
        invoke("graph", f"{FLOWS}:etl", "--format", "svg", "-o", str(tmp_path / "no/such/dir.svg")), 1, "cannot write"
    )


def test_graph_svg_refused_on_a_terminal(monkeypatch):
    import pqflow.cli

    monkeypatch.setattr(pqflow.cli, "_stdout_is_terminal", lambda: True)
    result = invoke("graph", f"{FLOWS}:etl", "--format", "png")
    assert result.exit_code == 2 and "needs -o FILE" in result.stderr and result.stdout == ""


def test_graph_without_any_renderer_is_one_line(monkeypatch):
    import pqflow.render

    monkeypatch.setattr(pqflow.render.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert_error(
        invoke("graph", f"{FLOWS}:etl", "--format", "svg", "-o", "x.svg"), 1, "needs Graphviz's 'dot'", "matplotlib"
    )
    assert not Path("x.svg").exists()


# -- run -------------------------------------------------------------------------------------------
def test_run_refuses_targets_that_are_not_deciders(tmp_path):
    url = ["-D", f"sqlite:///{tmp_path}/pq.db"]
    assert_error(invoke("run", f"{FLOWS}:not_a_decider", *url, "--burst"), 6, "not a pqflow.Decider subclass")
    assert_error(invoke("run", f"{FLOWS}:etl", *url, "--burst"), 6, "not a pqflow.Decider subclass")
    assert_error(invoke("run", f"{FLOWS}:nope", *url, "--burst"), 6, "has no attribute 'nope'")
    assert_error(invoke("run", "Decider", *url, "--burst"), 6, "cannot find 'Decider'")
    result = invoke("run", f"{FLOWS}:Decider", *url, "--processors", "0")
    assert result.exit_code == 2


# -- unreachable database --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["start", "cli_etl", "r1"],
        ["status", "r1"],
        ["runs"],
        ["cancel", "r1"],
        ["retry", "r1"],
        ["why", "r1", "load"],
        ["graph", "--run", "r1"],
    ],
)
@pytest.mark.every_database
def test_unreachable_database_exits_5_masked(command):
    started = time.monotonic()
    result = invoke(command[0], "-D", UNREACHABLE, *command[1:])
    assert_error(result, 5, "mysql+pymysql://u:***@127.0.0.1:1/x")
    assert "s3cretpw" not in result.stdout + result.stderr
    assert time.monotonic() - started < 15


@pytest.mark.every_database
def test_script_unreachable_database_and_help():
    proc = script("status", "r1", "-D", UNREACHABLE, timeout=60)
    assert proc.returncode == 5 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("pqflow: error: ")
    assert "u:***@127.0.0.1:1/x" in proc.stderr and "s3cretpw" not in proc.stderr
    helped = script("--help", timeout=60)
    assert helped.returncode == 0
    for command in ("run", "start", "status", "runs", "cancel", "retry", "why", "graph"):
        assert f"  {command} " in helped.stdout
