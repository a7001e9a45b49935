"""The signal queue and the stop cascade with real deliveries (a signal a process sends
itself is handled before os.kill returns). A signal waits to be acted on at most twice: order kept
between distinct signals, a signal queued again once returned, the cascade's second stop kept
when both stops arrive before the reader turns, no escalation in a worker child."""

import os
import signal

import pytest

from queue_core.worker.service import (
    CHILD_SIGNALS,
    SCHEDULER_SIGNALS,
    WORKER_SIGNALS,
    Intent,
    Phase,
    SignalQueue,
    Signals,
)

TERM, INT, USR1, USR2, HUP, QUIT = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGHUP,
    signal.SIGQUIT,
)


def send(*sigs):
    for s in sigs:
        os.kill(os.getpid(), s)


@pytest.fixture
def queue():
    q = SignalQueue([TERM, INT, USR1, USR2, HUP])
    yield q
    q.restore()


def drain_all(q):
    out = []
    while (s := q.wait(0)) is not None:
        out.append(s)
    return out


def test_distinct_signals_keep_their_order(queue):
    send(USR1, TERM)
    assert drain_all(queue) == [USR1, TERM]
    send(TERM, USR1)
    assert drain_all(queue) == [TERM, USR1]
    send(USR2, USR1, USR2, TERM, USR1, USR2, USR2, USR1)  # past two waiting, a repeat is merged
    assert drain_all(queue) == [USR2, USR1, USR2, TERM, USR1]


def test_a_signal_returned_is_queued_again(queue):
    send(USR1, USR1, USR1)
    assert queue.wait(0) == USR1
    send(USR1)
    assert queue.wait(0) == USR1
    assert queue.wait(0) == USR1
    assert queue.wait(0) is None


def test_a_repeat_arriving_while_others_are_pending_is_queued_after_them(queue):
    send(USR1, USR2, TERM)
    assert queue.wait(0) == USR1  # drained all three, USR1 returned
    send(USR1)  # USR1 no longer pending: queued again, behind TERM
    assert drain_all(queue) == [USR2, TERM, USR1]


def test_a_second_stop_after_the_first_was_acted_on_escalates():
    acted = []
    sig = Signals(WORKER_SIGNALS, {i: (lambda i=i: acted.append(i)) for i in Intent})
    try:
        send(*[USR2, USR1] * 2000, TERM)
        for _ in range(5):
            sig.wait(0)
        assert acted == [Intent.REOPEN_LOGS, Intent.RESTART, Intent.REOPEN_LOGS, Intent.RESTART, Intent.STOP]
        send(TERM)
        sig.wait(0)
        assert acted[-1] is Intent.STOP_NOW and sig.dispatcher.phase is Phase.STOPPING_NOW
    finally:
        sig.close()


def test_in_a_child_a_repeated_term_is_no_escalation():
    acted = []
    sig = Signals(
        CHILD_SIGNALS,
        {i: (lambda i=i: acted.append(i)) for i in set(CHILD_SIGNALS.values())},
        repeated_stop_is_immediate=False,
    )
    try:
        for signum in (TERM, TERM, USR1):
            send(signum)
            sig.wait(0)
        assert acted == [Intent.STOP] and sig.dispatcher.phase is Phase.STOPPING
        send(HUP)
        sig.wait(0)
        assert acted == [Intent.STOP, Intent.STOP_NOW]
    finally:
        sig.close()


def test_restart_after_stop_is_ignored_and_restart_before_stop_comes_first():
    acted = []
    sig = Signals(SCHEDULER_SIGNALS, {i: (lambda i=i: acted.append(i)) for i in set(SCHEDULER_SIGNALS.values())})
    try:
        send(TERM, *[USR1, HUP] * 1000)
        for _ in range(4):
            sig.wait(0)
        assert acted == [Intent.STOP]
    finally:
        sig.close()


def test_two_separate_terms_before_the_reader_turns_are_a_graceful_then_an_immediate_stop():
    """Two TERMs delivered while the reader is busy (its action, a reload check): a graceful then an
    immediate stop (an at-most-once queue would merge them into one stop)."""
    acted = []
    sig = Signals(WORKER_SIGNALS, {i: (lambda i=i: acted.append(i)) for i in Intent})
    try:
        send(TERM)
        send(TERM)  # a separate delivery, while the first still waits to be read
        for _ in range(2):
            sig.wait(0)
        assert acted == [Intent.STOP, Intent.STOP_NOW]
    finally:
        sig.close()
