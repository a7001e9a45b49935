"""What an operator's browser reads and does to one task at a time (queue layer), mixed into
:class:`~queue_core.api.queue.Queue`: pages of tasks by filter, newest first, each page after the
cursor of the last (``store/browse.py``), and the retry of one failed task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import NotFoundError, ValidationError
from ..rules.task_states import STATUSES
from ..rules.validate import check_int, check_name, check_queue, check_tag
from ..store.protocol import BrowseFilter, Store
from .task import TaskMetadata, metadata_from_row

#: what a page's ``status`` filter takes: a status, or an outcome of a finished task
BROWSE_STATUSES = (*STATUSES, "failed", "cancelled", "succeeded")
_OUTCOME_OF = {"failed": "failure", "cancelled": "cancelled", "succeeded": "success"}
#: the most tasks one page holds
MAX_PAGE = 500


@dataclass(frozen=True)
class TaskPage:
    """A page of tasks, newest first."""

    tasks: tuple[TaskMetadata, ...]
    #: what ``browse(cursor=...)`` takes for the next (older) page; None: this is the last
    next_cursor: int | None


class QueueBrowse:
    """Needs ``store``, ``table`` and ``now()`` (the queue's)."""

    store: Store
    table: str
    now: Callable[..., float]

    def browse(
        self,
        *,
        queue: str | None = None,
        type: str | None = None,
        status: str | None = None,
        user: str | None = None,
        tag: str | None = None,
        key_prefix: str | None = None,
        cursor: int | None = None,
        limit: int = 50,
        now: float | None = None,
    ) -> TaskPage:
        """The tasks matching every filter given, newest first, older than ``cursor`` (the
        ``next_cursor`` of the page before; None: from the newest). ``status``: one of
        :data:`BROWSE_STATUSES`. One statement per page, however large the table: no OFFSET and
        no count (a task submitted meanwhile is on no later page; none is skipped or shown twice)."""
        now = self.now(now)
        limit = check_int(limit, "limit", minimum=1)
        if limit > MAX_PAGE:
            raise ValidationError(f"limit must be at most {MAX_PAGE}")
        f = _filter(queue, type, status, user, tag, key_prefix)
        cursor = None if cursor is None else check_int(cursor, "cursor", minimum=0)
        rows = self.store.task_browse_page(f, before_id=cursor, limit=limit + 1, now=now)
        shown = rows[:limit]
        tasks = tuple(metadata_from_row(r, now, table=self.table) for r in shown)
        return TaskPage(tasks, shown[-1]["id"] if len(rows) > limit else None)

    def retry_task(self, key: str, *, now: float | None = None) -> None:
        """Run a plain task that ended as failure again: waiting, due now, fresh attempts.
        NotFoundError when there is no such task; ValidationError when it did not fail, or is a
        step of a workflow run (``pqflow retry`` retries those)."""
        check_name(key, "task key")
        now = self.now(now)
        row = self.store.task_get(key)
        if row is None:
            raise NotFoundError(f"task {key!r} not found")
        if row["workflow"] is not None:
            raise ValidationError(f"task {key!r} belongs to a workflow run: retry it with pqflow retry")
        if row["outcome"] != "failure" or row["finished_at"] is None:
            raise ValidationError(f"task {key!r} did not fail: only a failed task can be retried")
        if not self.store.failure_requeue([row["id"]], now):
            raise ValidationError(f"task {key!r} changed meanwhile: it was not retried")


def _filter(queue, type_, status, user, tag, key_prefix) -> BrowseFilter:
    if status is not None and status not in BROWSE_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(BROWSE_STATUSES)}, not {status!r}")
    outcome = _OUTCOME_OF.get(status) if status is not None else None
    if key_prefix is not None and not isinstance(key_prefix, str):
        raise ValidationError("key_prefix must be a string")
    return BrowseFilter(
        queue=None if queue is None else check_queue(queue),
        type=None if type_ is None else check_name(type_, "task type"),
        status=None if outcome is not None else status,
        outcome=outcome,
        user=None if user is None else check_name(user, "user"),
        tag=None if tag is None else check_tag(tag),
        key_prefix=key_prefix or None,
    )
