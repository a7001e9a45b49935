"""Python processes for the tests, forked from a server process that has imported pq already.

A fresh interpreter spends some 0.3 s of CPU importing SQLAlchemy, the drivers and pq before it
runs a line of a test's worker, and the process suites start hundreds. :func:`popen` and
:func:`run` (``subprocess.Popen`` and ``subprocess.run`` for Python commands) fork them instead
from a server (one per test process, started at first use) that imported those once. Each is a
real process all the same: a pid and a session of its own, the environment, working directory,
stdin, stdout and stderr it was given, its code run as ``python -c``, ``python -m`` or ``python
SCRIPT`` runs it, and its exit through the interpreter's own shutdown (threads joined, atexit,
flushed streams); its exit status reaches the test through a pipe from the server.

What a fork cannot be is started afresh, as ``subprocess`` would: another executable, an option
of the interpreter (``-u``), an environment that changes how a process starts (``LD_PRELOAD``:
libfaketime; a ``PYTHON*`` variable other than the server's ``PYTHONPATH`` and
``PYTHONFAULTHANDLER``), and a test that reads the process's command line (``/proc/<pid>/cmdline``
is the server's): those tests call ``subprocess`` themselves.
"""

from __future__ import annotations

import atexit
import gc
import inspect
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
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
#: variables a forked process may be given other values of than the server has (the others
#: that start with one of FRESH_PREFIXES need a fresh interpreter)
SETTABLE = frozenset({"PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE"})
FRESH_PREFIXES = ("PYTHON", "LD_")
MAX_REQUEST = 1 << 20


# -- the test's side ----------------------------------------------------------------------
class _Server:
    """The fork server of this test process, started at first use."""

    def __init__(self, pythonpath: str | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def fork(self, request: dict, fds: list[int]) -> int:
        """The pid of the process ``request`` describes, its stdin, stdout, stderr and status
        pipe ``fds``."""
        data = json.dumps(request).encode()
        with self.lock:
            socket.send_fds(self.sock, [data], fds)
            reply = self.sock.recv(4096).decode()
        if not reply.isdigit():
            raise OSError(f"the fork server could not start {request['argv'][:2]}: {reply or 'it is gone'}")
        return int(reply)


_servers: dict[str | None, _Server] = {}
_servers_lock = threading.Lock()


def _server_of(env: dict) -> _Server:
    """The server of processes started with ``env``'s ``PYTHONPATH`` (one per value)."""
    pythonpath = env.get("PYTHONPATH")
    with _servers_lock:
        server = _servers.get(pythonpath)
        if server is None or server.proc.poll() is not None:
            server = _servers[pythonpath] = _Server(pythonpath)
        return server


def python_argv(args, env: dict | None) -> list[str] | None:
    """``args`` as the server forks it (the Python interpreter, then ``-c CODE``, ``-m MODULE``
    or a script, then its arguments; a console script of this interpreter becomes ``python
    SCRIPT``), or None when it needs a fresh start."""
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


def _same_start(env) -> bool:
    """Whether a process started with ``env`` starts as a server does: the same ``PYTHON*`` and
    ``LD_*`` variables, but for :data:`SETTABLE` and a ``PYTHONPATH`` of none, this test
    process's or the project's root (a server each)."""
    if env.get("PYTHONPATH") not in (None, ROOT, os.environ.get("PYTHONPATH")):
        return False
    base = {**os.environ, "PYTHONPATH": env.get("PYTHONPATH")}
    for key in set(env) | set(base):
        if key.startswith(FRESH_PREFIXES) and key not in SETTABLE and env.get(key) != base.get(key):
            return False
    return True


class ForkedPopen(subprocess.Popen):
    """``subprocess.Popen`` of a process forked by the server (its exit status read from a pipe
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
            "cwd": os.fspath(a["cwd"]) if a["cwd"] is not None else os.getcwd(),
            "session": bool(a["start_new_session"]),
        }
        try:
            self.pid = _server_of(request["env"]).fork(request, [*fds, status_w])
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
            self._close_pipe_fds(*pipes)
        self._status_r = status_r
        self._child_created = True

    def _internal_poll(self, _deadstate=None, **_unused):
        if self.returncode is None and select.select([self._status_r], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def _wait(self, timeout):
        if self.returncode is not None:
            return self.returncode
        if not select.select([self._status_r], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(self.args, timeout)
        self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        data = b""
        while chunk := os.read(self._status_r, 64):
            data += chunk
        os.close(self._status_r)
        self._status_r = -1
        # no status: the server is gone and cannot tell (the process may still run)
        self.returncode = int(data) if data.strip() else 255


#: the parameters of ``Popen._execute_child`` after ``self``, in order (they differ by version)
_EXECUTE_CHILD_PARAMS = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``, forked from the server when it can be."""
    plain = not kwargs.get("pass_fds") and kwargs.get("preexec_fn") is None and not kwargs.get("shell")
    plain = plain and kwargs.get("executable") is None
    if plain and python_argv(args, kwargs.get("env")) is not None:
        return ForkedPopen(args, **kwargs)
    return subprocess.Popen(args, **kwargs)


def run(args, *, input=None, timeout=None, check=False, capture_output=False, **kwargs):
    """``subprocess.run(args, ...)``, forked from the server when it can be."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# -- the server's side --------------------------------------------------------------------
def _serve(fd: int) -> dict:
    """Fork a process per request until the test process is gone; returns, in a forked
    process, its request (run by :func:`_become`)."""
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    statuses: dict[int, int] = {}
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(statuses)
        if sock not in ready:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 4)
        except InterruptedError:
            continue
        if not data:  # the test process is gone
            os._exit(0)
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            request["fds"], request["reply"] = fds, sock
            return request
        statuses[pid] = fds[3]
        for f in fds[:3]:
            os.close(f)


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            os.write(fd, str(os.waitstatus_to_exitcode(status)).encode())
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
        request["reply"].send(f"{type(exc).__name__}: {exc}".encode())
        os._exit(127)
    request["reply"].send(str(os.getpid()).encode())  # a session of its own by then, as Popen's
    for fd in _open_fds():
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    sys.orig_argv = list(request["argv"])
    argv = request["argv"][1:]
    if argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif argv[0] == "-m":
        sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv, sys.path[0] = argv, os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def _exit_as_python(run, request: dict) -> None:
    """``run(request)``, then exit as the interpreter would at its end (an uncaught exception
    printed, non-daemon threads joined, atexit handlers run, streams flushed, the status of
    ``sys.exit`` or of the exception), without tearing its modules down one by one: a forked
    process would copy every page of the server's heap doing so (a third of a second)."""
    status = 0
    try:
        run(request)
    except SystemExit as exc:
        status = _status_of(exc.code)
    except BaseException:  # noqa: BLE001 - what the interpreter does with it
        sys.excepthook(*sys.exc_info())
        status = 1
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            status = -signal.SIGINT
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if status < 0:  # ended by a signal, as an interpreter interrupted by Ctrl-C is
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status & 0xFF)


def _status_of(code) -> int:
    """The exit status of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


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
