"""Python processes for the tests, forked from a server process that has imported pq already.

A fresh interpreter spends some 0.3 s of CPU importing SQLAlchemy, the drivers and pq before it
runs a line of a test's worker, and the process suites start hundreds. :func:`popen` and
:func:`run` (``subprocess.Popen`` and ``subprocess.run`` for Python commands) fork them instead
from a server (started at first use, replaced every :data:`FORKS_PER_SERVER` processes) that
imported those once. Each is a real process all the same: a pid of its own (a session of its own
when asked), the environment, working directory, stdin, stdout and stderr it was given (its
``sys`` streams made for them as Python's start makes them), its code run as ``python -c``,
``python -m`` or ``python SCRIPT`` runs it. Its exit status reaches the test through a pipe from
the server.

How a forked process differs from a fresh one, and why that is acceptable here:

- It ends as the interpreter does (uncaught exception printed, non-daemon threads joined,
  ``atexit`` handlers run, streams flushed, exit status 120 if they cannot be), but without
  tearing down its modules one by one: that would copy every page of the server's heap (a third
  of a second). Objects' finalizers at interpreter shutdown do not run. ``PQ_TEST_FRESH_PROCESSES=1``
  starts every process afresh instead, to check that nothing depends on this.
- Processes forked from one server share its string hash seed (its sets of strings iterate in
  one order); servers are replaced every :data:`FORKS_PER_SERVER` processes, so the suite still
  sees many orders.
- ``/proc/<pid>/cmdline`` is the server's: a test that reads a process's command line starts it
  with ``subprocess`` itself.

What a fork cannot be is started afresh, as ``subprocess`` would: another executable, an option
of the interpreter (``-u``), a ``subprocess`` option the fork does not honour, and an environment
that changes how a process starts (:data:`START_VARIABLES`: ``LD_PRELOAD``, libfaketime's; a
``PYTHON*`` variable other than a server's ``PYTHONPATH`` and ``PYTHONFAULTHANDLER``; the locale).
"""

from __future__ import annotations

import atexit
import gc
import inspect
import io
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
#: what the server imports once, for every process it forks
PRELOAD = (
    "sqlalchemy",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.mysql.pymysql",
    "sqlalchemy.dialects.postgresql.psycopg",
    "pymysql",
    "psycopg",
    "queue_core",
    "queue_core.config",
    "queue_core.worker.main",
    "queue_core.cli",
    "perfectsched.runner",
    "perfectsched.cli",
    "pqflow",
    "pqflow.cli",
)
#: the processes one server forks before a new one (with a new hash seed) replaces it
FORKS_PER_SERVER = 64
#: the variables (by prefix) that change how a Python process starts: a process is forked only
#: when it has the values this test process started with (but for SETTABLE and PYTHONPATH)
START_VARIABLES = ("PYTHON", "LD_", "LC_", "LANG", "LANGUAGE", "GLIBC_TUNABLES", "MALLOC_", "HOME")
SETTABLE = frozenset({"PYTHONFAULTHANDLER"})
#: the ``subprocess.Popen`` options a forked process honours (any other: a fresh process)
FORKABLE_OPTIONS = frozenset(
    {"stdin", "stdout", "stderr", "cwd", "env", "start_new_session", "text", "encoding", "errors", "bufsize"}
)
MAX_REQUEST = 1 << 20


def _start_variables(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(START_VARIABLES) and k not in SETTABLE}


#: this test process's start variables, as it started (a later change of os.environ: a fresh process)
_STARTED_WITH = _start_variables(os.environ)


# -- the test's side ----------------------------------------------------------------------
class _Server:
    """A fork server of this test process (``pythonpath``: its ``PYTHONPATH``, None: none)."""

    def __init__(self, pythonpath: str | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith(START_VARIABLES)}
        env.update({k: v for k, v in _STARTED_WITH.items() if k != "PYTHONPATH"})
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # never a terminal: its children's streams are made for their own fds
        )
        theirs.close()
        self.sock = ours
        self.forks = 0
        self._ids = itertools.count(1)

    def fork(self, request: dict, fds: list[int]) -> int:
        """The pid of the process ``request`` describes, its stdin, stdout, stderr and status
        pipe ``fds`` (called under ``_servers_lock``)."""
        self.forks += 1
        request = {**request, "id": next(self._ids)}
        socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        while True:  # a reply to an earlier request whose caller was interrupted is passed over
            got, _, reply = self.sock.recv(4096).decode().partition(" ")
            if not got:
                raise OSError(f"the fork server could not start {request['argv'][:2]}: it is gone")
            if int(got) == request["id"]:
                break
        if not reply.isdigit():
            raise OSError(f"the fork server could not start {request['argv'][:2]}: {reply}")
        return int(reply)

    def retire(self) -> None:
        """Let the server end once the processes it forked have (their statuses still reach the
        test)."""
        self.sock.close()


_servers: dict[str | None, _Server] = {}
#: servers retired, until they end (they wait for the processes they forked)
_retired: list[_Server] = []
_servers_lock = threading.Lock()


