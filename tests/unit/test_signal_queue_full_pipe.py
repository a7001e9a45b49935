"""A full wakeup pipe loses no signal and doubles none (queue_core.service.SignalQueue).

A flood can hold the main thread inside signal delivery until the interpreter's wakeup pipe is
full; the byte of a TERM sent then is dropped (tests/acceptance/test_signal_safety.py floods a
real process). Here the pipe is filled by real deliveries: a signal a process sends itself is
handled before ``os.kill`` returns, so each one below writes its byte before the next is sent.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from queue_core.service import SignalQueue
from queue_core.wakeup import Wakeup

TERM, USR1, USR2 = signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2


def _pipe_capacity() -> int:
    probe = Wakeup()
    try:
        return probe.capacity
    finally:
        probe.close()


def _send(signum: int, times: int = 1) -> None:
    for _ in range(times):
        os.kill(os.getpid(), signum)


def _waiting(queue: SignalQueue) -> list[int]:
    got = []
    while (signum := queue.wait(0)) is not None:
        got.append(signum)
    return got


def _until_in_a_pipe_read(tid: int) -> None:
    """Wait until thread ``tid`` of this process sleeps in a pipe's read (Linux tells where)."""
    for _ in range(10_000):
        with open(f"/proc/self/task/{tid}/wchan") as fh:
            if "pipe_read" in fh.read():
                return
        time.sleep(0.001)
    raise AssertionError(f"thread {tid} never reached its read")


def test_a_stop_whose_byte_a_full_pipe_dropped_is_acted_on_once():
    queue = SignalQueue([USR2, TERM])
    try:
        _send(USR2, _pipe_capacity())  # a flood nobody read yet: the pipe is full
        _send(TERM)  # its byte is dropped
        assert _waiting(queue) == [USR2, USR2, TERM]
        assert _waiting(queue) == []
    finally:
        queue.restore()


def test_a_signal_whose_byte_was_read_from_a_full_pipe_is_not_acted_on_again():
    queue = SignalQueue([USR1, USR2, TERM])
    try:
        _send(TERM)  # its byte is the first in the pipe
        _send(USR2, _pipe_capacity() - 1)  # the pipe is full
        _send(USR1)  # dropped
        assert _waiting(queue) == [TERM, USR2, USR2, USR1]
        assert _waiting(queue) == []
    finally:
        queue.restore()


def test_a_stop_read_in_one_turn_is_not_acted_on_again_when_a_later_turn_finds_the_pipe_full():
    queue = SignalQueue([USR1, USR2, TERM])
    try:
        _send(TERM)
        assert _waiting(queue) == [TERM]
        _send(USR2, _pipe_capacity())
        _send(USR1)  # dropped
        assert _waiting(queue) == [USR2, USR2, USR1]
    finally:
        queue.restore()


def test_a_pipe_that_never_filled_acts_on_each_signal_read_and_no_other():
    queue = SignalQueue([USR1, USR2, TERM])
    try:
        _send(USR1)
        _send(TERM)
        assert _waiting(queue) == [USR1, TERM]
        assert _waiting(queue) == []
    finally:
        queue.restore()


def test_a_reader_thread_acts_on_what_it_read_only():
    # A reader thread (a worker child's, the scheduler's) may act on a signal's byte before the
    # main thread runs its Python-level handler: here the main thread sits in a read the signal
    # does not interrupt (SA_RESTART) until the reader has acted. A full pipe read after that
    # handler ran must not make the reader act on the signal again.
    queue = SignalQueue([TERM])
    signal.siginterrupt(TERM, False)
    gate_r, gate_w = os.pipe()
    handled = threading.Event()
    got: list[int] = []

    def reader() -> None:
        _until_in_a_pipe_read(main_tid)
        os.kill(os.getpid(), TERM)
        got.append(queue.wait(10))
        os.write(gate_w, b"go")  # the main thread returns from its read, then runs the handler
        handled.wait(10)
        for _ in range(_pipe_capacity()):
            queue.poke()
        got.extend(_waiting(queue))

    main_tid = threading.get_native_id()
    thread = threading.Thread(target=reader)
    try:
        thread.start()
        os.read(gate_r, 2)
        handled.set()  # a call: the handler of the TERM has run by now
        thread.join(10)
        assert got == [TERM]
    finally:
        queue.restore()
        os.close(gate_r)
        os.close(gate_w)
