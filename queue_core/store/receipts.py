"""Receipts: proof that a transaction committed, for changes that cannot tell from the rows
(store layer).

When the connection drops during a COMMIT, the client cannot know whether the server applied
it, and :meth:`Database.run <queue_core.store.database.Database.run>` runs the transaction again.
The hot paths recognise their own earlier run from the rows (a claim or a finish by its lease
token). An operator's change cannot: after it, the row looks the same whether this change, an
earlier one or another actor's made it so, and another actor may even have changed it again
before the re-run. Such a change runs with receipts: its transaction writes a random token; the
re-run of a COMMIT whose outcome was unknown first looks for it. Found, the first run committed:
its result is returned and nothing runs again. Not found, it did not: the change runs anew.

Receipts live in ``<table>_receipts`` and are purged an hour after they were written (cleanup);
they are needed only for the seconds a transaction is retried.
"""

from __future__ import annotations

import secrets
import time

import sqlalchemy as sa

#: seconds a receipt is kept (far longer than a transaction's retries last)
RECEIPT_KEEP = 3600.0


class Receipts:
    """The receipts table ``t`` of one queue table."""

    def __init__(self, t: sa.Table):
        self.t = t

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(16)

    def write(self, conn, token: str) -> None:
        """Write ``token`` in the caller's transaction (stamped with this host's wall clock:
        only the purge an hour on reads it)."""
        conn.execute(sa.insert(self.t).values(token=token, at=time.time()))

    def exists(self, conn, token: str) -> bool:
        return conn.execute(sa.select(self.t.c.token).where(self.t.c.token == token)).first() is not None

    def purge(self, conn, now: float) -> int:
        """Delete the receipts written more than :data:`RECEIPT_KEEP` seconds before ``now``."""
        return conn.execute(sa.delete(self.t).where(self.t.c.at < now - RECEIPT_KEEP)).rowcount

    def guard(self, fn):
        """``fn(conn)`` with a receipt: the function :meth:`Database.run` runs instead of ``fn``."""
        return _Receipted(fn, self)


class _Receipted:
    """A transaction function writing a receipt; run again, it returns the result of the run that
    committed instead of running again (found by its receipt)."""

    def __init__(self, fn, receipts: Receipts):
        self.fn, self.receipts = fn, receipts
        self.token = receipts.new_token()
        self.reached_commit = False  # a run wrote the receipt: its COMMIT was under way
        self.result = None

    def __call__(self, conn):
        if self.reached_commit and self.receipts.exists(conn, self.token):
            return self.result  # that run committed; only its acknowledgement was lost
        result = self.fn(conn)
        self.receipts.write(conn, self.token)
        self.result, self.reached_commit = result, True
        return result
