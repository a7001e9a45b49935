"""Reads of claims limited to task types (store layer), mixed into :class:`TaskStore`.

A worker serving some task types only claims with ``types``. Its reads follow the claim's
walk (one priority level at a time, each level an exact index range in order) per type, on
the type indexes ``(state, type, priority DESC, timeout, id)`` and ``(state, type, resource,
timeout)``, so that no row of another type is read however many are due before them.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .schema import LIVE

log = logging.getLogger("queue_core.store")


class TypedReads:
    """Needs ``t`` (the task table), ``db``, ``name``, ``_top_level`` and ``missing_indexes``."""

    _type_indexes: bool | None = None  # whether the table has them (looked up once)

    def _tops(self, conn, types: list[str] | None, below: int | None = None) -> dict[str | None, int]:
        """The best priority (under ``below``) of live rows, as ``{None: level}``; with ``types``,
        of each type's live rows, as ``{type: level}``. Absent: no such row."""
        t = self.t
        if types is None:
            top = self._top_level if below is None else self._top_level.where(t.c.priority < below)
            level = conn.execute(top).scalar()
            return {} if level is None else {None: level}
        tops: dict[str | None, int] = {}
        for i in range(0, len(types), 100):
            chunk = types[i:i + 100]
            row = conn.execute(sa.select(*[self._type_top(x, below) for x in chunk])).one()
            tops.update({x: p for x, p in zip(chunk, row) if p is not None})
        return tops

    def _type_top(self, type_: str, below: int | None):
        t = self.t
        stmt = sa.select(t.c.priority).where(t.c.state == LIVE, t.c.type == type_)
        if below is not None:
            stmt = stmt.where(t.c.priority < below)
        return self._typed(stmt.order_by(t.c.priority.desc()).limit(1)).scalar_subquery()

    def _of_types(self, stmt, types: list | None) -> list:
        """``stmt`` itself (any type), else restricted to ``types``: one copy per type, each an
        exact range of the type indexes (in order); past the dialect's ``per_type`` types, one
        per chunk of an IN list (fewer round trips; the database merges, sorting if it must)."""
        c = self.t.c.type
        if types is None:
            return [stmt]
        if len(types) <= self.db.dialect.per_type:
            return [self._typed(stmt.where(c == x)) for x in types]
        return [self._typed(stmt.where(c.in_(types[i:i + 500]))) for i in range(0, len(types), 500)]

    def _typed(self, stmt):
        """A read limited to types: not through the indexes made for reads of every type (unless
        the table lacks the type indexes)."""
        if not self._type_indexes:
            return stmt
        name = self.t.name
        return self.db.dialect.avoid_indexes(stmt, self.t, [f"ix_{name}_{x}" for x in ("claim", "user", "purge")])

    def _check_type_indexes(self, conn) -> None:
        """Once per store: a table made by an earlier release lacks the type indexes until
        ``init`` adds them; meanwhile limited claims are right, but read other types' rows."""
        if self._type_indexes is None:
            wanted = {f"ix_{self.name}_type", f"ix_{self.name}_type_user"}
            self._type_indexes = not wanted & self.missing_indexes(conn)
            if not self._type_indexes:
                log.warning("table %s predates the indexes of claims limited to task types; such claims "
                            "read other types' rows until 'init' adds them", self.name)
