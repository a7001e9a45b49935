"""What the peers' task bodies write: completion marks, one byte appended per task (O_APPEND);
and, for the latency figure, each task's submission and start times."""

from __future__ import annotations

import os
import time

ENV = "BENCH_DONE_FILE"
RECORD_ENV = "BENCH_RECORD"


def mark() -> None:
    fd = os.open(os.environ[ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)


def record(created: float) -> None:
    """The latency figure's task body: append ``- created started`` to the file named by
    ``BENCH_RECORD`` (one O_APPEND write, atomic between processes; the lines of pq's own
    ``benchmarks.handlers.record``, with ``-`` for the key)."""
    line = f"- {created!r} {time.time()!r}\n".encode()
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def count(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
