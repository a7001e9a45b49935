"""Database passwords stay out of process titles.

``perfectqueue run``, ``perfectsched run`` and ``pqflow run`` started with ``-D URL`` (URL with a
password) re-execute themselves with the URL in ``PQ_DATABASE_URL`` and ``-D`` removed
(queue_core.cli.kit.argv_password.hide_url_from_argv): /proc/<pid>/cmdline of the command and of
its children, which every local user can read with ``ps``, holds no password;
/proc/<pid>/environ, which holds it now, is readable only by the owner. The same pid keeps
running, and the -D > PQ_DATABASE_URL > config file precedence is unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hostile_support import HERE, clean_environ
from procs import wait_for
from sqlalchemy.engine import make_url

import queue_core
from queue_core.cli.kit import argv_password, passwords
from queue_core.cli.main import cli as pq_cli

BIN = Path(sys.executable).parent
HANDLERS = str(HERE / "hostile_handlers.py")
FLOWS = str(HERE.parent / "acceptance" / "flows_cli.py")


# -- the argument surgery (no processes) ---------------------------------------------------------------
def _strip(*args: str) -> list[str]:
    run = pq_cli.get_command(click.Context(pq_cli), "run")
    out, _ = argv_password.without_option(list(args), pq_cli, run, "pq_database")
    return out


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "T", "-D", "U", "--burst"], ["run", "T", "--burst"]),
        (["run", "-DU", "T"], ["run", "T"]),
        (["run", "--database", "U", "T"], ["run", "T"]),
        (["run", "--database=U", "T"], ["run", "T"]),
        (["run", "-vD", "U", "T"], ["run", "-v", "T"]),
        (["run", "-vDU", "T"], ["run", "-v", "T"]),
        (["run", "-D=U", "T"], ["run", "T"]),
        (["run", "-D", "A", "-D", "B", "T"], ["run", "T"]),  # click keeps the last; both go
        (["run", "-I", "-D", "T", "-D", "U"], ["run", "-I", "-D", "T"]),  # "-D" as the value of -I stays
        (["run", "--log", "--database", "T", "--database", "U"], ["run", "--log", "--database", "T"]),
        (["run", "-r", "m", "--table", "-D", "T", "-DU"], ["run", "-r", "m", "--table", "-D", "T"]),
        (["run", "T", "--", "-D", "U"], ["run", "T", "--", "-D", "U"]),  # positionals after --
        (["--version", "run", "-DU"], ["--version", "run"]),
        (["run", "-Ipath", "-DU", "T"], ["run", "-Ipath", "T"]),
    ],
)
def test_without_option_tokenises_like_click(args, expected):
    assert _strip(*args) == expected


def test_url_password():
    assert passwords.url_password("mysql+pymysql://u:p%40ss@h/db") == "p@ss"
    assert passwords.url_password("postgresql+psycopg://u@h/db") is None
    assert passwords.url_password("sqlite:////tmp/x.db") is None
    assert passwords.url_password("not a url") is None


# -- real processes ------------------------------------------------------------------------------------
def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


def _environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return fh.read().replace(b"\0", b"\n").decode(errors="replace")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _popen(*args: str, env: dict | None = None, cwd=None) -> subprocess.Popen:
    return subprocess.Popen(
        [str(a) for a in args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean_environ(), **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )


def _stop(p: subprocess.Popen) -> tuple[int, str, str]:
    """Collect a command that was sent SIGTERM (once: a second one would stop it at once)."""
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    return p.returncode, out, err


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_long_running_commands_keep_the_password_out_of_argv(backend, tmp_path):
    from conftest import _server_url, drop_tables

    url = _server_url(backend)
    password = make_url(url).password
    assert password, "the test servers use passwords"
    tag = f"av{os.getpid() % 10000}_{uuid.uuid4().hex[:6]}"
    qt, st_q, st_s, ft = tag + "_q", tag + "_sq", tag + "_s", tag + "_f"
    with queue_core.open(url, qt) as q:
        q.init()
        q.submit("job", "ok", {"log": str(tmp_path / "runs.log")})
    sched = __import__("perfectsched").open(url, st_s, st_q)
    sched.init()
    sched.add("every", "tick", cron="* * * * *", next_time=time.time() - 120)
    sched.close()
    with queue_core.open(url, ft) as q:
        q.init()
        q.submit("run1", "cli_ping", {})  # a one-step workflow of flows_cli.py

    procs = {
        "perfectqueue": _popen(
            BIN / "perfectqueue",
            "run",
            f"{HANDLERS}:Worker",
            "-vD",
            url,
            "--table",
            qt,
            "--processors",
            "2",
            "--poll-interval",
            "0.1",
        ),
        "perfectsched": _popen(
            BIN / "perfectsched",
            "run",
            "--database",
            url,
            "--table",
            st_q,
            "--schedule-table",
            st_s,
            "--poll-interval",
            "0.1",
            "-v",
        ),
        "pqflow": _popen(
            BIN / "pqflow", "run", f"{FLOWS}:Decider", f"--database={url}", "--table", ft, "--poll-interval", "0.1"
        ),
    }
    queues = [queue_core.open(url, t) for t in (qt, st_q, ft)]
    try:

        def done() -> bool:
            time.sleep(0.15)
            q1, q2, q3 = queues
            return (
                q1["job"].metadata().outcome == "success"
                and any(m.key.startswith("every.") for m in q2.list())
                and q3["run1"].metadata().finished
            )

        wait_for(done, timeout=60, what="work done by all three commands")
        for name, p in procs.items():
            assert p.poll() is None, (name, p.communicate())
            pids = [p.pid, *_children(p.pid)]
            if name != "perfectsched":
                assert len(pids) >= 2, (name, "worker children expected")
            for pid in pids:
                cmd = _cmdline(pid)
                assert password not in cmd and url not in cmd, (name, pid, cmd)
                assert " run " in cmd and "-D" not in cmd.split() and "--database" not in cmd, (name, cmd)
            env = _environ(p.pid)
            assert f"PQ_DATABASE_URL={url}" in env.splitlines()  # where the URL went
            mode = stat.S_IMODE(os.stat(f"/proc/{p.pid}/environ").st_mode)
            assert mode & 0o077 == 0, oct(mode)  # readable by the owner (and root) only
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        results = {name: _stop(p) for name, p in procs.items()}
        for q in queues:
            q.close()
        drop_tables(url, qt, st_q, st_s, ft)
    for name, (code, out, err) in results.items():
        assert code == 0, (name, code, err[-2000:])
        assert password not in out + err, name  # nor in the logs, -v included
        assert "Traceback" not in err, (name, err[-2000:])


def test_precedence_is_kept_after_the_re_exec(tmp_path):
    """-D beats PQ_DATABASE_URL beats the config file, also when -D is moved into the environment
    (here through ``python -m queue_core.cli``, the other way to start the command)."""
    from conftest import _server_url, drop_tables

    url = _server_url("postgres")
    table = f"ap{os.getpid() % 10000}_{uuid.uuid4().hex[:6]}"
    decoy = f"sqlite:///{tmp_path}/decoy.db"
    with queue_core.open(url, table) as q:
        q.init()
        q.submit("job", "ok", {})
    with queue_core.open(decoy, table) as q:
        q.init()
        q.submit("decoy", "ok", {})
    cfg = tmp_path / "pq.toml"
    cfg.write_text(f'[development]\nurl = "{decoy}"\ntable = "{table}"\n')
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "queue_core.cli",
                "run",
                f"{HANDLERS}:Worker",
                "-c",
                str(cfg),
                "-D",
                url,
                "--burst",
                "--poll-interval",
                "0.1",
                "--processor-type",
                "thread",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**clean_environ(), "PQ_DATABASE_URL": decoy},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        with queue_core.open(url, table) as q:
            assert q["job"].metadata().outcome == "success"  # the -D database was served
        with queue_core.open(decoy, table) as q:
            assert q["decoy"].metadata().status == "waiting"  # not the environment's, not the file's
        # without -D: the environment beats the file (nothing to re-execute)
        listed = CliRunner().invoke(pq_cli, ["list", "-c", str(cfg), "--format", "json"], env={"PQ_DATABASE_URL": url})
        assert [t["key"] for t in json.loads(listed.stdout)] == ["job"], listed.stderr
    finally:
        drop_tables(url, table)
