"""Failure groups (queue layer, pure): the failed tasks grouped by queue, type and error class,
as ``perfectqueue failures`` and ``Queue.failures()`` show them, and the error class a task's
error text names (what ``retry --failed --error CLASS`` matches)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: what an error text starts with when pq wrote it from an exception: "ValueError: ..." or
#: "requests.exceptions.HTTPError: ..."
_CLASS = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):")
#: the class of an error text that names none (a text given to ``retry(error=...)``)
NO_CLASS = "(no class)"
MESSAGE_LENGTH = 200


def error_class(error: str | None) -> str:
    """The exception class an error text names, or NO_CLASS."""
    m = _CLASS.match(error or "")
    return m[1] if m else NO_CLASS


def first_line(error: str | None) -> str:
    """The error's first line, cut to MESSAGE_LENGTH characters."""
    line = (error or "").strip().split("\n", 1)[0].strip()
    return line if len(line) <= MESSAGE_LENGTH else line[: MESSAGE_LENGTH - 3] + "..."


@dataclass(frozen=True)
class FailureGroup:
    """Failed tasks of one queue and type whose errors name one class."""

    queue: str
    type: str
    error_class: str
    #: the first line of the latest error of the group
    message: str
    count: int
    first_seen: float
    last_seen: float
    #: the key of the latest task of the group
    sample_key: str
    #: how many of them are steps or runs of workflows (retried with pqflow retry, not here)
    in_runs: int = 0

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def group_failures(rows: Iterable[Mapping]) -> list[FailureGroup]:
    """The groups of failed task rows (key, queue, type, error, finished_at, in_run), the largest
    first (then by queue, type and class)."""
    groups: dict[tuple[str, str, str], FailureGroup] = {}
    for r in rows:
        at = r["finished_at"] or 0.0
        k = (r["queue"], r["type"], error_class(r["error"]))
        g = groups.get(k)
        latest = g is None or at >= g.last_seen
        groups[k] = FailureGroup(
            queue=k[0],
            type=k[1],
            error_class=k[2],
            message=first_line(r["error"]) if latest else g.message,  # type: ignore[union-attr]
            count=1 if g is None else g.count + 1,
            first_seen=at if g is None else min(g.first_seen, at),
            last_seen=at if g is None else max(g.last_seen, at),
            sample_key=r["key"] if latest else g.sample_key,  # type: ignore[union-attr]
            in_runs=(0 if g is None else g.in_runs) + bool(r["in_run"]),
        )
    return sorted(groups.values(), key=lambda g: (-g.count, g.queue, g.type, g.error_class))
