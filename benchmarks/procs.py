"""Processes of the benchmarks: worker commands, their peak memory, start barriers.

Every process is started in its own session and remembered; :func:`stop_all` ends the ones
still alive, by PID (and their descendants, found in /proc), never by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: the directory holding the ``benchmarks`` package (the repository root)
ROOT = Path(__file__).resolve().parents[1]

_started: list[Proc] = []


class BenchError(Exception):
    """A measurement that could not be made; its message is one line for the results."""


def child_env(**extra: str) -> dict:
    """The environment of a child: ours, with the repository root appended to PYTHONPATH
    (appended, so a PYTHONPATH chosen by the caller still decides which pq is imported)."""
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in parts:
        parts.append(str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def command(name: str, module: str | None = None) -> list[str]:
    """argv prefix of a console script of this Python (``perfectqueue``, ``celery`` ...).

    Falls back to ``python -m module`` when the script is not next to the interpreter.
    """
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if path:
        return [path]
    if module:
        return [sys.executable, "-m", module]
    raise BenchError(f"command {name!r} not found")


# -- /proc ---------------------------------------------------------------------------------
def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    out.extend(int(x) for x in fh.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def peak_rss_kb(pid: int) -> int | None:
    """VmHWM (peak resident set size) of a process, in kB."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRSS(threading.Thread):
    """Samples VmHWM of a process and of its descendants until stopped.

    ``root_kb``: the peak of the root process; ``children_kb``: pid -> peak of each
    descendant seen (the last value read before it exited)."""

    def __init__(self, pid: int, interval: float = 0.05):
        super().__init__(name="bench-rss", daemon=True)
        self.pid, self.interval = pid, interval
        self.root_kb = 0
        self.children_kb: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def sample(self) -> None:
        kb = peak_rss_kb(self.pid)
        if kb:
            self.root_kb = max(self.root_kb, kb)
        for c in descendants(self.pid):
            kb = peak_rss_kb(c)
            if kb:
                self.children_kb[c] = max(self.children_kb.get(c, 0), kb)

    def stop(self) -> None:
        self._halt.set()
        self.join(2)


# -- processes -----------------------------------------------------------------------------
class Proc:
    """A started command: own session, stdout+stderr to ``log`` (or piped).

    ``scoped`` processes (workers) are remembered and ended by :func:`stop_all` after each
    measurement; long-lived servers (Redis) pass False and are stopped by their owner."""

    def __init__(
        self, argv: list[str], *, env: dict, log: Path | None, stdin=None, pipe: bool = False, scoped: bool = True
    ):
        self.argv = argv
        self.log = log
        self._fh = open(log, "ab") if log is not None else None
        out = subprocess.PIPE if pipe else (self._fh or subprocess.DEVNULL)
        self.started = time.perf_counter()
        self.popen = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=stdin,
            stdout=out,
            stderr=(self._fh or subprocess.DEVNULL) if pipe else subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        if scoped:
            _started.append(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> float:
        """Wait for the exit; seconds from start to exit. A timeout or a failing exit code
        raises BenchError (after killing the process)."""
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BenchError(f"{self.name} did not finish within {timeout:.0f}s{self.tail()}") from None
        elapsed = time.perf_counter() - self.started
        self._close()
        if code != 0:
            raise BenchError(f"{self.name} exited with {code}{self.tail()}")
        return elapsed

    def stop(self, sig: int = signal.SIGTERM, grace: float = 15.0) -> None:
        """Ask it to stop (``sig``); after ``grace`` seconds kill it and its descendants."""
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except OSError:
                pass
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def kill(self) -> None:
        for pid in [*descendants(self.pid), self.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._close()

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv[0] != sys.executable else " ".join(self.argv[1:3])

    def tail(self, lines: int = 3) -> str:
        """The last lines of the log, as `` (log: ...)``, for error messages."""
        if self.log is None or not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        return (" (log: " + " | ".join(t.strip()[:200] for t in text) + ")") if text else ""


def stop_all() -> None:
    """Kill whatever this harness started and is still running."""
    for p in _started:
        if p.alive():
            p.kill()
    _started.clear()


# -- pq workers ------------------------------------------------------------------------------
def pq_worker(
    target: str,
    *,
    url: str,
    table: str,
    log: Path,
    program: str = "perfectqueue",
    processors: int | None = None,
    poll_interval: float | None = None,
    burst: bool = False,
    env: dict | None = None,
    queues: str | None = None,
) -> Proc:
    """``perfectqueue run TARGET`` (or ``pqflow run``) on ``url``/``table`` with the
    documented defaults, except the options given here."""
    argv = [*command(program, f"{'queue_core' if program == 'perfectqueue' else program}.cli"), "run", target]
    if processors is not None:
        argv += ["--processors", str(processors)]
    if poll_interval is not None:
        argv += ["--poll-interval", str(poll_interval)]
    if burst:
        argv.append("--burst")
    if queues is not None:
        argv += ["--queues", queues]
    return Proc(argv, env=child_env(PQ_DATABASE_URL=url, PQ_TABLE=table, **(env or {})), log=log)


# -- start barrier -----------------------------------------------------------------------------
def barrier(argvs: list[list[str]], *, env: dict, logdir: Path, timeout: float) -> tuple[float, list[dict]]:
    """Start the processes, wait until each printed ``ready``, release them together and
    wait for each to print one JSON line holding ``"end"`` (its ``time.time()`` when done).

    Returns (seconds from release to the last ``end``, the JSON objects).
    """
    procs = [
        Proc(a, env=env, log=logdir / f"barrier-{i}.log", stdin=subprocess.PIPE, pipe=True) for i, a in enumerate(argvs)
    ]
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            line = p.popen.stdout.readline().decode().strip()
            if line != "ready":
                raise BenchError(f"{p.name} did not get ready: {line!r}{p.tail()}")
        go = time.time()
        for p in procs:
            p.popen.stdin.write(b"go\n")
            p.popen.stdin.flush()
        results = []
        for p in procs:
            try:
                out, _ = p.popen.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchError(f"{p.name} did not finish within {timeout:.0f}s{p.tail()}") from None
            lines = out.decode().strip().splitlines()
            if p.popen.returncode != 0 or not lines:
                raise BenchError(f"{p.name} exited with {p.popen.returncode} without a result{p.tail()}")
            results.append(json.loads(lines[-1]))
        return max(r["end"] for r in results) - go, results
    finally:
        for p in procs:
            if p.alive():
                p.kill()


def barrier_child() -> None:
    """The child side of :func:`barrier`: say ready, wait for the release."""
    print("ready", flush=True)
    sys.stdin.readline()


def wait_until(predicate, timeout: float, what: str, procs: list[Proc] = (), interval: float = 0.02):
    """Poll ``predicate`` until it returns something true; BenchError after ``timeout`` or
    once every process of ``procs`` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if procs and not any(p.alive() for p in procs):
            raise BenchError(f"{procs[0].name} exited while waiting for {what}{procs[0].tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
