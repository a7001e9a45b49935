"""What every claim of a store shares (store layer): its tables, its screen, the fair lock's row,
and what it learned of its table once (the claim mark, the type indexes)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import sqlalchemy as sa

from ..database import Database
from ..events import TaskEvents
from .screen import ClaimScreen

log = logging.getLogger("queue_core.store")

#: how often a claim looks again at the table's claim mark (:meth:`ClaimTables.claim_table`): a
#: mark altered by hand is trusted at most this long after (docs/reliability.md)
MARK_CHECK_INTERVAL = 10.0


class ClaimTables:
    """The tables of a store's claims: ``t`` (the tasks), ``queues_t`` (queue settings),
    ``starts_t`` (rate-limited starts) and ``meta`` (its row ``fair_lock``); ``events`` records
    what a claim does, ``screen`` ends the rows it must not lease, ``missing_indexes(conn)``
    names the indexes the table lacks."""

    def __init__(
        self,
        db: Database,
        tables: tuple[sa.Table, sa.Table, sa.Table, sa.Table],
        events: TaskEvents,
        screen: ClaimScreen,
        missing_indexes: Callable[[sa.Connection], set[str]],
    ):
        self.db, self.events, self.screen, self.missing_indexes = db, events, screen, missing_indexes
        self.t, self.queues_t, self.starts_t, meta = tables
        self.name = self.t.name
        self.fair_lock = sa.select(meta.c.name).where(meta.c.name == "fair_lock")
        self._claim_t: sa.Table | None = None
        self._mark_checked = 0.0
        #: whether the table has the type indexes (None: not looked up yet)
        self.type_indexes: bool | None = None

    def claim_table(self, conn) -> sa.Table:
        """The task table as a claim's UPDATE writes it: with the dialect's claim mark where the
        table has it as ``init`` makes it (``Dialect.claim_mark_usable``). Looked at again by a
        claim every :data:`MARK_CHECK_INTERVAL` seconds: a table ``init`` upgrades is marked from
        then on, and a mark altered by hand is no longer trusted from then on."""
        at = time.monotonic()
        if self._claim_t is None or at >= self._mark_checked + MARK_CHECK_INTERVAL:
            usable = self.db.dialect.claim_mark_usable(conn, self.t)
            self._claim_t, self._mark_checked = (self._marked_t if usable else self.t), at
        return self._claim_t

    @functools.cached_property
    def _marked_t(self) -> sa.Table:
        """The task table with the dialect's claim mark: one copy, whose statements stay cached."""
        return self.db.dialect.with_claim_mark(self.t)

    def marked_claims(self) -> sa.Table | None:
        """The task table with its claim mark, when this store's claims mark their rows."""
        return None if self._claim_t is None or self._claim_t is self.t else self._claim_t

    def check_type_indexes(self, conn) -> None:
        """Once per store: a table made by an earlier release lacks the type indexes until
        ``init`` adds them; meanwhile limited claims are right, but read other types' rows."""
        if self.type_indexes is None:
            wanted = {f"ix_{self.name}_qtype", f"ix_{self.name}_qtype_user"}
            self.type_indexes = not wanted & self.missing_indexes(conn)
            if not self.type_indexes:
                log.warning(
                    "table %s predates the indexes of claims limited to task types; such claims "
                    "read other types' rows until 'init' adds them",
                    self.name,
                )
