"""Real worker processes for the acceptance tests: start, wait, collect."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forkserver

HANDLERS = str(Path(__file__).with_name("handlers.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def start_worker(url, table, target="Worker", *, burst=False, _file=HANDLERS, env=None, config_file=None, **settings):
    """A worker process (``env``: variables to add to its environment, e.g. libfaketime's). With
    ``config_file``, its settings are written there as JSON and re-read from it on a restart signal
    (as the CLI re-reads its config file)."""
    settings = {
        "url": url,
        "table": table,
        "poll_interval": 0.1,
        "task_heartbeat_interval": 0.3,
        "child_heartbeat_interval": 0.3,
        "child_fork_frequency_limit": 0.0,
        "retry_wait": 0,
        **settings,
    }
    if config_file is not None:
        Path(config_file).write_text(json.dumps(settings))
    code = (
        "import sys, json, queue_core.worker.main as w, queue_core.config as c\n"
        f"s = c.build(json.loads({json.dumps(json.dumps(settings))}))\n"
        f"path = {str(config_file) if config_file is not None else None!r}\n"
        "reload = (lambda: c.build(json.loads(open(path).read()))) if path else None\n"
        f"sys.exit(w.run_worker(w.load_target({_file + ':' + target!r}), s, burst={burst!r}, config_loader=reload))\n"
    )
    return _python(code, env)


def start_scheduler(
    url, table, schedule_table, target="occurrence", *, config_file, _file=HANDLERS, env=None, **settings
):
    """A ``perfectsched run`` process running ``target`` on each due occurrence (None: submitting them
    into the queue), its settings written to ``config_file`` as JSON and re-read from it on a restart
    (``env``: variables to add to its environment)."""
    settings = {
        "url": url,
        "table": table,
        "schedule_table": schedule_table,
        "poll_interval": 0.1,
        "task_heartbeat_interval": 0.3,
        **settings,
    }
    Path(config_file).write_text(json.dumps(settings))
    handler = f"load_target({_file + ':' + target!r})" if target else "None"
    code = (
        "import sys, json\n"
        "from queue_core.worker.loader import load_target\n"
        "from perfectsched.runner import run_scheduler\n"
        f"path = {str(config_file)!r}\n"
        "reload = lambda: json.loads(open(path).read())\n"
        f"sys.exit(run_scheduler(reload(), target={handler}, config_loader=reload))\n"
    )
    return _python(code, env)


def _python(code: str, env: dict | None = None) -> subprocess.Popen:
    """``code`` run by a Python process of its own session, stdout and stderr together (``env``:
    variables to add to its environment), forked from pq's imports when they allow
    (``forkserver.py``)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONFAULTHANDLER": "1", **(env or {})}
    return forkserver.popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def runs(log: Path, what="run") -> list[tuple[str, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        key, pid, kind = line.split()
        if kind == what:
            out.append((key, int(pid)))
    return out


def finish(proc, timeout=30):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out = _stacks_then_kill(proc)
        raise AssertionError("worker did not exit:\n" + out.decode(errors="replace")[-12000:]) from None
    return proc.returncode, out.decode(errors="replace")


def _stacks_then_kill(proc) -> bytes:
    """Kill ``proc`` and its children, after each printed the stacks of its threads (SIGABRT with
    PYTHONFAULTHANDLER set): what a hung worker was waiting for is in the test's output. Its
    processors are process groups of their own: each is sent the signal too."""
    for pid in _children(proc.pid):
        _send(pid, signal.SIGABRT)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGABRT)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # a child that outlived its supervisor
    except ProcessLookupError:
        pass
    return out


def _children(pid: int) -> list[int]:
    """The ids of the processes whose parent is ``pid`` (from /proc: Linux)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):  # not a process, or gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run_to_end(workers, timeout=120) -> None:
    """Wait for burst workers to end, each with exit code 0 (the others killed if one fails)."""
    try:
        for w in workers:
            code, out = finish(w, timeout=timeout)
            assert code == 0, out[-3000:]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()


def stop_and_time(proc, sig, timeout=30):
    """Send ``sig`` to ``proc`` and wait for its end: (exit code, output, seconds it took)."""
    proc.send_signal(sig)
    sent = time.monotonic()
    code, out = finish(proc, timeout=timeout)
    return code, out, time.monotonic() - sent
