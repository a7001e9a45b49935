"""A full wakeup pipe loses no signal and doubles none (queue_core.worker.service.SignalQueue).

A flood can hold the main thread inside signal delivery until the interpreter's wakeup pipe is
full; the byte of a TERM sent then is dropped (tests/acceptance/test_signal_safety.py floods a
real process). Here the pipe is filled by real deliveries: a signal a process sends itself is
handled before ``os.kill`` returns, so each one below writes its byte before the next is sent.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref

from queue_core.worker.service import FULL_LATELY, WORKER_SIGNALS, Dispatcher, Intent, Phase, SignalQueue
from queue_core.worker.wakeup import Wakeup

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


def _at_drains(monkeypatch, before=(), after=()) -> None:
    """Call ``before[i]`` just before the drain of turn ``i + 1`` and ``after[i]`` just after it
    (None: nothing): a signal sent at a boundary of a turn."""
    drain, done = Wakeup.drain, []

    def step(steps, i: int) -> None:
        if i < len(steps) and steps[i] is not None:
            steps[i]()

    def stepped(wakeup: Wakeup) -> bytes:
        done.append(1)
        step(before, len(done) - 1)
        read = drain(wakeup)
        step(after, len(done) - 1)
        return read

    monkeypatch.setattr(Wakeup, "drain", stepped)


def _stop(sent: list[int], times: int = 1, then_usr2: int = 0):
    """A step that sends TERM ``times`` times (noting each in ``sent``), then ``then_usr2`` USR2."""

    def send() -> None:
        sent.extend([TERM] * times)
        _send(TERM, times)
        _send(USR2, then_usr2)

    return send


def _waiting(queue: SignalQueue) -> list[int]:
    got = []
    while (signum := queue.wait(0)) is not None:
        got.append(signum)
    return got


def _write_the_byte_only(signum: int) -> None:
    """What the C-level handler writes for ``signum``, without a delivery (no handler call)."""
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    os.write(fd, bytes([signum]))


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


def test_a_stop_sent_between_a_full_drain_and_the_look_at_what_was_seen_is_acted_on_once(monkeypatch):
    # the TERM's byte lands in the pipe the drain just emptied and its handler runs
    # before the turn looks at the signals seen; the next turn reads the byte
    queue, sent = SignalQueue([USR2, TERM]), []
    _at_drains(monkeypatch, after=[_stop(sent)])  # the first drain is a full one
    try:
        _send(USR2, _pipe_capacity())
        assert _waiting(queue) == [USR2, USR2, TERM] and sent == [TERM]
    finally:
        queue.restore()


def test_a_signal_seen_before_its_byte_is_written_waits_for_the_byte():
    # A signal another thread catches is marked (and its handler may run in the main thread)
    # a moment before that thread writes its byte: here the handler is called by hand, the
    # byte comes later. Without a full pipe the reader waits for the byte and acts once.
    queue = SignalQueue([USR2, TERM])
    try:
        signal.getsignal(TERM)(TERM, None)
        assert _waiting(queue) == []
        _write_the_byte_only(TERM)
        assert _waiting(queue) == [TERM]
        for _ in range(_pipe_capacity()):
            queue.poke()
        assert _waiting(queue) == []
    finally:
        queue.restore()


def _deliver_from_a_frame_holding(obj: object, signum: int) -> weakref.ref:
    ref = weakref.ref(obj)
    os.kill(os.getpid(), signum)  # the handler notes the signal with this frame (obj among its locals)
    return ref


class _Big:
    pass


def test_the_frames_noted_with_a_signal_are_let_go_once_it_is_read():
    queue = SignalQueue([TERM])
    try:
        ref = _deliver_from_a_frame_holding(_Big(), TERM)
        assert _waiting(queue) == [TERM]
        gc.collect()
        assert ref() is None
        reader_got = []
        ref = _deliver_from_a_frame_holding(_Big(), TERM)
        reader = threading.Thread(target=lambda: reader_got.extend(_waiting(queue)))
        reader.start()
        reader.join(10)
        gc.collect()
        assert reader_got == [TERM] and ref() is None
    finally:
        queue.restore()


def test_a_stop_dropped_while_a_turn_drains_a_full_pipe_is_acted_on_the_next_turn(monkeypatch):
    # the TERM's byte is dropped and its handler runs inside the drain that empties the full
    # pipe: that turn did not see it before its drain; the next one finds it seen and unread
    queue, sent = SignalQueue([USR2, TERM]), []
    _send(USR2, _pipe_capacity())
    _at_drains(monkeypatch, before=[_stop(sent)])  # the pipe is full: its byte is dropped
    try:
        assert _waiting(queue) == [USR2, USR2, TERM] and sent == [TERM]
    finally:
        queue.restore()


def test_a_full_pipe_long_ago_does_not_make_a_signal_noted_before_its_byte_acted_on_at_once():
    # the flag of a full drain lasts one turn, not for ever
    queue = SignalQueue([USR2, TERM])
    try:
        for _ in range(_pipe_capacity()):
            queue.poke()
        assert queue.wait(0) is None  # the full drain
        for _ in range(FULL_LATELY):
            assert queue.wait(0) is None  # turns that found the pipe empty
        signal.getsignal(TERM)(TERM, None)  # noted; the byte is not written yet
        assert _waiting(queue) == []
        _write_the_byte_only(TERM)
        assert _waiting(queue) == [TERM]
    finally:
        queue.restore()


def test_two_stops_one_read_one_dropped_are_two():
    # a dropped delivery must not merge with one of the same signal read in that turn
    queue = SignalQueue([USR2, TERM])
    try:
        _send(TERM)  # its byte lands
        _send(USR2, _pipe_capacity() - 1)
        _send(TERM)  # dropped
        assert _waiting(queue) == [TERM, USR2, USR2, TERM]
    finally:
        queue.restore()


def test_two_stops_dropped_one_inside_a_drain_and_one_read_the_next_turn_are_two(monkeypatch):
    queue, sent = SignalQueue([USR2, TERM]), []
    _send(USR2, _pipe_capacity())
    _at_drains(monkeypatch, before=[_stop(sent)])  # the pipe is full: dropped, noted after the look
    try:
        assert queue.wait(0) == USR2 and sent == [TERM]
        _send(TERM)  # its byte lands
        assert _waiting(queue) == [USR2, TERM, TERM]
    finally:
        queue.restore()


def test_the_second_stop_a_full_pipe_dropped_still_makes_the_stop_immediate():
    queue = SignalQueue([USR2, TERM])
    try:
        _send(TERM)
        _send(USR2, _pipe_capacity() - 1)
        _send(TERM)  # dropped
        dispatcher_done: list[Intent] = []
        actions = {intent: (lambda intent=intent: dispatcher_done.append(intent)) for intent in Intent}
        dispatcher = Dispatcher(WORKER_SIGNALS, actions)
        for signum in _waiting(queue):
            dispatcher.dispatch(signum)
        assert dispatcher_done == [Intent.STOP, Intent.REOPEN_LOGS, Intent.REOPEN_LOGS, Intent.STOP_NOW]
        assert dispatcher.phase is Phase.STOPPING_NOW
    finally:
        queue.restore()


def test_a_dropped_stop_whose_call_a_later_stop_s_byte_stood_for_is_acted_on_later(monkeypatch):
    # stop A is dropped inside a full drain (noted after that turn's look); stop B's
    # byte lands inside the next drain (noted during it): that turn counts B's byte against A's
    # call, B's call waits in A's stead, and the turn after, two drains after the full one,
    # finds it without a byte
    queue, sent = SignalQueue([USR2, TERM]), []
    _send(USR2, _pipe_capacity())
    _at_drains(monkeypatch, before=[_stop(sent), _stop(sent)])  # A: dropped; B: lands in the empty pipe
    try:
        got = [queue.wait(0) for _ in range(4)]
        assert got == [USR2, USR2, TERM, TERM] and sent == [TERM, TERM]
    finally:
        queue.restore()


def test_a_stop_noted_during_the_drain_that_read_its_byte_is_acted_on_once(monkeypatch):
    # after a full drain: the byte read is that of a call noted during the drain, which must go
    # with it, not wait to be taken for a dropped one
    queue, sent = SignalQueue([USR2, TERM]), []
    _send(USR2, _pipe_capacity())
    _at_drains(monkeypatch, before=[None, _stop(sent)])  # the first drain emptied the pipe: it lands
    try:
        got = [queue.wait(0) for _ in range(FULL_LATELY + 3)]
        assert got == [USR2, USR2, TERM] + [None] * FULL_LATELY and sent == [TERM]
    finally:
        queue.restore()


# each kills a wrong variant of the rule that the tests above let through


def test_a_stop_read_by_the_full_drain_it_was_sent_in_is_acted_on_once(monkeypatch):
    # the byte read beyond the calls noted before the drain is that of the call noted during it;
    # sent after the turn's look, its byte lands and the full drain reads it
    queue, sent = SignalQueue([USR2, TERM]), []
    _at_drains(monkeypatch, before=[_stop(sent, then_usr2=_pipe_capacity() - 1)])
    try:
        assert _waiting(queue) == [TERM, USR2, USR2] and sent == [TERM]
    finally:
        queue.restore()


def test_two_stops_read_by_the_full_drain_they_were_sent_in_are_two(monkeypatch):
    queue, sent = SignalQueue([USR2, TERM]), []
    _at_drains(monkeypatch, before=[_stop(sent, times=2, then_usr2=_pipe_capacity() - 2)])
    try:
        assert _waiting(queue) == [TERM, TERM, USR2, USR2] and sent == [TERM, TERM]
    finally:
        queue.restore()


def test_two_stops_both_dropped_are_two_when_each_had_its_handler_call():
    # a signal a process sends itself is handled before os.kill returns: two calls, not merged
    queue = SignalQueue([USR2, TERM])
    try:
        _send(USR2, _pipe_capacity())
        _send(TERM, 2)
        assert _waiting(queue) == [USR2, USR2, TERM, TERM]
    finally:
        queue.restore()
