"""queue_core/worker/forked_check.py: a check run in a forked child, so that a process that forks (a worker's
supervisor) never holds database client state its children would inherit (libpq's GSSAPI locks
are not fork-safe: a processor hung in its first connect)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from queue_core.errors import DatabaseError, ForeignTableError
from queue_core.worker.forked_check import CheckApart
from queue_core.worker.service import WORKER_SIGNALS, Intent, Signals


def test_the_check_runs_in_another_process_and_its_success_returns(tmp_path):
    seen = tmp_path / "pid"
    CheckApart(lambda: seen.write_text(str(os.getpid()))).result(10)
    assert int(seen.read_text()) != os.getpid()


def test_what_the_check_raised_is_raised_again_with_its_class_and_text():
    def refuse():
        raise ForeignTableError("table 'x' is not a queue table")

    with pytest.raises(ForeignTableError, match="not a queue table"):
        CheckApart(refuse).result(10)


def test_an_error_that_cannot_be_made_again_arrives_as_a_database_error_naming_it():
    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    def odd():
        raise Odd(1, 2)

    with pytest.raises(DatabaseError, match="Odd: 1/2"):
        CheckApart(odd).result(10)


def test_a_check_past_its_limit_is_killed_and_said_to_have_timed_out():
    checker = CheckApart(lambda: time.sleep(60))
    pid = checker.pid
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="within 0.5 s"):
        checker.result(0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left


def test_a_check_whose_process_dies_is_a_database_error():
    with pytest.raises(DatabaseError, match="without an answer"):
        CheckApart(lambda: os.kill(os.getpid(), signal.SIGKILL)).result(10)


def test_a_signal_sent_to_the_check_never_reaches_the_callers_handlers(tmp_path):
    """The child inherits the caller's signal handlers and wake-up pipe: it must set them back
    to their defaults, or a TERM meant for it (a terminal's Ctrl-C reaches the whole group)
    would be read by the caller as its own."""
    got = []
    signals = Signals(WORKER_SIGNALS, {i: (lambda i=i: got.append(i)) for i in Intent})
    try:
        ready = tmp_path / "ready"
        checker = CheckApart(lambda: (ready.write_text("1"), time.sleep(60)), WORKER_SIGNALS)
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:  # its signals are set before the check
            time.sleep(0.01)
        os.kill(checker.pid, signal.SIGUSR2)
        with pytest.raises(DatabaseError, match="without an answer"):
            checker.result(10, wait=signals.wait)  # USR2's default action ends the child
        signals.wait(0.2)
    finally:
        signals.close()
    assert got == []


def test_a_wait_that_acts_on_signals_is_called_while_the_check_runs():
    calls = []

    def wait(seconds, fds):
        calls.append(seconds)
        time.sleep(min(seconds, 0.05))

    CheckApart(lambda: time.sleep(0.5)).result(10, wait=wait)
    assert len(calls) >= 2
