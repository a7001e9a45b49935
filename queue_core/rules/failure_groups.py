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
#: the longest class name an error text is grouped by (``store/failures.py`` counts heads up to it)
CLASS_LENGTH = 200
MESSAGE_LENGTH = 200


def error_class(error: str | None) -> str:
    """The exception class an error text names (at most CLASS_LENGTH characters), or NO_CLASS."""
    m = _CLASS.match(error or "")
    return m[1] if m and len(m[1]) <= CLASS_LENGTH else NO_CLASS


def _text(value: str | bytes | None) -> str:
    """A text the database gave as UTF-8 bytes (bytes that are not UTF-8: a hand edit, kept
    as lone surrogates)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "surrogateescape")
    return value or ""


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


def group_failures(heads: Iterable[Mapping], samples: Mapping[int, Mapping]) -> list[FailureGroup]:
    """The groups of the failed tasks counted per queue, type and error head (``heads``: rows of
    ``Store.failure_heads``), the heads that name no class together; each group's message
    and sample key are those of the newest task of its latest head (``samples``: by id). The
    largest group first (then by queue, type and class)."""
    groups: dict[tuple[str, str, str], FailureGroup] = {}
    for h in heads:
        head = _text(h["head"])
        k = (h["queue"], h["type"], error_class(head + ":") if head else NO_CLASS)
        found = samples.get(h["newest"], {})
        sample = {"key": found.get("key", ""), "error": _text(found.get("error"))}
        g = groups.get(k)
        latest = g is None or h["last_seen"] >= g.last_seen
        groups[k] = FailureGroup(
            queue=k[0],
            type=k[1],
            error_class=k[2],
            message=first_line(sample["error"]) if latest else g.message,  # type: ignore[union-attr]
            count=h["count"] + (0 if g is None else g.count),
            first_seen=h["first_seen"] if g is None else min(g.first_seen, h["first_seen"]),
            last_seen=h["last_seen"] if g is None else max(g.last_seen, h["last_seen"]),
            sample_key=sample["key"] if latest else g.sample_key,  # type: ignore[union-attr]
            in_runs=int(h["in_runs"] or 0) + (0 if g is None else g.in_runs),
        )
    return sorted(groups.values(), key=lambda g: (-g.count, g.queue, g.type, g.error_class))