def _fork(request: dict, fds: list[int]) -> int:
    """Fork ``request`` from the server of its ``PYTHONPATH`` (one per value, each replaced
    after :data:`FORKS_PER_SERVER` processes)."""
    pythonpath = request["env"].get("PYTHONPATH")
    with _servers_lock:
        server = _servers.get(pythonpath)
        _retired[:] = [old for old in _retired if old.proc.poll() is None]
        if server is not None and (server.forks >= FORKS_PER_SERVER or server.proc.poll() is not None):
            server.retire()
            _retired.append(server)
            server = None
        if server is None:
            server = _servers[pythonpath] = _Server(pythonpath)
        return server.fork(request, fds)


def python_argv(args, env: dict | None) -> list[str] | None:
    """``args`` as the server forks it (the Python interpreter, then ``-c CODE``, ``-m MODULE``
    or a script, then its arguments; a console script of this interpreter becomes ``python
    SCRIPT``), or None when it needs a fresh start."""
    if os.environ.get("PQ_TEST_FRESH_PROCESSES"):
        return None
    if not isinstance(args, list | tuple) or not args or not _same_start(os.environ if env is None else env):
        return None
    argv = [os.fspath(a) for a in args]
    if argv[0] != sys.executable:
        if not _console_script(argv[0]):
            return None
        argv = [sys.executable, *argv]
    if len(argv) < 2 or (argv[1].startswith("-") and argv[1] not in ("-c", "-m")):
        return None
    return argv if argv[1] not in ("-c", "-m") or len(argv) >= 3 else None


def _same_start(env) -> bool:
    """Whether a process started with ``env`` starts as a server does: the start variables this
    test process started with, but for SETTABLE and a ``PYTHONPATH`` of none, this test
    process's or the project's root (a server each)."""
    wanted = _start_variables(env)
    if wanted.get("PYTHONPATH") not in (None, ROOT, _STARTED_WITH.get("PYTHONPATH")):
        return False
    wanted.pop("PYTHONPATH", None)
    return wanted == {k: v for k, v in _STARTED_WITH.items() if k != "PYTHONPATH"}


def _console_script(path: str) -> bool:
    """Whether ``path`` is a script this interpreter runs (its first line: ``#!`` and it, or the
    interpreter of the same name in the same environment)."""
    try:
        with open(path, "rb") as f:
            line = f.readline().strip()
    except OSError:
        return False
    if not line.startswith(b"#!"):
        return False
    named = Path(os.fsdecode(line[2:]))
    here = Path(sys.executable)
    return named.name == here.name and named.parent.resolve() == here.parent.resolve()


#: the parameters of ``Popen._execute_child`` after ``self``, in order (they differ by version)
_EXECUTE_CHILD_PARAMS = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]


class ForkedPopen(subprocess.Popen):
    """``subprocess.Popen`` of a process forked by a server (its exit status read from a pipe
    the server writes it to: the server, not this process, is its parent)."""

    _status_r = -1

    def _execute_child(self, *args):
        a = dict(zip(_EXECUTE_CHILD_PARAMS, args, strict=True))
        pipes = [a[k] for k in ("p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")]
        fds = [a["p2cread"], a["c2pwrite"], a["errwrite"]]
        fds = [fd if fd != -1 else own for fd, own in zip(fds, (0, 1, 2), strict=True)]
        status_r, status_w = os.pipe()
        request = {
            "argv": python_argv(a["args"], a["env"]),
            "env": dict(os.environ if a["env"] is None else a["env"]),
            "cwd": os.path.abspath(os.fspath(a["cwd"]) if a["cwd"] is not None else os.getcwd()),
            "session": bool(a["start_new_session"]),
        }
        try:
            self.pid = _fork(request, [*fds, status_w])
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
            self._close_pipe_fds(*pipes)
        self._status_r = status_r
        self._child_created = True

    def _internal_poll(self, _deadstate=None, **_unused):
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None and _readable(self._status_r, 0):
                    self._read_status()
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout):
        with self._waitpid_lock:
            if self.returncode is not None:
                return self.returncode
            if not _readable(self._status_r, timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        data = os.read(self._status_r, 64)  # written at once by the server, or nothing: it is gone
        os.close(self._status_r)
        self._status_r = -1
        # no status: the server is gone and cannot tell (the process may still run)
        self.returncode = int(data) if data.strip() else 255


def _readable(fd: int, timeout: float | None) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, timeout) * 1000))


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``, forked from a server when it can be."""
    if set(kwargs) <= FORKABLE_OPTIONS and python_argv(args, kwargs.get("env")) is not None:
        return ForkedPopen(args, **kwargs)
    return subprocess.Popen(args, **kwargs)


def run(args, *, input=None, timeout=None, check=False, capture_output=False, **kwargs):
    """``subprocess.run(args, ...)``, forked from a server when it can be."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:  # a timeout, or the test interrupted: the process does not outlive it
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# -- the server's side --------------------------------------------------------------------
def _serve(fd: int) -> dict:
    """Fork a process per request until the test process retires this server, then wait for
    those processes to end; returns, in a forked process, its request (run by :func:`_become`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the test process and the children
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    statuses: dict[int, int] = {}
    retired = False
    while not retired or statuses:
        ready = {key for key, _ in _poll([wake_r] if retired else [sock, wake_r])}
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(statuses)
        if sock.fileno() in ready and not retired:
            request = _next_request(sock, statuses)
            if request is None:
                retired = True
                sock.close()
            elif request.get("fds"):
                return request
    os._exit(0)


def _poll(fds: list[int]) -> list[tuple[int, int]]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        try:
            return poller.poll()
        except InterruptedError:
            continue


def _next_request(sock: socket.socket, statuses: dict[int, int]) -> dict | None:
    """Fork the next request; returns it in the forked process (its ``fds`` set), ``{}`` in the
    server, None when the test process retired the server."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 4)
    if not data:
        return None
    request = json.loads(data)
    try:
        pid = os.fork()
    except OSError as exc:
        for f in fds:
            os.close(f)
        sock.send(f"{request['id']} {exc}".encode())
        return {}
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        request["fds"], request["reply"] = fds, sock
        return request
    statuses[pid] = fds[3]
    for f in fds[:3]:
        os.close(f)
    return {}


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is None:
            continue
        try:
            os.write(fd, str(os.waitstatus_to_exitcode(status)).encode())
        except OSError:  # the test no longer waits for it (interrupted while starting it)
            pass
        os.close(fd)


