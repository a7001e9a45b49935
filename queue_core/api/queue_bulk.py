"""What an operator does to many tasks at once (queue layer), mixed into
:class:`~queue_core.api.queue.Queue`: run the failed tasks matching filters again, cancel the
waiting ones matching filters. Each goes a page of ``batch`` rows per transaction, each row
fenced by its transition (``store/bulk.py``): stopped half-way or run twice, it changes every
matching task once; ``dry_run`` counts them and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..rules.failure_groups import error_class
from ..rules.validate import check_int, check_name, check_queue, check_tag
from ..store.protocol import Store


class QueueBulk:
    """Needs ``store``, ``config`` and ``now()`` (the queue's)."""

    store: Store
    config: dict
    now: Callable[..., float]

    def retry_failed(
        self,
        *,
        queue: str | None = None,
        type: str | None = None,
        error: str | None = None,
        tag: str | None = None,
        dry_run: bool = False,
        batch: int = 500,
        now: float | None = None,
    ) -> int:
        """Run again, with fresh attempts and due now, every plain task that ended as failure
        and matches the filters (``error``: the class its error names, as ``failures()`` shows it);
        how many (with ``dry_run``: how many would be). Tasks of workflow runs are left to
        ``pqflow retry``."""
        queue, type, tag = _checked(queue, type, tag)
        if error is not None:
            check_name(error, "error class")
        batch = check_int(batch, "batch", minimum=1)
        now = self.now(now)
        total, after = 0, 0
        while page := self.store.failure_page(queue=queue, type=type, tag=tag, after_id=after, limit=batch):
            after = page[-1]["id"]
            ids = [r["id"] for r in page if not r["in_run"] and (error is None or error_class(r["error"]) == error)]
            total += len(ids) if dry_run else len(self.store.failure_requeue(ids, now)) if ids else 0
        return total

    def cancel_waiting(
        self,
        *,
        queue: str | None = None,
        type: str | None = None,
        tag: str | None = None,
        dry_run: bool = False,
        batch: int = 500,
        now: float | None = None,
    ) -> int:
        """Cancel every plain task nobody runs (waiting, or its lease expired) that matches the
        filters; how many (with ``dry_run``: how many would be)."""
        queue, type, tag = _checked(queue, type, tag)
        batch = check_int(batch, "batch", minimum=1)
        now = self.now(now)
        purge_at = now + self.config["retention_time"]
        total, after = 0, 0
        while page := self.store.task_waiting_page(now, queue=queue, type=type, tag=tag, after_id=after, limit=batch):
            after = page[-1]["id"]
            ids = [r["id"] for r in page]
            total += len(ids) if dry_run else len(self.store.task_cancel_many(ids, now, purge_at))
        return total


def _checked(queue: Any, type_: Any, tag: Any) -> tuple[str | None, str | None, str | None]:
    return (
        None if queue is None else check_queue(queue),
        None if type_ is None else check_name(type_, "task type"),
        None if tag is None else check_tag(tag),
    )
