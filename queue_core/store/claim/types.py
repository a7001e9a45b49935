"""Reads of claims limited to task types (store layer): the :class:`TypeProbes` of a claim's view.

A worker serving some task types only claims with ``types``. Its reads follow the claim's
walk (one priority level at a time, each level an exact index range in order) per type, on
the type indexes ``(state, type, priority DESC, timeout, id)`` and ``(state, type, resource,
timeout)``, so that no row of another type is read however many are due before them.

Round trips stay few however many types a worker serves: the questions asked of every type
(its best priority; has it due rows of users; has it due rows at this level) are index
probes, a hundred per statement, and only the types that answer yes are read row by row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from .tables import ClaimTables

#: the probes asked in one statement
PROBES_PER_STATEMENT = 100


class TypeProbes:
    """The reads by type of the claims of one view: ``live(...)`` its scope's live rows,
    ``top_level`` their best level; their statements built once."""

    def __init__(self, tables: ClaimTables, live: Callable[..., Any], top_level: sa.Select):
        self.tables, self.t, self.live, self.top_level = tables, tables.t, live, top_level
        self._cache: dict[tuple, sa.Select] = {}

    def live_tops(self, conn, types) -> dict[str, int]:
        """The best priority of each of ``types`` that has live rows."""
        self.tables.check_type_indexes(conn)
        many = len(types) > PROBES_PER_STATEMENT
        return self.tops(conn, sorted(set(types) & self._live_types(conn) if many else set(types)))

    def tops(self, conn, types: list[str] | None, below: int | None = None) -> dict:
        """The best priority (under ``below``) of live rows, as ``{None: level}``; with ``types``,
        of each type's live rows, as ``{type: level}``. Absent: no such row."""
        if types is not None:
            return self._probe(conn, "top" if below is None else "below", types, below=below)
        top = self.top_level if below is None else self.top_level.where(self.t.c.priority < below)
        level = conn.execute(top).scalar()
        return {} if level is None else {None: level}

    def with_due_users(self, conn, types: list[str] | None, now: float) -> list[str] | None:
        """Those of ``types`` that have due rows of users (unasked for one type, or any type)."""
        if types is None or len(types) <= 1:
            return types
        return sorted(self._probe(conn, "users", types, now=now))

    def with_due_at(self, conn, at: list, level: int, now: float) -> list:
        """Those of the types ``at`` that have due userless rows at ``level`` (unasked for one)."""
        if len(at) <= 1:
            return at
        return sorted(self._probe(conn, "due", at, level=level, now=now))

    def _probe(self, conn, kind: str, types: list[str], **params: Any) -> dict[str, Any]:
        """``{type: answer}`` of the probe ``kind`` (a method ``_probe_<kind>``) for the types
        that have an answer."""
        answers: dict[str, Any] = {}
        for i in range(0, len(types), PROBES_PER_STATEMENT):
            chunk = tuple(types[i : i + PROBES_PER_STATEMENT])
            row = conn.execute(self._probe_statement(kind, chunk), params).one()
            answers.update({x: a for x, a in zip(chunk, row, strict=True) if a is not None})
        return answers

    def _probe_statement(self, kind: str, chunk: tuple[str, ...]):
        """A scalar subquery per type, built once: a worker asks about the same types at every
        poll, and building hundreds of subqueries costs more than running them."""
        cache = self._cache
        stmt = cache.get((kind, chunk))
        if stmt is None:
            if len(cache) >= 256:
                cache.clear()
            probe = getattr(self, f"_probe_{kind}")
            stmt = cache[(kind, chunk)] = sa.select(*[self._typed(probe(x)).scalar_subquery() for x in chunk])
        return stmt

    def _probe_top(self, type_: str):
        t = self.t
        return sa.select(t.c.priority).where(self.live(t.c.type == type_)).order_by(t.c.priority.desc()).limit(1)

    def _probe_below(self, type_: str):
        return self._probe_top(type_).where(self.t.c.priority < sa.bindparam("below"))

    def _probe_users(self, type_: str):
        t = self.t
        due = self.tables.db.dialect.likely(t.c.timeout <= sa.bindparam("now"))
        return sa.select(sa.literal(1)).where(self.live(t.c.type == type_, t.c.resource.is_not(None), due)).limit(1)

    def _probe_due(self, type_: str):
        t = self.t
        return (
            sa.select(sa.literal(1))
            .where(
                self.live(
                    t.c.type == type_,
                    t.c.priority == sa.bindparam("level"),
                    t.c.timeout <= sa.bindparam("now"),
                    t.c.resource.is_(None),
                )
            )
            .limit(1)
        )

    def _live_types(self, conn) -> set[str]:
        """Every type that has live rows: a loose scan of the type index, one probe per type
        (cheaper than a probe per served type when a worker serves hundreds)."""
        t = self.t

        def first(*after):
            return self._typed(sa.select(t.c.type).where(self.live(*after)).order_by(t.c.type).limit(1))

        live = sa.select(first().scalar_subquery().label("type")).cte("live_types", recursive=True)
        after = sa.select(first(t.c.type > live.c.type).scalar_subquery()).where(live.c.type.is_not(None))
        live = live.union_all(after)
        return {r[0] for r in conn.execute(sa.select(live.c.type).where(live.c.type.is_not(None)))}

    def rows_of_types(self, conn, stmt, types: list | None, wrap=None) -> list:
        """The rows of ``stmt`` (``wrap`` makes the statement to run of it), of any type or of
        ``types``: type by type, each an exact range of the type indexes in order (the same
        statement run per type); past the dialect's ``per_type`` types, with IN lists of 500:
        fewer round trips, but the database sorts, and PostgreSQL's planner may then prefer to
        read through the claim index when it estimates that cheaper."""
        wrap = wrap or (lambda s: s)
        if types is None:
            return list(conn.execute(wrap(stmt)))
        c = self.t.c.type
        if len(types) <= self.tables.db.dialect.per_type:
            one = wrap(self._typed(stmt.where(c == sa.bindparam("type_"))))
            return [r for x in types for r in conn.execute(one, {"type_": x})]
        many = wrap(self._typed(stmt.where(c.in_(sa.bindparam("types_", expanding=True)))))
        return [r for i in range(0, len(types), 500) for r in conn.execute(many, {"types_": types[i : i + 500]})]

    def _typed(self, stmt):
        """A read limited to types: not through the indexes made for reads of every type (unless
        the table lacks the type indexes)."""
        if not self.tables.type_indexes:
            return stmt
        name = self.t.name
        return self.tables.db.dialect.avoid_indexes(
            stmt, self.t, [f"ix_{name}_{x}" for x in ("queue", "quser", "running", "purge")]
        )
