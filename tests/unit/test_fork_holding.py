"""``apart.fork_holding``: the one fork of a worker (its processors, its start-up check). The
child starts with the caller's signals held (pending, not lost) and with the parent's objects out
of the collector's reach (``gc.freeze``), so its collections do not copy the parent's memory."""

from __future__ import annotations

import gc
import os
import signal

from queue_core.worker.forked_check import fork_holding


def _child_exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_child_finds_the_parents_objects_frozen_and_the_signals_held():
    kept = [object() for _ in range(1000)]  # objects of the parent's
    try:
        pid = fork_holding([signal.SIGUSR1])
        if pid == 0:  # the child: report by exit code, never return into pytest
            ok = gc.get_freeze_count() >= len(kept) and signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            os._exit(0 if ok else 3)
        assert _child_exit_code(pid) == 0
        assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the parent catches it again
    finally:
        gc.unfreeze()


def test_a_signal_sent_before_the_child_sets_its_handlers_stays_pending():
    try:
        pid = fork_holding([signal.SIGUSR2])
        if pid == 0:
            os.kill(os.getpid(), signal.SIGUSR2)  # held: pending, not acted upon
            pending = signal.SIGUSR2 in signal.sigpending()
            os._exit(0 if pending else 3)
        assert _child_exit_code(pid) == 0
    finally:
        gc.unfreeze()
