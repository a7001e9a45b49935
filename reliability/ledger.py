"""Append-only evidence files written by handlers and submitters, read by the checks.

One line per event, ``key pid attempt kind time``, written with a single ``write`` on a
descriptor opened with ``O_APPEND``: concurrent writers from many processes never interleave
within a line, and a process SIGKILLed right after the write leaves the line in the file.

Kinds: ``start``/``end`` (a handler execution began/its body returned), ``ack`` (a ``submit``
returned), ``error:<Type>`` (a ``submit`` raised), ``late:<outcome>`` (a fenced late finish).
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    key: str
    pid: int
    attempt: int
    kind: str
    time: float


def append(path: str | os.PathLike, key: str, attempt: int, kind: str) -> None:
    line = f"{key} {os.getpid()} {attempt} {kind} {time.time():.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(path: str | os.PathLike) -> list[Entry]:
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        key, pid, attempt, kind, t = line.split(" ")
        out.append(Entry(key, int(pid), int(attempt), kind, float(t)))
    return out


class Ledger:
    """A parsed ledger with the views the checks need."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.entries = read(self.path)

    def of(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    def starts(self) -> dict[str, list[Entry]]:
        """Executions per key, in the order they began."""
        out: dict[str, list[Entry]] = defaultdict(list)
        for e in self.of("start"):
            out[e.key].append(e)
        return out

    def executions(self) -> Counter:
        return Counter(e.key for e in self.of("start"))

    def acked(self) -> set[str]:
        return {e.key for e in self.of("ack")}

    def errors(self) -> Counter:
        return Counter(e.kind.split(":", 1)[1] for e in self.entries if e.kind.startswith("error:"))

    def unfinished(self) -> list[Entry]:
        """Executions that began but whose handler body never returned (killed or lease lost)."""
        ended = {(e.key, e.pid, e.attempt) for e in self.of("end")}
        return [e for e in self.of("start") if (e.key, e.pid, e.attempt) not in ended]

    def described(self, key: str) -> str:
        """The executions of ``key`` for a failure message: pid, attempt, whether its body returned."""
        ended = {(e.pid, e.attempt) for e in self.of("end") if e.key == key}
        return ", ".join(
            f"pid {e.pid} attempt {e.attempt} {'returned' if (e.pid, e.attempt) in ended else 'cut short'}"
            for e in self.starts().get(key, [])
        )