def _become(request: dict) -> None:
    """Turn this forked process into the one ``request`` describes, and run its code."""
    import faulthandler
    import runpy
    import time
    import types

    try:
        if request["session"]:
            os.setsid()
        for target, fd in enumerate(request["fds"][:3]):
            os.dup2(fd, target)
    except BaseException as exc:  # noqa: BLE001 - told to the test, which raises it
        request["reply"].send(f"{request['id']} {type(exc).__name__}: {exc}".encode())
        os._exit(127)
    request["reply"].send(f"{request['id']} {os.getpid()}".encode())  # a session of its own by then, as Popen's
    for fd in _open_fds():
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    _new_streams()
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    sys.orig_argv = list(request["argv"])
    argv = request["argv"][1:]
    if argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec", dont_inherit=True), main.__dict__)
    elif argv[0] == "-m":
        sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
        if not hasattr(sys.modules.get(argv[1]), "__path__"):  # a module (not a package) runs afresh as __main__
            sys.modules.pop(argv[1], None)
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv, sys.path[0] = argv, os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


#: the server's standard streams, kept: collected, they would close this process's fds 0, 1 and 2
_SERVER_STREAMS: list = []


def _new_streams() -> None:
    """``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` for this process's fds 0, 1 and 2, made
    as Python's start makes them (line-buffered on a terminal, stderr always; unbuffered with
    ``PYTHONUNBUFFERED``), in the encodings the server's were made in (the same locale)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, old, write: bool, line: bool):
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        buffered = raw if write and unbuffered else (io.BufferedWriter(raw) if write else io.BufferedReader(raw))
        return io.TextIOWrapper(
            buffered,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=line or raw.isatty(),
            write_through=write and unbuffered,
        )

    _SERVER_STREAMS.extend((sys.__stdin__, sys.__stdout__, sys.__stderr__))  # never closed: they own fds 0-2
    sys.stdin = sys.__stdin__ = stream(0, sys.__stdin__, False, False)
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, True, False)
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, True, True)


def _exit_as_python(run, request: dict) -> None:
    """``run(request)``, then exit as the interpreter would at its end (an uncaught exception
    printed, non-daemon threads joined, atexit handlers run, streams flushed, the status of
    ``sys.exit`` or of the exception; 120 when the streams cannot be flushed), without tearing its
    modules down one by one: a forked process would copy every page of the server's heap doing
    so (a third of a second)."""
    status, interrupted = 0, False
    try:
        run(request)
    except SystemExit as exc:
        status = _status_of(exc.code)
    except BaseException as exc:  # noqa: BLE001 - what the interpreter does with it
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    status = _flushed(status)
    if interrupted:  # ended by SIGINT, as an interpreter interrupted by Ctrl-C is
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _status_of(code) -> int:
    """The exit status of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flushed(status: int) -> int:
    """``status``, or 120 when stdout or stderr cannot be flushed (as Python's end reports it)."""
    for name in ("stdout", "stderr"):
        try:
            getattr(sys, name).flush()
        except (OSError, ValueError) as exc:
            try:
                os.write(2, f"Exception ignored on flushing sys.{name}: {exc!r}\n".encode())
            except OSError:
                pass
            status = 120
    return status


def _open_fds() -> list[int]:
    """The file descriptors open in this process (not every possible one: there may be a
    million)."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:  # the listing's own descriptor, closed already
            continue
        fds.append(int(name))
    return fds


if __name__ == "__main__":
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()  # what is here now is never scanned again: the forked processes share its pages
    _exit_as_python(_become, _serve(int(sys.argv[1])))
