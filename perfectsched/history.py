"""The latest occurrences of a schedule and the tasks they submitted, read from the queue: each
occurrence's task is keyed ``"<schedule key>.<scheduled time>"`` (:mod:`perfectsched.rows`)."""

from __future__ import annotations

from dataclasses import dataclass

from queue_core.api.queue import Queue
from queue_core.api.task import TaskMetadata

#: pages of the queue read at most to find a schedule's latest occurrences
MAX_PAGES = 3


@dataclass(frozen=True)
class PastOccurrence:
    """An occurrence that fired: its scheduled time (epoch seconds) and the task it submitted."""

    scheduled_time: int
    task: TaskMetadata


def occurrence_time(schedule_key: str, task_key: str) -> int | None:
    """The scheduled time a task key names for ``schedule_key`` (None: not one of its tasks, e.g.
    a task of the schedule ``a.b`` seen from the schedule ``a``)."""
    prefix = f"{schedule_key}."
    suffix = task_key[len(prefix) :] if task_key.startswith(prefix) else ""
    return int(suffix) if suffix.isascii() and suffix.isdigit() else None


def latest_occurrences(queue: Queue, schedule_key: str, *, limit: int = 5) -> list[PastOccurrence]:
    """The tasks of the latest ``limit`` occurrences of ``schedule_key`` still in ``queue``, newest
    first: a key-prefix read of the queue newest first (``Queue.browse``), at most
    :data:`MAX_PAGES` pages of ``limit``."""
    found: list[PastOccurrence] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = queue.browse(key_prefix=f"{schedule_key}.", cursor=cursor, limit=limit)
        for task in page.tasks:
            at = occurrence_time(schedule_key, task.key)
            if at is not None:
                found.append(PastOccurrence(at, task))
        cursor = page.next_cursor
        if len(found) >= limit or cursor is None:
            break
    return found[:limit]
