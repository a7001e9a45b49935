"""Receipts: proof that a transaction committed, for changes that cannot tell from the rows
(store layer).

When the connection drops during a COMMIT, the client cannot know whether the server applied
it, and :meth:`Database.run <queue_core.store.database.Database.run>` runs the transaction again.
The hot paths recognise their own earlier run from the rows (a claim or a finish by its lease
token). An operator's change cannot: after it, the row looks the same whether this change, an
earlier one or another actor's made it so, and another actor may even have changed it again
before the re-run. Such a change runs with a receipt: a random token drawn once, claimed first
thing in each run of the transaction (an insert that skips a token already there). A run that
finds it taken knows an earlier run committed (a COMMIT still under way on the server is waited
for: the insert waits for the row the other transaction holds) and returns that run's result
without running again; a run that claims it runs the change, and its receipt commits with it.

Receipts live in ``<table>_receipts``, stamped with the change's time, and are purged an hour on
(cleanup): they are needed only for the seconds a transaction is retried. Before its first
claim or purge a store checks that the table is its own and of this release (``ready``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from .dialects import Dialect

#: seconds a receipt is kept (far longer than a transaction's retries last)
RECEIPT_KEEP = 3600.0


class Receipts:
    """The receipts table ``t`` of one queue table on a database of ``dialect``. ``ready(conn)``:
    raises SchemaError (or ForeignTableError) when the table may not be written (made by an older
    release, another program's)."""

    def __init__(self, t: sa.Table, dialect: Dialect, ready: Callable[[Any], None]):
        self.t = t
        self.dialect = dialect
        self._claim_stmt = dialect.insert_if_absent(t, "token")
        self._ready = ready
        self._checked = False

    def check(self, conn) -> None:
        """``ready``, once per store object."""
        if not self._checked:
            self._ready(conn)
            self._checked = True

    def claim(self, conn, token: str, at: float) -> bool:
        """Take ``token`` in the caller's transaction; False when an earlier transaction holding it
        committed."""
        self.check(conn)
        return self.dialect.execute_insert(conn, self._claim_stmt, [{"token": token, "at": at}], self.t.c.token) == 1

    def purge(self, conn, now: float) -> int:
        """Delete the receipts stamped more than :data:`RECEIPT_KEEP` seconds before ``now``."""
        self.check(conn)
        return conn.execute(sa.delete(self.t).where(self.t.c.at < now - RECEIPT_KEEP)).rowcount

    def at(self, now: float) -> Receipt:
        """A new receipt stamped ``now`` (the time of the change: cleanup purges by the same
        clock), for :meth:`Database.run`'s ``receipt``."""
        return Receipt(self, secrets.token_hex(16), now)


class Receipt:
    """One change's receipt: a random token and its stamp."""

    def __init__(self, receipts: Receipts, token: str, at: float):
        self.receipts, self.token, self.at = receipts, token, at

    def guard(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``fn(conn)`` claiming this receipt first: the function :meth:`Database.run` runs."""
        return _Receipted(fn, self)


class _Receipted:
    """A transaction function that claims its receipt first; run again after a run that claimed it
    committed, it returns that run's result instead of running again."""

    def __init__(self, fn: Callable[[Any], Any], receipt: Receipt):
        self.fn, self.receipt = fn, receipt
        self.ran = False  # a run holding the receipt returned (it reached its COMMIT)
        self.result: Any = None

    def __call__(self, conn):
        r = self.receipt
        if not r.receipts.claim(conn, r.token, r.at):
            if not self.ran:  # only a run of this object claims its token
                raise RuntimeError(f"receipt {r.token} taken by no run of this transaction")
            return self.result  # that run committed; only its acknowledgement was lost
        result = self.fn(conn)
        self.result, self.ran = result, True
        return result
