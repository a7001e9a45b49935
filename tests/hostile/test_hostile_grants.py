"""The database privileges recommended in docs/security.md, tested as written.

The SQL blocks marked ``-- tested: <backend>/<step>`` in docs/security.md are run with fresh names
(a throwaway database and two accounts, dropped at the end) through the servers' superuser
connections (tests/hostile/db_admin.py). Then: the worker account cannot create or drop tables,
the admin account can, and with the worker grants only, a real worker, a submitter, the
scheduler, a pqflow decider and the operator commands all work.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from db_admin import mariadb_root as _mariadb_root
from db_admin import pg_super as _pg_super
from db_admin import skip_unless_admin as _skip_unless_admin
from db_admin import url_for as _url_for
from hostile_support import HERE, ROOT, clean_environ, one_line_error
from sqlalchemy.engine import make_url

import perfectsched
import pqflow
import queue_core
from perfectsched.cli import cli as sched_cli
from queue_core.api.app import make_runner
from queue_core.cli.main import cli as pq_cli

DOC = ROOT / "docs" / "security.md"
BIN = Path(sys.executable).parent


def doc_blocks() -> dict[str, str]:
    """``{"mariadb/accounts": "CREATE DATABASE jobs ...", ...}`` from docs/security.md."""
    blocks = {}
    for body in re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S):
        first, _, rest = body.partition("\n")
        m = re.fullmatch(r"-- tested: (\S+)", first.strip())
        if m:
            blocks[m.group(1)] = rest
    return blocks


def rename(sql: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        sql = re.sub(rf"\b{re.escape(old)}", new, sql)
    return sql


# -- the scenario ---------------------------------------------------------------------------------
WORKFLOW = pqflow.Workflow("grants_flow", retries=0, retry_wait=0)
#: a workflow never started before the INSERT on the meta table is revoked: its name is new there
WORKFLOW_2 = pqflow.Workflow("grants_flow_two")


@WORKFLOW_2.step()
def only(ctx):
    return None


@WORKFLOW.step()
def one(ctx):
    return 1


@WORKFLOW.step(after=one)
def two(ctx, one):
    return one + 1


class Decider(pqflow.Decider):
    workflows = [WORKFLOW]


def _cli(cli, *args):
    return CliRunner().invoke(cli, list(args), env={k: None for k in os.environ if k.startswith("PQ_")})


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_workers_need_dml_only_and_init_needs_ddl(backend, tmp_path):
    from conftest import _server_url

    server = _server_url(backend)
    _skip_unless_admin(backend)
    tag = uuid.uuid4().hex[:8]
    names = {
        "jobs": f"pqsec_{tag}",
        "pq_admin": f"pqsec_a_{tag}",
        "pq_worker": f"pqsec_w_{tag}",
        "admin-secret": f"a-{uuid.uuid4().hex}",
        "worker-secret": f"w@{uuid.uuid4().hex}:/x",
        "pq_tasks": "sec_tasks",
        "pq_schedules": "sec_sched",
    }
    blocks = {k: rename(v, names) for k, v in doc_blocks().items()}
    kind = "mariadb" if backend == "mysql" else "postgres"
    assert {f"{kind}/accounts", f"{kind}/worker"} <= set(blocks), "docs/security.md lost its tested blocks"
    port = make_url(server).port or (3306 if backend == "mysql" else 5432)
    admin = _url_for(server, names["pq_admin"], names["admin-secret"], names["jobs"])
    worker = _url_for(server, names["pq_worker"], names["worker-secret"], names["jobs"])
    qt, stt = names["pq_tasks"], names["pq_schedules"]
    q_opts = ["--table", qt]
    s_opts = ["--table", qt, "--schedule-table", stt]

    if backend == "mysql":
        _mariadb_root(blocks["mariadb/accounts"])
    else:
        _pg_super(blocks["postgres/accounts"], port)
    try:
        # 1. the worker account cannot create tables, nor drop them
        for cli, opts in ((pq_cli, q_opts), (sched_cli, s_opts)):
            err = one_line_error(cli.name, _cli(cli, "init", "-D", worker, *opts), 5)
            assert names["worker-secret"] not in err
        # 2. the admin account creates them (once), and grants (PostgreSQL: as their owner)
        for cli, opts in ((pq_cli, q_opts), (sched_cli, s_opts)):
            result = _cli(cli, "init", "-D", admin, *opts)
            assert result.exit_code == 0, result.stderr
        if backend == "mysql":
            _mariadb_root(blocks["mariadb/worker"])
        else:
            engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                for stmt in filter(str.strip, blocks["postgres/worker"].split(";")):
                    conn.exec_driver_sql(stmt)
            engine.dispose()
        # 3. the worker account, DML only: DDL still refused, the tables untouched
        with queue_core.open(admin, qt) as q:
            q.submit("before", "ok", {})
        for cli, opts in ((pq_cli, q_opts), (sched_cli, s_opts)):
            one_line_error(cli.name, _cli(cli, "init", "--force", "-D", worker, *opts), 5)
        assert _cli(pq_cli, "init", "-D", worker, *q_opts).exit_code == 0  # existing table: nothing to create
        with queue_core.open(admin, qt) as q:
            assert [m.key for m in q.list()] == ["before"]
        one_line_error("perfectqueue", _cli(pq_cli, "init", "-D", worker, "--table", "sec_other"), 5)
        # 4. everything else works with the worker account
        _submitter_operator_and_worker(worker, qt, tmp_path)
        _scheduler(worker, qt, stt, s_opts)
        _decider(worker, qt)
        # 5. the less obvious grants of docs/security.md are needed: revoke them one by one
        revoke = _mariadb_root if backend == "mysql" else lambda sql: _pg_super(sql, port, names["jobs"])
        w = f"'{names['pq_worker']}'@'%'" if backend == "mysql" else names["pq_worker"]
        on = f"{names['jobs']}." if backend == "mysql" else ""
        checks = [
            (f"REVOKE DELETE ON {on}{qt} FROM {w};", _needs_delete, f"GRANT DELETE ON {on}{qt} TO {w};"),
            (
                f"REVOKE INSERT ON {on}{qt}_meta FROM {w};",
                lambda q: WORKFLOW_2.start("needs-meta-insert", {}, queue=q),
                f"GRANT INSERT ON {on}{qt}_meta TO {w};",
            ),
        ]
        if backend == "postgres":
            checks += [
                (f"REVOKE UPDATE ON {qt}_meta FROM {w};", _capped_claim, f"GRANT UPDATE ON {qt}_meta TO {w};"),
                (f"REVOKE USAGE ON SEQUENCE {qt}_id_seq FROM {w};", lambda q: q.submit("needs-seq", "ok", {}), None),
            ]
        for sql, call, restore in checks:
            revoke(sql)
            with queue_core.open(worker, qt, max_retry_count=0) as q:
                with pytest.raises(queue_core.DatabaseError, match="denied"):
                    call(q)
            if restore:
                revoke(restore)
    finally:
        if backend == "mysql":
            _mariadb_root(
                f"DROP DATABASE IF EXISTS `{names['jobs']}`;\n"
                f"DROP USER IF EXISTS '{names['pq_admin']}'@'%';\n"
                f"DROP USER IF EXISTS '{names['pq_worker']}'@'%';\n"
            )
        else:
            _pg_super(
                f"DROP DATABASE IF EXISTS {names['jobs']} WITH (FORCE);\n"
                f"DROP ROLE IF EXISTS {names['pq_admin']};\nDROP ROLE IF EXISTS {names['pq_worker']};\n",
                port,
            )


def _submitter_operator_and_worker(worker: str, qt: str, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    base = ["-D", worker, "--table", qt]
    assert _cli(pq_cli, "submit", *base, "k1", "ok", f'{{"log": "{log}"}}').exit_code == 0
    with queue_core.open(worker, qt) as q:
        q.submit("capped", "ok", {"log": str(log)}, user="team", max_running=1)  # the fair_lock path
        q.submit("cancel-me", "ok", {})
        q.submit("finish-me", "ok", {})
        q.submit("purge-me", "ok", {})
        q.poll(alive_time=60)  # "before" (submitted by the admin)
    for command in (
        ["list"],
        ["stats"],
        ["show", "k1"],
        ["cancel", "cancel-me"],
        ["force-finish", "finish-me"],
        ["cleanup"],
    ):
        result = _cli(pq_cli, command[0], *base, *command[1:])
        assert result.exit_code == 0, (command, result.stderr)
    proc = subprocess.run(
        [
            str(BIN / "perfectqueue"),
            "run",
            f"{HERE / 'hostile_handlers.py'}:Worker",
            "--burst",
            "--processor-type",
            "thread",
            "--poll-interval",
            "0.1",
            *base,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environ(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "permission" not in proc.stderr.lower() and "denied" not in proc.stderr.lower(), proc.stderr[-3000:]
    with queue_core.open(worker, qt) as q:
        done = {m.key: m.outcome for m in q.list()}
        assert done["k1"] == done["capped"] == done["purge-me"] == "success", done
        q.submit("old", "ok", {})
        q.poll(alive_time=60).finish(retention_time=0)
        time.sleep(0.01)
        assert q.cleanup() >= 1  # DELETE


def _needs_delete(q) -> None:
    """A purge: cleanup, and the submission of a key whose finished row's retention ended (k1, finished
    with the default retention, is past it a year from now). Other submissions need no DELETE
    (test_hostile_privileges.py)."""
    later = time.time() + 10**7
    with pytest.raises(queue_core.AccessDeniedError, match="denied"):
        q.cleanup(now=later)
    q.submit_many([{"key": "k1", "type": "ok"}], now=later)


def _capped_claim(q) -> None:
    q.submit(f"capped-{uuid.uuid4().hex[:6]}", "ok", {}, user="team", max_running=1, priority=100)
    q.poll(alive_time=30)


def _scheduler(worker: str, qt: str, stt: str, s_opts: list[str]) -> None:
    opts = ["-D", worker, *s_opts]
    start = str(int(time.time()) - 150)
    result = _cli(sched_cli, "add", *opts, "tick", "tick", "* * * * *", "--start", start)
    assert result.exit_code == 0, result.stderr
    with perfectsched.open(worker, stt, qt) as sc:
        assert sc.tick() >= 1
    assert _cli(sched_cli, "modify", *opts, "tick", "--delay", "5").exit_code == 0
    with perfectsched.open(worker, stt, qt) as sc:
        sc.add("handled", "h", cron="* * * * *", next_time=1_700_000_000)
        task = sc.poll(alive_time=30)
        assert task is not None
        task.heartbeat(alive_time=30)
        task.finish()
    for command in (["list"], ["show", "tick"], ["delete", "handled"]):
        result = _cli(sched_cli, command[0], *opts, *command[1:])
        assert result.exit_code == 0, (command, result.stderr)


def _decider(worker: str, qt: str) -> None:
    with queue_core.open(worker, qt) as q:
        for m in list(q.list(status="waiting")):
            q[m.key].force_finish()  # leave only the run for the decider
        WORKFLOW.start("grants-run", {"n": 1}, queue=q)
        for _ in range(10):
            task = q.poll(alive_time=30)
            if task is None:
                break
            make_runner(Decider, task).run()
            if task.deferred is not None:  # a step's success: written with the next batch
                assert q.finish_many([task]) == []
            elif not task.done:
                task.finish()
        assert pqflow.get_run("grants-run", queue=q).status == "succeeded"
