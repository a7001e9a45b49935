"""The metrics perfectsched adds to ``perfectqueue metrics`` (entry point ``pq.metrics``): for
each schedule, how late its next occurrence is (now minus the due time of the occurrence not yet
submitted: 0 while it is not due), and whether it is set aside."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from queue_core.ops.metrics import Sample
from queue_core.store.protocol import due_times

from .scheduler import EXTRA_KEYS


def samples(queue: Any, now: float, options: dict) -> Iterator[Sample]:
    """The schedule gauges of the schedule table ``options["schedule_table"]`` (default
    ``pq_schedules``) in ``queue``'s database; none when it does not exist."""
    table = options.get("schedule_table") or EXTRA_KEYS["schedule_table"][0]
    for key, due, error in due_times(queue.db, table):
        if isinstance(due, bool) or not isinstance(due, int | float):
            continue  # a row edited by hand (or not a schedule table's): its lag is unknown
        labels = {"schedule": str(key)}
        late = max(0.0, now - due) if error is None else 0.0
        yield Sample("schedule_lag_seconds", "How late the next occurrence of a schedule is", labels, late)
        yield Sample(
            "schedule_set_aside",
            "1 when a schedule is set aside (it cannot be computed)",
            labels,
            0.0 if error is None else 1.0,
        )
