"""Pages of tasks for an operator's browser (store layer): the tasks matching filters, newest
first, after a keyset cursor (the last id shown); never an OFFSET, never a count of the table.
A part of :class:`~queue_core.store.tasks.SqlStore` (its ``browse``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..rules.task_states import FINISHED
from .database import Database
from .failures import FailureReads
from .tags import TaskTags
from .transitions import status_where

#: the columns a page leaves out: what a task carries (read one task for them)
_HEAVY = frozenset({"data", "result", "workflow", "definition"})


@dataclass(frozen=True, kw_only=True)
class BrowseFilter:
    """What a page of tasks matches (each None: anything)."""

    queue: str | None = None
    type: str | None = None
    #: waiting, running, pending, finished (``transitions.status_where``)
    status: str | None = None
    #: success, failure, cancelled, ... (finished tasks)
    outcome: str | None = None
    user: str | None = None
    tag: str | None = None
    key_prefix: str | None = None


class TaskBrowse:
    """Pages of the task table ``t`` by filter (a part of ``SqlStore``: its ``browse``); the tags
    of each row from the part ``tags``, the failed rows through the part ``failures``."""

    def __init__(self, db: Database, t: sa.Table, tags_t: sa.Table, tags: TaskTags, failures: FailureReads):
        self.db, self.t, self.tags_t, self.tags, self.failures = db, t, tags_t, tags, failures

    def task_browse_page(self, f: BrowseFilter, *, before_id: int | None, limit: int, now: float) -> list[dict]:
        """Up to ``limit`` task rows matching ``f`` with an id below ``before_id`` (None: from
        the newest), newest first, with their ``tags`` and without data and results. Walks the
        primary key backwards (with ``tag``: the tag's range of the tag table) and stops at
        ``limit`` rows: one statement, however large the table."""
        t = self.t
        stmt, order = self._browse_base(f, [c for c in t.c if c.name not in _HEAVY])
        stmt = stmt.where(*self._browse_where(f, now))
        if before_id is not None:
            stmt = stmt.where(order < before_id)
        stmt = stmt.order_by(order.desc()).limit(limit)
        return self.db.run(
            lambda c: self.tags.with_tags(c, [dict(r._mapping) for r in c.execute(stmt)]), write=False, what="browse"
        )

    def _browse_base(self, f: BrowseFilter, cols: list) -> tuple[sa.Select, Any]:
        t, tg = self.t, self.tags_t
        if f.tag is None:
            return sa.select(*cols), t.c.id
        joined = sa.select(*cols).select_from(tg.join(t, t.c.id == tg.c.task_id)).where(tg.c.tag == f.tag)
        return joined, tg.c.task_id

    def _browse_where(self, f: BrowseFilter, now: float) -> list:
        t = self.t
        where = [col == value for col, value in self._browse_equal(f) if value is not None]
        if f.status is not None:
            where.append(status_where(t, f.status, now))
        if f.outcome == "failure":
            where += self.failures.failed_where()  # through the failed rows' own index where there is one
        elif f.outcome is not None:
            where += [t.c.state == FINISHED, t.c.outcome == f.outcome]
        if f.key_prefix:
            where += _key_range(t.c.key, f.key_prefix)  # a range of the key's index
            where.append(t.c.key.startswith(f.key_prefix, autoescape=True))
            if self.db.dialect.like_folds_case:
                where.append(sa.func.substr(t.c.key, 1, len(f.key_prefix)) == f.key_prefix)
        return where

    def _browse_equal(self, f: BrowseFilter) -> list[tuple[Any, Any]]:
        t = self.t
        return [(t.c.queue, f.queue), (t.c.type, f.type), (t.c.resource, f.user)]


def _key_range(key: Any, prefix: str) -> list:
    """The range of the byte-ordered ``key`` (``ExactString(byte_order=True)``) that holds every
    key starting with ``prefix``: at or above it, and below :func:`after_prefix` (when there is
    such a string)."""
    above = after_prefix(prefix)
    return [key >= prefix] if above is None else [key >= prefix, key < above]


def after_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point order (the
    byte order of UTF-8): its last character that is not the highest code point, plus one (a
    surrogate skipped); None when every character is the highest."""
    body = prefix.rstrip(chr(0x10FFFF))
    if not body:
        return None
    last = ord(body[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:
        last = 0xE000
    return body[:-1] + chr(last)
