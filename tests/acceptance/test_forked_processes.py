"""The processes the process suites fork from pq's imports (``forkserver.py``) behave as the
fresh interpreters they stand for: what a test of a worker reads of its process holds for both."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest

ENV = {**os.environ, "PYTHONPATH": forkserver.ROOT}
PY = sys.executable


def forked(code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", ENV)
    return forkserver.run([PY, "-c", code, *args], capture_output=True, text=True, timeout=30, **kwargs)


def test_a_forked_process_has_the_environment_directory_arguments_and_input_it_was_given(tmp_path):
    code = "import os, sys; print(os.environ['X'], os.getcwd(), sys.argv, sys.path[0] == '', sys.stdin.read())"
    done = forked(code, "a", "b", env={**ENV, "X": "y"}, cwd=tmp_path, input="in")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"y {tmp_path} ['-c', 'a', 'b'] True in\n"


def test_a_forked_process_is_a_process_and_a_session_of_its_own():
    proc = forkserver.popen([PY, "-c", "import time; time.sleep(30)"], env=ENV, start_new_session=True)
    try:
        assert isinstance(proc, forkserver.ForkedPopen)
        assert proc.pid != os.getpid() and os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit(-1)", 255, ""),
        ("def f(x: Undefined): pass", 1, "NameError: name 'Undefined' is not defined\n"),
        ("import sys; sys.exit('bye')", 1, "bye\n"),
        ("raise ValueError('boom')", 1, "ValueError: boom\n"),
        ("raise KeyboardInterrupt", -signal.SIGINT, "KeyboardInterrupt\n"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL, ""),
    ],
)
def test_a_forked_process_exits_with_the_status_python_gives_its_end(code, status, stderr):
    done = forked(code)
    assert done.returncode == status
    assert done.stderr.endswith(stderr)


def test_a_forked_process_joins_its_threads_runs_atexit_and_flushes_before_it_exits():
    code = (
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('atexit', end=''))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n"
        "sys.stdout.write('buffered ')\n"
    )
    done = forked(code)
    assert (done.returncode, done.stdout) == (0, "buffered thread\natexit")


def test_a_console_script_of_this_interpreter_is_forked_as_python_script(tmp_path):
    script = Path(PY).with_name("perfectqueue")
    assert forkserver.python_argv([str(script), "--help"], ENV) == [PY, str(script), "--help"]
    done = forkserver.run([str(script), "submit", "k", "t", "-D", f"sqlite:///{tmp_path}/q.db"], capture_output=True)
    assert done.returncode != 0 and done.stderr.decode().startswith("perfectqueue: error: ")


@pytest.mark.parametrize(
    ("args", "env"),
    [
        ([PY, "-u", "-c", "pass"], ENV),
        ([PY, "-c", "pass"], {**ENV, "LD_PRELOAD": "/nonexistent.so"}),
        ([PY, "-c", "pass"], {**ENV, "PYTHONTZPATH": "/nowhere"}),
        ([PY, "-c", "pass"], {**ENV, "PYTHONPATH": "/elsewhere"}),
        (["/bin/true"], ENV),
    ],
)
def test_what_changes_how_a_process_starts_starts_a_fresh_one(args, env):
    assert forkserver.python_argv(args, env) is None
    proc = forkserver.popen(args, env=env, stderr=subprocess.DEVNULL)
    assert type(proc) is subprocess.Popen
    proc.wait(timeout=30)


def test_output_that_cannot_be_written_fails_the_process_as_it_fails_a_fresh_one():
    """Written after its reader is gone: at the write (unbuffered: status 1) or at the flush of the
    process's end (buffered: status 120)."""
    code = "import sys, time; time.sleep(0.5); sys.stdout.write('unflushed')"
    statuses = []
    for start in (forkserver.popen, subprocess.Popen):
        proc = start([PY, "-c", code], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        proc.stdout.close()
        statuses.append(proc.wait(timeout=30))
    expected = 1 if os.environ.get("PYTHONUNBUFFERED") else 120
    assert statuses == [expected, expected]


def test_a_forked_process_on_a_terminal_writes_its_lines_at_once():
    main, side = pty.openpty()
    env = {**ENV}
    proc = forkserver.popen([PY, "-c", "import time; print('ready'); time.sleep(5)"], env=env, stdout=side)
    os.close(side)
    try:
        assert select.select([main], [], [], 5)[0], "no line within 5 s"
        assert os.read(main, 100).startswith(b"ready")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        os.close(main)


def test_a_relative_directory_is_the_test_process_s(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert forked("import os; print(os.getcwd())", cwd="sub").stdout == f"{tmp_path / 'sub'}\n"


def test_a_module_the_server_imported_runs_as_main_without_a_warning():
    done = forkserver.run([PY, "-m", "queue_core.exit_codes"], env=ENV, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_start_whose_reply_was_never_read_does_not_shift_the_pids_of_later_processes():
    forked("pass")  # the server of ENV is up
    server = forkserver._servers[ENV.get("PYTHONPATH")]
    status_r, status_w = os.pipe()
    stale = {"argv": [PY, "-c", "pass"], "env": ENV, "cwd": os.getcwd(), "session": False, "id": 0}
    socket.send_fds(server.sock, [json.dumps(stale).encode()], [0, 1, 2, status_w])  # its reply left unread
    os.close(status_w)
    try:
        proc = forkserver.popen([PY, "-c", "import os; print(os.getpid())"], env=ENV, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=30)
        assert int(out) == proc.pid
    finally:
        os.close(status_r)


def test_processes_are_forked_from_servers_of_new_hash_seeds_as_they_go():
    seeds = set()
    for _ in range(forkserver.FORKS_PER_SERVER * 2 + 1):
        seeds.add(forked("print(hash('some key'))").stdout)
    assert len(seeds) >= 2


def test_a_server_retired_while_its_process_runs_still_tells_that_process_s_status():
    proc = forkserver.popen([PY, "-c", "import time; time.sleep(0.5)"], env=ENV)
    for _ in range(forkserver.FORKS_PER_SERVER):
        forked("pass")  # the server that forked ``proc`` is retired meanwhile
    assert proc.wait(timeout=30) == 0
