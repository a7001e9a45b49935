"""Processes the scenarios start: spawn, find, signal and reap them, always by process id.

Every process is started in a new session (``start_new_session=True``), so the session id is
the started process's pid and every process it forks (a worker's children) stays in that
session. :func:`session_pids` finds them all from ``/proc``; :class:`Fleet` kills every session it
started when the scenario ends, whether it passed, failed or raised.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns a true value; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1], session [3])."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def gone(pid: int) -> bool:
    """True once ``pid`` no longer exists at all (a zombie still exists)."""
    return not os.path.exists(f"/proc/{pid}")


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid``."""
    out = []
    for pid in _all_pids():
        fields = _stat(pid)
        if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out.append(pid)
    return out


def children(pid: int) -> list[int]:
    """Live direct children of ``pid``."""
    out = []
    for p in _all_pids():
        fields = _stat(p)
        if fields and fields[0] not in ("Z", "X") and int(fields[1]) == pid:
            out.append(p)
    return out


def signal_pids(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class Proc:
    """One started process (the leader of its own session) and its output file."""

    def __init__(self, name: str, popen: subprocess.Popen, log: Path, graceful: set[int] | None = None):
        self.name, self.popen, self.log = name, popen, log
        self.pid = popen.pid
        #: pids asked to stop gracefully (shared by a Fleet): they must not leave leases behind
        self.graceful = graceful if graceful is not None else set()

    def __repr__(self) -> str:
        return f"<Proc {self.name} pid={self.pid}>"

    def running(self) -> bool:
        return self.popen.poll() is None

    def pids(self) -> list[int]:
        """The leader and every live process it forked (same session)."""
        return session_pids(self.pid)

    def send(self, sig) -> None:
        if self.running():
            self.popen.send_signal(sig)

    def kill(self) -> list[int]:
        """SIGKILL the whole session at once; returns the pids killed."""
        pids = self.pids()
        signal_pids(pids, signal.SIGKILL)
        self.popen.wait()
        return pids

    def stop(self, timeout: float = 30.0, *, signalled: bool = False) -> int | None:
        """SIGTERM (unless ``signalled`` already), wait for a graceful exit, then SIGKILL what
        is left. Returns the exit code."""
        self.graceful.update(self.pids())
        if not signalled:
            self.send(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        return self.popen.returncode

    def output(self, tail: int | None = 3000) -> str:
        try:
            text = self.log.read_text(errors="replace")
            return text if tail is None else text[-tail:]
        except OSError:
            return ""


def stop_all(procs: list[Proc], timeout: float = 30.0) -> None:
    """Graceful stop of several processes at once (one SIGTERM each, then wait)."""
    for p in procs:
        p.graceful.update(p.pids())
        p.send(signal.SIGTERM)
    for p in procs:
        p.stop(timeout, signalled=True)


class Fleet:
    """Starts processes and guarantees they are all gone when the ``with`` block ends."""

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self.graceful: set[int] = set()
        self._n = 0

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()

    def kill_all(self) -> None:
        for p in self.procs:
            p.kill()

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        self._n += 1
        log = self.logdir / f"{self._n:03d}-{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(ROOT),
                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                start_new_session=True,
            )
        proc = Proc(name, popen, log, self.graceful)
        self.procs.append(proc)
        return proc

    def agent(self, kind: str, spec: dict, *, name: str | None = None, env: dict | None = None) -> Proc:
        """Start ``python -m reliability.agents KIND SPEC`` (see :mod:`reliability.agents`)."""
        argv = [sys.executable, "-m", "reliability.agents", kind, json.dumps(spec)]
        return self.spawn(name or kind, argv, env)


def local_pid(owner: str | None) -> int | None:
    """The process of this host that a lease's owner (``host:pid``, as a claim writes it) names."""
    host, _, pid = (owner or "").rpartition(":")
    return int(pid) if host == HOST and pid.isdigit() else None
