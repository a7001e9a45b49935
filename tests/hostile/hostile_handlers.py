"""Hostile task handlers, loaded by path by real worker processes (tests/hostile/test_hostile_worker.py).

Every handler appends "<key> <pid> <what>" to the file named by the task's data["log"].
"""

from __future__ import annotations

import os
import signal
import sys
import time

import queue_core


def _record(task, what="run"):
    path = task.data.get("log")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{task.key} {os.getpid()} {what}\n")


def ok(task):
    _record(task)


def raises(task):
    _record(task)
    raise ValueError("handler raised on purpose")


class Garbage(queue_core.Application):
    """perform() returns junk; the return value of a handler means nothing."""

    def perform(self):
        _record(self.task)
        return (x for x in range(3)), object(), "x" * 1_000_000


def garbage_function(task):
    _record(task)
    return {"not": "a result"}, 42


def exits(task):
    _record(task)
    sys.exit(3)


def exits_with_message(task):
    _record(task)
    sys.exit("goodbye from a handler")


def hard_exit(task):
    """Kills its own process: the child is replaced, the task runs again after its lease."""
    _record(task)
    os._exit(7)


def hangs(task):
    """Never returns and ignores kill(): holds one processor (its lease kept by the heartbeat)."""
    _record(task)
    while True:
        time.sleep(0.2)


def freezes(task):
    """Stops its whole process, heartbeat thread included: the supervisor kills and replaces it."""
    _record(task)
    os.kill(os.getpid(), signal.SIGSTOP)


def allocates(task):
    """Allocates (and touches) 512 MiB in 64 MiB pieces, then returns. (One piece at a time lets
    the heartbeat thread run; a handler that holds the GIL longer than child_heartbeat_limit is
    killed as silent, like "freezes".)"""
    _record(task)
    blobs = [b"x" * (64 * 1024 * 1024) for _ in range(8)]
    assert sum(map(len, blobs)) == 512 * 1024 * 1024
    del blobs
    _record(task, "done")


def impossible_allocation(task):
    _record(task)
    bytearray(2**62)  # MemoryError at once


def interrupts(task):
    _record(task)
    raise KeyboardInterrupt


class BrokenStr(Exception):
    def __str__(self):
        raise RuntimeError("str() of this error fails")


def broken_error(task):
    _record(task)
    raise BrokenStr()


def surrogate_error(task):
    """An error about a file name that is not UTF-8 (os.listdir gives it surrogate escapes)."""
    _record(task)
    name = b"caf\xe9.csv".decode("utf-8", "surrogateescape")
    raise OSError(f"cannot read {name}")


class Worker(queue_core.Dispatch):
    routes = [
        ("ok", ok),
        ("raises", raises),
        ("garbage", Garbage),
        ("garbage_function", garbage_function),
        ("exits", exits),
        ("exits_with_message", exits_with_message),
        ("hard_exit", hard_exit),
        ("hangs", hangs),
        ("freezes", freezes),
        ("allocates", allocates),
        ("impossible_allocation", impossible_allocation),
        ("interrupts", interrupts),
        ("broken_error", broken_error),
        ("surrogate_error", surrogate_error),
    ]
