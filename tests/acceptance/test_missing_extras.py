"""A command that needs an optional dependency that is not installed says which extra installs
it, in one line on stderr with a non-zero exit: the real console scripts, each in a process where
the dependency cannot be imported (a ``sitecustomize`` sets ``sys.modules[name] = None``, which
makes ``import name`` raise ImportError, as a missing package does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pqflow
import queue_core

BIN = Path(sys.executable).parent
BLOCK = "import os, sys\nfor name in os.environ['BLOCKED_MODULES'].split(','):\n    sys.modules[name] = None\n"

flow = pqflow.Workflow("extras_flow")


@flow.step()
def only(ctx):
    return 1


CLONE = Path(__file__).resolve().parents[2]


def hint(extra: str) -> str:
    """What a missing extra's message says to run: pq installs from its clone (in place here)."""
    return f"pip install -e '{CLONE}[{extra}]'"


def _run(tmp_path: Path, blocked: str, *argv: str, path: str | None = None) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}
    env.update(BLOCKED_MODULES=blocked, PYTHONPATH=str(site))
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def _one_line(proc: subprocess.CompletedProcess, code: int, prog: str, text: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [f"{prog}: error: {text}"], proc.stderr


def test_perfectqueue_metrics_names_the_metrics_extra(tmp_path, db_url, table_name):
    with queue_core.open(db_url, table_name) as q:
        q.init()
    proc = _run(tmp_path, "prometheus_client", "perfectqueue", "metrics", "--once", "-D", db_url, "--table", table_name)
    text = f"perfectqueue metrics needs prometheus_client: install pq[metrics] ({hint('metrics')})"
    _one_line(proc, 6, "perfectqueue", text)


def test_pqweb_names_the_web_extra(tmp_path, db_url, table_name):
    proc = _run(tmp_path, "starlette", "pqweb", "-D", db_url, "--table", table_name, "--listen", "127.0.0.1:1")
    _one_line(proc, 6, "pqweb", f"pqweb needs starlette: install pq[web] ({hint('web')})")


def test_a_postgres_url_without_psycopg_names_the_postgres_extra(tmp_path):
    proc = _run(tmp_path, "psycopg", "perfectqueue", "list", "-D", "postgresql+psycopg://u:pw@127.0.0.1:1/x")
    assert proc.returncode == 6, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and f"install pq[postgres] ({hint('postgres')})" in proc.stderr


def test_pqflow_graph_without_graphviz_or_matplotlib_names_the_graph_extra(tmp_path):
    (tmp_path / "extras_flows.py").write_text(Path(__file__).read_text())
    out = tmp_path / "g.svg"
    proc = _run(
        tmp_path, "matplotlib", "pqflow", "graph", "extras_flows:flow", "--format", "svg", "-o", str(out), path=str(BIN)
    )  # no Graphviz 'dot' on this PATH
    text = (
        "rendering svg needs Graphviz's 'dot' (apt install graphviz) or matplotlib: install pq[graph] "
        f"({hint('graph')})"
    )
    _one_line(proc, 1, "pqflow", text)
    assert not out.exists()
