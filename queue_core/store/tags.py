"""Tags and tracking of tasks (store layer): the ``<table>_tags`` rows of a task, written with
its insert and deleted with its row, and the ``tracked`` flag of its row. A part of
:class:`~queue_core.store.tasks.SqlStore`.

A tag row is keyed (tag, task id): the tasks of a tag are an exact range of that key, read in
id order, so ``list --tag`` pages through them without reading any other row. A task's tags
are read through the task-id index. Tags are not part of a task's state: changing them is
not a transition (``transitions.py``); tracking is (``track``: any row, no state change)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa

from ..errors import NotFoundError, ValidationError
from ..rules.validate import MAX_TAGS
from .database import Database
from .transitions import task_where


class TaskTags:
    """The tags part of a store: the tag table ``tags_t`` of the task table ``t`` (named ``name``);
    ``task_get`` reads a task row (the store's)."""

    def __init__(self, db: Database, name: str, t: sa.Table, tags_t: sa.Table, task_get: Callable[..., dict | None]):
        self.db, self.name, self.t, self.tags_t, self.task_get = db, name, t, tags_t, task_get

    def insert_tags(self, conn, made: Sequence[tuple[int, tuple[str, ...]]]) -> None:
        """The tag rows of tasks just inserted: (task id, its tags) of each row the submission's
        own INSERT made (a task whose key was taken by another submission gets none of them)."""
        rows = [{"tag": tag, "task_id": id_} for id_, tags in made for tag in tags]
        if rows:
            conn.execute(self.db.dialect.insert_if_absent(self.tags_t, ("tag", "task_id")), rows)

    def tags_of(self, conn, ids: Sequence[int]) -> dict[int, list[str]]:
        """The tags of the tasks ``ids``, sorted, by task id (tasks without tags are left out)."""
        tg = self.tags_t
        out: dict[int, list[str]] = {}
        ids = list(ids)
        for i in range(0, len(ids), 500):
            stmt = sa.select(tg.c.task_id, tg.c.tag).where(tg.c.task_id.in_(ids[i : i + 500]))
            for id_, tag in conn.execute(stmt):
                out.setdefault(id_, []).append(tag)
        return {id_: sorted(tags) for id_, tags in out.items()}

    def with_tags(self, conn, rows: list[dict]) -> list[dict]:
        """``rows`` (task rows), each given its ``tags``."""
        tags = self.tags_of(conn, [r["id"] for r in rows]) if rows else {}
        for r in rows:
            r["tags"] = tags.get(r["id"], [])
        return rows

    def forget_tags(self, conn, ids: Sequence[int]) -> None:
        """Delete the tag rows of the tasks ``ids`` (deleted in the same transaction)."""
        ids = list(ids)
        for i in range(0, len(ids), 500):
            conn.execute(sa.delete(self.tags_t).where(self.tags_t.c.task_id.in_(ids[i : i + 500])))

    def tag_change(self, key: str, add: Sequence[str] = (), remove: Sequence[str] = ()) -> list[str]:
        """Add ``add`` and remove ``remove`` (validated tags) on task ``key``, any state; its tags
        after. NotFoundError when there is no such task; ValidationError (nothing changed) when it
        would have more than MAX_TAGS."""
        tg = self.tags_t

        def work(conn) -> list[str]:
            row = conn.execute(self.db.dialect.lock_rows(sa.select(self.t.c.id).where(self.t.c.key == key))).first()
            if row is None:
                raise NotFoundError(f"task {key!r} not found in {self.name}")
            if remove:
                conn.execute(sa.delete(tg).where(tg.c.task_id == row.id, tg.c.tag.in_(list(remove))))
            if add:
                rows = [{"tag": tag, "task_id": row.id} for tag in add]
                conn.execute(self.db.dialect.insert_if_absent(tg, ("tag", "task_id")), rows)
            tags = self.tags_of(conn, [row.id]).get(row.id, [])
            if len(tags) > MAX_TAGS:
                raise ValidationError(f"task {key!r} would have {len(tags)} tags; a task has at most {MAX_TAGS}")
            return tags

        return self.db.run(work, what="tag")

    def task_set_tracked(self, key: str, tracked: bool) -> None:
        """Track (or stop tracking) task ``key``, in any state; NotFoundError when there is none."""
        t = self.t
        stmt = sa.update(t).where(t.c.key == key, *task_where(t, "track")).values(tracked=int(tracked))

        def work(conn) -> None:
            if conn.execute(stmt).rowcount == 0 and self.task_get(key, conn) is None:  # (MySQL: 0 when unchanged)
                raise NotFoundError(f"task {key!r} not found in {self.name}")

        self.db.run(work, what="track")

    def tagged_page(self, tag: str, after_id: int | None, limit: int, cols: list) -> sa.Select:
        """The statement of a page of task rows tagged ``tag``, in id order after ``after_id``:
        an exact range of the tag table's key, each row then by its primary key."""
        t, tg = self.t, self.tags_t
        stmt = sa.select(*cols).select_from(tg.join(t, t.c.id == tg.c.task_id)).where(tg.c.tag == tag)
        if after_id is not None:
            stmt = stmt.where(tg.c.task_id > after_id)
        return stmt.order_by(tg.c.task_id).limit(limit)
