"""The metrics pqflow adds to ``perfectqueue metrics`` (entry point ``pq.metrics``): workflow runs
by workflow and status, as ``pqflow runs`` lists them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from queue_core.ops.metrics import Sample

from .runs import list_runs, run_status


def samples(queue: Any, now: float, options: dict) -> Iterator[Sample]:
    """One gauge per (workflow, status) of the runs still kept."""
    counts = Counter((str(r["type"]), run_status(r)) for r in list_runs(queue))
    for (workflow, status), n in sorted(counts.items()):
        yield Sample(
            "workflow_runs",
            "Workflow runs kept, by workflow and status",
            {"workflow": workflow, "status": status},
            float(n),
        )
